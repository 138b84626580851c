"""`grpo-train eval` end to end: the real console script on a tiny Llama saved to disk, its exit codes and JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from _tiny_models import build_tiny_llama  # noqa: E402
from reward_helpers import subprocess_env  # noqa: E402

from grpo_core import stats  # noqa: E402
from grpo_rewards.compose import build  # noqa: E402

pytestmark = pytest.mark.timeout(300)

# A format the random tiny model meets on some prompts and not on others: a letter "a" in the
# completion. Solved/unsolved then varies per problem, so the counts below check real bookkeeping.
SPEC = {"scorers": [{"scorer": "regex_format", "name": "has_a", "params": {"pattern": "a", "mode": "search"}},
                    {"scorer": "math_accuracy"}]}


def grpo_train() -> str:
    return str(Path(sys.executable).with_name("grpo-train"))


def run_eval(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = subprocess_env() | {"OMP_NUM_THREADS": "1"}
    return subprocess.run([grpo_train(), "eval", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=240)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-cli")
    build_tiny_llama(root / "model")
    build_tiny_llama(root / "other", seed=1)
    with open(root / "heldout.jsonl", "w") as f:
        for i in range(12):
            f.write(json.dumps({"prompt": f"What is {i} + 3? The answer is", "answer": str(i + 3)}) + "\n")
    (root / "spec.json").write_text(json.dumps(SPEC))
    return root


@pytest.fixture(scope="module")
def first_run(workdir):
    proc = run_eval("--model", "model", "--data", "heldout.jsonl", "--spec", "spec.json", "--accuracy-scorer", "has_a",
                    "--num-samples", "4", "--k", "1", "4", "--temperature", "1.0", "--max-new-tokens", "8",
                    "--output", "base.json", "--completions", "base_completions.jsonl", "--no-progress",
                    cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads((workdir / "base.json").read_text())


def test_eval_writes_metrics_that_match_its_completions(workdir, first_run):
    proc, result = first_run
    assert result["num_problems"] == 12 and result["accuracy_scorer"] == "has_a"
    rows = [json.loads(line) for line in (workdir / "base_completions.jsonl").read_text().splitlines()]
    assert len(rows) == 12 + 12 * 4  # greedy, then 4 samples per problem in problem order
    # Score the written completions independently and count what the JSON should say.
    values = build(SPEC).score(rows).values["has_a"]
    greedy = [v == 1.0 for v in values[:12]]
    counts = [sum(v == 1.0 for v in values[12 + 4 * i:16 + 4 * i]) for i in range(12)]
    assert 0 < sum(greedy) < 12 and 0 < sum(counts) < 48  # a varied case: solved and unsolved problems
    assert [p["greedy_solved"] for p in result["problems"]] == greedy
    assert [p["samples_solved"] for p in result["problems"]] == counts
    accuracy = result["metrics"]["greedy_accuracy"]
    assert accuracy["value"] == pytest.approx(sum(greedy) / 12)
    assert (accuracy["low"], accuracy["high"]) == pytest.approx(stats.wilson_interval(sum(greedy), 12))
    assert result["metrics"]["pass@1"]["value"] == pytest.approx(sum(counts) / 48)
    assert result["metrics"]["pass@4"]["value"] == pytest.approx(sum(c > 0 for c in counts) / 12)
    assert result["greedy_scorers"]["has_a"]["mean"] == pytest.approx(sum(greedy) / 12)
    assert result["greedy_scorers"]["math_accuracy"]["unscored"] == 0
    assert "greedy accuracy" in proc.stdout and "pass@4" in proc.stdout  # the rich table


def test_compare_with_itself_is_zero_and_with_another_model_is_paired(workdir, first_run):
    common = ("--data", "heldout.jsonl", "--spec", "spec.json", "--accuracy-scorer", "has_a", "--num-samples", "4",
              "--temperature", "1.0", "--max-new-tokens", "8", "--no-progress", "--compare", "base.json")
    same = run_eval("--model", "model", *common, "--output", "same.json", cwd=workdir)
    assert same.returncode == 0, same.stderr
    diff = json.loads((workdir / "same.json").read_text())["comparison"]["greedy_accuracy"]
    assert (diff["value"], diff["low"], diff["high"], diff["better"], diff["worse"]) == (0.0, 0.0, 0.0, 0, 0)
    other = run_eval("--model", "other", *common, "--output", "other.json", cwd=workdir)
    assert other.returncode == 0, other.stderr
    result = json.loads((workdir / "other.json").read_text())
    base = first_run[1]
    mine = [p["greedy_solved"] for p in result["problems"]]
    theirs = [p["greedy_solved"] for p in base["problems"]]
    diff = result["comparison"]["greedy_accuracy"]
    assert diff["value"] == pytest.approx((sum(mine) - sum(theirs)) / 12)
    assert diff["better"] == sum(m and not t for m, t in zip(mine, theirs))
    assert diff["worse"] == sum(t and not m for m, t in zip(mine, theirs))
    assert diff["low"] <= diff["value"] <= diff["high"]


@pytest.mark.parametrize("args, message", [
    (("--model", "model", "--data", "heldout.jsonl"), "--task NAME (or --data FILE) and --spec FILE"),
    (("--model", "model", "--data", "heldout.jsonl", "--spec", "spec.json", "--accuracy-scorer", "nope"),
     "'nope' is not in the reward spec"),
    (("--model", "model", "--data", "heldout.jsonl", "--spec", "spec.json", "--num-samples", "2", "--k", "4"),
     "each k must be between 1 and --num-samples"),
    (("--model", "model", "--data", "heldout.jsonl", "--spec", "spec.json", "--compare", "missing.json"),
     "missing.json: no such file"),
    (("--model", "model", "--data", "heldout.jsonl", "--spec", "spec.json", "--compare", "heldout.jsonl"),
     "not a JSON result"),
    (("--model", "model", "--task", "reasoning_gym:no_such_generator", "--spec", "spec.json"),
     "reasoning"),
    (("--model", "model", "--task", "arith_words", "--task-options", "{shots: 9}", "--spec", "spec.json"),
     "--task-options for task 'arith_words': shots"),
    (("--model", "model", "--data", "nothing.jsonl", "--spec", "spec.json"), "nothing.jsonl: no such file"),
])
def test_bad_input_exits_2_with_a_message(workdir, args, message, monkeypatch, capsys):
    # in-process through the same entry point as the console script (an unexpected exception would fail here)
    from grpo_core.cli import main

    monkeypatch.chdir(workdir)
    assert main(["eval", *args, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_eval_from_a_training_config_uses_its_held_out_split(workdir):
    config = {"model": {"name_or_path": str(workdir / "model")},
              "data": {"task": "arith_words", "eval_size": 5, "options": {"shots": 0}},
              "rewards": {"scorers": [{"scorer": "math_accuracy"}]}, "max_completion_length": 6, "seed": 42}
    (workdir / "train.json").write_text(json.dumps(config))
    proc = run_eval("train.json", "--num-samples", "0", "--output", "cfg.json", "--completions", "cfg.jsonl",
                    "--no-progress", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((workdir / "cfg.json").read_text())
    assert result["num_problems"] == 5 and set(result["metrics"]) == {"greedy_accuracy"}
    from grpo_core.data import get_task

    expected = get_task("arith_words").build("eval", 5, 43, shots=0)  # what a run with seed 42 holds out
    assert [json.loads(line)["prompt"] for line in (workdir / "cfg.jsonl").read_text().splitlines()] == \
        [r["prompt"] for r in expected]
    assert os.path.getsize(workdir / "cfg.json") > 0


def test_the_batch_size_comes_from_the_config_unless_given(tmp_path):
    from grpo_core.evaluate import eval_parser, load_inputs, settings_from

    config = tmp_path / "c.json"
    config.write_text(json.dumps({"model": {"name_or_path": str(tmp_path)}, "data": {"task": "arith_words", "eval_size": 4},
                                  "rewards": {"scorers": [{"scorer": "math_accuracy"}]}, "eval_batch_size": 48}))
    for argv, expected in ((["--batch-size", "5"], 5), ([], 48)):
        args = eval_parser().parse_args([str(config), *argv])
        assert settings_from(args, load_inputs(args).defaults).batch_size == expected
    assert settings_from(eval_parser().parse_args(["--task", "arith_words", "--spec", "s.yaml"]), {}).batch_size == 32
