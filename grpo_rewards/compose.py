"""CompositeReward: a validated spec turned into one callable that scores batches.

Each member's value passes through its None policy, its gate, the spec's aggregation and its
weight (see `aggregate`); with the defaults the total is the sum of weight * value over the
scorers that returned a value, and None where no scorer could score. A scorer that raises gives
None for the samples of that batch, is counted, and is logged once with its exception, unless
its `on_error` is `raise`. Group scorers see one prompt's samples together (see `group`);
deterministic scorers are served from a score cache (see `cache`).

The adapters to trainers (`integrations.trl`, `integrations.verl`) depend on this module and register
themselves here when the package loads, so `reward.as_trl()` reads as users know it without compose
importing its adapters.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_rewards.aggregate import combine, decided_by_gate
from grpo_rewards.cache import ScoreCache
from grpo_rewards.columns import check_columns, gold_field
from grpo_rewards.group import GroupScorer, groups_of, score_in_groups
from grpo_rewards.registry import Registry, get_registry
from grpo_rewards.scorer import RewardBatch, Sample, Score, Scorer
from grpo_rewards.spec import RewardSpec, ScorerSpec, load_spec

__all__ = ["CompositeReward", "Member", "RewardBatch", "as_samples", "build", "register_adapter"]

log = logging.getLogger(__name__)

# name -> the function that turns a CompositeReward into that trainer's reward ("trl", "verl").
ADAPTERS: dict[str, Callable[..., Any]] = {}


def register_adapter(name: str, make: Callable[..., Any]) -> None:
    """Offer `make(reward, ...)` as `reward.as_<name>(...)`; the integrations call this on import."""
    ADAPTERS[name] = make


@dataclass(frozen=True)
class Member:
    spec: ScorerSpec  # alias, weight, None policy and gate: what `aggregate` reads
    scorer: Scorer
    on_error: str
    dependencies: tuple[str, ...] = ()

    @property
    def alias(self) -> str:
        return self.spec.alias


def as_samples(items: Iterable[Sample | Mapping[str, Any]]) -> list[Sample]:
    return [it if isinstance(it, Sample) else Sample.from_record(it) for it in items]


class CompositeReward:
    """The reward of a `RewardSpec`: its scorers, combined as the spec says.

    A `RewardSpec` is trusted as given (one from `load_spec` or a training config was validated
    there, and its scorers get their validated `Params` as is); a path or mapping is validated
    first. `registry` is the run's registry, handed to every scorer; None: the process-wide one.
    """

    def __init__(self, spec: RewardSpec | Mapping[str, Any] | str, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else get_registry()
        self.spec = spec if isinstance(spec, RewardSpec) else load_spec(spec, self.registry)
        self.members = []
        for s in self.spec.scorers:
            cls = self.registry.scorer(s.scorer)
            scorer = cls(s.scorer_params, registry=self.registry)
            self.members.append(Member(s, scorer, s.on_error or self.spec.on_error,
                                       tuple(cls.dependencies(scorer.params))))
        # Members whose raw values a later scorer reads: always scored in full.
        self._read_by_others = {d for m in self.members for d in m.dependencies}
        self.cache = ScoreCache(self.spec.cache_size)
        self.error_counts = {m.alias: 0 for m in self.members}
        self._logged: set[str] = set()

    @property
    def aliases(self) -> list[str]:
        return [m.alias for m in self.members]

    @property
    def weights(self) -> list[float]:
        return [m.spec.weight for m in self.members]

    def _run_member(self, member: Member, samples: list[Sample], results: dict[str, list[Score]],
                    groups: list[list[int]]) -> tuple[list[Score], int, int]:
        """(scores, samples that got None by an error, samples served from the cache)."""
        hits = 0
        try:
            if isinstance(member.scorer, GroupScorer):
                scores = score_in_groups(member.scorer, samples, results, groups)
            else:
                scores, hits = self.cache.score(member.scorer, samples, results, member.dependencies)
            if len(scores) != len(samples):
                raise RuntimeError(f"returned {len(scores)} scores for {len(samples)} samples")
            scores = [s if isinstance(s, Score) else Score(s) for s in scores]
            return (*self._check_range(member, scores), hits)
        except Exception as exc:
            if member.on_error == "raise":
                raise
            if member.alias not in self._logged:
                self._logged.add(member.alias)
                log.warning("scorer %r raised; its samples are scored None (logged once per scorer)",
                            member.alias, exc_info=exc)
            reason = f"scorer raised {type(exc).__name__}: {exc}"
            return [Score.unscorable("scorer error", error=reason) for _ in samples], len(samples), 0

    def _run_gated(self, member: Member, samples: list[Sample], results: dict[str, list[Score]],
                   groups: list[list[int]]) -> tuple[list[Score], int, int]:
        """`_run_member` on the samples whose value the member's gate does not decide alone: the
        others get None, which the gate replaces as it would have replaced any value."""
        shut = None
        if not isinstance(member.scorer, GroupScorer) and member.alias not in self._read_by_others:
            shut = decided_by_gate({a: [s.value for s in col] for a, col in results.items()}, self.spec.scorers,
                                   member.spec)
        if not shut or not any(shut):
            return self._run_member(member, samples, results, groups)
        keep = [i for i, closed in enumerate(shut) if not closed]
        scores: list[Score] = [Score.unscorable("not scored: its gate decides", gate_on=member.spec.gate.on)
                               for _ in samples]
        errors = hits = 0
        if keep:
            at = {i: k for k, i in enumerate(keep)}
            part, errors, hits = self._run_member(member, [samples[i] for i in keep],
                                                  {a: [col[i] for i in keep] for a, col in results.items()},
                                                  [g2 for g in groups if (g2 := [at[i] for i in g if i in at])])
            for i, score in zip(keep, part, strict=True):
                scores[i] = score
        return scores, errors, hits

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

    def score(self, samples: Sequence[Sample | Mapping[str, Any]], group_size: int | None = None) -> RewardBatch:
        """Score a batch. Groups: consecutive runs of `group_size`, or (None) the samples sharing a prompt."""
        samples = as_samples(samples)
        zeros = {m.alias: 0 for m in self.members}
        if not samples:  # scorers need not handle an empty batch
            empty: dict[str, list[Any]] = {m.alias: [] for m in self.members}
            return RewardBatch([], dict(empty), dict(zeros), [], dict(empty), dict(empty), dict(zeros))
        groups = groups_of(samples, group_size)
        results: dict[str, list[Score]] = {}
        errors, hits = dict(zeros), dict(zeros)
        for member in self.members:
            results[member.alias], errors[member.alias], hits[member.alias] = self._run_gated(
                member, samples, results, groups)
            self.error_counts[member.alias] += errors[member.alias]
        values = {alias: [s.value for s in scores] for alias, scores in results.items()}
        totals, gated, contributions, sums = combine(values, self.spec.scorers, self.spec.aggregate, groups)
        return RewardBatch(totals, results, errors, groups, gated, contributions, hits, sums)

    __call__ = score

    def check_columns(self, columns: Iterable[str], where: str = "the data") -> None:
        """Refuse data without a reference field some member reads (`columns.MissingFieldError`)."""
        check_columns([(m.alias, m.scorer) for m in self.members], columns, where)

    @property
    def gold_field(self) -> str:
        """The reference field a bare gold value fills (an OpenRLHF label, verl's ground truth)."""
        return gold_field([(m.alias, m.scorer) for m in self.members])

    def _adapter(self, name: str) -> Callable[..., Any]:
        if name not in ADAPTERS:  # only when grpo_rewards.integrations failed to load
            raise RuntimeError(f"no {name} adapter registered: import grpo_rewards.integrations.{name}")
        return ADAPTERS[name]

    def as_trl(self, group_size: int | None = None) -> tuple[list[Any], list[float]]:
        """`(reward_funcs, reward_weights)` for TRL's `GRPOTrainer`; see `integrations.trl`."""
        return self._adapter("trl")(self, group_size)  # type: ignore[no-any-return]

    def as_verl(self, none_score: float = math.nan) -> Any:
        """verl's custom reward function (`compute_score(data_source, solution_str, ground_truth, extra_info)`,
        with `.batch(...)` for its batch manager); see `integrations.verl`."""
        return self._adapter("verl")(self, none_score)

    def open(self) -> None:
        """Start every member's workers in the background (`Scorer.open`); entering the reward does."""
        for member in self.members:
            try:
                member.scorer.open()
            except Exception as exc:  # noqa: BLE001 - only a head start: its first batch meets the failure
                log.warning("%s: its workers could not be started ahead: %s: %s", member.alias, type(exc).__name__, exc)

    def close(self) -> None:
        for member in self.members:
            member.scorer.close()

    def __enter__(self) -> CompositeReward:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build(spec: RewardSpec | Mapping[str, Any] | str, registry: Registry | None = None) -> CompositeReward:
    """The reward of `spec`: a validated `RewardSpec`, or a path or mapping validated here."""
    return CompositeReward(spec, registry)
