"""The README's scorer table holds exactly the built-in scorers the registry has: a scorer added
without its row (or a row left after its scorer went) fails here."""

from __future__ import annotations

import re

from reward_helpers import REPO

from grpo_rewards.registry import BUILTIN_PLUGINS, load_registry


def readme_table_scorers() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Scorers\n", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| `([a-z_0-9]+)` \|", section, re.MULTILINE)]


def test_the_readme_lists_every_built_in_scorer_once():
    registry = load_registry()
    built_in = {name for name, entry in registry.scorers.items() if entry.plugin in BUILTIN_PLUGINS}
    listed = readme_table_scorers()
    assert len(listed) == len(set(listed)), "a scorer has two rows"
    assert sorted(listed) == sorted(built_in)


def test_the_field_column_names_what_each_scorer_declares():
    """A scorer that reads a reference field says so in its row; one that reads none leaves the cell empty."""
    registry = load_registry()
    text = (REPO / "README.md").read_text()
    for name, entry in registry.scorers.items():
        if entry.plugin not in BUILTIN_PLUGINS:
            continue
        row = re.search(rf"^\| `{name}` \|.*\|(.*)\|$", text, re.MULTILINE)
        assert row is not None, name
        reads = row.group(1).strip()
        assert bool(reads) == (entry.cls.reads is not None), (name, reads)
        if entry.cls.reads is not None and entry.cls.reads.param:
            assert f"`{entry.cls.reads.param}`" in reads, (name, reads)
        if entry.cls.reads is not None:  # a declaration names params the scorer has
            named = {entry.cls.reads.param, entry.cls.reads.unless} - {None}
            assert named <= set(entry.cls.Params.model_fields), (name, named)
