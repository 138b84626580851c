"""CompositeReward: a validated spec turned into one callable that scores batches.

Total per sample = sum of weight * value over the scorers that returned a value; a sample no
scorer could score has total None. A scorer that raises gives None for the samples of that
batch, is counted, and is logged once with its exception, unless its `on_error` is `raise`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_rewards.integrations.trl import TrlRewardFunction, trl_reward_functions
from grpo_rewards.registry import Registry, get_registry
from grpo_rewards.scorer import RewardBatch, Sample, Score, Scorer
from grpo_rewards.spec import RewardSpec, load_spec

__all__ = ["CompositeReward", "Member", "RewardBatch", "as_samples", "build"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Member:
    alias: str
    weight: float
    scorer: Scorer
    on_error: str


def as_samples(items: Iterable[Sample | Mapping[str, Any]]) -> list[Sample]:
    return [it if isinstance(it, Sample) else Sample.from_record(it) for it in items]


class CompositeReward:
    """A weighted sum of scorers built from a `RewardSpec`.

    A `RewardSpec` is trusted as given (one from `load_spec` or a training config was validated
    there, and its scorers get their validated `Params` as is); a path or mapping is validated
    first. `registry` is the run's registry, handed to every scorer; None: the process-wide one.
    """

    def __init__(self, spec: RewardSpec | Mapping[str, Any] | str, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else get_registry()
        self.spec = spec if isinstance(spec, RewardSpec) else load_spec(spec, self.registry)
        self.members = [
            Member(s.alias, s.weight, self.registry.scorer(s.scorer)(s.scorer_params, registry=self.registry),
                   s.on_error or self.spec.on_error)
            for s in self.spec.scorers
        ]
        self.error_counts = {m.alias: 0 for m in self.members}
        self._logged: set[str] = set()

    @property
    def aliases(self) -> list[str]:
        return [m.alias for m in self.members]

    @property
    def weights(self) -> list[float]:
        return [m.weight for m in self.members]

    def _run_member(self, member: Member, samples: list[Sample], results: dict[str, list[Score]]) -> tuple[list[Score], int]:
        try:
            scores = member.scorer.score(samples, results)
            if len(scores) != len(samples):
                raise RuntimeError(f"returned {len(scores)} scores for {len(samples)} samples")
            scores = [s if isinstance(s, Score) else Score(s) for s in scores]
            return self._check_range(member, scores)
        except Exception as exc:
            if member.on_error == "raise":
                raise
            if member.alias not in self._logged:
                self._logged.add(member.alias)
                log.warning("scorer %r raised; its samples are scored None (logged once per scorer)",
                            member.alias, exc_info=exc)
            reason = f"scorer raised {type(exc).__name__}: {exc}"
            return [Score.unscorable("scorer error", error=reason) for _ in samples], len(samples)

    def _check_range(self, member: Member, scores: list[Score]) -> tuple[list[Score], int]:
        """A value outside the scorer's declared `value_range` is a scorer bug: like an exception, the
        sample gets None (with the value in `info`) and is counted, rather than clipped into a reward
        the scorer never meant."""
        low, high = member.scorer.value_range
        outside = [i for i, s in enumerate(scores) if s.value is not None and not low <= s.value <= high]
        if not outside:
            return scores, 0
        if member.on_error == "raise":
            raise ValueError(f"scorer {member.alias!r} returned {scores[outside[0]].value!r}, outside its "
                             f"declared value_range [{low:g}, {high:g}]")
        if member.alias not in self._logged:
            self._logged.add(member.alias)
            log.warning("scorer %r returned values outside its value_range [%g, %g]; those samples are "
                        "scored None (logged once per scorer)", member.alias, low, high)
        for i in outside:
            scores[i] = Score.unscorable("scorer error", error=f"value {scores[i].value!r} outside the declared "
                                         f"value_range [{low:g}, {high:g}]", raw_value=scores[i].value)
        return scores, len(outside)

    def score(self, samples: Sequence[Sample | Mapping[str, Any]]) -> RewardBatch:
        samples = as_samples(samples)
        if not samples:  # scorers need not handle an empty batch
            return RewardBatch([], {m.alias: [] for m in self.members}, {m.alias: 0 for m in self.members})
        results: dict[str, list[Score]] = {}
        errors: dict[str, int] = {}
        for member in self.members:
            results[member.alias], errors[member.alias] = self._run_member(member, samples, results)
            self.error_counts[member.alias] += errors[member.alias]
        totals: list[float | None] = []
        for i in range(len(samples)):
            parts = [m.weight * results[m.alias][i].value for m in self.members if results[m.alias][i].value is not None]
            totals.append(sum(parts) if parts else None)
        return RewardBatch(totals, results, errors)

    __call__ = score

    def as_trl(self) -> tuple[list[TrlRewardFunction], list[float]]:
        """`(reward_funcs, reward_weights)` for TRL's `GRPOTrainer`; see `integrations.trl`."""
        return trl_reward_functions(self)

    def close(self) -> None:
        for member in self.members:
            member.scorer.close()

    def __enter__(self) -> CompositeReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build(spec: RewardSpec | Mapping[str, Any] | str, registry: Registry | None = None) -> CompositeReward:
    """The reward of `spec`: a validated `RewardSpec`, or a path or mapping validated here."""
    return CompositeReward(spec, registry)
