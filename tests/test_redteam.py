"""The red-team suite, math and text families: every hack through its real scorer's batch path,
at the score it must get; and the honest answers next to each defence, which must keep their credit.
(The code family is in tests/test_redteam_code.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from grpo_rewards import redteam
from grpo_rewards.redteam import Hack, all_hacks, run_hacks
from grpo_rewards.registry import get_registry
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.math import MathAccuracy

MATH = all_hacks(("math",))
TEXT = all_hacks(("text",))


def _check(hacks: list[Hack]) -> None:
    scores = run_hacks(hacks)
    wrong = {}
    for hack, score in zip(hacks, scores, strict=True):
        if hack.expect is None:
            ok = score.value is None and bool(score.info.get("reason"))
        else:
            ok = score.value == pytest.approx(hack.expect, abs=1e-9)
        if not ok:
            wrong[hack.id] = (score.value, score.info)
    assert not wrong


def test_hack_ids_are_unique_and_documented():
    hacks = all_hacks()
    assert len({h.id for h in hacks}) == len(hacks)
    assert all(h.why and h.family in redteam.FAMILIES for h in hacks)
    assert len(MATH) >= 30 and len(TEXT) >= 15


@pytest.mark.timeout(300)
def test_math_hacks_score_what_they_must():
    _check(MATH)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [11, 23])
def test_new_members_of_each_math_family_earn_nothing(seed):
    """The families are generated: members drawn with other numbers, connectives and places than
    the suite's must score 0 too, so the rules hold for the family, not for a list."""
    import random

    from grpo_rewards.redteam.math import families

    _check(families(random.Random(seed)))


def _math(scorer: MathAccuracy, pairs: list[tuple[str, str]], prompt: str = "") -> list[float | None]:
    return [s.value for s in scorer.score([Sample(prompt, c, {"answer": g}) for g, c in pairs])]


@pytest.mark.timeout(300)
def test_honest_answers_keep_their_credit_next_to_the_hedge_check():
    honest = [
        ("0.5", "<answer>1/2 (or 0.5)</answer>"),            # two forms of one value
        ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\frac{\\sqrt{2}}{2} \\text{ or } \\frac{1}{\\sqrt{2}}}"),  # one value, worker-checked
        ("18", "The answer is 18 dollars."),                  # a unit is not a second value
        ("18", "The answer is 18. Because 3 \\times 6 = 18, we are done."),
        ("1000", "\\boxed{1,000}"),                           # thousands separators
        ("14916", "The answer is $14{,}916$."),
        ("2, -2", "<answer>2 or -2</answer>"),                # the gold names several values itself
        ("\\pm 2", "\\boxed{\\pm 2}"),
        ("[1, 2]", "\\boxed{[1, 2]}"),                        # an interval gold
        ("\\{1, 2\\}", "\\boxed{1} and \\boxed{2}"),
        ("5", "\\boxed{5 \\pm 0}"),                           # +-0 is one value
        ("5", "\\boxed{x = 5}"),
        ("5", "\\boxed{5\\,\\text{cm}}"),                    # spacing and a unit are not a second value
        ("12000", "\\boxed{12\\,000}"),
        ("5", "The answer is 5, not 6."),                     # remarks after a complete answer
        ("5", "The answer is $5$, which is less than 6."),
        ("12", "The answer is 12 apples, 3 more than Anna's 9"),
        ("150", "The answer is 150 minutes, i.e. 2.5 hours"),
        ("B", "The answer is B) 5."),                         # a choice letter and its text
        ("13", "#### 72 some text #### 13"),                  # the last `####` is the answer
    ]
    with MathAccuracy() as scorer:
        assert _math(scorer, honest) == [1.0] * len(honest)


@pytest.mark.timeout(300)
def test_allow_several_values_restores_math_verifys_any_match():
    hedges = [("6", "<answer>5 (or 6)</answer>"), ("5", "<answer>5|6</answer>"), ("6", "\\boxed{5 \\lor 6}")]
    with MathAccuracy(allow_several_values=True) as lenient, MathAccuracy() as strict:
        assert _math(lenient, hedges) == [1.0, 1.0, 1.0]
        scores = strict.score([Sample("", c, {"answer": g}) for g, c in hedges])
        assert [s.value for s in scores] == [0.0, 0.0, 0.0]
        assert scores[0].info["reason"] == "several different answers" and scores[0].info["candidates"] == ["5", "6"]


@pytest.mark.timeout(300)
def test_restated_question_rule_is_narrow():
    prompt = "A box holds 3 rows of 4 cups. What fraction of the 12 cups are in the first 3 rows... compute 12 / 4."
    with MathAccuracy() as scorer, MathAccuracy(allow_restated_question=True) as lenient:
        # Evaluated values built from the prompt's numbers are answers, not restatements.
        assert _math(scorer, [("3", "\\boxed{3}"), ("0.75", "\\boxed{\\frac{3}{4}}"), ("3", "\\boxed{12/4}")],
                     prompt) == [1.0, 1.0, 0.0]
        # A number the prompt does not hold (the 2 of 2\sqrt{3}) makes it the model's own work.
        assert _math(scorer, [("6", "\\boxed{2 \\times 3}")], "What is 3 doubled?") == [1.0]
        # Non-numeric golds are not checked: `\sqrt{12}` vs `2\sqrt{3}` is an honest form.
        assert _math(scorer, [("2\\sqrt{3}", "\\boxed{\\sqrt{12}}")], "Simplify sqrt(12).") == [1.0]
        assert _math(lenient, [("391", "\\boxed{17 \\times 23}")], "Compute 17 x 23.") == [1.0]


SPECIFIC_TEXT = [h for h in TEXT if h.scorer != redteam.ANY_SCORER]
GENERIC = [h for h in all_hacks() if h.scorer == redteam.ANY_SCORER]


@pytest.mark.timeout(300)
def test_text_hacks_score_what_they_must():
    _check(SPECIFIC_TEXT)


# A configuration of every built-in scorer, for the hacks that apply to any of them.
BUILTIN_PARAMS = {
    "length": {"mode": "range", "low": 1000, "high": 3000}, "cosine_length": {"max_len": 600},
    "overlong_punishment": {"max_length": 100, "buffer": 20}, "regex_format": {"pattern": "<answer>.*</answer>"},
    "remote": {"url": "http://127.0.0.1:9/score", "retries": 0},  # nothing listens: None, never a reward
}


@pytest.mark.timeout(300)
def test_generic_hacks_earn_nothing_from_any_builtin_scorer():
    registry = get_registry()
    paid = {}
    for name, entry in sorted(registry.scorers.items()):
        hacks = [replace(h, params=BUILTIN_PARAMS.get(name, {})) for h in GENERIC]
        for hack, score in zip(hacks, run_hacks(hacks, scorer=name), strict=True):
            if redteam.pays(score.value, hack.expect, entry.cls.value_range):
                paid[(hack.id, name)] = score.value
    assert len(registry.scorers) >= 12 and len(GENERIC) >= 3
    assert not paid
