"""From the members' values to each sample's total: None policy, gate, aggregation, weight.

A member's value passes through, in order:

1. its None policy: `skip` keeps None (left out of the total), `zero` turns it into 0,
   `drop_sample` makes the whole sample's total None (so it gets advantage 0);
2. its gate: where the gating member's value (after that member's own policy and gate) does not
   meet the condition, the value becomes the gate's `otherwise`; where the gating value is None
   the gate cannot be judged and the value becomes None;
3. the aggregation's member step (`advantages.member_values`): `sum` takes the value as it is,
   `normalize_then_sum` standardises it within its group (TRL 1.16's formula);
4. its weight. The total is the sum over the members with a value; None if none has one.

A member is the spec's own `ScorerSpec` (alias, weight, on_none, gate). Groups are the samples
of one prompt (see `group.groups_of`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grpo_rewards.advantages import member_values
from grpo_rewards.spec import GateSpec, ScorerSpec

Values = list[float | None]


def _gate_order(members: Sequence[ScorerSpec]) -> list[ScorerSpec]:
    """Gated members after the members they are gated on (the spec loader has ruled out cycles)."""
    done: set[str] = {m.alias for m in members if m.gate is None}
    order = [m for m in members if m.gate is None]
    pending = [m for m in members if m.gate is not None]
    while pending:
        ready = [m for m in pending if m.gate.on in done]
        if not ready:
            raise ValueError(f"gates cannot be ordered: {[m.alias for m in pending]}")
        order += ready
        done.update(m.alias for m in ready)
        pending = [m for m in pending if m.alias not in done]
    return order


def _opens(gate: GateSpec, value: float) -> bool:
    return (gate.min is None or value >= gate.min) and (gate.max is None or value <= gate.max)


def apply_policies(values: Mapping[str, Values], members: Sequence[ScorerSpec]) -> tuple[dict[str, Values], list[bool]]:
    """Steps 1 and 2: each member's value as the aggregation reads it, and which samples are dropped.

    A dropped sample has None for every member, so it is also left out of the group statistics."""
    n = len(next(iter(values.values()), []))
    dropped = [False] * n
    policed: dict[str, Values] = {}
    for member in members:
        column = list(values[member.alias])
        for i, value in enumerate(column):
            if value is None and member.on_none == "zero":
                column[i] = 0.0
            elif value is None and member.on_none == "drop_sample":
                dropped[i] = True
        policed[member.alias] = column
    gated: dict[str, Values] = {}
    for member in _gate_order(members):
        column = policed[member.alias]
        if member.gate is not None:
            source = gated[member.gate.on]
            column = [None if s is None else (v if _opens(member.gate, s) else member.gate.otherwise)
                      for v, s in zip(column, source, strict=True)]
        gated[member.alias] = column
    out = {m.alias: [None if dropped[i] else v for i, v in enumerate(gated[m.alias])] for m in members}
    return out, dropped


def combine(values: Mapping[str, Values], members: Sequence[ScorerSpec], aggregate: str,
            groups: Sequence[Sequence[int]]) -> tuple[Values, dict[str, Values], dict[str, Values], Values]:
    """(totals, each member's value after policy and gate, each member's weighted contribution,
    the weighted sums of the gated values: the totals before any group normalisation)."""
    gated, dropped = apply_policies(values, members)
    normalised = {m.alias: member_values(gated[m.alias], groups, aggregate) for m in members}
    contributions = _weigh(normalised, members)
    return _sum_rows(contributions, dropped), gated, contributions, _sum_rows(_weigh(gated, members), dropped)


def _weigh(columns: Mapping[str, Values], members: Sequence[ScorerSpec]) -> dict[str, Values]:
    return {m.alias: [None if v is None else m.weight * v for v in columns[m.alias]] for m in members}


def _sum_rows(columns: Mapping[str, Values], dropped: Sequence[bool]) -> Values:
    out: Values = []
    for i in range(len(dropped)):
        parts = [c[i] for c in columns.values() if c[i] is not None]
        out.append(sum(parts) if parts and not dropped[i] else None)
    return out
