"""scripts/learning_experiment.py end to end on a tiny Llama: base eval, a 2-step LoRA run, its final
adapter evaluated against the base, TRL on the same recipe (scripts/trl_recipe.py), the table and the plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")
pytest.importorskip("peft")
pytest.importorskip("trl")

from _tiny_models import build_tiny_llama  # noqa: E402
from reward_helpers import subprocess_env  # noqa: E402

# slow: six commands, each loading torch and transformers (a minute each on a loaded 2-core machine)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[1]


def test_experiment_script_runs_seeds_evals_trl_and_writes_the_table(tmp_path):
    model = build_tiny_llama(tmp_path / "model")
    recipe = (REPO / "examples" / "smollm2_rg.yaml").read_text()
    recipe = recipe.replace("name_or_path: smollm2-135m-instruct", f"name_or_path: {model}")
    config = tmp_path / "recipe.yaml"
    config.write_text(recipe)
    sets = ["max_steps=2", "per_device_train_batch_size=4", "num_generations=2", "max_completion_length=6",
            "data.eval_size=4", "eval_steps=1", "data.train_size=20", "data.options.eval_count=20",
            "model.gradient_checkpointing=false"]
    out = tmp_path / "exp"
    command = [sys.executable, str(REPO / "scripts" / "learning_experiment.py"), str(config), "--seeds", "1",
               "--eval-size", "6", "--num-samples", "2", "--out", str(out), "--trl-seed", "1",
               "--trl-save-steps", "2", "--set-eval=--batch-size=4", *[x for s in sets for x in ("--set", s)]]
    env = subprocess_env() | {"OMP_NUM_THREADS": "1"}
    trained = subprocess.run([*command, "--train-only"], capture_output=True, text=True, env=env, timeout=1150)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (out / "seed_1" / "final").exists() and list((out / "trl_seed_1").glob("checkpoint-*"))
    assert not (out / "seed_1" / "eval.json").exists() and not (out / "results.md").exists()  # evals wait
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grpo-train " + str(config) not in proc.stderr and "trl_recipe.py" not in proc.stderr  # trained once
    base = json.loads((out / "base.json").read_text())
    assert base["num_problems"] == 6 and "pass@2" in base["metrics"]
    result = json.loads((out / "seed_1" / "eval.json").read_text())
    assert result["problem_digest"] == base["problem_digest"]  # every model on the same problems
    assert "adapter" in result["model"]
    table = (out / "results.md").read_text()
    assert table.count("| seed 1 |") == 1 and "Mean greedy gain over 1 seed:" in table
    assert json.loads((out / "seed_1" / "cost.json").read_text())["peak_rss_gib"] > 0
    summary = json.loads((out / "summary.json").read_text())
    gain = summary["runs"][0]["comparison"]["greedy_accuracy"]  # computed at report time, from the two files
    solved = lambda r: sum(p["greedy_solved"] for p in r["problems"]) / 6  # noqa: E731
    assert gain["value"] == pytest.approx(solved(result) - solved(base)) and gain["n"] == 6
    assert [c["step"] for c in summary["trl"]["curve"]] == [2]  # TRL's checkpoint, evaluated
    assert summary["trl"]["curve"][0]["minutes"] > 0
    assert summary["trl"]["comparison"]["greedy_accuracy"]["n"] == 6
    assert "pass@2" not in summary["trl"]["metrics"]  # TRL's final eval is greedy (--trl-num-samples 0)
    assert (out / "curve.png").stat().st_size > 0 and (out / "vs_trl.png").stat().st_size > 0
