"""Params tables for the docs, generated from each scorer's (and sandbox backend's) pydantic
`Params` so they cannot drift.

A markdown file marks where a scorer's table goes (`sandbox-params: NAME` for a backend's)::

    <!-- params: think_format -->
    (generated; do not edit)
    <!-- /params -->

`python -m grpo_rewards.docs --write docs/scorers.md` refreshes every marked table;
`--check` exits 1 naming the stale ones (the test suite runs the check).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from grpo_rewards.fileio import write_atomic
from grpo_rewards.patterns import LazyPattern
from grpo_rewards.registry import Registry, get_registry

MARKER = LazyPattern(re.compile,
                     r"(<!-- (?P<kind>params|sandbox-params): (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /params -->)",
                     re.DOTALL)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def type_name(annotation: Any) -> str:
    """A short readable form of a field's type: `int`, `"a" | "b"`, `list[str]`, `str | None`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args if a is not Ellipsis)}]"
    if origin is dict or annotation is dict:
        return "object"
    if annotation is type(None):
        return "null"
    if annotation is typing.Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "{" + ", ".join(annotation.model_fields) + "}"
    return getattr(annotation, "__name__", str(annotation))


_BOUNDS = (
    (annotated_types.Ge, "ge", "≥ {}"), (annotated_types.Gt, "gt", "> {}"),
    (annotated_types.Le, "le", "≤ {}"), (annotated_types.Lt, "lt", "< {}"),
    (annotated_types.MinLen, "min_length", "length ≥ {}"), (annotated_types.MaxLen, "max_length", "length ≤ {}"),
)


def bounds_text(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        for kind, attr, fmt in _BOUNDS:
            if isinstance(meta, kind):
                parts.append(fmt.format(getattr(meta, attr)))
        if getattr(meta, "pattern", None):
            parts.append(f"pattern `{meta.pattern}`")
        if getattr(meta, "allow_inf_nan", None) is False:
            parts.append("finite")
    return ", ".join(parts)


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "*required*"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump()
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def params_table(params: type[BaseModel]) -> str:
    """The markdown table of a `Params` model: name, type, default, bounds, description."""
    if not params.model_fields:
        return "No parameters.\n"
    rows = ["| name | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, field in params.model_fields.items():
        cells = [f"`{name}`", f"`{type_name(field.annotation)}`", default_text(field),
                 bounds_text(field), field.description or ""]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def scorer_block(scorer: type) -> str:
    """The generated body of one scorer's section: value range, params table, and any table the
    scorer adds of its own (`docs_extra`, e.g. the instruction types of `instruction_following`)."""
    lo, hi = scorer.value_range
    extra = getattr(scorer, "docs_extra", None)
    return f"Value range: [{lo:g}, {hi:g}].\n\n" + \
        params_table(scorer.Params) + (f"\n{extra()}" if extra is not None else "")


class UnknownScorerInDocs(ValueError):
    pass


def _marked_class(registry: Registry, m: re.Match[str]) -> type | None:
    table = registry.scorers if m.group("kind") == "params" else registry.sandboxes
    entry = table.get(m.group("name"))
    return entry.cls if entry is not None else None


def refresh(text: str, registry: Registry | None = None) -> tuple[str, list[str]]:
    """`text` with every marked table regenerated, and the names whose tables changed."""
    registry = registry or get_registry()
    changed: list[str] = []
    unknown = [f"{m.group('kind')}: {m.group('name')}" for m in MARKER.finditer(text)
               if _marked_class(registry, m) is None]
    if unknown:
        raise UnknownScorerInDocs(f"params markers name unregistered scorers or sandboxes: {', '.join(unknown)} "
                                  f"(registered scorers: {', '.join(sorted(registry.scorers))}; "
                                  f"sandboxes: {', '.join(sorted(registry.sandboxes))})")

    def replace(m: re.Match[str]) -> str:
        cls = _marked_class(registry, m)
        body = scorer_block(cls) if m.group("kind") == "params" else params_table(cls.Params)
        if body != m.group("body"):
            changed.append(m.group("name"))
        return m.group(1) + body + m.group(5)

    return MARKER.sub(replace, text), changed


def documented_scorers(text: str) -> list[str]:
    return [m.group("name") for m in MARKER.finditer(text) if m.group("kind") == "params"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_rewards.docs", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", metavar="FILE", type=Path, help="exit 1 if any marked params table is stale")
    mode.add_argument("--write", metavar="FILE", type=Path, help="regenerate every marked params table in place")
    args = parser.parse_args(argv)
    path: Path = args.check or args.write
    try:
        text = path.read_text(encoding="utf-8")
        new, changed = refresh(text)
    except (OSError, UnknownScorerInDocs) as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if changed:
            print(f"{path}: stale params tables: {', '.join(changed)}; run "
                  f"`python -m grpo_rewards.docs --write {path}`", file=sys.stderr)
            return 1
        print(f"{path}: {len(documented_scorers(text))} params tables up to date")
        return 0
    if new != text:
        write_atomic(path, new)
    print(f"{path}: refreshed {len(changed)} table(s){': ' + ', '.join(changed) if changed else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
