"""Every code block a reader could paste is either run by a named test or marked as a fragment.

The line before each fenced block in README.md, docs/ and grpo_core/README.md is an HTML comment
(invisible when rendered): `<!-- checked by tests/FILE.py::TEST -->`, naming a test that reads this
document and runs or compares the block, or `<!-- fragment: why it is not run -->`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from reward_helpers import REPO, subprocess_env

from grpo_rewards import ConfigError, load_spec

DOCS = [REPO / "README.md", REPO / "grpo_core" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```\w*\n.*?^```\n", re.S | re.M)
MARK = re.compile(r"<!-- (?:checked by (?P<test>tests/\w+\.py::\w+)|fragment: (?P<why>[^>]{3,})) -->")


def blocks_with_marks(doc):
    text = doc.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        yield text[:match.start()].count("\n") + 1, MARK.fullmatch(before.strip())


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_block_is_checked_by_a_test_or_marked_as_a_fragment(doc):
    unmarked = [line for line, mark in blocks_with_marks(doc) if mark is None]
    assert not unmarked, f"{doc.name}: blocks at lines {unmarked} need <!-- checked by ... --> or <!-- fragment: ... -->"
    for line, mark in blocks_with_marks(doc):
        if mark["test"]:
            path, name = mark["test"].split("::")
            source = (REPO / path).read_text(encoding="utf-8")
            assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{doc.name}:{line}: no test {mark['test']}"
            # The named test reads this document (this file's tests read every marked block).
            assert doc.name in source or path == "tests/test_doc_blocks.py", f"{doc.name}:{line}: {path} never reads it"


def marked_blocks(test_name: str) -> list[tuple[str, str]]:
    """(where, body) of every block marked as checked by `test_name` of this file."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            if before == f"<!-- checked by tests/test_doc_blocks.py::{test_name} -->":
                where = f"{doc.relative_to(REPO)}:{text[:match.start()].count(chr(10)) + 1}"
                found.append((where, match.group(0).split("\n", 1)[1].rsplit("```", 1)[0]))
    return found


@pytest.mark.timeout(900)
def test_marked_command_blocks_run(tmp_path):
    """Each command line of a marked bash block, as printed, from a directory holding a copy of
    examples/ (what a user has after cloning)."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = subprocess_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # the installed console scripts
    blocks = marked_blocks("test_marked_command_blocks_run")
    assert len(blocks) >= 3
    for where, body in blocks:
        for command in body.replace("\\\n", " ").splitlines():
            command = command.split("  #", 1)[0].strip()
            if not command or command.startswith("#"):
                continue
            result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                                    env=env, timeout=300)
            assert result.returncode == 0, f"{where}: {command}\n{result.stderr[-2000:]}"
    assert (tmp_path / "reward-spec.schema.json").stat().st_size > 1000
    assert len((tmp_path / "outputs" / "scores.jsonl").read_text().splitlines()) == \
        len((tmp_path / "examples" / "completions.jsonl").read_text().splitlines())


def test_marked_spec_snippets_validate():
    """Each marked YAML block is a complete reward spec that validates against the built-in scorers."""
    blocks = marked_blocks("test_marked_spec_snippets_validate")
    assert len(blocks) >= 2
    for where, body in blocks:
        try:
            load_spec(yaml.safe_load(body))
        except ConfigError as exc:
            pytest.fail(f"{where}: {exc}")
