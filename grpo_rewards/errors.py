"""User-facing errors: each names what is wrong and where, so the CLI can print it without a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a user's input: a dotted/indexed path, a message, and where it was read."""

    path: str
    message: str
    source: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.source:
            where = f"{self.source}:{self.line}: " if self.line else f"{self.source}: "
        # A problem of a whole record (an input line) has a source and line but no path inside it.
        path = f"{self.path}: " if self.path else ("" if where else "<root>: ")
        return f"{where}{path}{self.message}"


class UserError(Exception):
    """A mistake in the user's input (config, spec, data); the CLI prints it and exits 2."""


class ConfigError(UserError, ValueError):
    """Every problem found in one config or spec, listed together."""

    def __init__(self, problems: Sequence[Problem], what: str = "spec") -> None:
        self.problems = list(problems)
        self.what = what
        lines = "\n".join(f"  - {p}" for p in self.problems)
        n = len(self.problems)
        super().__init__(f"invalid {what} ({n} problem{'s' if n != 1 else ''}):\n{lines}")


PLURALS = {"sandbox": "sandboxes"}


class UnknownNameError(UserError, KeyError):
    def __init__(self, kind: str, name: str, known: Iterable[str], failures: Iterable[Any] = ()) -> None:
        known = list(known)
        self.kind, self.name = kind, name
        self.suggestions = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        msg = f"unknown {kind} {name!r}"
        if self.suggestions:
            msg += f"; did you mean {' or '.join(self.suggestions)}?"
        else:
            msg += f"; known {PLURALS.get(kind, kind + 's')}: {', '.join(known) or 'none'}"
        broken = [str(f) for f in failures]
        if broken:
            msg += " (note: " + "; ".join(broken) + ")"
        self.message = msg
        super().__init__(msg)

    def __str__(self) -> str:
        return self.message


def format_loc(loc: Iterable[Any], prefix: str = "") -> str:
    """`("scorers", 1, "params", "timeout_s")` -> `scorers[1].params.timeout_s`."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
