"""Groups (one prompt's samples) and the contract of scorers that see a whole group at once.

From a trainer a group is G consecutive samples; standalone (`score`, the Python API) it is a
`group_size` of consecutive samples, or by default every sample that shares a prompt.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

from grpo_rewards.scorer import Sample, Score, Scorer

Results = Mapping[str, Sequence[Score]]


def prompt_key(sample: Sample) -> str:
    """The prompt as a hashable key: a string as it is, chat messages as canonical JSON."""
    if isinstance(sample.prompt, str):
        return sample.prompt
    return json.dumps(sample.prompt, sort_keys=True, default=repr)


def consecutive_groups(n: int, group_size: int) -> list[list[int]]:
    """Indices of `group_size` consecutive samples per group, as a trainer lays out a generation batch."""
    if group_size < 1 or n % group_size:
        raise ValueError(f"a batch of {n} samples cannot be cut into groups of {group_size}")
    return [list(range(start, start + group_size)) for start in range(0, n, group_size)]


def groups_of(samples: Sequence[Sample], group_size: int | None = None) -> list[list[int]]:
    """Indices of each group: consecutive runs of `group_size`, or (None) the samples sharing a prompt.

    Without `group_size`, a sample with an empty prompt is a group of its own: no prompt says
    nothing about which samples belong together."""
    if group_size is not None:
        return consecutive_groups(len(samples), group_size)
    by_prompt: dict[str | int, list[int]] = {}
    for i, sample in enumerate(samples):
        by_prompt.setdefault(prompt_key(sample) or i, []).append(i)
    return list(by_prompt.values())


class GroupScorer(Scorer):
    """Base class of scorers whose value for a sample depends on the other samples of its group.

    Subclasses implement `score_groups`; everything else (name, Params, value_range, plugins)
    is as for any `Scorer`. `CompositeReward` hands them its groups; called on their own
    (`scorer.score(samples)`), the samples sharing a prompt form a group.
    """

    # The value depends on the group, not on the sample alone: never served from the score cache.
    deterministic: ClassVar[bool] = False

    @abstractmethod
    def score_groups(self, groups: Sequence[Sequence[Sample]],
                     results: Sequence[Results] | None = None) -> list[list[Score]]:
        """Score each group. Returns, per group, one `Score` per sample, in order.

        `results[g]` maps the alias of each scorer that ran earlier in the spec to its scores
        for the samples of group `g`, as `Scorer.score` receives them for a batch.
        """

    def score(self, samples: Sequence[Sample], results: Results | None = None) -> list[Score]:
        return score_in_groups(self, samples, results, groups_of(samples))


def score_in_groups(scorer: GroupScorer, samples: Sequence[Sample], results: Results | None,
                    groups: Sequence[Sequence[int]]) -> list[Score]:
    """Call `scorer.score_groups` on the batch cut into `groups` (index lists); scores back in batch order."""
    results = results or {}
    grouped = [[samples[i] for i in group] for group in groups]
    grouped_results = [{alias: [scores[i] for i in group] for alias, scores in results.items()} for group in groups]
    scored = scorer.score_groups(grouped, grouped_results)
    if len(scored) != len(groups):
        raise RuntimeError(f"score_groups returned {len(scored)} groups for {len(groups)}")
    out: list[Score | None] = [None] * len(samples)
    for group, scores in zip(groups, scored):
        if len(scores) != len(group):
            raise RuntimeError(f"score_groups returned {len(scores)} scores for a group of {len(group)}")
        for i, score in zip(group, scores):
            out[i] = score if isinstance(score, Score) else Score(score)
    return [s if s is not None else Score.unscorable("sample in no group") for s in out]
