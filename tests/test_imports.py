"""grpo_rewards' import structure: no circles between its modules, and a function-level import
only for a heavy or optional third-party dependency, with a comment saying why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "grpo_rewards"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    return [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]


def project_module(name: str) -> str | None:
    """The grpo_rewards module `name` is (or is inside), if any."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_nodes(path: Path) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in it (TYPE_CHECKING blocks included)."""
    graph = {}
    for name, path in MODULES.items():
        targets = {project_module(t) for n in import_nodes(path) for t in imported(n)}
        graph[name] = {t for t in targets if t and t != name and not name.startswith(t + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import path that comes back to where it started (one per circle, by depth-first search)."""
    found, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return found


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_grpo_rewards():
    graph = import_graph()
    assert "grpo_rewards.compose" in graph["grpo_rewards.integrations.trl"]  # the graph is read at all
    assert circles(graph) == []


def test_the_adapters_depend_on_compose_and_not_the_reverse():
    """compose offers `as_trl`/`as_verl` through adapters that register themselves, never by importing them."""
    graph = import_graph()
    reached, todo = set(), ["grpo_rewards.compose"]
    while todo:
        for nxt in graph[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    assert not [m for m in reached if m.startswith("grpo_rewards.integrations")]
    for adapter in ("trl", "verl", "verl_functions"):
        assert "grpo_rewards.compose" in graph[f"grpo_rewards.integrations.{adapter}"]


@pytest.mark.parametrize("path", sorted(MODULES.values()), ids=str)
def test_function_level_imports_are_third_party_and_say_why(path):
    lines = path.read_text().splitlines()
    for node in import_nodes(path):
        if node.col_offset == 0:
            continue
        where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        assert not any(project_module(t) for t in imported(node)), f"{where}: a project import below module level (a function, TYPE_CHECKING)"
        # A comment on the line, or above the run of import lines this one belongs to.
        row = node.lineno - 1
        while row > 0 and lines[row - 1].strip().startswith(("import ", "from ")):
            row -= 1
        assert "#" in lines[node.lineno - 1] or lines[row - 1].strip().startswith("#"), \
            f"{where}: say why this import is deferred (heavy or optional dependency)"
