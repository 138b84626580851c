"""Config and spec mistakes get a message that helps: "did you mean" for unknown keys, a pointer
for TRL's option names, quoted numbers rejected, an output_dir that is a file found at load time,
and one rule for relative paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _grpo_core_helpers import write_config

from grpo_core.config import load_config
from grpo_rewards import ConfigError, load_spec


def problems_of(call) -> list[str]:
    with pytest.raises(ConfigError) as info:
        call()
    return [str(p) for p in info.value.problems]


def test_unknown_spec_params_and_fields_get_a_did_you_mean(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("scorers:\n  - scorer: repetition\n    wieght: 1\n    params: {ngram_sise: 3}\n")
    assert problems_of(lambda: load_spec(spec)) == [
        f"{spec}:3: scorers[0].wieght: unknown field; did you mean weight?",
        f"{spec}:4: scorers[0].params.ngram_sise: unknown field; did you mean ngram_size?"]


def test_unknown_config_keys_get_a_did_you_mean_or_trls_pointer(tmp_path):
    path = write_config(tmp_path, learning_rat=0.1, gradient_checkpointing=True, per_device_eval_batch_size=4,
                        eval_strategy="steps", **{"model.dtpye": "float32"})
    found = problems_of(lambda: load_config(path))
    assert any(p.endswith("learning_rat: unknown field; did you mean learning_rate?") for p in found)
    assert any(p.endswith("model.dtpye: unknown field; did you mean dtype?") for p in found)
    assert any(p.endswith("gradient_checkpointing: unknown field (here it is `model.gradient_checkpointing`)")
               for p in found)
    assert any(p.endswith("per_device_eval_batch_size: unknown field (here it is `eval_batch_size`)") for p in found)
    assert any("eval_strategy: unknown field (evaluation is on when `eval_steps` > 0)" in p for p in found)


def test_quoted_numbers_are_rejected_in_specs_and_configs(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text('scorers:\n  - scorer: repetition\n    weight: "0.5"\n    params: {max_penalty: "-1"}\n')
    found = problems_of(lambda: load_spec(spec))
    assert found == [
        f"{spec}:3: scorers[0].weight: a quoted value ('0.5') where a number is expected: write it without quotes",
        f"{spec}:4: scorers[0].params.max_penalty: a quoted value ('-1') where a number is expected: write it "
        "without quotes"]
    path = write_config(tmp_path, learning_rate="0.1", plot="false")
    found = problems_of(lambda: load_config(path))
    assert any("learning_rate: a quoted value ('0.1') where a number is expected" in p for p in found)
    assert any("plot: a quoted value ('false') where true or false is expected" in p for p in found)
    assert load_config(write_config(tmp_path, learning_rate=0.1)).learning_rate == 0.1  # unquoted is fine


def test_an_output_dir_that_is_a_file_is_a_config_problem(tmp_path):
    (tmp_path / "taken").write_text("")
    found = problems_of(lambda: load_config(write_config(tmp_path, output_dir=str(tmp_path / "taken"))))
    assert any(p.endswith(f"output_dir: {tmp_path / 'taken'} is an existing file, not a directory") for p in found)
    found = problems_of(lambda: load_config(write_config(tmp_path, output_dir=str(tmp_path / "taken" / "run"))))
    assert any("is inside" in p and "an existing file" in p for p in found)


def test_paths_in_a_config_are_relative_to_it_and_set_paths_to_the_cwd(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "prompts.jsonl").write_text('{"prompt": "ab", "answer": "a"}\n' * 8)
    path = write_config(configs, output_dir="runs/a", **{"data.path": "prompts.jsonl"})
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(path)
    assert Path(config.output_dir) == configs / "runs" / "a"
    assert Path(config.data.path) == configs / "prompts.jsonl"
    config = load_config(path, ["output_dir=runs/b"])
    assert Path(config.output_dir) == elsewhere / "runs" / "b"
    assert os.path.isabs(load_config(path, ["output_dir=/tmp/x"]).output_dir)
