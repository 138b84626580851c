"""A data set's columns held against the reference fields a reward's scorers read.

A field missing from the data altogether is a misconfiguration, not a mask: a gold column under
another name (`solution` where math reads `answer`) would score None on every row and train on the
other terms alone. So every entry point (`score`, `explain`, `grpo-train`, the TRL and verl
adapters, the server) checks the columns it has before scoring, and refuses with the scorer, the
field, the columns there are and a did-you-mean. A field present but empty on some rows is not
checked here: those rows score None, as TRL's multi-task masking expects.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from grpo_rewards.errors import UserError
from grpo_rewards.scorer import Scorer

# Names datasets give the gold answer (open-r1 and TRL's `solution`, verl's `ground_truth`, ...): a
# missing one of these is most likely another of these under a different name.
GOLD_NAMES = ("answer", "solution", "gold", "ground_truth", "final_answer", "expected_answer",
              "reference_answer", "label", "target")
# Columns every entry point has that are never a reference field.
NOT_REFERENCE = frozenset({"prompt", "completion", "id", "completion_ids", "data_source"})
MAX_SHOWN = 20


@dataclass(frozen=True)
class Missing:
    """A member whose reference field is absent from the data."""

    index: int  # position in the spec: `scorers[index]`
    alias: str
    scorer: Scorer
    fields: tuple[str, ...]  # of which the data has none


class MissingFieldError(UserError, ValueError):
    """The data lacks a reference field some scorer reads; the message says which and what to do."""

    def __init__(self, missing: Sequence[Missing], columns: Iterable[str], where: str) -> None:
        self.missing = list(missing)
        self.columns = sorted(set(columns))
        self.where = where
        shown = ", ".join(self.columns[:MAX_SHOWN]) + (" ..." if len(self.columns) > MAX_SHOWN else "")
        lines = [_problem(m, self.columns) for m in self.missing]
        head = f"{where} lacks a field the reward reads (its columns: {shown or 'none'})"
        super().__init__(head + ":\n" + "\n".join(f"  - {line}" for line in lines))


def _suggestions(field: str, columns: Sequence[str]) -> list[str]:
    candidates = [c for c in columns if c not in NOT_REFERENCE]
    close = difflib.get_close_matches(field, candidates, n=3, cutoff=0.6)
    gold = [c for c in GOLD_NAMES if c in candidates] if field in GOLD_NAMES else []
    return list(dict.fromkeys([*close, *gold]))


def _problem(m: Missing, columns: Sequence[str]) -> str:
    name = f"{m.alias!r} (scorers[{m.index}])" if m.alias == m.scorer.name else \
        f"{m.alias!r} ({m.scorer.name}, scorers[{m.index}])"
    param = m.scorer.reads.param if m.scorer.reads is not None else None
    if param is None:
        fields = " or ".join(repr(f) for f in m.fields)
        close = list(dict.fromkeys(s for f in m.fields for s in _suggestions(f, columns)))
        hint = f"; did you mean {' or '.join(map(repr, close))}? Rename it" if close else "; add one"
        return f"scorer {name} reads {fields}: the data has none{hint}"
    field = m.fields[0]
    close = _suggestions(field, columns)
    where = f"scorers[{m.index}].params"
    if close:
        hint = (f"did you mean {close[0]!r}? Set `{param}: {close[0]}` in {where}, "
                f"or rename the column {close[0]!r} to {field!r}")
    else:
        hint = f"set `{param}` in {where} to the column that holds it, or add a column {field!r}"
    return f"scorer {name} reads the field {field!r} (its `{param}`), which the data lacks; {hint}"


def missing_fields(members: Iterable[tuple[str, Scorer]], columns: Iterable[str]) -> list[Missing]:
    """Members (alias, scorer), in spec order, that read a field none of `columns` is."""
    present = set(columns)
    out = []
    for index, (alias, scorer) in enumerate(members):
        needed = scorer.reference_fields()
        if needed and not present.intersection(needed):
            out.append(Missing(index, alias, scorer, needed))
    return out


def check_columns(members: Iterable[tuple[str, Scorer]], columns: Iterable[str], where: str = "the data") -> None:
    """Raise `MissingFieldError` when a member reads a reference field absent from `columns`."""
    columns = list(columns)
    missing = missing_fields(members, columns)
    if missing:
        raise MissingFieldError(missing, columns, where)


def gold_field(members: Iterable[tuple[str, Scorer]]) -> str:
    """The field a bare gold value (an OpenRLHF label, verl's ground truth) fills: the first one a member
    names by a param (math's `answer_field`), so a spec reading `solution` gets it there; else `answer`."""
    for _, scorer in members:
        if scorer.reads is not None and scorer.reads.param is not None and scorer.reference_fields():
            return scorer.reference_fields()[0]
    return "answer"


def columns_of(references: Iterable[Mapping[str, object]]) -> set[str]:
    """Every field name any of the records (or samples' references) has."""
    names: set[str] = set()
    for ref in references:
        names.update(ref)
    return names


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, (str, list, tuple, dict)) and len(value) == 0)


def empty_counts(members: Iterable[tuple[str, Scorer]], references: Sequence[Mapping[str, object]]
                 ) -> dict[str, tuple[str, int]]:
    """alias -> (fields, rows where every field it reads is absent, null or empty): those rows score None."""
    out = {}
    for alias, scorer in members:
        needed = scorer.reference_fields()
        if needed:
            empty = sum(1 for ref in references if all(_empty(ref.get(f)) for f in needed))
            if empty:
                out[alias] = ("/".join(needed), empty)
    return out
