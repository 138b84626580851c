"""From the members' values to each sample's total: None policy, gate, aggregation, weight.

A member's value passes through, in order:

1. its None policy: `skip` keeps None (left out of the total), `zero` turns it into 0,
   `drop_sample` makes the whole sample's total None (so it gets advantage 0);
2. its gate: where the gating member's value (after that member's own policy and gate) does not
   meet the condition, the value becomes the gate's `otherwise`; where the gating value is None
   the gate cannot be judged and the value becomes None;
3. the aggregation: `sum` takes the value as it is; `normalize_then_sum` replaces it by
   (value - group mean) / (group std + 1e-4), over the group's non-None values (unbiased std),
   and by 0 where the group has fewer than two values for this member (TRL 1.16's formula);
4. its weight. The total is the sum over the members with a value; None if none has one.

Groups are the samples of one prompt (see `group.groups_of`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grpo_rewards.spec import GateSpec, RewardSpec

NORMALIZE_EPS = 1e-4  # TRL's, so that `normalize_then_sum` gives TRL's numbers

Values = list[float | None]


@dataclass(frozen=True)
class MemberRule:
    """How one member's value enters the total."""

    alias: str
    weight: float
    on_none: str = "skip"
    gate: GateSpec | None = None


def member_rules(spec: RewardSpec) -> list[MemberRule]:
    return [MemberRule(s.alias, s.weight, s.on_none, s.gate) for s in spec.scorers]


def _gate_order(rules: Sequence[MemberRule]) -> list[MemberRule]:
    """Gated members after the members they are gated on (the spec loader has ruled out cycles)."""
    done: set[str] = {r.alias for r in rules if r.gate is None}
    order = [r for r in rules if r.gate is None]
    pending = [r for r in rules if r.gate is not None]
    while pending:
        ready = [r for r in pending if r.gate.on in done]
        if not ready:
            raise ValueError(f"gates cannot be ordered: {[r.alias for r in pending]}")
        order += ready
        done.update(r.alias for r in ready)
        pending = [r for r in pending if r.alias not in done]
    return order


def _opens(gate: GateSpec, value: float) -> bool:
    return (gate.min is None or value >= gate.min) and (gate.max is None or value <= gate.max)


def apply_policies(values: Mapping[str, Values], rules: Sequence[MemberRule]) -> tuple[dict[str, Values], list[bool]]:
    """Steps 1 and 2: each member's value as the aggregation reads it, and which samples are dropped.

    A dropped sample has None for every member, so it is also left out of the group statistics."""
    n = len(next(iter(values.values()), []))
    dropped = [False] * n
    policed: dict[str, Values] = {}
    for rule in rules:
        column = list(values[rule.alias])
        for i, value in enumerate(column):
            if value is None and rule.on_none == "zero":
                column[i] = 0.0
            elif value is None and rule.on_none == "drop_sample":
                dropped[i] = True
        policed[rule.alias] = column
    gated: dict[str, Values] = {}
    for rule in _gate_order(rules):
        column = policed[rule.alias]
        if rule.gate is not None:
            source = gated[rule.gate.on]
            column = [None if s is None else (v if _opens(rule.gate, s) else rule.gate.otherwise)
                      for v, s in zip(column, source, strict=True)]
        gated[rule.alias] = column
    out = {rule.alias: [None if dropped[i] else v for i, v in enumerate(gated[rule.alias])] for rule in rules}
    return out, dropped


def decided_by_gate(values: Mapping[str, Values], rules: Sequence[MemberRule], rule: MemberRule) -> list[bool] | None:
    """Where `rule`'s gate alone decides its member's value (the gating value is None, or the gate is
    shut), given the `values` of the members scored so far; None when that cannot be known yet (the
    gating member, or a gate it depends on, is not scored) or the member's own None would matter
    (`drop_sample`). There the member need not be scored at all: an expensive scorer (a judge)
    gated on a cheap one is asked only where the cheap one passes."""
    if rule.gate is None or rule.on_none == "drop_sample":
        return None
    known = [r for r in rules if r.alias in values]
    if rule.gate.on not in values or any(r.gate is not None and r.gate.on not in values for r in known):
        return None
    gated, _ = apply_policies({r.alias: values[r.alias] for r in known}, known)
    return [s is None or not _opens(rule.gate, s) for s in gated[rule.gate.on]]


def group_normalize(column: Values, groups: Sequence[Sequence[int]]) -> Values:
    """(value - mean) / (std + eps) within each group; 0 where the group has fewer than two values."""
    out: Values = [None] * len(column)
    for group in groups:
        present = [column[i] for i in group if column[i] is not None]
        if len(present) < 2:
            for i in group:
                out[i] = None if column[i] is None else 0.0
            continue
        mean = math.fsum(present) / len(present)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in present) / (len(present) - 1))
        for i in group:
            value = column[i]
            out[i] = None if value is None else (value - mean) / (std + NORMALIZE_EPS)
    return out


def combine(values: Mapping[str, Values], rules: Sequence[MemberRule], aggregate: str,
            groups: Sequence[Sequence[int]]) -> tuple[Values, dict[str, Values], dict[str, Values], Values]:
    """(totals, each member's value after policy and gate, each member's weighted contribution,
    the weighted sums of the gated values: the totals before any group normalisation)."""
    gated, dropped = apply_policies(values, rules)
    weighted = {r.alias: [None if v is None else r.weight * v for v in gated[r.alias]] for r in rules}
    contributions = weighted
    if aggregate == "normalize_then_sum":
        contributions = {r.alias: [None if v is None else r.weight * v for v in group_normalize(gated[r.alias], groups)]
                         for r in rules}
    sums = _sum_rows(weighted, dropped)
    return (sums if contributions is weighted else _sum_rows(contributions, dropped)), gated, contributions, sums


def _sum_rows(columns: Mapping[str, Values], dropped: Sequence[bool]) -> Values:
    out: Values = []
    for i in range(len(dropped)):
        parts = [c[i] for c in columns.values() if c[i] is not None]
        out.append(sum(parts) if parts and not dropped[i] else None)
    return out
