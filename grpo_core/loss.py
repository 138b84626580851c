"""Token log-probs and the GRPO objective (TRL 1.16's formulas).

The objective per completion token t of completion i (B completions, mask m):

    ratio  = exp(logp - old_logp)                (token level; GSPO: the masked mean over the sequence)
    loss_t = -min(ratio * A_i, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A_i) + beta * KL_t
    KL_t   = exp(ref - logp) - (ref - logp) - 1  (k3 estimator, always >= 0)

then reduced by `loss_type`. Deviations from the GRPO paper (DeepSeekMath, Shao et al. 2024),
each shared with TRL so results compare:

* advantages (`A_i`, computed by `grpo_rewards.advantages` from the spec's `aggregate` and
  `scale_rewards`) are TRL's: (r - group mean) / (std + 1e-4), unbiased std.
* the paper averages per sequence then over sequences (`grpo`); `bnpo` averages over the tokens of
  the micro-batch, `dr_grpo` divides the token sum by B * max_completion_length, `dapo` (TRL's
  default) divides it by the completion tokens of the whole generation batch (over all ranks).
* clip-higher (DAPO): a separate upper clip `epsilon_high`.
* log-probs are of the temperature-scaled distribution, logits / temperature, as sampled.
* with one update per generation batch the old log-probs are `logp.detach()` (ratio 1, the same
  gradient), so they are never recomputed.
* position ids follow the attention mask (left padding), as during generation (TRL uses 0..T-1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# ---------------------------------------------------------------------------------------------
# Log-probs of the sampled tokens, never materialising (B, T, V) logits


def _chunk_logprobs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    targets: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _logprobs_of_logits(F.linear(hidden, weight, bias), targets, temperature)


def _logprobs_of_logits(logits: torch.Tensor, targets: torch.Tensor,
                        temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float()                                                       # (n, V)
    if temperature != 1.0:
        logits = logits / temperature
    logz = logits.logsumexp(-1)                                                   # (n,)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - logz                 # (n,)
    with torch.no_grad():  # entropy is a metric only
        entropy = logz - (logits.softmax(-1) * logits).sum(-1)
    return logp, entropy


def selective_logprobs(hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, temperature: float,
                       chunk_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob and entropy of `targets` (N,) under `head(hidden)` (N, H), chunk by chunk.

    When all rows fit in one chunk the logits are computed once; otherwise each chunk is
    checkpointed, so the backward pass holds one chunk's logits at a time, not N x V.
    """
    if hidden.size(0) <= chunk_rows:
        return _chunk_logprobs(hidden, head.weight, head.bias, targets, temperature)
    logps, entropies = [], []
    for start in range(0, hidden.size(0), chunk_rows):
        end = start + chunk_rows
        logp, entropy = checkpoint(_chunk_logprobs, hidden[start:end], head.weight, head.bias, targets[start:end],
                                   temperature, use_reentrant=False)
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps), torch.cat(entropies)


class CompletionLogprobs(torch.nn.Module):
    """Wraps a causal LM: per-token log-probs (and entropies) of completions given prompts.

    Hidden states are sliced to the positions that predict completion tokens (no logits at
    prompt or pad positions) before the output head. This module is what DDP wraps.
    """

    def __init__(self, lm: torch.nn.Module, temperature: float, chunk_mib: int) -> None:
        super().__init__()
        self.lm = lm
        self.temperature = temperature
        head = lm.get_output_embeddings()
        config = lm.config
        special = getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None)
        self.fast = isinstance(head, torch.nn.Linear) and not special and hasattr(lm, lm.base_model_prefix)
        vocab = head.weight.size(0) if head is not None else config.vocab_size
        self.chunk_rows = max(1, chunk_mib * 2**20 // (vocab * 8))  # fp32 logits + softmax per row

    def forward(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                completion_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids = torch.cat([prompt_ids, completion_ids], 1)                    # (B, P+C)
        attention = torch.cat([prompt_mask, completion_mask], 1)                  # (B, P+C)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)                       # as in generate()
        p, c = prompt_ids.size(1), completion_ids.size(1)
        keep = completion_mask.bool()                                             # (B, C)
        if self.fast:
            body = getattr(self.lm, self.lm.base_model_prefix)
            hidden = body(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                          use_cache=False).last_hidden_state                      # (B, P+C, H)
            hidden = hidden[:, p - 1:p + c - 1][keep]                             # (N, H) predict completions
            logp, entropy = selective_logprobs(hidden, self.lm.get_output_embeddings(), completion_ids[keep],
                                               self.temperature, self.chunk_rows)
        else:  # models that post-process logits (softcapping, scaling): let them, on completion positions only
            logits = self.lm(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                             use_cache=False, logits_to_keep=c + 1).logits[:, :-1]  # (B, C, V)
            logp, entropy = _logprobs_of_logits(logits[keep], completion_ids[keep], self.temperature)
        zeros = torch.zeros(keep.shape, dtype=logp.dtype, device=logp.device)
        return zeros.masked_scatter(keep, logp), zeros.masked_scatter(keep, entropy.to(logp.dtype))  # (B, C)


# ---------------------------------------------------------------------------------------------
# Statistics of the rewards (logged)


def nanstd(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """Unbiased std ignoring NaN; NaN where fewer than two values (torch has no nanstd)."""
    mean = x.nanmean() if dim is None else x.nanmean(dim, keepdim=True)
    count = (~x.isnan()).sum() if dim is None else (~x.isnan()).sum(dim, keepdim=True)
    sq = (x - mean).square()
    var = sq.nansum() if dim is None else sq.nansum(dim, keepdim=True)
    var = torch.where(count > 1, var / (count - 1).clamp(min=1), torch.full_like(var, math.nan))
    std = var.sqrt()
    return std if keepdim or dim is None else std.squeeze(dim)


# ---------------------------------------------------------------------------------------------
# The objective


@dataclass(frozen=True)
class Normalisation:
    """What the reductions divide by, besides the mask."""

    accumulation_steps: int = 1      # micro-batches per optimizer step
    max_completion_length: int = 1   # dr_grpo's constant
    loss_tokens: float = 1.0         # dapo: completion tokens of the generation batch, all ranks, / world size


Reduction = Callable[[torch.Tensor, torch.Tensor, Normalisation], torch.Tensor]


def _sequence_mean(masked: torch.Tensor, mask: torch.Tensor, n: Normalisation) -> torch.Tensor:
    """grpo: the mean over each sequence's tokens, then over sequences (the paper's)."""
    return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / n.accumulation_steps


def _batch_token_mean(masked: torch.Tensor, mask: torch.Tensor, n: Normalisation) -> torch.Tensor:
    """bnpo: the mean over the micro-batch's completion tokens."""
    return masked.sum() / mask.sum().clamp(min=1.0) / n.accumulation_steps


def _constant_length(masked: torch.Tensor, mask: torch.Tensor, n: Normalisation) -> torch.Tensor:
    """dr_grpo: the token sum over B * max_completion_length (no length bias)."""
    return masked.sum() / (masked.size(0) * n.max_completion_length) / n.accumulation_steps


def _generation_batch_tokens(masked: torch.Tensor, mask: torch.Tensor, n: Normalisation) -> torch.Tensor:
    """dapo: the token sum over the completion tokens of the whole generation batch (all micro-batches)."""
    return masked.sum() / max(n.loss_tokens, 1.0)


# loss_type -> reduction of the masked per-token loss (B, C) to the micro-batch's share of the step's loss
LOSS_TYPES: dict[str, Reduction] = {
    "grpo": _sequence_mean,
    "bnpo": _batch_token_mean,
    "dr_grpo": _constant_length,
    "dapo": _generation_batch_tokens,
}


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor | None, ref_logps: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, *, loss_type: str, beta: float, epsilon: float,
              epsilon_high: float, importance_sampling_level: str = "token", max_completion_length: int = 1,
              accumulation_steps: int = 1, dapo_tokens: float = 1.0) -> tuple[torch.Tensor, dict[str, Any]]:
    """The micro-batch loss, already divided for gradient accumulation, and detached stats.

    logps/old_logps/ref_logps/mask: (B, C); advantages: (B,). The KL term is there when `ref_logps`
    is given (the policy has a reference only when beta > 0). `dapo_tokens`: completion tokens of
    the generation batch over all ranks, divided by the world size (TRL's `num_items_in_batch`).
    """
    reduce = LOSS_TYPES.get(loss_type)
    if reduce is None:
        raise ValueError(f"unknown loss_type {loss_type!r}; known: {', '.join(LOSS_TYPES)}")
    mask = mask.to(logps.dtype)
    adv = advantages[:, None]                                                     # (B, 1)
    old_logps = logps.detach() if old_logps is None else old_logps
    log_ratio = logps - old_logps                                                 # (B, C)
    if importance_sampling_level == "sequence":                                   # GSPO
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0))[:, None]  # (B, 1)
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon_high)
    per_token = -torch.min(ratio * adv, clipped * adv)                            # (B, C) or (B, 1)
    kl = None
    if ref_logps is not None:
        delta = ref_logps - logps
        kl = delta.exp() - delta - 1                                              # (B, C) k3
        per_token = per_token + beta * kl
    loss = reduce(per_token * mask, mask, Normalisation(accumulation_steps, max_completion_length, dapo_tokens))
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1.0)
        region = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + epsilon_high) & (adv > 0))
        clip = region.float().mean() if region.size(1) == 1 else (region * mask).sum() / tokens
        stats = {"clip_ratio": clip, "kl": (kl * mask).sum() / tokens if kl is not None else torch.zeros(())}
    return loss, stats
