"""A training config's reward spec: validated once, carried validated, built without revalidation;
`--set` overrides that address list items by index and take the blame for what they break."""

from __future__ import annotations

import pytest
from _grpo_core_helpers import write_config

import grpo_rewards.compose as compose_module
import grpo_rewards.spec as spec_module
from grpo_core.cli import main as train_cli
from grpo_core.config import load_config
from grpo_rewards import ConfigError, Sample, build


def test_the_spec_is_validated_once_and_built_as_validated(tmp_path, monkeypatch):
    calls = []
    real_check = spec_module._scorer_params  # each member's scorer and params, checked by its validator
    monkeypatch.setattr(spec_module, "_scorer_params", lambda *a, **k: calls.append(a) or real_check(*a, **k))
    config = load_config(write_config(tmp_path))
    assert [name for _, name, _ in calls] == [s.scorer for s in config.rewards.scorers]  # once each

    def no_revalidation(*args, **kwargs):
        raise AssertionError("a validated spec was validated again")

    monkeypatch.setattr(compose_module, "load_spec", no_revalidation)
    reward = build(config.rewards, config.registry)
    for member, spec in zip(reward.members, config.rewards.scorers, strict=True):
        assert member.scorer.params is spec.scorer_params  # the validated Params instance itself
        assert member.scorer.registry is config.registry
    assert reward.score([Sample("q", "1 + 1")]).totals[0] is not None
    with pytest.raises(AssertionError, match="validated again"):
        build({"scorers": [{"scorer": "length"}]}, config.registry)  # raw input is validated


def test_set_addresses_a_list_item_by_index(tmp_path):
    path = write_config(tmp_path)
    config = load_config(path, ["rewards.scorers.0.weight=2", "rewards.scorers.1.params={}"])
    assert [s.weight for s in config.rewards.scorers] == [2.0, 0.5]
    assert [s.alias for s in config.rewards.scorers] == ["a_frac", "correct"]
    config = load_config(path, ["rewards.scorers.1.name=right", "data.eval_size=3"])
    assert [s.alias for s in config.rewards.scorers] == ["a_frac", "right"] and config.data.eval_size == 3


@pytest.mark.parametrize(("override", "message"), [
    ("rewards.scorers.0.weight=heavy",
     "--set rewards.scorers.0.weight=heavy: Input should be a valid number, unable to parse string as a number"),
    ("rewards.scorers.0.params={bogus: 1}",
     "--set rewards.scorers.0.params={bogus: 1}: rewards.scorers[0].params.bogus: unknown field"),
    ("rewards.scorers.2.weight=1",
     "--set rewards.scorers.2.weight=1: rewards.scorers is a list of 2 items: address one by its index (0 to 1), "
     "got '2'"),
    ("rewards.scorers.first.weight=1", "rewards.scorers is a list of 2 items"),
    ("beta.value=1", "--set beta.value=1: cannot set inside beta: it is a float (0.04), not a mapping or a list"),
    ("max_stepz=3", "--set max_stepz=3: unknown field"),
    ("learning_rate=-1", "--set learning_rate=-1: Input should be greater than 0"),
])
def test_a_bad_override_is_blamed_on_its_set_argument(tmp_path, override, message):
    path = write_config(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(path, [override])
    text = str(info.value)
    assert message in text, text
    assert f"{path}:" not in text  # not on a line of the file, which is fine


def test_problems_of_the_file_keep_their_lines_next_to_an_overrides(tmp_path):
    path = write_config(tmp_path, beta=-1)
    with pytest.raises(ConfigError) as info:
        load_config(path, ["rewards.scorers.1.weight=heavy"])
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("beta:"))
    text = str(info.value)
    assert f"{path}:{line}: beta: Input should be greater than or equal to 0" in text
    assert "--set rewards.scorers.1.weight=heavy: Input should be a valid number" in text


def test_the_cli_reports_a_bad_override_and_exits_2(tmp_path, capsys):
    path = write_config(tmp_path)
    assert train_cli([str(path), "--set", "rewards.scorers.0.weight=heavy"]) == 2
    err = capsys.readouterr().err
    assert "--set rewards.scorers.0.weight=heavy: Input should be a valid number" in err and "Traceback" not in err
