"""The built-in demo pieces (grpo_core/tasks.py) and a shortened quickstart run that must learn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_core.tasks import (
    MODEL_PRESETS, ArithmeticParams, MajorityParams, arithmetic, chars_tokenizer, majority, majority_strings, model_config,
    partition,
)

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def test_arithmetic_split_is_fixed_and_disjoint() -> None:
    options = {"operations": ["+", "-"]}
    train = arithmetic("train", None, 0, **options)
    held = arithmetic("eval", None, 1, **options)
    assert {r["prompt"] for r in train}.isdisjoint({r["prompt"] for r in held})
    # the partition does not move with the run's seed, only with split_seed
    assert held == arithmetic("eval", None, 7, **options)
    assert {r["prompt"] for r in arithmetic("train", None, 5, **options)} == {r["prompt"] for r in train}
    assert held != arithmetic("eval", None, 1, split_seed=3, **options)
    for r in train + held:
        a, rest = r["prompt"].rstrip("=").replace("-", "+-").split("+", 1)
        assert int(r["answer"]) == int(a) + int(rest) and 0 <= int(r["answer"]) <= 9


def test_mirrored_held_out_problems_are_swapped_training_problems() -> None:
    train, held = partition(ArithmeticParams())
    assert held and all(a != b and (b, op, a) in train for a, op, b in held)
    assert len(held) == round(0.2 * (len(train) + len(held)))


def test_train_split_repeats_to_size_and_eval_truncates() -> None:
    train = arithmetic("train", 500, 0)
    assert len(train) == 500
    assert len(arithmetic("eval", 3, 1)) == 3
    assert arithmetic("train", 500, 0) == train  # deterministic for a seed
    assert arithmetic("train", 500, 1) != train


def test_majority_held_out_strings_are_never_trained_on() -> None:
    held = majority("eval", None, 0)
    train = majority("train", 20000, 3)
    assert len(held) == 500 and {r["prompt"] for r in held}.isdisjoint({r["prompt"] for r in train})
    assert held == majority("eval", None, 9)  # fixed by split_seed, not the run's seed
    assert held != majority("eval", None, 0, split_seed=1)
    for r in held + train[:500]:
        digits = r["prompt"].removesuffix("=")
        assert len(digits) == 5 and digits.count(r["answer"]) >= 3
    # 10 * (C(5,3)*9*9 + C(5,4)*9 + 1) strings of five digits have a digit in at least three places
    assert len(majority_strings(MajorityParams())) == 8560


def test_arithmetic_params_reject_nonsense() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="only 3 problems"):  # 0-0, 1-0, 1-1 (negatives are left out)
        ArithmeticParams(operations=["-"], max_operand=1)
    with pytest.raises(ValidationError):
        ArithmeticParams(operations=["/"])


def test_chars_tokenizer_round_trips_through_auto_tokenizer(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = chars_tokenizer()
    ids = tokenizer("12+3=")["input_ids"]
    assert len(ids) == 5 and tokenizer.decode(ids) == "12+3="
    assert tokenizer.eos_token_id != tokenizer.pad_token_id
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("12+3=")["input_ids"] == ids
    assert (loaded.eos_token, loaded.pad_token) == ("<eos>", "<pad>")
    assert loaded.decode(ids + [loaded.eos_token_id], skip_special_tokens=True) == "12+3="


@pytest.mark.parametrize(("preset", "low", "high"), [("tiny", 5e4, 2e5), ("2m", 1.5e6, 2.5e6), ("20m", 1.5e7, 2.5e7)])
def test_model_presets_have_their_advertised_size(preset: str, low: float, high: float) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):  # shapes only: no memory, no init time
        model = AutoModelForCausalLM.from_config(model_config(preset, chars_tokenizer()))
    assert low <= sum(p.numel() for p in model.parameters()) <= high
    assert MODEL_PRESETS[preset]["model_type"] == model.config.model_type


@pytest.mark.timeout(300)
def test_shortened_quickstart_run_raises_the_reward(tmp_path: Path) -> None:
    from grpo_core.config import load_config
    from grpo_core.trainer import train

    config = load_config(QUICKSTART, overrides=[
        f"output_dir={tmp_path / 'run'}", "max_steps=60", "per_device_train_batch_size=256", "logging_steps=20",
        "eval_steps=60", "progress=false"])
    summary = train(config)
    rows = [json.loads(line) for line in open(summary["metrics_file"])]
    rewards = [r["reward"] for r in rows if "reward" in r]
    assert len(rewards) == 3 and rewards[-1] > rewards[0] + 0.3, rewards  # seeded: 0.15 -> 0.75
    evals = [r for r in rows if "eval/correct" in r]
    assert [r["step"] for r in evals] == [0, 60]
    # held-out strings, never trained on: seeded 0.0 -> 0.88
    assert evals[0]["eval/correct"] <= 0.3 and evals[1]["eval/correct"] >= 0.6, evals
    assert Path(summary["plot"]).is_file() and (Path(summary["final_model"]) / "tokenizer.json").is_file()
