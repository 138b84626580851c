"""A lean sampling loop for Llama-family decoders (Llama, Qwen2, Qwen3), with a preallocated KV cache.

Why hand-written: for small models a decode step is mostly Python overhead, and HF `generate`
adds its own (logits processors, stopping criteria, cache objects, mask building, output
wrappers) to the model's. This loop calls the model's own modules (embeddings, norms,
projections, MLP, rotary embedding, `apply_rotary_pos_emb`) and does the rest with a handful of
tensor ops per layer, so the arithmetic is the model's, and the sampling mirrors HF's
(temperature, then top-k, then top-p, then `multinomial` on the softmax), so a seeded run picks
the same tokens as `generate`. Other architectures, sliding-window attention and
`generation_backend: hf` use HF `generate`.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}


def supported(model: Any) -> bool:
    config = model.config
    return (type(model).__name__ in SUPPORTED and not getattr(config, "use_sliding_window", False)
            and getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager")
            and not getattr(model, "peft_config", None))


def _filter_logits(scores: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """HF's TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper, in HF's order."""
    if temperature != 1.0:
        scores = scores / temperature
    if top_k:
        kth = torch.topk(scores, min(top_k, scores.size(-1)))[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        remove = sorted_scores.softmax(-1).cumsum(-1) <= (1 - top_p)
        remove[..., -1:] = False  # always keep the most likely token
        scores = scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))
    return scores


class _Layer:
    """One decoder layer over a preallocated cache: (B, T, H) in, (B, T, H) out."""

    def __init__(self, layer: Any, batch: int, length: int) -> None:
        self.layer, self.attn = layer, layer.self_attn
        self.rotary = sys.modules[type(self.attn).__module__].apply_rotary_pos_emb
        self.head_dim = self.attn.head_dim
        self.batch, self.length = batch, length
        self.keys = self.values = None

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                 start: int) -> torch.Tensor:
        attn, b, t = self.attn, x.size(0), x.size(1)
        h = self.layer.input_layernorm(x)
        q = attn.q_proj(h).view(b, t, -1, self.head_dim)
        k = attn.k_proj(h).view(b, t, -1, self.head_dim)
        if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over each head
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = self.rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)          # (B, heads, T, D)
        v = attn.v_proj(h).view(b, t, -1, self.head_dim).transpose(1, 2)
        if self.keys is None:
            self.keys = k.new_zeros(b, k.size(1), self.length, self.head_dim)        # (B, kv_heads, L, D)
            self.values = v.new_zeros(b, v.size(1), self.length, self.head_dim)
        self.keys[:, :, start:start + t] = k
        self.values[:, :, start:start + t] = v
        end = start + t
        out = F.scaled_dot_product_attention(q, self.keys[:, :, :end], self.values[:, :, :end], attn_mask=mask,
                                             scale=attn.scaling, enable_gqa=q.size(1) != k.size(1))
        x = x + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
        return x + self.layer.mlp(self.layer.post_attention_layernorm(x))


@torch.inference_mode()
def sample(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int,
           eos_ids: torch.Tensor, pad_id: int, do_sample: bool, temperature: float = 1.0, top_k: int = 0,
           top_p: float = 1.0) -> torch.Tensor:
    """Completion ids (B, C <= max_new_tokens) after left-padded prompts; pad after each row's first EOS."""
    body, head = model.model, model.get_output_embeddings()
    b, p = prompt_ids.shape
    length = p + max_new_tokens
    layers = [_Layer(layer, b, length) for layer in body.layers]
    valid = torch.zeros(b, length, dtype=torch.bool, device=prompt_ids.device)  # keys each row may attend to
    valid[:, :p] = prompt_mask.bool()
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)                       # (B, P), as generate() does
    causal = torch.ones(p, p, dtype=torch.bool, device=prompt_ids.device).tril()
    # Pad queries attend to themselves too, so no attention row is empty (NaN); nothing attends to them.
    mask = (causal[None] & valid[:, None, :p]) | torch.eye(p, dtype=torch.bool, device=prompt_ids.device)[None]
    x, start = body.embed_tokens(prompt_ids), 0
    out = torch.full((b, max_new_tokens), pad_id, dtype=torch.long, device=prompt_ids.device)
    finished = torch.zeros(b, dtype=torch.bool, device=prompt_ids.device)
    last = positions[:, -1:]
    for step in range(max_new_tokens):
        cos, sin = body.rotary_emb(x, positions)
        for layer in layers:
            x = layer(x, cos, sin, mask[:, None], start)
        scores = head(body.norm(x[:, -1])).float()                                # (B, V)
        if do_sample:
            scores = _filter_logits(scores, temperature, top_k, top_p)
            token = torch.multinomial(scores.softmax(-1), 1).squeeze(1)
        else:
            token = scores.argmax(-1)
        token = torch.where(finished, pad_id, token)
        out[:, step] = token
        finished |= torch.isin(token, eos_ids)
        if bool(finished.all()):
            return out[:, :step + 1]
        start += x.size(1)
        valid[:, start] = True
        mask = valid[:, None, :start + 1]                                          # (B, 1, L)
        last = last + 1
        positions = last
        x = body.embed_tokens(token[:, None])
    return out
