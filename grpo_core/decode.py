"""A lean sampling loop for Llama-family decoders (Llama, Qwen2, Qwen3), with a preallocated KV cache.

Why hand-written: for small models a decode step is mostly Python overhead, and HF `generate`
adds its own (logits processors, stopping criteria, cache objects, mask building, output
wrappers) to the model's. This loop uses the model's own weights and modules (embeddings,
rotary embedding, `rotate_half`, activation) with fewer ops per layer: q/k/v and
gate/up projections fused into one matmul each, RMSNorm as one `F.rms_norm`. The sampling mirrors HF's
(temperature, then top-k, then top-p, then `multinomial` on the softmax), so a seeded run picks
the same tokens as `generate`. It runs on grpo_core.llama's module and on transformers' classes
alike (the same module tree), and on a LoRA (peft) model with each adapted projection's merged weight
W + scale * B @ A, taken once per rollout (grpo_core.lora.linear_weights). Under autocast the snapshot of the weights is made in the autocast
dtype, and in bf16 on the CPU laid out once for oneDNN (`_Projection`). Other architectures,
sliding-window attention and `generation_backend: hf` use HF `generate`. On the CPU, where
grpo_core.native's compiled op is built, each layer's step is that one op (bitwise the same).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F

from grpo_core import native
from grpo_core.llama import CausalLM, attention, is_silu
from grpo_core.lora import has_adapter, inner_model, linear_weights, mergeable

SUPPORTED = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}


def supported(model: Any) -> bool:
    """Whether this loop runs `model`: float32 weights (autocast gives it bf16 products; weights held in
    a low precision take HF `generate`), a Llama-family architecture, no sliding window, and LoRA
    adapters only of the plain kind, whose merged weights the loop decodes with (lora.mergeable)."""
    if next(model.parameters()).dtype != torch.float32:
        return False
    if has_adapter(model):
        if not mergeable(model):
            return False
        model = inner_model(model)
    if isinstance(model, CausalLM):
        return True
    config = model.config
    return (type(model).__name__ in SUPPORTED and not getattr(config, "use_sliding_window", False)
            and getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager"))


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


def _plain_rms_norm(module: Any) -> tuple[torch.Tensor, float] | None:
    """(weight, eps) of a plain Llama-style RMSNorm (`x / rms(x) * weight`), else None."""
    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    if type(module).__name__.endswith("RMSNorm") and weight is not None and eps is not None:
        return weight, eps
    return None


def _norm(module: Any) -> Any:
    """RMSNorm as one fused op (`F.rms_norm`, weight included) when the module is the plain Llama-style
    kind; on a float32 input this is bitwise what the module computes."""
    if (plain := _plain_rms_norm(module)) is None:
        return module
    weight, eps = plain
    return lambda x: (F.rms_norm(x, weight.shape, weight, eps) if x.dtype == torch.float32 == weight.dtype
                      else F.rms_norm(x.float(), weight.shape, None, eps).to(x.dtype) * weight)


def _matmul_dtype(device: torch.device) -> torch.dtype | None:
    """The autocast dtype the caller generates under, or None."""
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


def _fused(*linears: Any, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for several projections of the same input: one matmul instead of several.

    Under autocast the copy is made in its dtype: autocast would otherwise cast every weight again
    at every decode step (it caches casts only while grad is enabled), which costs more than the
    matmuls of a small model; the products are the same. Each weight is copied once, converting
    on the way (cheaper than a `cat` then a cast).
    """
    def joined(parts: list[torch.Tensor]) -> torch.Tensor:
        if len(parts) == 1:
            return parts[0] if dtype is None else parts[0].to(dtype)
        out = parts[0].new_empty((sum(p.size(0) for p in parts), *parts[0].shape[1:]), dtype=dtype or parts[0].dtype)
        start = 0
        for part in parts:
            out[start:start + part.size(0)].copy_(part)
            start += part.size(0)
        return out

    weights, biases = zip(*(linear_weights(lin) for lin in linears))  # a LoRA layer's merged weight
    bias = joined(list(biases)) if all(b is not None for b in biases) else None
    return joined(list(weights)), bias


def _packable(weight: torch.Tensor) -> bool:
    """Whether oneDNN can hold `weight` prepacked with bitwise the products of F.linear (bf16 on a CPU
    with native bf16 matmuls, where F.linear itself runs oneDNN's kernel)."""
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16 or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without these ops
        return False


class _Projection:
    """`x @ W.T + b` for one or several fused linears (see `_fused`), W held as the decode loop needs it.

    Why prepacked: given a plain-layout bf16 weight, oneDNN reorders it into its blocked layout on
    every call. The product of a small batch is short next to that reorder, which nearly doubles
    the matmul time. The weight is reordered once per rollout instead; the products are bitwise F.linear's
    (tests/test_rollout.py). Float32 keeps F.linear: oneDNN's float32 kernel rounds differently
    from the BLAS one, and float32 decoding picks the same tokens as HF `generate`.
    """

    def __init__(self, *linears: Any, dtype: torch.dtype | None, rows: int) -> None:
        weight, self.bias = _fused(*linears, dtype=dtype)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows) if _packable(weight) else None
        self.weight = weight if self.packed is None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight, bias) as the compiled layer takes them: it tells a prepacked weight by its layout."""
        return self.weight if self.packed is None else self.packed, self.bias


class _Layer:
    """One decoder layer over a preallocated cache: (B, T, H) in, (B, T, H) out.

    Casts are explicit (the loop runs with autocast off): the input of each projection is cast once
    to the snapshot's dtype, as autocast would, and everything else stays in the residual stream's
    dtype. q and k are rotated together (one set of ops for both), attention runs in float32.
    """

    def __init__(self, layer: Any, length: int, dtype: torch.dtype | None, rows: int) -> None:
        self.layer, attn, mlp = layer, layer.self_attn, layer.mlp
        self.rotate_half = getattr(sys.modules[type(attn).__module__], "rotate_half")
        self.head_dim, self.scaling, self.dtype = attn.head_dim, attn.scaling, dtype
        self.heads = [attn.q_proj.out_features // self.head_dim, attn.k_proj.out_features // self.head_dim]
        self.qkv = _Projection(attn.q_proj, attn.k_proj, attn.v_proj, dtype=dtype, rows=rows)
        self.o_proj = _Projection(attn.o_proj, dtype=dtype, rows=rows)
        self.q_norm = _norm(attn.q_norm) if hasattr(attn, "q_norm") else None  # Qwen3: RMSNorm per head
        self.k_norm = _norm(attn.k_norm) if hasattr(attn, "k_norm") else None
        self.norm1, self.norm2 = _norm(layer.input_layernorm), _norm(layer.post_attention_layernorm)
        has_gate = hasattr(mlp, "gate_proj")
        self.gate_up = _Projection(mlp.gate_proj, mlp.up_proj, dtype=dtype, rows=rows) if has_gate else None
        self.down = _Projection(mlp.down_proj, dtype=dtype, rows=rows) if hasattr(mlp, "down_proj") else None
        self.length = length
        self.keys = self.values = None
        self.native = self._native_layer(layer)

    def _native_layer(self, layer: Any) -> tuple[Any, tuple] | None:
        """grpo_core.native's compiled op (bitwise this class's step) and its weight arguments, when it
        is built and covers the layer (on the CPU: plain RMSNorms, a SiLU-gated MLP), else None."""
        attn = layer.self_attn
        norms = [_plain_rms_norm(m) for m in (layer.input_layernorm, layer.post_attention_layernorm)]
        qk_norms = ([_plain_rms_norm(attn.q_norm), _plain_rms_norm(attn.k_norm)] if self.q_norm is not None
                    else [(None, 0.0)] * 2)
        act = getattr(layer.mlp, "act_fn", None)
        silu = is_silu(act)
        covered = (None not in norms + qk_norms and norms[0][1] == norms[1][1] and qk_norms[0][1] == qk_norms[1][1]
                   and self.gate_up is not None and self.down is not None and silu and self.head_dim % 2 == 0
                   and attn.q_proj.weight.device.type == "cpu")
        if not covered or (op := native.decode_layer_op()) is None:
            return None
        # (op, its weight arguments), not a closure over self: that cycle would keep the layer's weight
        # snapshot and caches alive after the rollout until the garbage collector ran
        return op, (norms[0][0], norms[1][0], norms[0][1], *self.qkv.tensors(), *self.o_proj.tensors(),
                    *self.gate_up.tensors(), *self.down.tensors(), qk_norms[0][0], qk_norms[1][0], qk_norms[0][1])

    def cast(self, h: torch.Tensor) -> torch.Tensor:
        return h if self.dtype is None else h.to(self.dtype)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        if self.gate_up is None:
            return self.layer.mlp(h)
        gate, up = self.gate_up(self.cast(h)).chunk(2, -1)
        return self.down(self.layer.mlp.act_fn(gate) * up)

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                 start: int) -> torch.Tensor:
        b, t, d = x.size(0), x.size(1), self.head_dim
        if self.keys is None:
            self.keys = x.new_zeros(b, self.heads[1], self.length, d, dtype=torch.float32)  # (B, KV, L, D)
            self.values = x.new_zeros(b, self.heads[1], self.length, d, dtype=torch.float32)
        if self.native is not None:
            op, weights = self.native
            return op(x, *weights, cos, sin, self.keys, self.values, mask, start, *self.heads, self.scaling, self.dtype)
        qkv = self.qkv(self.cast(self.norm1(x)))                                       # (B, T, (H+2KV)*D)
        qk = qkv[..., :sum(self.heads) * d].view(b, t, -1, d)                          # (B, T, H+KV, D)
        v = qkv[..., sum(self.heads) * d:].view(b, t, -1, d).transpose(1, 2)           # (B, KV, T, D)
        if self.q_norm is not None:
            q, k = qk.split(self.heads, 2)
            qk = torch.cat([self.q_norm(q), self.k_norm(k)], 2)
        qk = qk.transpose(1, 2).to(cos.dtype)                                          # (B, H+KV, T, D)
        q, k = (qk * cos + self.rotate_half(qk) * sin).split(self.heads, 1)            # HF's rotation
        end = start + t
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        # Attention in float32: its shapes change at every step, and the CPU's bf16 matmuls compile
        # and keep a kernel per shape; its cost is small next to the projections'.
        out = attention(q.float(), self.keys[:, :, :end], self.values[:, :, :end], mask, self.scaling)
        x = x + self.o_proj(self.cast(out.transpose(1, 2).reshape(b, t, -1)))
        return x + self.mlp(self.norm2(x))


@torch.inference_mode()
def sample(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int,
           eos_ids: torch.Tensor, pad_id: int, do_sample: bool, temperature: float = 1.0, top_k: int = 0,
           top_p: float = 1.0) -> torch.Tensor:
    """Completion ids (B, C <= max_new_tokens) after left-padded prompts; pad after each row's first EOS."""
    model = inner_model(model)  # under LoRA: the LM with its adapter layers, decoded with merged weights
    body, head = model.model, model.get_output_embeddings()
    p = prompt_ids.size(1)
    dtype = _matmul_dtype(prompt_ids.device)
    with torch.autocast(prompt_ids.device.type, enabled=False):  # casts are explicit, see _Layer
        rows = prompt_ids.size(0)  # what the weights are laid out for: the decode steps' batch
        return _sample(body, [_Layer(layer, p + max_new_tokens, dtype, rows) for layer in body.layers],
                       _Projection(head, dtype=dtype, rows=rows), dtype, prompt_ids, prompt_mask, max_new_tokens, eos_ids, pad_id,
                       do_sample, temperature, top_k, top_p)


def _sample(body: Any, layers: list[_Layer], head_proj: _Projection, dtype: torch.dtype | None,
            prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int, eos_ids: torch.Tensor,
            pad_id: int, do_sample: bool, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    b, p = prompt_ids.shape
    length = p + max_new_tokens
    valid = torch.zeros(b, length, dtype=torch.bool, device=prompt_ids.device)  # keys each row may attend to
    valid[:, :p] = prompt_mask.bool()
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)                       # (B, P), as generate() does
    causal = torch.ones(p, p, dtype=torch.bool, device=prompt_ids.device).tril()
    # Pad queries attend to themselves too, so no attention row is empty (NaN); nothing attends to them.
    mask = (causal[None] & valid[:, None, :p]) | torch.eye(p, dtype=torch.bool, device=prompt_ids.device)[None]
    x, start = body.embed_tokens(prompt_ids), 0
    out = torch.full((b, max_new_tokens), pad_id, dtype=torch.long, device=prompt_ids.device)
    finished = torch.zeros(b, dtype=torch.bool, device=prompt_ids.device)
    rows = torch.arange(b, device=prompt_ids.device)  # (A,) the rows still decoding: x, caches, masks hold these
    last = positions[:, -1:]
    for step in range(max_new_tokens):
        attend = mask[:, None]
        cos, sin = (t[:, None] for t in body.rotary_emb(x, positions))                # (A, 1, T, D)
        for layer in layers:
            x = layer(x, cos, sin, attend, start)
        h = body.norm(x[:, -1])
        scores = head_proj(h if dtype is None else h.to(dtype)).float()               # (A, V)
        if do_sample:
            probs = _filter_logits(scores, temperature, top_k, top_p).softmax(-1)
            if rows.numel() < b:
                # One draw per row of the whole batch, as generate() makes them: a row's draw depends on
                # its own probabilities and the generator's position only, so seeded runs stay the same.
                probs = probs.new_zeros(b, probs.size(1)).index_fill_(1, rows.new_zeros(1), 1.0).index_copy_(0, rows, probs)
            token = torch.multinomial(probs, 1).squeeze(1)[rows]
        else:
            token = scores.argmax(-1)
        token = torch.where(finished[rows], pad_id, token)
        out[rows, step] = token
        finished[rows] |= torch.isin(token, eos_ids)
        if bool(finished.all()):
            return out[:, :step + 1]
        start += x.size(1)
        keep = (~finished[rows]).nonzero().squeeze(1)
        if keep.numel() * 4 <= rows.numel() * 3:  # a quarter finished: drop them from the caches (a copy)
            rows, token, valid, last = rows[keep], token[keep], valid[keep], last[keep]
            for layer in layers:
                layer.keys, layer.values = layer.keys[keep], layer.values[keep]
        valid[:, start] = True
        mask = valid[:, None, :start + 1]                                          # (A, 1, L)
        last = last + 1
        positions = last
        x = body.embed_tokens(token[:, None])
    return out
