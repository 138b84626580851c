"""Reward diagnostics: which member moves the total, which gives no signal, how many duplicates.

Per member, over the groups of the batches seen: the share of groups (of two or more samples) in
which its contribution to the total has no spread, the correlation of its value (as the
aggregation reads it) with the total, its share of the total's variance, and the fractions of
None and of errors. For the whole reward: the share of groups whose totals have no spread (no
gradient) and the duplicate rate (completions repeating another of their group, whitespace
collapsed). Warnings name the member responsible when one member decides almost all of the
total's variance or when most groups give no gradient.

`grpo-rewards score` prints them under its summary; the trainer logs `reward_metrics(batch)`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from grpo_rewards.compose import CompositeReward, RewardBatch
from grpo_rewards.scorers.group import duplicate_counts

log = logging.getLogger(__name__)

DOMINANT_SHARE = 0.9    # a member with this share of the total's variance decides the total
NO_GRADIENT_SHARE = 0.5  # more than this share of groups without spread: most give no gradient
SPREAD_EPS = 1e-9       # below this a group's values count as equal


@dataclass
class Moments:
    """Running sums for a mean, a variance and a covariance of pairs (x, y)."""

    n: int = 0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    yy: float = 0.0
    xy: float = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.x += x
        self.y += y
        self.xx += x * x
        self.yy += y * y
        self.xy += x * y

    def cov(self) -> float:
        return self.xy / self.n - (self.x / self.n) * (self.y / self.n)

    def var_x(self) -> float:
        return self.xx / self.n - (self.x / self.n) ** 2

    def var_y(self) -> float:
        return self.yy / self.n - (self.y / self.n) ** 2

    def corr(self) -> float | None:
        if self.n < 2:
            return None
        denominator = math.sqrt(max(self.var_x(), 0.0) * max(self.var_y(), 0.0))
        return self.cov() / denominator if denominator > SPREAD_EPS else None


@dataclass(frozen=True)
class RewardWarning:
    key: str   # what it is about ("dominant:<alias>", "no_gradient"): the trainer says each once
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class MemberStats:
    samples: int = 0
    nones: int = 0
    errors: int = 0
    groups: int = 0           # groups of two or more samples
    flat_groups: int = 0      # of those, groups where its contribution has no spread
    with_total: Moments = field(default_factory=Moments)      # (its value, total)
    share: Moments = field(default_factory=Moments)           # (its contribution, total)


def _flat(values: Iterable[float | None]) -> bool:
    present = [v for v in values if v is not None]
    return len(present) < 2 or max(present) - min(present) <= SPREAD_EPS


class RewardDiagnostics:
    """Accumulates diagnostics over batches (a whole `score` run, or one training step)."""

    def __init__(self, aliases: Sequence[str]) -> None:
        self.members = {alias: MemberStats() for alias in aliases}
        self.groups = 0
        self.flat_groups = 0
        self.samples_in_groups = 0
        self.duplicates = 0

    def add(self, batch: RewardBatch, texts: Sequence[str] | None = None) -> None:
        """Add a batch; `texts` are the completions' texts (from the batch's samples when scored standalone)."""
        n = len(batch)
        groups = [g for g in batch.groups if len(g) > 1]
        self.groups += len(groups)
        self.flat_groups += sum(_flat(batch.totals[i] for i in g) for g in groups)
        if texts is not None:
            self.samples_in_groups += sum(len(g) for g in groups)
            self.duplicates += sum(sum(c > 0 for c in duplicate_counts([texts[i] for i in g])) for g in groups)
        for alias, stats in self.members.items():
            values, gated, contributions = batch.values[alias], batch.gated[alias], batch.contributions[alias]
            stats.samples += n
            stats.nones += sum(v is None for v in values)
            stats.errors += batch.errors.get(alias, 0)
            stats.groups += len(groups)
            stats.flat_groups += sum(_flat(contributions[i] for i in g) for g in groups)
            for i, total in enumerate(batch.totals):
                if total is None:
                    continue
                stats.share.add(contributions[i] or 0.0, total)
                if gated[i] is not None:
                    stats.with_total.add(gated[i], total)

    def member_rows(self) -> dict[str, dict[str, float | None]]:
        """Per member: zero_std (share of flat groups), corr_total, variance_share, none, errors (fractions)."""
        rows = {}
        for alias, s in self.members.items():
            total_var = s.share.var_y() if s.share.n > 1 else 0.0
            rows[alias] = {
                "zero_std": s.flat_groups / s.groups if s.groups else None,
                "corr_total": s.with_total.corr(),
                "variance_share": s.share.cov() / total_var if total_var > SPREAD_EPS else None,
                "none": s.nones / s.samples if s.samples else None,
                "errors": s.errors / s.samples if s.samples else None,
            }
        return rows

    @property
    def zero_std_share(self) -> float | None:
        return self.flat_groups / self.groups if self.groups else None

    @property
    def duplicate_rate(self) -> float | None:
        return self.duplicates / self.samples_in_groups if self.samples_in_groups else None

    def warnings(self) -> list[RewardWarning]:
        rows = self.member_rows()
        out = []
        if len(rows) > 1:
            for alias, row in rows.items():
                share = row["variance_share"]
                if share is not None and share >= DOMINANT_SHARE:
                    out.append(RewardWarning(f"dominant:{alias}", f"{alias!r} decides {share:.0%} of the total's "
                                             "variance; the other members barely move the advantages"))
        flat = self.zero_std_share
        if flat is not None and flat > NO_GRADIENT_SHARE:
            constant = sorted(((row["zero_std"], alias) for alias, row in rows.items()
                               if row["zero_std"] is not None and row["zero_std"] > NO_GRADIENT_SHARE), reverse=True)
            named = ", ".join(f"{alias!r} is constant in {share:.0%}" for share, alias in constant)
            out.append(RewardWarning("no_gradient", f"{flat:.0%} of groups give no gradient (equal totals)"
                                     + (f": {named}" if named else "")))
        return out

    def metrics(self, prefix: str = "reward_diag") -> dict[str, float]:
        """Flat float metrics: `<prefix>/<alias>/zero_std`, ..., `<prefix>/duplicate_rate` (None left out).

        Not under `reward/`, which the trainer's plot draws as reward curves."""
        out: dict[str, float | None] = {}
        for alias, row in self.member_rows().items():
            out |= {f"{prefix}/{alias}/{key}": value for key, value in row.items()}
        out[f"{prefix}/duplicate_rate"] = self.duplicate_rate
        return {k: float(v) for k, v in out.items() if v is not None}


class StepDiagnostics:
    """The trainer's per-step diagnostics: metrics, and each kind of warning logged the first time."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # rank 0 only, as for every other log line
        self.said: set[str] = set()

    def metrics(self, reward: CompositeReward, batch: RewardBatch, texts: Sequence[str]) -> dict[str, float]:
        """This step's diagnostics, with the score cache's hit rate so far."""
        diagnostics = RewardDiagnostics(reward.aliases)
        diagnostics.add(batch, texts)
        metrics = diagnostics.metrics()
        if reward.cache.hit_rate is not None:
            metrics["reward_diag/cache_hit_rate"] = reward.cache.hit_rate
        for warning in diagnostics.warnings():
            if self.enabled and warning.key not in self.said:
                self.said.add(warning.key)
                log.warning("reward: %s (said once per run)", warning.text)
        return metrics
