"""grpo-train as a user meets it: --help names both commands, one console line per logged step,
--resume on a finished run, Ctrl-C during generate."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from _grpo_core_helpers import write_config  # noqa: E402
from _tiny_models import build_tiny_llama  # noqa: E402
from reward_helpers import subprocess_env  # noqa: E402

from grpo_core.cli import main  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def script(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_help_lists_generate_as_a_command():
    result = subprocess.run([script("grpo-train"), "--help"], capture_output=True, text=True, env=subprocess_env(),
                            timeout=60)
    assert result.returncode == 0
    usage = result.stdout.split("\n\n")[0]
    assert "grpo-train generate --model M --data FILE --output FILE" in usage
    assert "commands:" in result.stdout


def test_one_console_line_per_logged_step_and_resume_of_a_finished_run(tmp_path, capsys):
    path = write_config(tmp_path, max_steps=2, logging_steps=1, **{"data.eval_size": 0})
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 1", "step 2"]
    for key in ("reward=", "reward/a_frac=", "reward/correct=", "kl=", "step_seconds="):
        assert key in lines[0], lines[0]
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert main([str(path), "--resume"]) == 0  # finished: nothing to do, said so
    assert "is complete (step 2 of 2)" in capsys.readouterr().err
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == metrics
    # More steps need a checkpoint to continue from; this run kept none (save_steps: 0).
    assert main([str(path), "--resume", "--set", "max_steps=3"]) == 2
    assert "finished at step 2 without checkpoints" in capsys.readouterr().err


def test_resume_continues_a_finished_run_when_max_steps_is_raised(tmp_path, capsys):
    path = write_config(tmp_path, max_steps=2, save_steps=1, **{"data.eval_size": 0})
    assert main([str(path)]) == 0
    assert main([str(path), "--resume", "--set", "max_steps=3"]) == 0
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_ctrl_c_during_generate_exits_130_without_a_traceback_or_output(tmp_path):
    model = build_tiny_llama(tmp_path / "tiny")
    data = tmp_path / "prompts.jsonl"
    # Enough work to outlast the sleep on a fast machine: the tiny model's 256 positions cap each
    # completion, so 64 prompts were done in under 6 s once; 2,000 take over a minute.
    data.write_text("".join(json.dumps({"prompt": f"count {i}"}) + "\n" for i in range(2000)))
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [script("grpo-train"), "generate", "--model", str(model), "--data", str(data), "--output", str(out),
         "--max-new-tokens", "4000", "--batch-size", "2", "--device", "cpu", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    time.sleep(6)  # past start-up: loading or generating
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted; no output written" in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
