"""Known reward hacks, as data: each names the scorer it targets and the score it must get.

The red-team tests (tests/redteam/) and `grpo-rewards probe` read the same list, so a hack
added here is both a regression test and something a user's spec is checked against.
Each family lives in its own module (`code`, `math`, `text`) with a module-level `HACKS` list.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("code", "math", "text")


@dataclass(frozen=True)
class Hack:
    """One known way of earning reward without doing the task."""

    family: str                       # "code", "math", "text"
    name: str                         # short id, unique within the family: "always_equal_eq"
    scorer: str                       # registry name of the scorer it targets: "code_tests"
    sample: Mapping[str, Any]         # {"prompt": ..., "completion": ..., **reference fields}
    expect: float | None = 0.0        # what the scorer must give it: a value, or None (unscorable)
    why: str = ""                     # one line: what it exploits in a naive scorer
    params: Mapping[str, Any] = field(default_factory=dict)  # the scorer's params ({} = defaults)

    @property
    def id(self) -> str:
        return f"{self.family}/{self.name}"


def all_hacks(families: tuple[str, ...] = FAMILIES) -> list[Hack]:
    """Every hack of the given families, in a stable order."""
    hacks: list[Hack] = []
    for family in families:
        hacks.extend(importlib.import_module(f"{__name__}.{family}").HACKS)
    return hacks
