"""The generated params tables in docs/scorers.md are current, and the generator and its CLI behave."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import docs
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.registry import get_registry, load_registry
from grpo_rewards.scorer import Score, Scorer
from grpo_rewards.scorers.text import TEXT_SCORERS

SCORERS_MD = Path(__file__).resolve().parents[1] / "docs" / "scorers.md"


def test_scorers_md_tables_are_current():
    text = SCORERS_MD.read_text(encoding="utf-8")
    _, stale = docs.refresh(text, get_registry())
    assert stale == [], f"run `python -m grpo_rewards.docs --write docs/scorers.md` (stale: {stale})"


def test_every_text_scorer_has_a_section_with_a_table():
    documented = docs.documented_scorers(SCORERS_MD.read_text(encoding="utf-8"))
    missing = {cls.name for cls in TEXT_SCORERS} - set(documented)
    assert not missing
    assert len(documented) == len(set(documented)), "a scorer is documented twice"


class DemoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int = Field(ge=1, le=9, description="A required bounded int.")
    mode: Literal["a", "b"] = Field("a", description="Pick | one.")
    ratio: float = Field(0.5, gt=0, lt=1, description="Open interval.")
    names: list[str] = Field(default_factory=lambda: ["x"], min_length=1, description="Some names.")
    note: str | None = Field(None, description="Optional\n text.")


class Demo(Scorer):
    """A demo scorer from a plugin."""

    name = "demo_plugin_scorer"
    Params = DemoParams
    value_range = (-2.0, 3.0)

    def score(self, samples, results=None):
        return [Score(0.0) for _ in samples]


class DemoPlugin:
    @hookimpl
    def grpo_rewards_scorers(self):
        return [Demo]


def test_params_table_renders_type_default_bounds_and_description():
    table = docs.params_table(DemoParams)
    rows = table.strip().splitlines()
    assert rows[0] == "| name | type | default | bounds | description |"
    assert rows[2] == "| `limit` | `int` | *required* | ≥ 1, ≤ 9 | A required bounded int. |"
    assert rows[3] == '| `mode` | `"a" \\| "b"` | `"a"` |  | Pick \\| one. |'
    assert rows[4] == "| `ratio` | `float` | `0.5` | > 0, < 1 | Open interval. |"
    assert rows[5] == '| `names` | `list[str]` | `["x"]` | length ≥ 1 | Some names. |'
    assert rows[6] == "| `note` | `str \\| null` | `null` |  | Optional text. |"


def test_refresh_is_generic_for_any_registered_scorer():
    registry = load_registry(extra_plugins=[DemoPlugin()])
    text = "# Docs\n\n<!-- params: demo_plugin_scorer -->\nold\n<!-- /params -->\n\ntail\n"
    new, changed = docs.refresh(text, registry)
    assert changed == ["demo_plugin_scorer"]
    assert "Value range: [-2, 3]." in new and "| `limit` |" in new and new.endswith("<!-- /params -->\n\ntail\n")
    assert docs.refresh(new, registry) == (new, [])
    with pytest.raises(docs.UnknownScorerInDocs, match="no_such_scorer"):
        docs.refresh("<!-- params: no_such_scorer -->\n<!-- /params -->\n", registry)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_rewards.docs", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.timeout(180)
def test_cli_check_and_write(tmp_path):
    stale = tmp_path / "scorers.md"
    stale.write_text("intro\n<!-- params: think_format -->\nhand-edited\n<!-- /params -->\n", encoding="utf-8")
    checked = run_cli("--check", str(stale))
    assert checked.returncode == 1 and "think_format" in checked.stderr
    written = run_cli("--write", str(stale))
    assert written.returncode == 0, written.stderr
    assert "| `think_tag` |" in stale.read_text(encoding="utf-8")
    assert list(tmp_path.iterdir()) == [stale]  # no temporary file left behind
    assert run_cli("--check", str(stale)).returncode == 0
    stale.write_text("<!-- params: nope -->\n<!-- /params -->\n", encoding="utf-8")
    unknown = run_cli("--check", str(stale))
    assert unknown.returncode == 2 and "nope" in unknown.stderr and "Traceback" not in unknown.stderr
