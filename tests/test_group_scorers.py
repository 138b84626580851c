"""Group scorers: the built-ins by hand, the `score_groups` contract from a plugin, in a composite,
standalone and through the TRL adapter (whole batch, consecutive groups)."""

from __future__ import annotations

import pytest

from grpo_rewards import GroupScorer, Sample, Score, Scorer, build, hookimpl, load_registry
from grpo_rewards.integrations.trl import trl_reward_functions
from grpo_rewards.scorers.group import GroupDuplicates, MajorityAnswer, duplicate_counts


def group(prompt: str, *completions: str) -> list[Sample]:
    return [Sample(prompt, c) for c in completions]


def values(scores):
    return [s.value for s in scores]


def test_duplicate_counts_exact_and_whitespace_normalised():
    texts = ["a  b", "a b", " a b\n", "c"]
    assert duplicate_counts(texts) == [2, 2, 2, 0]
    assert duplicate_counts(texts, normalize_whitespace=False) == [0, 0, 0, 0]


def test_group_duplicates_penalty_by_hand():
    scorer = GroupDuplicates()
    samples = group("p", "x", "x ", "y", "x") + group("q", "z") + group("r", "u", "v")
    # p: three "x" (each equals 2 of the 3 others: -2/3), one "y" (0); q: a group of one (0); r: no repeats
    assert values(scorer.score(samples)) == pytest.approx([-2 / 3, -2 / 3, 0.0, -2 / 3, 0.0, 0.0, 0.0])
    exact = GroupDuplicates(normalize_whitespace=False)
    assert values(exact.score(samples[:4])) == pytest.approx([-1 / 3, 0.0, 0.0, -1 / 3])


def test_majority_answer_by_hand_with_ties_missing_answers_and_too_few():
    scorer = MajorityAnswer()
    samples = group("p", r"so \boxed{4}", "The answer is $4$", r"\boxed{5}", "no idea at all, sorry friends")
    assert values(scorer.score(samples)) == [1.0, 1.0, 0.0, 0.0]
    tie = group("t", r"\boxed{1}", r"\boxed{2}")
    assert values(scorer.score(tie)) == [1.0, 1.0]  # each tied answer is a majority
    alone = group("a", r"\boxed{1}", "nothing here to read, none")
    assert values(scorer.score(alone)) == [None, None]  # one answer: no majority to speak of
    assert "a majority needs 2" in scorer.score(alone)[0].info["reason"]
    assert values(MajorityAnswer(min_answers=1).score(alone)) == [1.0, 0.0]


def test_majority_answer_reads_the_one_answer_region():
    """The final answer as math_accuracy reads it: after the reasoning, normalised, the last `####`."""
    samples = group("p", r"<think>\boxed{7}</think> The answer is $12{,}000$.", r"\boxed{12\,000}",
                    "#### 7 then #### 12000", r"\boxed{7}")
    assert values(MajorityAnswer().score(samples)) == [1.0, 1.0, 1.0, 0.0]


class GroupRank(GroupScorer):
    """Rank of the earlier member's value within the group, scaled to [0, 1]: a plugin's group scorer."""

    name = "t_group_rank"
    seen_groups: list[int] = []

    @classmethod
    def dependencies(cls, params):
        return ["len"]

    def score_groups(self, groups, results=None):
        out = []
        for samples, res in zip(groups, results, strict=True):
            type(self).seen_groups.append(len(samples))
            lengths = [s.value for s in res["len"]]
            order = sorted(lengths)
            top = max(len(samples) - 1, 1)
            out.append([Score(order.index(v) / top) for v in lengths])
        return out


class Length(Scorer):
    """Completion length."""

    name = "t_len"
    value_range = (0.0, 1e9)

    def score(self, samples, results=None):
        return [Score(float(len(s.completion_text))) for s in samples]


class Plugin:
    @hookimpl
    def grpo_rewards_scorers(self):
        return [GroupRank, Length]


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[Plugin()])


SPEC = {"scorers": [{"scorer": "t_len", "name": "len", "weight": 0.0},
                    {"scorer": "t_group_rank", "name": "rank"},
                    {"scorer": "group_duplicates", "name": "dup", "weight": 0.5}]}


def test_a_plugin_group_scorer_in_a_composite_sees_each_group_and_earlier_results(registry):
    GroupRank.seen_groups.clear()
    samples = [{"prompt": "p", "completion": c} for c in ("aaa", "a", "aa")] + \
              [{"prompt": "q", "completion": c} for c in ("bb", "bb")] + [{"prompt": "p", "completion": "aaaa"}]
    with build(SPEC, registry) as reward:
        batch = reward.score(samples)  # grouped by prompt: p = 0, 1, 2, 5; q = 3, 4
        assert batch.groups == [[0, 1, 2, 5], [3, 4]]
        assert sorted(GroupRank.seen_groups) == [2, 4]
        assert batch.values["rank"] == pytest.approx([2 / 3, 0.0, 1 / 3, 0.0, 0.0, 1.0])
        assert batch.values["dup"] == [0.0, 0.0, 0.0, -1.0, -1.0, 0.0]
        assert batch.totals == pytest.approx([2 / 3, 0.0, 1 / 3, -0.5, -0.5, 1.0])
        # with group_size, consecutive rows form the groups whatever their prompts
        consecutive = reward.score(samples, group_size=3)
        assert consecutive.groups == [[0, 1, 2], [3, 4, 5]]
        assert consecutive.values["dup"] == pytest.approx([0.0, 0.0, 0.0, -0.5, -0.5, 0.0])


def test_a_group_scorer_that_raises_or_miscounts_gives_none_not_a_crash(registry):
    class Broken(GroupScorer):
        """Returns one score too few."""

        name = "t_broken_group"

        def score_groups(self, groups, results=None):
            return [[Score(1.0)] * (len(g) - 1) for g in groups]

    class BrokenPlugin:
        @hookimpl
        def grpo_rewards_scorers(self):
            return [Broken]

    reg = load_registry(extra_plugins=[BrokenPlugin()])
    with build({"scorers": [{"scorer": "t_broken_group"}, {"scorer": "group_duplicates"}]}, reg) as reward:
        batch = reward.score([{"prompt": "p", "completion": "x"}, {"prompt": "p", "completion": "y"}])
    assert batch.values["t_broken_group"] == [None, None] and batch.errors["t_broken_group"] == 2
    assert "1 scores for a group of 2" in batch.scores["t_broken_group"][0].info["error"]
    assert batch.totals == [0.0, 0.0]


def test_group_scorers_are_never_cached(registry):
    with build({"scorers": [{"scorer": "group_duplicates"}]}, registry) as reward:
        first = reward.score([{"prompt": "p", "completion": "x"}, {"prompt": "p", "completion": "x"}])
        alone = reward.score([{"prompt": "p", "completion": "x"}])
    assert first.values["group_duplicates"] == [-1.0, -1.0] and alone.values["group_duplicates"] == [0.0]
    assert reward.cache.lookups == 0


def test_trl_adapter_groups_consecutive_rows(registry):
    with build(SPEC, registry) as reward:
        funcs, weights = trl_reward_functions(reward, group_size=2)
        dup = funcs[2]
        got = dup(prompts=["p", "p", "p", "p"], completions=["x", "x", "x", "y"], completion_ids=[[1]] * 4)
        assert got == [-1.0, -1.0, 0.0, 0.0]  # groups (0, 1) and (2, 3)
        by_prompt, _ = trl_reward_functions(reward)
        assert by_prompt[2](prompts=["p"] * 4, completions=["x", "x", "x", "y"]) == pytest.approx([-2 / 3] * 3 + [0.0])
    assert weights == [0.0, 1.0, 0.5]
