"""Docs that quote a file quote it exactly, and the TRL example runs as printed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from reward_helpers import REPO, subprocess_env

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A block that follows a line ending in "(`examples/NAME`):" quotes that file.
QUOTE = re.compile(r"\(`(examples/[^`]+)`\):\n\n(?:<!--[^>]*-->\n)?```\w*\n(.*?)```", re.S)


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


def test_the_plugin_guide_describes_every_field_and_property_of_sample():
    import dataclasses

    from grpo_rewards import Sample

    text = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)(?:\([^)]*\))?` \|", text, flags=re.M))
    public = {f.name for f in dataclasses.fields(Sample)}
    public |= {n for n, v in vars(Sample).items() if not n.startswith("_") and isinstance(v, (property, classmethod))}
    assert public <= documented, f"docs/plugins.md does not describe {sorted(public - documented)}"


def test_the_table_of_defaults_that_differ_from_trl_is_complete_and_right():
    import dataclasses

    import yaml

    trl = pytest.importorskip("trl")
    from grpo_core.config import TrainConfig

    def trl_default(f):
        if f.default is not dataclasses.MISSING:
            return f.default
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else None

    theirs = {f.name: trl_default(f) for f in dataclasses.fields(trl.GRPOConfig)}
    differ = {name: (field.get_default(call_default_factory=True), theirs[name])
              for name, field in TrainConfig.model_fields.items()
              if name in theirs and field.get_default(call_default_factory=True) != theirs[name]}
    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    section = text.split("## Defaults that differ from TRL's `GRPOConfig`", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \| `([^`]*)` \| (.+) \|$", section, flags=re.M)
    table = {name: (yaml.safe_load(ours), yaml.safe_load(trls)) for name, ours, trls, _ in rows}
    assert set(table) == set(differ), f"missing {set(differ) - set(table)}, extra {set(table) - set(differ)}"
    for name, (ours, trls) in differ.items():
        assert table[name] == (ours, trls), name
