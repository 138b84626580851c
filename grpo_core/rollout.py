"""Rollouts: G sampled completions per prompt, their masks, and the `Rollout` the objective reads.

Prompts (encoded once by grpo_core.prompts) are left-padded per batch so every completion starts
at the same column. Generation uses a KV cache under `torch.inference_mode`: grpo_core.decode's lean loop
for Llama-family models (the same tokens as HF `generate`, with less overhead), HF `generate` otherwise.
The completion mask runs up to and including the first EOS (pad may equal EOS, so the mask
cannot come from pad positions); a completion without EOS is kept whole (truncated).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig

from grpo_core import decode


@dataclass
class Rollout:
    """One generation batch on one rank: B = prompts x G rows, P prompt and C completion columns."""

    prompt_ids: torch.Tensor        # (B, P) left-padded
    prompt_mask: torch.Tensor       # (B, P)
    completion_ids: torch.Tensor    # (B, C) right-padded, C = longest completion
    completion_mask: torch.Tensor   # (B, C) 1 up to and including the first EOS
    advantages: torch.Tensor        # (B,)
    old_logps: torch.Tensor | None = None       # (B, C) when num_iterations > 1
    ref_logps: torch.Tensor | None = None       # (B, C) when the policy has a reference (beta > 0)
    rewards: torch.Tensor | None = None         # (B,) weighted total, NaN where no scorer gave a value
    reward_sums: torch.Tensor | None = None     # (B,) the totals before any group normalisation (logged)
    scorer_rewards: torch.Tensor | None = None  # (B, S) each scorer's value (reward.aliases order), NaN for None
    loss_tokens: float = 1.0  # completion tokens of the generation batch over all ranks / world size (dapo)

    def __len__(self) -> int:
        return self.prompt_ids.size(0)

    def rows(self, start: int, end: int) -> Rollout:
        """A micro-batch; completion columns trimmed to the longest completion in it."""
        width = int(self.completion_mask[start:end].sum(-1).max().clamp(min=1))
        cut = lambda t: None if t is None else t[start:end, :width]  # noqa: E731
        take = lambda t: None if t is None else t[start:end]  # noqa: E731
        return Rollout(self.prompt_ids[start:end], self.prompt_mask[start:end], cut(self.completion_ids),
                       cut(self.completion_mask), self.advantages[start:end], cut(self.old_logps),
                       cut(self.ref_logps), take(self.rewards), take(self.reward_sums), take(self.scorer_rewards),
                       self.loss_tokens)

    def state(self) -> dict[str, Any]:
        return dict(self.__dict__)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.as_tensor(r)
            mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


def completion_mask(completion_ids: torch.Tensor, eos_ids: torch.Tensor) -> torch.Tensor:
    """1 up to and including the first EOS of each row; the whole row when it has none."""
    is_eos = torch.isin(completion_ids, eos_ids)                                    # (B, C)
    length = completion_ids.size(1)
    first = torch.where(is_eos.any(-1), is_eos.int().argmax(-1), length)          # (B,)
    positions = torch.arange(length, device=completion_ids.device)
    return (positions[None, :] <= first[:, None]).long()                           # (B, C)


def generation_config(tokenizer: Any, eos_ids: list[int], max_new_tokens: int, do_sample: bool,
                      temperature: float, top_p: float, top_k: int) -> GenerationConfig:
    # top_k 0 (TRL: no top-k) must reach HF as 0: None would mean its default of 50.
    sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k} if do_sample else {}
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=do_sample, eos_token_id=eos_ids,
                            pad_token_id=tokenizer.pad_token_id, use_cache=True, **sampling)


@torch.inference_mode()
def _sample_ids(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, gen_config: Any,
            eos_ids: torch.Tensor, backend: str) -> torch.Tensor:
    was_training = model.training
    model.eval()
    try:
        if backend == "auto" and decode.supported(model):
            c = gen_config
            return decode.sample(model, prompt_ids, prompt_mask, c.max_new_tokens, eos_ids, c.pad_token_id,
                                 c.do_sample, c.temperature or 1.0, c.top_k or 0, c.top_p or 1.0)
        out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=gen_config)
    finally:
        model.train(was_training)
    return out[:, prompt_ids.size(1):]                                             # (B, C')


def generate(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, gen_config: Any,
             eos_ids: torch.Tensor, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Completions for already-repeated prompt rows: ids (B, C) and mask (B, C), C trimmed to the longest.

    `backend`: `auto` uses grpo_core.decode's lean loop for the models it supports, else HF `generate`.
    """
    ids = _sample_ids(model, prompt_ids, prompt_mask, gen_config, eos_ids, backend)
    if ids.size(1) == 0:  # nothing generated; keep one EOS column so shapes stay valid
        ids = torch.full((ids.size(0), 1), int(eos_ids[0]), dtype=torch.long, device=ids.device)
    mask = completion_mask(ids, eos_ids)
    width = int(mask.sum(-1).max())
    # Cloned outside inference mode: inference tensors cannot be saved for backward.
    return ids[:, :width].clone(), mask[:, :width].clone()
