"""The trainer end to end: short real runs, config errors, checkpoints, resume after SIGKILL, signals."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import typing
from pathlib import Path

import pytest
import torch

from _grpo_core_helpers import TESTS, base_config, write_config
from _grpo_core_helpers import one_torch_thread  # noqa: F401 - autouse fixture
from grpo_core import runtime as runtime_module
from grpo_core.cli import main
from grpo_core.config import TrainConfig, load_config, validate_config
from grpo_core.loss import LOSS_TYPES
from grpo_core.metrics import read_metrics
from grpo_core.trainer import Trainer, train
from grpo_rewards.advantages import advantages
from grpo_rewards.errors import ConfigError, UserError
from grpo_rewards.group import consecutive_groups

REQUIRED = ["completion_length", "reward", "reward/a_frac", "reward/correct", "reward_std", "kl", "clip_ratio",
            "frac_reward_zero_std", "entropy", "learning_rate", "step_seconds", "tokens_per_second"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def cli(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grpo_core.cli", *map(str, args)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def final_params(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(directory / "model.safetensors")


@pytest.mark.timeout(180)
def test_short_run_logs_every_metric_evaluates_and_writes_plot_and_model(tmp_path):
    config = validate_config(base_config(tmp_path, max_steps=3, eval_steps=2, plot=True, logging_steps=1))
    summary = train(config)
    run = Path(summary["output_dir"])
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert set(records[0]) == {"step", "eval/reward", "eval/a_frac", "eval/correct", "eval/completion_length"}
    for record in records[1:]:
        assert set(REQUIRED) <= set(record), set(REQUIRED) - set(record)
    assert "eval/reward" in records[2] and "eval/reward" in records[3]
    assert records[1]["kl"] == 0.0 and records[3]["kl"] > 0  # the policy moves away from the reference
    assert (run / "metrics.png").stat().st_size > 1000
    assert summary["eval"]["eval/reward"] == records[3]["eval/reward"]
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(summary["final_model"]).num_parameters() > 0


@pytest.mark.timeout(180)
def test_reward_rises_on_a_learnable_reward(tmp_path):
    config = validate_config(base_config(tmp_path, max_steps=12, beta=0.0, learning_rate=5e-3,
                                         rewards={"scorers": [{"scorer": "test_char_fraction"}]}))
    trainer = Trainer(config)
    assert trainer.policy.reference is None  # beta == 0: no reference model at all
    train_records = read_metrics(Path(trainer.train()["metrics_file"]))
    rewards = [r["reward"] for r in train_records if "reward" in r]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1, rewards
    assert all(r["kl"] == 0.0 for r in train_records)


@pytest.mark.timeout(180)
def test_normalize_then_sum_trains_on_batch_scaled_advantages_and_logs_the_rewards_scale(tmp_path):
    """GDPO as TRL 1.16: the totals (each member normalised in its group) are scaled over the batch,
    not normalised per group again; the logged reward is the weighted sum, not the normalised total."""
    config = validate_config(base_config(tmp_path, max_steps=2, eval_steps=2, beta=0.0,
                                         **{"rewards.aggregate": "normalize_then_sum"}))
    trainer = Trainer(config)
    rollout, stats = trainer.make_rollout()
    totals, sums = rollout.rewards, rollout.reward_sums
    as_list = [None if math.isnan(t) else t for t in totals.tolist()]
    batch_scaled, _ = advantages(as_list, consecutive_groups(len(as_list), 4), "normalize_then_sum")
    assert torch.allclose(rollout.advantages, torch.tensor(batch_scaled))
    if (totals.view(-1, 4).nan_to_num().std(-1) > 0).all():  # every group has spread: per-group would differ
        per_group, _ = advantages(as_list, consecutive_groups(len(as_list), 4), "sum", "group")
        assert not torch.allclose(rollout.advantages, torch.tensor(per_group), atol=1e-3)
    assert stats["reward"] == pytest.approx(sums.nanmean().item(), abs=1e-6)
    assert stats["reward"] > 0.01 and abs(totals.nanmean().item()) < 1e-5  # the scale the totals hide
    evaluated = trainer.evaluate()
    assert evaluated["eval/reward"] == pytest.approx(evaluated["eval/a_frac"] + 0.5 * evaluated["eval/correct"],
                                                     abs=1e-5)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("overrides", [
    {"loss_type": "grpo", "num_iterations": 2, "importance_sampling_level": "sequence", "scale_rewards": "batch",
     "gradient_accumulation_steps": 2, "per_device_train_batch_size": 4, "report_to": ["tensorboard"]},
    {"loss_type": "dr_grpo", "scale_rewards": "none", "mask_truncated_completions": True,
     "model.tokenizer": "builtin:test_chars_pad_eos", "top_k": 5, "top_p": 0.9, "bf16": True},
])
def test_variants_run(tmp_path, overrides):
    summary = train(validate_config(base_config(tmp_path, max_steps=2, **overrides)))
    records = read_metrics(summary["metrics_file"])
    assert [r["step"] for r in records] == [1, 2]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in records)
    if overrides.get("num_iterations") == 2:  # step 2 reuses step 1's rollout: no new rewards, a real ratio
        assert "reward" in records[0] and "reward" not in records[1]
        assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_config_problems_are_all_reported_with_file_line_and_path(tmp_path):
    path = write_config(tmp_path, num_generations=3, beta=-1, bogus=1,
                        rewards={"scorers": [{"scorer": "test_char_fractoin"}, {"scorer": "length", "weight": "x"}]},
                        **{"data.path": "missing.jsonl", "model.config.model_type": "nonsense"})
    proc = cli(path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    lines = path.read_text().splitlines()

    def line_of(key: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if line.lstrip().startswith(key))

    for expected in [f"{path}:{line_of('bogus:')}: bogus: unknown field",
                     f"{path}:{line_of('beta:')}: beta:",
                     "rewards.scorers[0].scorer: unknown scorer 'test_char_fractoin'; did you mean test_char_fraction",
                     "rewards.scorers[1].weight", "divisible by num_generations", "data.path: no such file",
                     "model.config.model_type"]:
        assert expected in err, (expected, err)


def test_overrides_and_reward_spec_files(tmp_path):
    (tmp_path / "rewards.yaml").write_text("scorers:\n  - scorer: test_char_fraction\n    weight: 2\n")
    path = write_config(tmp_path, rewards="rewards.yaml")
    config = load_config(path, ["max_steps=7", "model.dtype=bfloat16", "report_to=[tensorboard]"])
    assert (config.max_steps, config.model.dtype, config.report_to) == (7, "bfloat16", ["tensorboard"])
    assert config.rewards.scorers[0].weight == 2
    (tmp_path / "rewards.yaml").write_text("scorers:\n  - scorer: test_char_fraction\n    params: {x: 1}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, ["learning_rate=-1", "oops"])
    assert "oops: an override must look like key.path=value" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(path, ["learning_rate=-1"])
    text = str(info.value)
    assert f"{tmp_path / 'rewards.yaml'}:3: scorers[0].params.x: unknown field" in text and "learning_rate" in text


def test_data_from_a_task_and_from_a_datasets_file(tmp_path):
    config = validate_config(base_config(tmp_path, data={"task": "test_sums", "options": {"largest": 4}, "eval_size": 3}))
    trainer = Trainer(config)
    assert len(trainer.train_records) == 15 and len(trainer.eval_records) == 3
    assert {r["prompt"] for r in trainer.train_records}.isdisjoint(r["prompt"] for r in trainer.eval_records)
    (tmp_path / "p.json").write_text(json.dumps([{"question": "1+1=", "answer": "2"}] * 12))
    config = validate_config(base_config(tmp_path, data={"path": str(tmp_path / "p.json"), "prompt_field": "question",
                                                         "eval_size": 4}))
    trainer = Trainer(config)
    assert len(trainer.train_records) == 8 and trainer.train_records[0] == {"prompt": "1+1=", "answer": "2"}
    with pytest.raises(ConfigError) as info:
        validate_config(base_config(tmp_path, data={"task": "test_sums", "options": {"largest": 99, "x": 1}}))
    assert "data.options.largest" in str(info.value) and "data.options.x: unknown field" in str(info.value)
    with pytest.raises(ConfigError, match="unknown task 'test_sum'; did you mean test_sums"):
        validate_config(base_config(tmp_path, data={"task": "test_sum"}))
    with pytest.raises(ConfigError, match="exactly one of `task`, `path` or `dataset`"):
        validate_config(base_config(tmp_path, data={"task": "test_sums", "path": "x.jsonl"}))


def test_a_fresh_run_refuses_an_output_dir_with_checkpoints(tmp_path):
    (tmp_path / "run" / "checkpoint-3").mkdir(parents=True)
    with pytest.raises(UserError, match="--resume"):
        train(validate_config(base_config(tmp_path, max_steps=1)))


def test_every_loss_type_the_config_accepts_is_in_the_objective_table():
    assert set(typing.get_args(TrainConfig.model_fields["loss_type"].annotation)) == set(LOSS_TYPES)


def test_a_scale_rewards_that_the_aggregation_ignores_is_a_config_error(tmp_path):
    """TRL 1.16 scales normalize_then_sum's totals over the batch whatever scale_rewards says: saying
    otherwise is refused, naming the field; the default and `batch` are TRL's behaviour."""
    nts = {"rewards.aggregate": "normalize_then_sum"}
    with pytest.raises(ConfigError, match=r"scale_rewards: .*scale_rewards: none. would have no effect"):
        validate_config(base_config(tmp_path, scale_rewards="none", **nts))
    assert validate_config(base_config(tmp_path, scale_rewards="batch", **nts)).scale_rewards == "batch"
    assert validate_config(base_config(tmp_path, **nts)).rewards.aggregate == "normalize_then_sum"
    assert validate_config(base_config(tmp_path, scale_rewards="none")).scale_rewards == "none"


# ---------------------------------------------------------------------------------------------
# checkpoints, resume, signals


@pytest.mark.timeout(180)
def test_a_checkpoint_from_before_the_rollout_held_its_loss_tokens_still_resumes(tmp_path):
    """Checkpoints kept the dapo normaliser beside the pending rollout (`dapo_tokens`), not in it."""
    config = validate_config(base_config(tmp_path, max_steps=1, save_steps=1, num_iterations=2, eval_steps=0))
    Trainer(config).train()
    checkpoint = tmp_path / "run" / "checkpoint-1"
    rank_state = torch.load(checkpoint / "rank0.pt", weights_only=False)
    pending = rank_state["rollout"]  # step 1 of 2 on this generation batch: still pending
    for new_field in ("rewards", "scorer_rewards"):
        pending.pop(new_field)
    rank_state["dapo_tokens"] = pending.pop("loss_tokens")
    torch.save(rank_state, checkpoint / "rank0.pt")
    again = Trainer(config)
    again.restore(checkpoint)
    assert again.rollout.loss_tokens == rank_state["dapo_tokens"] > 1
    assert again.rollout.rewards is None and again.iteration == 1
    stats = again.train_step()
    assert "reward" not in stats and stats["loss"] == stats["loss"]  # the pending batch, no new rollout; not NaN


def wait_for_step(run: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.get("step", -1) >= step for r in read_metrics(run / "metrics.jsonl")):
            return
        if proc.poll() is not None:
            raise AssertionError(f"run ended early: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached")


@pytest.mark.timeout(300)
def test_sigkilled_run_resumes_exactly(tmp_path, capsys):
    """Killed after checkpoint 3 (mid generation batch, num_iterations=2), resumed: every step once,
    the same final weights as an uninterrupted run."""
    # enough steps that the kill lands mid-run: a step of this tiny model takes milliseconds
    settings = dict(max_steps=60, save_steps=3, num_iterations=2, logging_steps=1, learning_rate=1e-2,
                    eval_steps=4)
    killed = write_config(tmp_path, "killed.yaml", **settings)
    proc = cli(killed)
    wait_for_step(tmp_path / "run", 5, proc)  # checkpoint-3 exists, steps 4-5 are lost work
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # checkpoint-3, or checkpoint-6 when the run outpaced the kill; killed before the end either way
    from grpo_core.checkpoint import checkpoints

    assert checkpoints(tmp_path / "run") and not (tmp_path / "run" / "final").exists()
    assert main([str(killed), "--resume"]) == 0
    steps = [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    assert steps == list(range(61))

    reference = validate_config(base_config(tmp_path, **settings, output_dir=str(tmp_path / "straight")))
    train(reference)
    a, b = final_params(tmp_path / "run" / "final"), final_params(tmp_path / "straight" / "final")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key
    straight = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    for x, y in zip(read_metrics(tmp_path / "run" / "metrics.jsonl"), straight):
        assert x.get("reward") == y.get("reward") and x.get("eval/reward") == y.get("eval/reward")


def signal_at_step(run: Path, step: int, sig: int) -> threading.Thread:
    """Send `sig` to this process once `step` is logged (the trainer's handler runs on the main thread)."""
    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(r.get("step", -1) >= step for r in read_metrics(run / "metrics.jsonl")):
                os.kill(os.getpid(), sig)
                return
            time.sleep(0.05)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_saves_a_checkpoint_and_exits_cleanly(tmp_path, capsys, sig, code):
    path = write_config(tmp_path, max_steps=200)
    before = signal.getsignal(sig)
    signal_at_step(tmp_path / "run", 2, sig)
    assert main([str(path)]) == code
    assert signal.getsignal(sig) == before  # handlers restored
    err = capsys.readouterr().err
    assert "checkpoint saved" in err and "--resume" in err
    step = max(r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl"))
    checkpoint = tmp_path / "run" / f"checkpoint-{step}"
    assert (checkpoint / "trainer_state.pt").is_file() and (checkpoint / "rank0.pt").is_file()
    assert not list((tmp_path / "run").glob(".tmp-*"))
    assert not (tmp_path / "run" / "final").exists()
    assert main([str(path), "--resume", "--set", f"max_steps={step + 1}"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["step"] == step + 1
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == list(range(1, step + 2))


def _resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(runtime_module._glibc() is None, reason="needs glibc 2.33+ (malloc_trim, mallinfo2)")
def test_release_free_heap_returns_the_pages_of_freed_tensors():
    # 64 KiB tensors live in glibc's heap (under its mmap threshold); keeping every eighth one
    # leaves ~110 MiB of holes that glibc does not give back on its own.
    tensors = [torch.ones(16384) for _ in range(2048)]
    kept = tensors[7::8]
    del tensors
    before = _resident_mib()
    assert not runtime_module.release_free_heap(torch.device("cpu"), min_free_mib=10**6)  # not that much free
    assert _resident_mib() - before > -5
    assert runtime_module.release_free_heap(torch.device("cpu"))
    after = _resident_mib()
    assert before - after > 60, (before, after)
    assert all(float(t[-1]) == 1.0 for t in kept)  # live tensors untouched
    assert not runtime_module.release_free_heap(torch.device("meta"))  # only CPU memory is glibc's
