"""`grpo-rewards probe`: the known hacks that apply to a spec, scored by that spec."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import Sample, Score, Scorer, hookimpl
from grpo_rewards.cli import main
from grpo_rewards.probe import probe
from grpo_rewards.redteam import ANY_SCORER, Hack
from grpo_rewards.registry import load_registry

EXAMPLE_SPEC = Path(__file__).resolve().parents[1] / "examples" / "rewards.yaml"


@pytest.mark.timeout(300)
def test_the_example_spec_pays_no_hack(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich folds long cells in a narrow terminal
    assert main(["probe", "--spec", str(EXAMPLE_SPEC)]) == 0
    out = capsys.readouterr().out
    assert "no hack pays" in out and "against 4 scorers" in out
    assert main(["probe", "--spec", str(EXAMPLE_SPEC), "--all"]) == 0
    listed = capsys.readouterr().out
    assert "math/or_in_parentheses" in listed and "text/padding_wrong_a" in listed


@pytest.mark.timeout(300)
def test_a_lenient_spec_shows_the_hacks_that_pay_and_exits_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    spec = tmp_path / "lenient.yaml"
    spec.write_text(
        "scorers:\n"
        "  - scorer: math_accuracy\n"
        "    params: {allow_several_values: true}\n"
        "  - scorer: think_format\n"
        "    name: format\n"
        "    params: {require_content: false}\n"
        "  - scorer: length\n"
        "    params: {mode: ramp, low: 0, high: 500, reverse: true}\n"
    )
    assert main(["probe", "--spec", str(spec)]) == 1
    out = capsys.readouterr().out
    assert "math/or_in_parentheses" in out and "text/empty_think" in out and "format (think_format)" in out
    # A brevity reward with no correctness gate pays an empty completion: the generic hacks show it.
    assert "text/empty_completion" in out
    assert "math/product_unevaluated" not in out  # still refused: only the hedge check was relaxed
    findings = probe(str(spec))
    paying = {(f.hack.id, f.alias) for f in findings if f.pays}
    assert ("math/semicolon", "math_accuracy") in paying and ("text/empty_completion", "length") in paying
    assert ("text/empty_completion", "math_accuracy") not in paying


def test_bad_input_exits_2_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("scorers:\n  - scorer: math_acuracy\n")
    assert main(["probe", "--spec", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "did you mean math_accuracy" in err and "bad.yaml:2" in err and "Traceback" not in err
    assert main(["probe", "--spec", str(tmp_path / "missing.yaml")]) == 2


class _EchoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    secret: str = Field("open sesame", min_length=1, description="The phrase that earns 1.")


class _Echo(Scorer):
    """1 when the completion contains the secret phrase: a plugin scorer with a hack of its own."""

    name = "t_echo"
    Params = _EchoParams

    def score(self, samples, results=None):
        return [Score(1.0 if self.params.secret in s.completion_text else 0.0) for s in samples]

    redteam_hacks = [
        Hack("plugin", "says_the_phrase", "t_echo", {"completion": "open sesame"}, 0.0,
             "the phrase alone, no work"),
        Hack("plugin", "whispers", ANY_SCORER, {"completion": "..."}, 0.0, "a generic hack from a plugin"),
    ]


def test_a_plugin_scorer_is_probed_with_its_own_hacks_and_the_generic_ones():
    plugin = types.SimpleNamespace(__name__="echo_plugin", grpo_rewards_scorers=hookimpl(lambda: [_Echo]))
    registry = load_registry([plugin], entry_points=False)
    findings = probe({"scorers": [{"scorer": "t_echo"}]}, registry)
    by_hack = {f.hack.id: f for f in findings}
    assert by_hack["plugin/says_the_phrase"].pays and by_hack["plugin/says_the_phrase"].value == 1.0
    assert not by_hack["text/empty_completion"].pays and not by_hack["plugin/whispers"].pays
    assert not any(f.hack.family == "math" for f in findings)  # math hacks target math_accuracy only
    # A hack added by a plugin applies to the other scorers of the spec too, when it says so.
    mixed = probe({"scorers": [{"scorer": "t_echo"}, {"scorer": "repetition"}]}, registry)
    assert {f.alias for f in mixed if f.hack.id == "plugin/whispers"} == {"t_echo", "repetition"}


def test_the_sample_record_is_what_a_scorer_sees():
    hack = _Echo.redteam_hacks[0]
    assert Sample.from_record(hack.sample).completion_text == "open sesame"


def test_the_plugin_example_in_the_docs_is_probed_with_its_hack():
    text = (EXAMPLE_SPEC.parents[1] / "docs" / "reward-hacking.md").read_text(encoding="utf-8")
    [code] = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    namespace: dict = {}
    exec(compile(code, "reward-hacking.md", "exec"), namespace)  # noqa: S102 - our own doc's example
    keyword = namespace["Keyword"]
    plugin = types.SimpleNamespace(__name__="keyword_plugin", grpo_rewards_scorers=hookimpl(lambda: [keyword]))
    findings = probe({"scorers": [{"scorer": "keyword"}]}, load_registry([plugin], entry_points=False))
    assert [f.hack.id for f in findings if f.pays] == ["plugin/keyword_alone"]
