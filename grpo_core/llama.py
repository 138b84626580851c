"""A compact Llama-family causal LM (Llama, Qwen2, Qwen3) that reads and writes Hugging Face checkpoints.

Why hand-written: importing transformers' modeling code pulls in torch._dynamo and sympy, a large
share of a small run's memory and start-up, and its forward builds masks and output wrappers on
every call (figures: docs/benchmarks.md, "grpo_core's measured choices"). This module keeps HF's module tree,
parameter names and numerics (tests/test_llama.py compares logits and gradients with
transformers' own classes), so checkpoints move both ways, `save_pretrained` writes a directory
transformers loads, and grpo_core.decode runs on it unchanged. Anything it does not cover
(other rope types, sliding windows, other activations, LoRA through peft) loads with transformers;
`native_unsupported` says why.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from torch.utils.checkpoint import checkpoint

MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
# What config.json must state (transformers writes them all for these model types); missing: transformers loads it.
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "rms_norm_eps", "tie_word_embeddings")
OPTIONAL = {"num_key_value_heads": None, "head_dim": None, "attention_bias": False, "mlp_bias": False,
            "attention_dropout": 0.0, "hidden_act": "silu", "initializer_range": 0.02, "pad_token_id": None,
            "bos_token_id": None, "eos_token_id": None, "use_sliding_window": False, "layer_types": None,
            "pretraining_tp": 1, "rope_parameters": None, "rope_scaling": None, "rope_theta": 10000.0,
            "use_cache": True}


class Config(SimpleNamespace):
    """A checkpoint's config.json as attributes, written back unchanged (plus `architectures`).

    Why not transformers' config classes: importing `LlamaConfig` pulls in its rope utilities and
    with them accelerate and sympy, much memory for a dict.
    """

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        config = cls(**{**OPTIONAL, **values})
        config._saved = dict(values)
        if config.num_key_value_heads is None:
            config.num_key_value_heads = config.num_attention_heads
        return config

    def to_dict(self) -> dict[str, Any]:
        return {**self._saved, **{k: v for k, v in vars(self).items() if k in self._saved or k == "architectures"}}

    def save_pretrained(self, directory: str | Path) -> None:
        (Path(directory) / "config.json").write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


def read_config(directory: str | Path) -> Config:
    """The config of a checkpoint directory this module can run; ValueError saying why it cannot."""
    try:
        values = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"no readable config.json ({exc})") from None
    if values.get("model_type") not in MODEL_TYPES:
        raise ValueError(f"model_type {values.get('model_type')!r} is not one of {sorted(MODEL_TYPES)}")
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise ValueError(f"config.json does not state {missing}")
    config = Config.from_dict(values)
    reason = native_unsupported(config)
    if reason:
        raise ValueError(reason)
    return config


def native_unsupported(config: Any) -> str | None:
    """Why this module cannot stand in for the HF model of `config`; None when it can."""
    if config.model_type not in MODEL_TYPES:
        return f"model_type {config.model_type!r} is not one of {sorted(MODEL_TYPES)}"
    rope = _rope(config)
    if rope.get("rope_type", "default") != "default":
        return f"rope_type {rope.get('rope_type')!r}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r}"
    if getattr(config, "use_sliding_window", False):
        return "sliding-window attention"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "layer types other than full attention"
    return None


def _rope(config: Any) -> dict[str, Any]:
    rope = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    rope.setdefault("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    return rope


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF's rotation layout (halves, not interleaved pairs); grpo_core.decode finds it by this name."""
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k: (B, heads, T, D); cos, sin: (B, T, D)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
              dropout: float = 0.0) -> torch.Tensor:
    """Softmax attention: q (B, heads, T, D), k and v (B, kv_heads, S, D), boolean mask broadcastable
    to (B, heads, T, S) -> (B, heads, T, D).

    On the CPU in reduced precision (bf16 autocast) this is the explicit form, softmax in float32
    (transformers' `eager` attention): torch's CPU flash kernel in bf16 is several times slower
    at these small shapes. Elsewhere SDPA, which is as fast or faster.
    """
    low_precision = q.dtype != torch.float32 or torch.is_autocast_enabled(q.device.type)
    if q.device.type != "cpu" or not low_precision:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale,
                                              enable_gqa=q.size(1) != k.size(1))
    device = q.device.type
    if q.size(1) != k.size(1):  # before autocast's cast, as autocast would (the heads' gradients sum in float32)
        k, v = (t.repeat_interleave(q.size(1) // k.size(1), dim=1) for t in (k, v))
    if torch.is_autocast_enabled(device):  # the casts autocast would make in the products, made once
        dtype = torch.get_autocast_dtype(device)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    with torch.autocast(device, enabled=False):
        if dropout == 0.0 and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
            return _RecomputedAttention.apply(q, k, v, mask, scale)
        return _explicit_attention(q, k, v, mask, scale, dropout)


def _explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
                        dropout: float = 0.0) -> torch.Tensor:
    """transformers' `eager` attention over as many k/v heads as q heads."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale                                  # (B, heads, T, S)
    probs = scores.float().masked_fill(~mask, -float("inf")).softmax(-1).to(v.dtype)
    if dropout:
        probs = F.dropout(probs, dropout)
    return torch.matmul(probs, v)


class _RecomputedAttention(torch.autograd.Function):
    """`_explicit_attention` without dropout or grouped heads, saving q, k, v and the mask only.

    Autograd would also keep the attention probabilities twice, in float32 for the softmax and in
    v's dtype for the second product. As FlashAttention does,
    the backward recomputes them with the forward's ops and then runs, op by op, what autograd
    runs for `_explicit_attention`, so the gradients are bitwise autograd's (tests/test_llama.py).
    Written out rather than differentiated again with autograd: a nested backward per layer is slower.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                scale: float) -> torch.Tensor:
        ctx.save_for_backward(q, k, v, mask)
        ctx.scale = scale
        return _explicit_attention(q, k, v, mask, scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, mask = ctx.saved_tensors
        b, h, t, d = q.shape
        flat = lambda x: x.reshape(b * h, x.size(-2), x.size(-1))  # noqa: E731 - (B*heads, rows, cols)
        q3, k3, v3, grad3 = flat(q), flat(k), flat(v), flat(grad)
        scores = torch.bmm(q3, k3.transpose(1, 2)).view(b, h, t, -1) * ctx.scale           # (B, heads, T, S)
        probs32 = scores.float().masked_fill(~mask, -float("inf")).softmax(-1)
        probs3 = flat(probs32.to(v.dtype))
        grad_v = probs3.transpose(1, 2).bmm(grad3).view(v.shape)
        grad_probs = grad3.bmm(v3.transpose(1, 2)).view(b, h, t, -1).float()
        grad_scores = torch._softmax_backward_data(grad_probs, probs32, -1, torch.float32)
        grad_scores = flat(grad_scores.masked_fill(~mask, 0).to(q.dtype) * ctx.scale)      # (B*heads, T, S)
        grad_q = grad_scores.bmm(k3).view(q.shape)
        grad_k = q3.transpose(1, 2).bmm(grad_scores).transpose(1, 2).reshape(k.shape)
        return grad_q, grad_k, grad_v, None, None


def cast_for_matmuls(x: torch.Tensor) -> torch.Tensor:
    """`x` in the autocast dtype, when autocast is on: several projections of one input then share
    one cast (and one saved copy for backward) instead of autocast making one per projection."""
    device = x.device.type
    if torch.is_autocast_enabled(device) and x.dtype == torch.float32:
        return x.to(torch.get_autocast_dtype(device))
    return x


def _linear_in(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """F.linear with the weight (and bias) cast to `dtype`, as autocast's linear runs it."""
    return F.linear(x, weight.to(dtype), None if bias is None else bias.to(dtype))


def _linear_in_grads(grad: torch.Tensor, x: torch.Tensor | None, weight: torch.Tensor, ctx: Any,
                     needs: tuple[bool, bool, bool]) -> tuple[torch.Tensor | None, ...]:
    """The gradients of `_linear_in(x, weight, bias, ctx.dtype)` (input, weight, bias; None where not
    needed), formed as autocast's linear forms them; `x` is read only for the weight's."""
    rows = grad.reshape(-1, grad.size(-1))                                               # (N, out)
    grad_x = grad.matmul(weight.to(ctx.dtype)) if needs[0] else None
    grad_w = rows.t().mm(x.reshape(-1, x.size(-1))).to(weight.dtype) if needs[1] else None
    grad_b = rows.sum(0).to(ctx.bias_dtype) if ctx.bias_dtype is not None and needs[2] else None
    return grad_x, grad_w, grad_b


class LowPrecisionLinear(torch.autograd.Function):
    """F.linear in `dtype` that keeps the float32 weight for backward and casts it again there
    (and the input only when the weight trains).

    Autocast's own linear saves its low-precision copy of every weight until the backward: half
    the model's size in extra memory. The ops, forward and backward, are the ones autocast runs.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
        x = x.to(dtype)
        ctx.save_for_backward(x if weight.requires_grad else None, weight)  # x: only for the weight's gradient
        ctx.dtype, ctx.bias_dtype = dtype, None if bias is None else bias.dtype
        return _linear_in(x, weight, bias, dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        return (*_linear_in_grads(grad, x, weight, ctx, ctx.needs_input_grad[:3]), None)


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) whose trainable weights, under autocast, are not
    kept in a second, low-precision copy for the backward (see `LowPrecisionLinear`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device) and self.weight.requires_grad and torch.is_grad_enabled():
            with torch.autocast(device, enabled=False):
                return LowPrecisionLinear.apply(x, self.weight, self.bias, torch.get_autocast_dtype(device))
        return super().forward(x)


class SwiGLUDown(torch.autograd.Function):
    """`down(silu(gate) * up)` with down's weight in `dtype` (autocast's, or its own), saving only gate,
    up and down's float32 weight.

    Autograd would also keep silu(gate), the product (down's input) and, under autocast, down's
    low-precision weight: two more (B, T, intermediate) tensors and a weight copy per layer.
    The backward recomputes silu(gate) and the product with the
    forward's ops (bitwise the same) and runs the ops autograd would, so the gradients are
    autograd's (tests/test_llama.py).
    """

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
        ctx.save_for_backward(gate, up, weight)
        ctx.dtype, ctx.bias_dtype = dtype, None if bias is None else bias.dtype
        return _linear_in((F.silu(gate) * up).to(dtype), weight, bias, dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        silu = F.silu(gate)
        product = (silu * up).to(ctx.dtype) if needs[2] else None                           # (B, T, I)
        grad_product, grad_w, grad_b = _linear_in_grads(grad, product, weight, ctx, (True, needs[2], needs[3]))
        grad_product = grad_product.to(gate.dtype)
        grad_gate = torch.ops.aten.silu_backward(grad_product * up, gate) if needs[0] else None
        grad_up = grad_product * silu if needs[1] else None
        return grad_gate, grad_up, grad_w, grad_b, None


class SwiGLU(torch.autograd.Function):
    """`silu(gate) * up`, saving gate and up only (autograd would keep silu(gate) too), for an MLP
    whose down projection is not ours to fuse (a LoRA layer, see grpo_core.lora). The backward
    recomputes silu(gate) with the forward's op and runs autograd's ops: bitwise its gradients."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = ctx.saved_tensors
        return torch.ops.aten.silu_backward(grad * up, gate), grad * F.silu(gate)


def is_silu(act: Any) -> bool:
    """Whether an MLP's activation (transformers' or torch's) is SiLU."""
    return act is F.silu or type(act).__name__ in ("SiLU", "SiLUActivation")


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> torch.Tensor:
        # Always on the CPU (moved with the module): on the meta device this arithmetic imports torch._dynamo.
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device="cpu").float() / self.head_dim
        return 1.0 / self.theta ** exponents

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(x.device.type, enabled=False):  # angles in float32, as HF
            freqs = position_ids[:, :, None].float() * self.inv_freq.float()[None, None, :]  # (B, T, D/2)
            angles = torch.cat((freqs, freqs), -1)                                             # (B, T, D)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * F.rms_norm(x.float(), weight.shape, None, eps).to(x.dtype)


class _RecomputedRMSNorm(torch.autograd.Function):
    """`_rms_norm` of a float32 input, saving the input and its (N, 1) reciprocal RMS only.

    Autograd would also keep the normalised input for the weight's gradient, one (B, T, H) float32
    tensor per norm. The forward is
    the steps F.rms_norm takes on the CPU; the backward recomputes the normalised input and runs
    what autograd runs for those steps, so values and gradients are bitwise autograd's
    (tests/test_llama.py).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)                          # (..., 1)
        ctx.save_for_backward(x, weight, rstd)
        return weight * (x * rstd)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, rstd = ctx.saved_tensors
        grad_weight = (grad * (x * rstd)).sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        grad_normed = grad * weight
        grad_rstd = (grad_normed * x).sum_to_size(rstd.shape)
        grad_mean = -0.5 * grad_rstd * rstd.pow(3)                                          # rsqrt's
        grad_square = grad_mean.expand_as(x) / x.size(-1)                                  # mean's
        grad_x = grad_normed * rstd + grad_square * (2.0 * x)                              # the product's, pow's
        return grad_x, grad_weight, None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.dtype == self.weight.dtype == torch.float32 and (
                x.requires_grad or self.weight.requires_grad):
            return _RecomputedRMSNorm.apply(x, self.weight, self.variance_epsilon)
        return _rms_norm(x, self.weight, self.variance_epsilon)


class Attention(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = getattr(config, "attention_dropout", 0.0)
        qkv_bias = config.model_type == "qwen2" or getattr(config, "attention_bias", False)
        o_bias = config.model_type != "qwen2" and getattr(config, "attention_bias", False)
        self.q_proj = Linear(config.hidden_size, heads * self.head_dim, bias=qkv_bias)
        self.k_proj = Linear(config.hidden_size, kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = Linear(config.hidden_size, kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = Linear(heads * self.head_dim, config.hidden_size, bias=o_bias)
        if config.model_type == "qwen3":  # RMSNorm over each head's q and k
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        shape = (b, t, -1, self.head_dim)
        x = cast_for_matmuls(x)
        q, k, v = self.q_proj(x).view(shape), self.k_proj(x).view(shape), self.v_proj(x).view(shape)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)     # (B, heads, T, D)
        out = attention(q, k, v.transpose(1, 2), mask, self.scaling, self.dropout if self.training else 0.0)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        bias = getattr(config, "mlp_bias", False)
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.act_fn = F.silu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = cast_for_matmuls(x)
        gate, up = self.gate_proj(x), self.up_proj(x)
        down = self.down_proj
        if torch.is_grad_enabled() and type(down) is Linear and (gate.requires_grad or down.weight.requires_grad):
            device = x.device.type
            dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else down.weight.dtype
            with torch.autocast(device, enabled=False):  # the casts autocast would make are explicit
                return SwiGLUDown.apply(gate, up, down.weight, down.bias, dtype)
        return down(F.silu(gate) * up)  # no grad, or a down projection wrapped by peft (LoRA)


class DecoderLayer(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.self_attn, self.mlp = Attention(config), MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """HF's `LlamaModel`: embeddings, decoder layers, final norm; (B, T) ids -> (B, T, H) hidden states."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        # Given an empty weight (filled by init_weights or a checkpoint), and the pad row (which, as in
        # HF, gets no gradient) set afterwards: on the meta device nn.Embedding's own initialisation
        # imports torch._dynamo and sympy.
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                         _weight=torch.empty(config.vocab_size, config.hidden_size))
        self.embed_tokens.padding_idx = config.pad_token_id
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.rotary_emb = RotaryEmbedding(head_dim, _rope(config)["rope_theta"])
        self.gradient_checkpointing = False

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, use_cache: bool = False) -> SimpleNamespace:
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()
        eye = torch.eye(t, dtype=torch.bool, device=input_ids.device)
        # Causal over real keys; a pad query also sees itself, so no row is empty (a NaN would reach
        # the weight gradients through 0 * NaN even though pad positions never enter the loss).
        mask = ((causal[None] & attention_mask.bool()[:, None, :]) | eye[None])[:, None]   # (B, 1, T, T)
        x = self.embed_tokens(input_ids)                                                   # (B, T, H)
        cos, sin = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
            else:
                x = layer(x, cos, sin, mask)
        return SimpleNamespace(last_hidden_state=self.norm(x))


class CausalLM(nn.Module):
    """HF's `LlamaForCausalLM` / `Qwen2ForCausalLM` / `Qwen3ForCausalLM` as far as training needs it."""

    base_model_prefix = "model"

    def __init__(self, config: Any, generation_config: Any = None) -> None:
        super().__init__()
        self.config = config
        self.generation_config = generation_config or SimpleNamespace(
            eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, bos_token_id=config.bos_token_id)
        self.model = Body(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def architecture(self) -> str:
        return MODEL_TYPES[self.config.model_type]

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        self.model.gradient_checkpointing = True  # always non-reentrant

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, logits_to_keep: int = 0, **_: Any) -> SimpleNamespace:
        hidden = self.model(input_ids, attention_mask, position_ids).last_hidden_state    # (B, T, H)
        return SimpleNamespace(logits=self.lm_head(hidden[:, -logits_to_keep:]))        # (B, T', V)

    def init_weights(self) -> None:
        """HF's initialisation: normal(0, initializer_range) for linear and embedding weights, in
        module order; zero biases and the padding row; norms at one."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.weight.data.normal_(0.0, std)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(0.0, std)
                if module.padding_idx is not None:
                    module.weight.data[module.padding_idx].zero_()
            elif isinstance(module, RMSNorm):
                module.weight.data.fill_(1.0)
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def save_pretrained(self, directory: str | Path, **_: Any) -> None:
        """config.json, generation_config.json and model.safetensors, as transformers writes them."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.config.architectures = [self.architecture]
        self.config.save_pretrained(directory)
        generation = {k: v for k, v in vars(self.generation_config).items() if not k.startswith("_")} \
            if isinstance(self.generation_config, SimpleNamespace) else self.generation_config.to_diff_dict()
        (directory / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)  # tied: transformers re-ties it on load
        save_file(state, directory / "model.safetensors", metadata={"format": "pt"})


def from_config(config: Any, dtype: torch.dtype = torch.float32) -> CausalLM:
    """A freshly initialised model (the caller seeds torch)."""
    model = CausalLM(config)
    model.init_weights()
    return model.to(dtype)


def from_pretrained(directory: str | Path, config: Any, dtype: torch.dtype = torch.float32) -> CausalLM:
    """The model saved in `directory` (every `model*.safetensors` shard), in `dtype`."""
    directory = Path(directory)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(directory.glob("model*.safetensors")):
        state.update(load_file(shard))
    if not state:
        raise ValueError(f"{directory}: no model*.safetensors")
    with torch.device("meta"):
        model = CausalLM(config, _generation_config(directory, config))
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"{directory}: weights do not fit a {config.model_type} model "
                         f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(dtype)


def _generation_config(directory: Path, config: Any) -> SimpleNamespace:
    """The checkpoint's generation_config.json (EOS ids may differ from config.json's)."""
    path = directory / "generation_config.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    defaults = {"eos_token_id": config.eos_token_id, "pad_token_id": config.pad_token_id,
                "bos_token_id": config.bos_token_id}
    return SimpleNamespace(**(defaults | saved))
