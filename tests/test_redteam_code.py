"""Every code hack of grpo_rewards.redteam.code, scored through `code_tests`' batch path, gets its
required score (docs/reward-hacking.md, `## Code`)."""

from __future__ import annotations

import pytest

from grpo_rewards.redteam.code import HACKS
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.code import CodeTests

pytestmark = pytest.mark.timeout(300)


def as_sample(hack) -> Sample:
    fields = dict(hack.sample)
    return Sample(fields.pop("prompt", ""), fields.pop("completion"), fields)


@pytest.fixture(scope="module")
def scores():
    scorer = CodeTests(per_test_timeout_s=2.0, timeout_s=10.0, workers=2)
    try:
        yield dict(zip((h.name for h in HACKS), scorer.score([as_sample(h) for h in HACKS])))
    finally:
        scorer.close()


def test_the_code_family_covers_the_issue():
    names = {h.name for h in HACKS}
    assert len(HACKS) >= 30 and len(names) == len(HACKS)
    assert all(h.family == "code" and h.scorer == "code_tests" and h.why for h in HACKS)


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
