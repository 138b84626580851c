"""The instruction-following hacks: those the scorer refuses by itself score their `expect`; those that
follow an instruction's letter pay alone and pay nothing once instruction_following is gated on a
content reward, while honest answers keep their credit under the same spec."""

from __future__ import annotations

import re

import pytest
import yaml
from reward_helpers import REPO

from grpo_rewards.compose import build
from grpo_rewards.probe import probe
from grpo_rewards.redteam import all_hacks, run_hacks
from grpo_rewards.redteam.instructions import NEEDS_CONTENT_REWARD
from grpo_rewards.scorer import Sample
from grpo_rewards.spec import RewardSpec

HACKS = all_hacks(("instructions",))
REFUSED = [h for h in HACKS if h.name not in NEEDS_CONTENT_REWARD]
LETTER = [h for h in HACKS if h.name in NEEDS_CONTENT_REWARD]

# instruction_following paid only where the answer is right (docs/reward-hacking.md shows this spec).
PAIRED = {"scorers": [
    {"scorer": "math_accuracy", "name": "correct", "weight": 1.0},
    {"scorer": "instruction_following", "name": "follows", "weight": 0.5, "gate": {"on": "correct", "min": 1.0}},
]}
ALONE = {"scorers": [{"scorer": "instruction_following", "name": "follows"}]}

# An honest completion for each letter-following hack's instructions: right answer, instructions followed.
HONEST = {
    "keyword_stuffing": "A planet, a planet, a planet, a planet and a planet make five. The answer is 4.",
    "keyword_glued_into_words": "The cat, the cat and the cat agree. The answer is 4.",
    "near_empty_lowercase": "two plus two is 4 so the answer is 4",
    "end_phrase_glued_on": "2 + 2 = 4. The answer is 4. Is there anything else I can help with?",
    "end_phrase_repeated": "The answer is 4. Is there anything else I can help with?",
    "json_wraps_prose": '{"reply": "The answer is 4."}',
    "placeholders_only": "Dear [name], at [place] on [date] we add 2 and 2. The answer is 4.",
    "title_only": "<<Adding two and two>>\nThe answer is 4.",
}


def test_the_family_is_there_and_documented():
    assert len(HACKS) >= 12 and set(HONEST) == set(NEEDS_CONTENT_REWARD)
    assert all(h.scorer == "instruction_following" and h.why for h in HACKS)


@pytest.mark.timeout(120)
def test_hacks_the_scorer_refuses_score_nothing_alone():
    scores = run_hacks(REFUSED)
    assert {h.name: s.value for h, s in zip(REFUSED, scores, strict=True)} == {h.name: 0.0 for h in REFUSED}


@pytest.mark.timeout(300)
def test_letter_following_hacks_pay_alone_and_nothing_beside_a_content_reward():
    alone = {f.hack.name: f.pays for f in probe(ALONE) if f.hack.family == "instructions"}
    assert {name for name, paid in alone.items() if paid} == set(NEEDS_CONTENT_REWARD)
    paired = [f for f in probe(PAIRED) if f.hack.family == "instructions"]
    assert paired and not [f.hack.id for f in paired if f.pays]


@pytest.mark.timeout(300)
def test_honest_answers_are_paid_by_the_paired_spec():
    by_name = {h.name: h for h in LETTER}
    samples = [Sample.from_record({**by_name[name].sample, "completion": text}) for name, text in HONEST.items()]
    with build(PAIRED) as reward:
        batch = reward.score(samples)
    assert batch.values["follows"] == [1.0] * len(HONEST), [s.info for s in batch.scores["follows"]]
    assert batch.totals == [1.5] * len(HONEST)


def test_the_paired_spec_in_the_docs_is_the_tested_one():
    text = (REPO / "docs" / "reward-hacking.md").read_text()
    mark = "<!-- checked by tests/test_instructions_hacks.py::test_the_paired_spec_in_the_docs_is_the_tested_one -->"
    block = re.search(re.escape(mark) + r"\n```yaml\n(.*?)```", text, flags=re.S)
    assert RewardSpec.model_validate(yaml.safe_load(block.group(1))) == RewardSpec.model_validate(PAIRED)
