"""Docs that quote a file quote it exactly, and the TRL example runs as printed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from reward_helpers import REPO, subprocess_env

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A block that follows a line ending in "(`examples/NAME`):" quotes that file.
QUOTE = re.compile(r"\(`(examples/[^`]+)`\):\n\n```\w*\n(.*?)```", re.S)


def test_every_quoted_example_file_is_quoted_exactly():
    quoted = 0
    for doc in DOCS:
        for name, body in QUOTE.findall(doc.read_text(encoding="utf-8")):
            assert body == (REPO / name).read_text(encoding="utf-8"), f"{doc.name} quotes {name} inexactly"
            quoted += 1
    assert quoted >= 1


def _trl_block(doc) -> str:
    [code] = [b for b in re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
              if "GRPOTrainer(" in b]
    return code


@pytest.mark.timeout(600)
def test_the_trl_example_runs_as_printed_on_this_machine(tmp_path):
    code = _trl_block(REPO / "README.md")
    assert code == _trl_block(REPO / "docs" / "getting-started.md")  # one example, shown twice
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "rewards.yaml").write_text((REPO / "examples" / "rewards.yaml").read_text())
    check = code + "\nassert trainer.state.global_step == 2, trainer.state.global_step\n"
    result = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True,
                            env=subprocess_env(), timeout=580)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "runs" / "grpo").is_dir()
