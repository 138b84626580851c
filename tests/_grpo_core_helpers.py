"""Helpers of the grpo_core tests: a character tokenizer, a tiny Llama config, prompt data, and a
scorer plugin module (importable as `_grpo_core_helpers` with tests/ on the path) whose rewards
are cheap, deterministic and learnable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pydantic import BaseModel, ConfigDict, Field

from grpo_core.data import register_task, register_tokenizer
from grpo_core.tasks import char_level_tokenizer
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.scorer import Score, Scorer

TESTS = Path(__file__).resolve().parent
CHARS = list("0123456789+=abcxyz ")
SPECIALS = ["<pad>", "<eos>", "<unk>"]


@register_tokenizer("test_chars")
def char_tokenizer() -> Any:
    """One token per character; <eos> separate from <pad>."""
    return char_level_tokenizer(CHARS, SPECIALS)


def small_decoder(kind: str, vocab: int, tokenizer: Any) -> Any:
    """A seeded 2-layer transformers model of `kind` (llama, qwen2, qwen3) with grouped heads (4 q, 2 kv)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(kind, vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
    return AutoModelForCausalLM.from_config(config).eval()


@register_tokenizer("test_chars_pad_eos")
def char_tokenizer_pad_is_eos() -> Any:
    tokenizer = char_tokenizer()
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class SumsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    largest: int = Field(9, ge=1, le=9, description="Largest addend.")


@register_task("test_sums", params=SumsParams)
def sums_task(split: str, size: int | None, seed: int, largest: int = 9) -> list[dict[str, Any]]:
    """`a+b=` prompts; eval takes the pairs with a > b, train the others, so they never overlap."""
    pairs = [(a, b) for a in range(largest + 1) for b in range(largest + 1) if (a > b) == (split == "eval")]
    return [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in pairs][:size]


class CharFraction(Scorer):
    """Fraction of completion characters equal to `char` (None for an empty completion)."""

    name = "test_char_fraction"

    def score(self, samples, results=None):
        out = []
        for s in samples:
            text = s.completion_text
            out.append(Score(text.count("a") / len(text)) if text else Score.unscorable("empty"))
        return out


class StartsWithAnswer(Scorer):
    """1 when the completion starts with the reference answer."""

    name = "test_starts_with_answer"

    def score(self, samples, results=None):
        return [Score(float(s.completion_text.strip().startswith(str(s.reference.get("answer"))))) for s in samples]


@hookimpl
def grpo_rewards_scorers():
    return [CharFraction, StartsWithAnswer]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread: on a shared 2-core machine a second thread makes tiny models several times
    slower (spinning), and `torch_threads` set by a run must not leak into other tests."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_llama(**overrides: Any) -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
            "tie_word_embeddings": True, **overrides}


def write_prompts(path: Path, n: int = 64) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            a, b = i % 10, (i * 7) % 10
            f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n")
    return path


def base_config(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    config = {
        "plugins": ["_grpo_core_helpers"],
        "model": {"config": tiny_llama(), "tokenizer": "builtin:test_chars"},
        "data": {"path": str(write_prompts(tmp_path / "prompts.jsonl")), "eval_size": 8},
        "rewards": {"scorers": [{"scorer": "test_char_fraction", "name": "a_frac"},
                                {"scorer": "test_starts_with_answer", "name": "correct", "weight": 0.5}]},
        "num_generations": 4, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
        "max_completion_length": 8, "max_prompt_length": 16, "learning_rate": 3e-3, "beta": 0.04,
        "max_steps": 4, "seed": 0, "output_dir": str(tmp_path / "run"), "progress": False, "plot": False,
        "lr_scheduler_type": "constant", "device": "cpu", "torch_threads": 1,
    }
    for key, value in overrides.items():
        node, parts = config, key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return config


def write_config(tmp_path: Path, name: str = "config.yaml", **overrides: Any) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(base_config(tmp_path, **overrides), sort_keys=False), encoding="utf-8")
    return path
