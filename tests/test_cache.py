"""The score cache: same results as without it (real math-verify), scored once within and across
batches, bounded, keyed by everything a scorer reads, never for non-deterministic scorers."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import Sample, Score, Scorer, build, hookimpl, load_registry
from grpo_rewards.cache import ScoreCache
from grpo_rewards.scorers.code import CodeTests


class CountingParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    none_for: str = Field("", description="Completion that scores None.")


class Counting(Scorer):
    """Length of the completion; counts the samples it is asked to score."""

    name = "t_counting"
    Params = CountingParams
    value_range = (0.0, 1e9)
    scored = 0

    def score(self, samples, results=None):
        type(self).scored += len(samples)
        return [Score.unscorable("asked to") if s.completion_text == self.params.none_for
                else Score(float(len(s.completion_text)), {"prompt": s.prompt_text}) for s in samples]


class Moody(Counting):
    """Declares itself non-deterministic."""

    name = "t_moody"
    deterministic = False


class Reader(Scorer):
    """Reads the earlier member `n`: its value plus one."""

    name = "t_reader"
    value_range = (0.0, 1e9)
    scored = 0

    @classmethod
    def dependencies(cls, params):
        return ["n"]

    def score(self, samples, results=None):
        type(self).scored += len(samples)
        return [Score(None if r.value is None else r.value + 1) for r in results["n"]]


class Plugin:
    @hookimpl
    def grpo_rewards_scorers(self):
        return [Counting, Moody, Reader]


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[Plugin()])


def records(*completions: str, prompt: str = "p", **reference) -> list[dict]:
    return [{"prompt": prompt, "completion": c, **reference} for c in completions]


def test_duplicates_within_and_across_batches_are_scored_once(registry):
    Counting.scored = 0
    with build({"scorers": [{"scorer": "t_counting"}]}, registry) as reward:
        first = reward.score(records("a", "bb", "a", "a"))
        assert Counting.scored == 2 and first.cache_hits == {"t_counting": 2}
        second = reward.score(records("bb", "ccc"))
        assert Counting.scored == 3 and second.cache_hits == {"t_counting": 1}
        assert first.values["t_counting"] == [1.0, 2.0, 1.0, 1.0] and second.values["t_counting"] == [2.0, 3.0]
        assert (reward.cache.hits, reward.cache.lookups) == (3, 6) and reward.cache.hit_rate == 0.5


def test_key_holds_prompt_reference_params_and_what_the_scorer_reads(registry):
    Counting.scored = Reader.scored = 0
    spec = {"scorers": [{"scorer": "t_counting", "name": "n"}, {"scorer": "t_reader"},
                        {"scorer": "t_counting", "name": "m", "params": {"none_for": "zz"}}]}
    with build(spec, registry) as reward:
        batch = reward.score(records("a", prompt="p") + records("a", prompt="q") + records("a", prompt="p", answer=1))
        assert Counting.scored == 6  # three distinct (prompt, reference); two members with different params
        assert [s.info["prompt"] for s in batch.scores["n"]] == ["p", "q", "p"]
        assert Reader.scored == 3
        reward.score(records("a", prompt="p"))
        assert Counting.scored == 6 and Reader.scored == 3  # all three members served from the cache


def test_values_read_from_another_member_are_part_of_the_key(registry):
    # the same sample, but the member it reads has a different value: not a cache hit
    cache = ScoreCache(10)
    reader = Reader()
    sample = [Sample("p", "c")]
    first, _ = cache.score(reader, sample, {"n": [Score(1.0)]}, ["n"])
    second, hits = cache.score(reader, sample, {"n": [Score(5.0)]}, ["n"])
    assert (first[0].value, second[0].value, hits) == (2.0, 6.0, 0)


def test_none_is_not_cached_and_non_deterministic_scorers_are_not_cached(registry):
    Counting.scored = Moody.scored = 0
    spec = {"scorers": [{"scorer": "t_counting", "params": {"none_for": "x"}}, {"scorer": "t_moody"}]}
    with build(spec, registry) as reward:
        reward.score(records("x", "x", "y"))
        reward.score(records("x", "y"))
    assert Counting.scored == 2 + 1  # "x" (None) asked again in the second batch; "y" once
    assert Moody.scored == 5
    assert CodeTests.deterministic is False  # a test that times out under load fails


def test_lru_is_bounded_and_evicts_the_least_recently_used(registry):
    Counting.scored = 0
    with build({"cache_size": 2, "scorers": [{"scorer": "t_counting"}]}, registry) as reward:
        reward.score(records("a", "b"))
        reward.score(records("a"))        # a is now the most recent
        reward.score(records("c"))        # evicts b
        assert len(reward.cache) == 2
        Counting.scored = 0
        reward.score(records("a", "c", "b"))
        assert Counting.scored == 1
    with build({"cache_size": 0, "scorers": [{"scorer": "t_counting"}]}, registry) as reward:
        Counting.scored = 0
        reward.score(records("a", "a"))
        assert Counting.scored == 2 and reward.cache.lookups == 0


def test_cached_copies_are_independent(registry):
    with build({"scorers": [{"scorer": "t_counting"}]}, registry) as reward:
        batch = reward.score(records("a", "a"))
        batch.scores["t_counting"][0].info["mutated"] = True
        assert "mutated" not in batch.scores["t_counting"][1].info
        assert "mutated" not in reward.score(records("a")).scores["t_counting"][0].info


@pytest.mark.timeout(300)
def test_math_accuracy_cached_and_uncached_results_are_identical():
    completions = [r"so \boxed{4}", r"\boxed{5}", "The answer is $\\frac{8}{2}$", r"\boxed{4}", "no answer"]
    golds = ["4", "4", "4", "4", "nonsense{"]
    batch = [{"prompt": f"q{i % 2}", "completion": c, "answer": g}
             for i, (c, g) in enumerate(zip(completions * 4, golds * 4, strict=True))]
    spec = {"scorers": [{"scorer": "math_accuracy", "params": {"cache_size": 0}}]}
    with build({**spec, "cache_size": 0}) as plain, build(spec) as cached:
        expected = plain.score(batch)
        got = [cached.score(batch), cached.score(batch)]
    for run in got:
        assert run.totals == expected.totals
        assert [(s.value, s.info) for s in run.scores["math_accuracy"]] == \
               [(s.value, s.info) for s in expected.scores["math_accuracy"]]
    assert expected.values["math_accuracy"][:4] == [1.0, 0.0, 1.0, 1.0]
    assert got[0].cache_hits["math_accuracy"] > 0 and got[1].cache_hits["math_accuracy"] >= 16
