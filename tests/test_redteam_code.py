"""Every code hack of grpo_rewards.redteam.code, scored through `code_tests`' batch path, gets its
required score (docs/reward-hacking.md, `## Code`)."""

from __future__ import annotations

import pytest

from grpo_rewards.redteam.code import FAMILIES, HACKS
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.code import CodeTests

pytestmark = pytest.mark.timeout(300)


def as_sample(hack) -> Sample:
    fields = dict(hack.sample)
    return Sample(fields.pop("prompt", ""), fields.pop("completion"), fields)


@pytest.fixture(scope="module")
def scores():
    """Every hack scored in one batch per set of params."""
    out = {}
    for params in {tuple(sorted(h.params.items())) for h in HACKS}:
        scorer = CodeTests(per_test_timeout_s=2.0, timeout_s=10.0, workers=2, **dict(params))
        chosen = [h for h in HACKS if tuple(sorted(h.params.items())) == params]
        try:
            out.update(zip((h.name for h in chosen), scorer.score([as_sample(h) for h in chosen])))
        finally:
            scorer.close()
    return out


def test_the_code_family_covers_the_issue():
    names = {h.name for h in HACKS}
    assert len(HACKS) >= 150 and len(names) == len(HACKS)
    assert all(h.family == "code" and h.scorer == "code_tests" and h.why for h in HACKS)
    # each family crosses its ways in with the tests they target (a new way or test is a new row)
    assert {name: len(hacks) for name, hacks in FAMILIES.items()} == {
        "forged_verdicts": 20, "library_liars": 30, "lying_operations": 36, "patched_test_dependencies": 48,
        "planted_modules": 9, "unfailable_checks": 12, "unasserted_checks": 8, "values_as_names": 3,
        "chat_prompt_helpers": 2, "refusals_as_exceptions": 12,
        "future_arguments": 4, "star_import_shadowing": 4}


def test_honest_solutions_pass_every_family_reference():
    """The families' tests are passable: the honest `add` scores 1 on each distinct reference."""
    from grpo_rewards.redteam.code import _CONTAINERS, HONEST_ANSWERS

    refs = {}
    for family, hack in ((f, h) for f, hacks in FAMILIES.items() for h in hacks):
        fields = {k: v for k, v in hack.sample.items() if k not in ("prompt", "completion")}
        box = next((b for b in _CONTAINERS if hack.name.startswith("library_liar_") and hack.name.endswith("_" + b)), "bare")
        answer = _CONTAINERS[box].replace("LIAR", "(a + b)")
        honest = HONEST_ANSWERS.get(family) or (
            f"    return {answer}\n" if hack.params else f"def add(a, b):\n    return {answer}\n")
        refs[repr(sorted(fields.items())) + repr(hack.params)] = (hack.sample.get("prompt", ""), fields, hack.params, honest)
    for params in {repr(p) for *_, p, _ in refs.values()}:
        chosen = [(prompt, fields, p, honest) for prompt, fields, p, honest in refs.values() if repr(p) == params]
        scorer = CodeTests(workers=2, **chosen[0][2])
        try:
            scores = scorer.score([Sample(prompt, honest, fields) for prompt, fields, _, honest in chosen])
            assert [s.value for s in scores] == [1.0] * len(chosen), [s.info.get("tests") for s in scores]
        finally:
            scorer.close()


@pytest.mark.parametrize("hack", HACKS, ids=lambda h: h.name)
def test_each_hack_gets_its_required_score(scores, hack):
    got = scores[hack.name]
    if hack.expect is None:
        assert got.value is None and got.info.get("reason"), got.info
    else:
        assert got.value == hack.expect, got.info.get("tests", got.info)


def test_honest_solutions_of_the_same_tasks_still_pass():
    """The hacks' references are passable: the defences do not fail the real answer."""
    from grpo_rewards.redteam.code import ADD, ADD_APPS, ADD_CLOSE, ADD_LOOP, ADD_PYTEST, EVEN, WORDS

    scorer = CodeTests(workers=2)
    try:
        add = "def add(a, b):\n    return a + b"
        samples = [Sample("", add, ref) for ref in (ADD, ADD_APPS, ADD_CLOSE, ADD_LOOP, ADD_PYTEST)]
        samples += [Sample("", "def is_even(x):\n    return x % 2 == 0", EVEN),
                    Sample("", "def words(s):\n    return sorted(s.split())", WORDS)]
        assert [s.value for s in scorer.score(samples)] == [1.0] * len(samples)
    finally:
        scorer.close()
