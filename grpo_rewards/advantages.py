"""From rewards to advantages: the one place where the spec's `aggregate` and `scale_rewards` are decided.

A reward spec's `aggregate` says what happens to each member's value before the weighted sum (its
`member` step) and how the totals then become advantages (its `scale`, or `scale_rewards` where
the aggregation leaves it open). Each entry of `AGGREGATIONS` is one such mode, with the name TRL
1.16 gives it (`GRPOConfig.multi_objective_aggregation`) and the same formulas:

* `sum`: values as they are; the totals are standardised within each group, `scale_rewards`
  choosing the spread: the group's (`group`), the whole batch's (`batch`) or none (`none`, Dr. GRPO).
* `normalize_then_sum` (GDPO): each member standardised within its group, then the totals over
  the whole batch; a `scale_rewards` other than `batch` has no meaning there and is refused.

Standardising is (value - group mean) / (spread + 1e-4) with the unbiased std, over the values
that are not None; a None stays None (advantage 0), and a group with fewer than two values
gives 0. Both packages call `advantages`: `grpo_core`'s trainer on the rewards of every rank,
`CompositeReward` (through `aggregate`) for the member step, the TRL parity tests against TRL.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

EPS = 1e-4  # TRL's, so that the advantages are TRL's numbers
SCALES = ("group", "batch", "none")  # scale_rewards, as TRL names them

Values = Sequence[float | None]
Groups = Sequence[Sequence[int]]


@dataclass(frozen=True)
class Aggregation:
    """One value of a spec's `aggregate`."""

    trl_name: str                   # GRPOConfig.multi_objective_aggregation
    normalize_members: bool         # each member standardised within its group before the weighted sum
    scale: str | None               # how the totals are scaled; None: as `scale_rewards` says
    description: str


AGGREGATIONS: dict[str, Aggregation] = {
    "sum": Aggregation("sum_then_normalize", False, None, "the weighted sum of the members' values"),
    "normalize_then_sum": Aggregation(
        "normalize_then_sum", True, "batch", "each member normalised within its group (mean and std over the "
        "group's values) before the weighted sum; the totals are then scaled over the batch"),
}


def scale_problem(aggregate: str, scale_rewards: str) -> str | None:
    """Why `scale_rewards` cannot go with `aggregate` (None: it can)."""
    fixed = AGGREGATIONS[aggregate].scale
    if fixed is None or scale_rewards == fixed:
        return None
    return (f"`aggregate: {aggregate}` scales the totals over the {fixed} (as TRL 1.16 does), so "
            f"`scale_rewards: {scale_rewards}` would have no effect; leave it out or set it to {fixed!r}")


def standardize(values: Values, groups: Groups, scale: str) -> tuple[list[float | None], list[bool]]:
    """Each value centred on its group's mean and divided by (spread + EPS), the spread being the
    group's std (`group`), the batch's (`batch`) or 1 with no EPS (`none`); and, per sample, whether
    that spread is zero (TRL's `frac_reward_zero_std`; under `none` the group's std is reported)."""
    out: list[float | None] = [None] * len(values)
    zero: list[bool] = [False] * len(values)
    batch_std = _std([v for v in values if v is not None]) if scale == "batch" else None
    for group in groups:
        present = [values[i] for i in group if values[i] is not None]
        mean = math.fsum(present) / len(present) if present else 0.0
        std = batch_std if scale == "batch" else _std(present)
        for i in group:
            zero[i] = std is not None and std <= 1e-8
            if values[i] is None:
                continue
            if len(present) < 2 or (scale != "none" and std is None):
                out[i] = 0.0
            else:
                out[i] = values[i] - mean if scale == "none" else (values[i] - mean) / (std + EPS)
    return out, zero


def _std(present: Sequence[float]) -> float | None:
    """Unbiased std; None below two values."""
    if len(present) < 2:
        return None
    mean = math.fsum(present) / len(present)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in present) / (len(present) - 1))


def member_values(column: Values, groups: Groups, aggregate: str) -> Values:
    """A member's values as the weighted sum reads them under `aggregate` (its member step)."""
    if not AGGREGATIONS[aggregate].normalize_members:
        return column
    return standardize(column, groups, "group")[0]


def advantages(totals: Values, groups: Groups, aggregate: str, scale_rewards: str = "group"
               ) -> tuple[list[float], list[bool]]:
    """Each sample's advantage (0 where its total is None) and whether its spread was zero.

    `totals` are the spec's totals (after its member step) of the whole generation batch, all
    ranks; `groups` the indices of each prompt's samples."""
    scale = AGGREGATIONS[aggregate].scale
    if scale == "batch":
        groups = [[i for group in groups for i in group]]  # one mean and one spread: the batch's
    out, zero = standardize(totals, groups, scale or scale_rewards)
    return [0.0 if a is None else a for a in out], zero

