"""docs/architecture.md's "Adding things" holds: the files it says a new loss variant or aggregation
mode touches are the only ones, because no other module of either package spells an entry of the
table (the config's choices and the tests derive from it)."""

from __future__ import annotations

import ast
import re

import pytest
from reward_helpers import REPO

from grpo_core.loss import LOSS_TYPES
from grpo_rewards.advantages import AGGREGATIONS

# A field's default names one entry; that names no list that must grow with the table.
DEFAULTS = {"grpo_core/config.py": {"dapo"}, "grpo_rewards/spec.py": {"sum"}}


def spelled_in_code(names: set[str]) -> dict[str, set[str]]:
    """Module -> the names of `names` that its code (docstrings left out) has as a string constant."""
    found: dict[str, set[str]] = {}
    for path in sorted(p for package in ("grpo_rewards", "grpo_core") for p in (REPO / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings:
                found.setdefault(path.relative_to(REPO).as_posix(), set()).add(node.value)
    return found


def claimed(case: str) -> tuple[int, list[str]]:
    """(the count the architecture page gives for `case`, the files its bullet names)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").split("## Adding things", 1)[1]
    bullet = re.search(rf"^- {case} \((\d+) files\):(.*?)(?=^- |\Z)", text, re.S | re.M)
    assert bullet, f"architecture.md's Adding things has no '- {case} (N files):' bullet"
    files = re.findall(r"`((?:grpo_\w+|tests|docs)/[\w/]+\.(?:py|md))`", bullet.group(2))
    return int(bullet.group(1)), files


@pytest.mark.parametrize("case, table, table_name", [
    ("A loss variant", LOSS_TYPES, "LOSS_TYPES"),
    ("An aggregation mode", AGGREGATIONS, "AGGREGATIONS"),
])
def test_adding_an_entry_touches_the_files_the_architecture_page_counts(case, table, table_name):
    count, files = claimed(case)
    assert count == len(files) == len(set(files)), (count, files)
    code = [f for f in files if f.startswith("grpo_")]
    spelled = {path: names - DEFAULTS.get(path, set()) for path, names in spelled_in_code(set(table)).items()}
    assert {path for path, names in spelled.items() if names} == set(code), spelled
    assert table_name in (REPO / code[0]).read_text(encoding="utf-8")
    test_file, doc = (REPO / f for f in files if f.startswith("tests/")), [f for f in files if f.startswith("docs/")]
    for path in test_file:
        source = path.read_text(encoding="utf-8")
        assert table_name in source or all(name in source for name in table), f"{path} does not cover {table_name}"
    text = (REPO / doc[0]).read_text(encoding="utf-8")
    assert all(f"`{name}`" in text for name in table), f"{doc[0]} does not name every entry of {table_name}"
