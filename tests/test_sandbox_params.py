"""One registry per run: sandbox backends from plugins, with params from the spec, looked up in
the registry the run built (never the process-wide one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _grpo_core_helpers import write_config
from _relay_sandbox import RelaySandbox

import _relay_sandbox
import grpo_rewards.registry as registry_module
from grpo_core.config import load_config
from grpo_rewards import ConfigError, Sample, build, docs, load_registry, load_spec
from grpo_rewards.cli import main as rewards_cli
from grpo_rewards.sandbox.local import LocalSandbox
from grpo_rewards.scorers.code import CodeTests

ADD_TEST = {"test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
            "entry_point": "add"}
SUM_STDIO = {"inputs": ["2 3\n", "10 -4\n"], "outputs": ["5\n", "6\n"]}
URL = "https://exec.example:8443"


def relay_spec(**params) -> dict:
    return {"scorers": [{"scorer": "code_tests", "params": {
        "sandbox": {"backend": "relay", "params": {"url": URL}}, **params}}]}


def samples() -> list[Sample]:
    return [Sample("", "```python\ndef add(a, b):\n    return a + b\n```", ADD_TEST),
            Sample("", "```python\ndef add(a, b):\n    return a + b if a > 0 else 99\n```", ADD_TEST),
            Sample("", "```python\na, b = map(int, input().split())\nprint(a + b)\n```", SUM_STDIO)]


@pytest.fixture
def no_global_registry(monkeypatch):
    """Any lookup in the process-wide registry fails the test."""
    def refuse(refresh: bool = False):
        raise AssertionError("the process-wide registry was consulted")

    monkeypatch.setattr(registry_module, "get_registry", refuse)
    RelaySandbox.opened.clear()


def test_a_plugin_backend_runs_with_params_from_the_spec(no_global_registry):
    registry = load_registry(extra_plugins=[_relay_sandbox])
    with build(relay_spec(workers=3), registry) as reward:
        batch = reward.score(samples())
    assert batch.values == {"code_tests": [1.0, 0.5, 1.0]}  # really run: the wrong add passes one of two
    assert RelaySandbox.opened == [{"url": URL, "workers": 3}]  # `workers` reached the backend's own param


def test_backend_params_are_validated_with_their_full_path():
    registry = load_registry(extra_plugins=[_relay_sandbox])
    spec = relay_spec()
    spec["scorers"][0]["params"]["sandbox"]["params"] = {"url": "ftp://x", "workers": 0, "proxy": "y"}
    with pytest.raises(ConfigError) as info:
        load_spec(spec, registry)
    text = str(info.value)
    for path in ("scorers[0].params.sandbox.params.url: String should match pattern",
                 "scorers[0].params.sandbox.params.workers: Input should be greater than or equal to 1",
                 "scorers[0].params.sandbox.params.proxy: unknown field"):
        assert path in text, text
    spec["scorers"][0]["params"]["sandbox"]["params"] = {}
    with pytest.raises(ConfigError, match=r"sandbox\.params\.url: Field required"):
        load_spec(spec, registry)
    with pytest.raises(ConfigError, match=r"`workers: 2` disagrees with `sandbox.params.workers: 3`"):
        load_spec({"scorers": [{"scorer": "code_tests", "params": {
            "workers": 2, "sandbox": {"backend": "relay", "params": {"url": URL, "workers": 3}}}}]}, registry)


def test_the_backend_is_found_only_in_the_registry_of_the_run():
    with pytest.raises(ConfigError, match=r"scorers\[0\]\.params\.sandbox\.backend: unknown sandbox 'relay'"):
        load_spec(relay_spec(), load_registry())  # the installed plugins do not include the test's


def test_bare_name_and_workers_shorthand_still_work():
    spec = load_spec({"scorers": [{"scorer": "code_tests", "params": {"sandbox": "local", "workers": 1}}]})
    choice = spec.scorers[0].scorer_params.sandbox
    assert (choice.backend, choice.params.workers) == ("local", 1)
    assert spec.scorers[0].params["sandbox"] == {"backend": "local", "params": {"workers": 1, "scratch_mb": 128,
                                                                              "require": []}}
    assert load_spec(spec.model_dump()).scorers[0].params == spec.scorers[0].params  # its dump loads again
    registry = load_registry(extra_plugins=[_relay_sandbox])
    with pytest.raises(ConfigError, match="sandbox backend 'local' has no `workers`|unknown sandbox layer"):
        load_spec({"scorers": [{"scorer": "code_tests", "params": {
            "sandbox": {"backend": "local", "params": {"require": ["moat"]}}}}]}, registry)
    with pytest.raises(ConfigError, match=r"scratch_mb: Input should be greater than or equal to 8"):
        load_spec({"scorers": [{"scorer": "code_tests", "params": {
            "sandbox": {"backend": "local", "params": {"scratch_mb": 1}}}}]})


def test_local_sandbox_params_and_keyword_construction():
    sandbox = LocalSandbox(workers=2, require=["zygote"])
    assert (sandbox.size, sandbox.require, sandbox.params.scratch_mb) == (2, ("zygote",), 128)
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        LocalSandbox(require=["moat"])
    with pytest.raises(ValueError, match="less than or equal to 256"):
        LocalSandbox(workers=1000)


def test_through_a_training_configs_plugins(tmp_path, monkeypatch, no_global_registry):
    built = []
    real_load = registry_module.load_registry
    monkeypatch.setattr("grpo_core.config.load_registry", lambda **kw: built.append(kw) or real_load(**kw))
    rewards = relay_spec(per_test_timeout_s=5)
    path = write_config(tmp_path, rewards=rewards, plugins=["_grpo_core_helpers", "_relay_sandbox"])
    config = load_config(path)
    assert len(built) == 1 and config.registry is config.registry
    assert "relay" in config.registry.sandboxes
    with build(config.rewards, config.registry) as reward:
        assert reward.score(samples()).totals == [1.0, 0.5, 1.0]
    assert RelaySandbox.opened == [{"url": URL, "workers": 1}]
    assert len(built) == 1  # one registry for the whole run

    rewards["scorers"][0]["params"]["sandbox"]["params"]["url"] = "not a url"
    path = write_config(tmp_path, rewards=rewards, plugins=["_grpo_core_helpers", "_relay_sandbox"])
    with pytest.raises(ConfigError) as info:
        load_config(path)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "not a url" in text)
    assert f"{path}:{line}: rewards.scorers[0].params.sandbox.params.url: String should match" in str(info.value)


def test_list_and_schema_show_backends_and_their_params(monkeypatch, capsys):
    monkeypatch.setattr("grpo_rewards.cli.load_registry", lambda: load_registry(extra_plugins=[_relay_sandbox]))
    assert rewards_cli(["list", "--json"]) == 0
    sandboxes = {s["name"]: s for s in json.loads(capsys.readouterr().out)["sandboxes"]}
    assert sandboxes["relay"]["params"]["url"]["required"] is True
    assert sandboxes["local"]["params"]["workers"]["default"] is None
    assert rewards_cli(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$defs"]["relay_sandbox"]["properties"]["params"] == {"$ref": "#/$defs/RelayParams"}
    assert schema["$defs"]["RelayParams"]["required"] == ["url"]
    sandbox = schema["$defs"]["CodeTestsParams"]["properties"]["sandbox"]
    assert {"enum": ["local", "relay"], "type": "string"} in sandbox["anyOf"]


def test_a_spec_file_selects_the_backend_from_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("grpo_rewards.cli.load_registry", lambda: load_registry(extra_plugins=[_relay_sandbox]))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(relay_spec()))
    assert rewards_cli(["validate", str(spec)]) == 0
    spec.write_text(yaml.safe_dump(relay_spec(workers=9)))
    assert rewards_cli(["validate", str(spec)]) == 2
    assert "spec.yaml:7: scorers[0].params.workers: rejected by sandbox backend 'relay': Input should be less than " \
        "or equal to 8" \
        in capsys.readouterr().err


def test_a_standalone_scorer_uses_the_registry_it_is_given(no_global_registry):
    registry = load_registry(extra_plugins=[_relay_sandbox])
    scorer = CodeTests(sandbox={"backend": "relay", "params": {"url": URL}}, registry=registry)
    try:
        assert [s.value for s in scorer.score(samples()[:2])] == [1.0, 0.5]
    finally:
        scorer.close()


def test_docs_sandbox_params_tables_are_current():
    text = (Path(__file__).resolve().parents[1] / "docs" / "sandbox.md").read_text(encoding="utf-8")
    new, stale = docs.refresh(text, load_registry())
    assert stale == [], "run `python -m grpo_rewards.docs --write docs/sandbox.md`"
    assert "| `scratch_mb` | `int` | `128` | ≥ 8, ≤ 65536 |" in new
