"""Known reward hacks, as data: each names the scorer it targets and the score it must get.

The red-team tests (tests/test_redteam*.py) and `grpo-rewards probe` read the same list, so a hack
added here is both a regression test and something a user's spec is checked against.
Each family lives in its own module (`code`, `math`, `text`) with a module-level `HACKS` list.
A hack whose `scorer` is `ANY_SCORER` applies to every scorer (an empty completion, padding);
a plugin contributes hacks for its own scorers with a `redteam_hacks` class attribute (see
docs/reward-hacking.md).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo_rewards.compose import build
from grpo_rewards.registry import Registry, get_registry
from grpo_rewards.scorer import Sample, Score

FAMILIES = ("code", "math", "text", "judge", "instructions")
ANY_SCORER = "*"


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


def applies(hack: Hack, scorer_name: str) -> bool:
    return hack.scorer in (scorer_name, ANY_SCORER)


def pays(value: float | None, expect: float | None, value_range: tuple[float, float]) -> bool:
    """Whether a hack earned more than it must: above `expect` (0 when it must be None) by more
    than 1% of the scorer's range, so that a rounding difference is not a finding."""
    if value is None:
        return False
    floor = 0.0 if expect is None else expect
    return value > floor + 0.01 * (value_range[1] - value_range[0])


def hack_spec(hack: Hack, scorer: str | None = None, registry: Registry | None = None) -> dict[str, Any]:
    """A one-member spec that runs `hack` against `scorer` (default: its target) with its params,
    preceded by the scorers it reads (`cosine_length` reads `math_accuracy`), each with defaults."""
    scorer = scorer or hack.scorer
    cls = (registry or get_registry()).scorer(scorer)
    needs = cls.dependencies(cls.Params.model_validate(dict(hack.params)))
    members = [{"scorer": alias, "name": alias, "weight": 0.0} for alias in needs]
    return {"scorers": [*members, {"scorer": scorer, "name": "target", "params": dict(hack.params)}]}


def run_hacks(hacks: Sequence[Hack], scorer: str | None = None, registry: Registry | None = None) -> list[Score]:
    """Each hack's Score from its target scorer (or `scorer`, for hacks that apply to any), through
    the scorer's real batch path: the hacks sharing a configuration are scored as one batch."""
    groups: dict[str, list[int]] = {}
    specs: dict[str, dict[str, Any]] = {}
    for i, hack in enumerate(hacks):
        spec = hack_spec(hack, scorer, registry)
        key = json.dumps(spec, sort_keys=True, default=repr)
        specs[key] = spec
        groups.setdefault(key, []).append(i)
    out: list[Score | None] = [None] * len(hacks)
    for key, indices in groups.items():
        with build(specs[key], registry) as reward:
            batch = reward.score([Sample.from_record(hacks[i].sample) for i in indices])
        for i, score in zip(indices, batch.scores["target"], strict=True):
            out[i] = score
    return out  # type: ignore[return-value]
