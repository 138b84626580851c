"""The `reward_model` scorer: a Hugging Face sequence-classification reward model's chosen logit.

Prompt and completion are rendered as TRL 1.16's `GRPOTrainer` renders them for a reward model:
chat messages (prompt messages plus the assistant completion) through the reward tokenizer's chat
template, text as prompt + completion; tokenized without added special tokens, padded on the right
with the pad token (the EOS where the tokenizer has none, which the model's config is told), and
the value is `logits[:, 0]`. Batches are formed from samples of similar length so that little
padding is computed, and the values are returned in input order.

The model is loaded while the spec is validated (a missing or broken model is a spec error) and
kept once per process for every member that names it with the same device and dtype.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.scorer import ParamsModel, Sample, Score, Scorer

DTYPES = ("float32", "bfloat16", "float16")


class RewardModelParams(ParamsModel):
    model: str = Field(min_length=1, description="The reward model: a local directory or a Hugging Face hub id "
                       "(from the local cache when offline); an `AutoModelForSequenceClassification` with "
                       "its tokenizer. Loaded when the spec is validated.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where the model runs; `auto`: CUDA when "
                                                   "available, else the CPU.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights' dtype; the values "
                                                             "are returned as float32.")
    batch_size: int = Field(16, ge=1, le=4096, description="Sequences per forward pass (formed by length).")
    max_length: int | None = Field(None, ge=8, le=1_000_000, description="Tokens kept per sequence, from the "
                                   "end (where the reward is read); `info.truncated` counts the tokens cut. "
                                   "null: none cut, as TRL.")
    transform: Literal["none", "sigmoid", "affine"] = Field(
        "none", description="`none`: the logit; `sigmoid`: 1 / (1 + e^-logit); `affine`: the logit mapped "
        "linearly from `affine_from` onto `affine_to` (not clipped).")
    affine_from: tuple[float, float] = Field((-5.0, 5.0), description="transform `affine`: the logit span "
                                             "(low, high) that maps onto `affine_to`.")
    affine_to: tuple[float, float] = Field((0.0, 1.0), description="transform `affine`: the values the "
                                           "ends of `affine_from` map to.")

    @model_validator(mode="after")
    def _loads(self) -> RewardModelParams:
        low, high = self.affine_from
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"affine_from must be two finite numbers, low < high; got {list(self.affine_from)}")
        if not all(math.isfinite(v) for v in self.affine_to):
            raise ValueError(f"affine_to must be finite; got {list(self.affine_to)}")
        # A hub id is `org/name`; anything else that is not a directory is a missing one, said plainly.
        local = self.model.startswith((".", "~", "/")) or self.model.count("/") > 1
        if local and not Path(self.model).expanduser().is_dir():
            raise ValueError(f"reward model {self.model!r}: no such directory (relative to {os.getcwd()})")
        try:
            load_reward_model(self.model, self.device, self.dtype)
        except Exception as exc:  # noqa: BLE001 - any reason the model cannot serve is the spec's problem
            raise ValueError(f"reward model {self.model!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
        return self


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    tokenizer: Any
    device: str


_LOADED: dict[tuple[str, str, str], LoadedModel] = {}  # one copy per process, never evicted
_LOAD_LOCK = threading.Lock()


def load_reward_model(path: str, device: str, dtype: str) -> LoadedModel:
    """The model and tokenizer at `path`, loaded on first use and shared afterwards."""
    # torch and transformers: the `train` extra, not the core install
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' asked for, but torch sees no CUDA device")
    key = (path, device, dtype)
    with _LOAD_LOCK:
        if key not in _LOADED:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1,
                                                                       dtype=getattr(torch, dtype))
            if tokenizer.pad_token_id is None:  # as TRL: the EOS pads, and the model is told
                tokenizer.pad_token = tokenizer.eos_token
            model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
            _LOADED[key] = LoadedModel(model.to(device).eval(), tokenizer, device)
        return _LOADED[key]


def render(sample: Sample, tokenizer: Any) -> str:
    """The text TRL's GRPOTrainer gives a reward model for this prompt and completion."""
    if isinstance(sample.prompt, str):
        return sample.prompt + sample.completion_text
    completion = sample.completion
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    return tokenizer.apply_chat_template([*sample.prompt, *completion], tokenize=False)


class RewardModel(Scorer):
    """A Hugging Face sequence-classification reward model's logit, rendered as TRL renders it."""

    name = "reward_model"
    Params = RewardModelParams
    value_range = (-math.inf, math.inf)

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        p = self.params
        self.loaded = load_reward_model(p.model, p.device, p.dtype)

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        out: list[Score | None] = [None] * len(samples)
        ids: dict[int, list[int]] = {}
        cut: dict[int, int] = {}
        for i, sample in enumerate(samples):
            try:
                tokens = self.loaded.tokenizer(render(sample, self.loaded.tokenizer), add_special_tokens=False)
            except Exception as exc:  # noqa: BLE001 - a sample the template rejects is unscorable, not a crash
                out[i] = Score.unscorable("cannot render the sample", error=f"{type(exc).__name__}: {exc}")
                continue
            ids[i], cut[i] = self._truncated(tokens["input_ids"])
        order = sorted(ids, key=lambda i: len(ids[i]))  # similar lengths together: little padding
        size = self.params.batch_size
        for start in range(0, len(order), size):
            batch = order[start:start + size]
            try:
                logits = self._forward([ids[i] for i in batch])
            except Exception as exc:  # noqa: BLE001 - out of memory, a device error: None, not a crash
                for i in batch:
                    out[i] = Score.unscorable("reward model failed", error=f"{type(exc).__name__}: {exc}")
                continue
            for i, logit in zip(batch, logits, strict=True):
                info = {"logit": logit, "tokens": len(ids[i])}
                if cut[i]:
                    info["truncated"] = cut[i]
                out[i] = Score(self._transform(logit), info)
        return out  # type: ignore[return-value]

    def _truncated(self, ids: list[int]) -> tuple[list[int], int]:
        limit = self.params.max_length
        if limit is None or len(ids) <= limit:
            return ids, 0
        return ids[-limit:], len(ids) - limit

    def _forward(self, batch: list[list[int]]) -> list[float]:
        import torch  # the `train` extra (the model is loaded, so it is installed)

        width = max(len(x) for x in batch)
        pad = self.loaded.tokenizer.pad_token_id
        input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in batch], device=self.loaded.device)
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in batch], device=self.loaded.device)
        with torch.inference_mode():
            logits = self.loaded.model(input_ids=input_ids, attention_mask=mask).logits[:, 0]
        return logits.float().tolist()

    def _transform(self, logit: float) -> float:
        p = self.params
        if p.transform == "sigmoid":
            return 1.0 / (1.0 + math.exp(-logit)) if logit >= 0 else math.exp(logit) / (1.0 + math.exp(logit))
        if p.transform == "affine":
            (a, b), (c, d) = p.affine_from, p.affine_to
            return c + (d - c) * (logit - a) / (b - a)
        return logit


@hookimpl
def grpo_rewards_scorers():
    return [RewardModel]
