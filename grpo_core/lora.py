"""LoRA adapters (through `peft`), the adapter-disabled reference model, checkpointing and saving.

With LoRA the frozen base weights *are* the reference model of GRPO's KL term: the reference
forward runs the same module with the adapter switched off (`reference_mode`), so no second copy
of the weights is ever loaded. The final model is either the adapter alone (a few MB; needs the
base to load) or the merged model (a plain checkpoint any tool loads): `merge_on_save` (in a
training config also `save: adapter | merged`). Checkpoints always hold the adapter alone.
"""

from __future__ import annotations

import copy
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from grpo_core.hub import save_model_dir
from grpo_core.llama import LowPrecisionLinear, SwiGLU, is_silu
from grpo_rewards.fileio import atomic_directory


class LoraSettings(BaseModel):
    """The `lora:` section of a training config; absent means full fine-tuning."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(16, ge=1, le=1024, description="Rank of the low-rank update matrices.")
    alpha: float = Field(32.0, gt=0, le=1e4, description="Scaling numerator: the update is scaled by alpha / r.")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the adapter's input during training.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="Module names to adapt (e.g. [q_proj, v_proj]), or 'all-linear' for every linear "
        "layer except the output head.",
    )
    merge_on_save: bool = Field(
        True,
        description="The final model (`output_dir/final`): true merges the adapter into the base weights (a "
        "plain model directory), false saves the adapter alone (a few MB; load it onto the base). A training "
        "config may say `save: merged` or `save: adapter` instead (give one of the two). Checkpoints "
        "(`checkpoint-N`) hold the adapter alone either way; resume rebuilds the base from the model source.",
    )


def apply_lora(
    model: Any,
    r: int = 16,
    alpha: float = 32.0,
    dropout: float = 0.05,
    target_modules: list[str] | str = "all-linear",
) -> Any:
    """Wrap `model` in a peft LoRA model: base weights frozen, only the adapter trains."""
    # peft is an optional extra and heavy to import: only where LoRA is used, here and below
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        bias="none",
    )
    model = get_peft_model(model, config)
    for layer in _adapter_layers(model):
        if _lean_eligible(layer):
            layer.forward = types.MethodType(_lean_forward, layer)
    for mlp in model.modules():
        if all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj")) and is_silu(getattr(mlp, "act_fn", None)):
            mlp.forward = types.MethodType(_lean_mlp_forward, mlp)
    return model


def _lean_eligible(layer: Any) -> bool:
    from peft.tuners.lora import Linear  # only with LoRA (see apply_lora)

    return type(layer) is Linear and not layer.lora_variant and not any(layer.lora_bias.values()) \
        and not layer.fan_in_fan_out


class _SharedCast(torch.autograd.Function):
    """One consumer's view of `cast` (x in the autocast dtype, made once): the consumers share its
    storage, while each one's gradient reaches x in x's dtype, summed there as with autocast's
    own per-consumer casts (not in bf16 at a shared node)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cast: torch.Tensor) -> torch.Tensor:
        ctx.dtype = x.dtype
        return cast.view_as(cast)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.to(ctx.dtype), None


def _autocast_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` in `dtype`, cast once per tensor: q, k and v (gate and up) read the same input, and
    autocast would keep one copy of it per projection for the adapter's backward."""
    if x.dtype == dtype:
        return x  # autocast makes no copy either
    cached = getattr(x, "_grpo_autocast", None)
    if cached is None or cached[0] != x._version or cached[1].dtype != dtype:
        with torch.no_grad():
            cached = (x._version, x.to(dtype))
        x._grpo_autocast = cached  # lives as long as x, which the graph does not keep
    return _SharedCast.apply(x, cached[1])


def _lean_forward(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """A plain LoRA layer's training forward under autocast, as peft computes it (the base product,
    plus scale * B(A(dropout(x))) per active adapter, in the autocast dtype) but holding less for the
    backward: the frozen weight instead of its cast copy (grpo_core.llama's `LowPrecisionLinear`),
    one cast input shared by the projections that read it (where there is no dropout). Anything else goes through peft's own forward."""
    device = x.device.type
    base = self.get_base_layer()
    if (args or kwargs or self.disable_adapters or self.merged or self.lora_variant or not torch.is_grad_enabled()
            or not torch.is_autocast_enabled(device) or base.weight.requires_grad):
        return type(self).forward(self, x, *args, **kwargs)
    dtype = torch.get_autocast_dtype(device)
    # The frozen weight kept, not autocast's copy (the input it saves is the adapter's own)
    result = LowPrecisionLinear.apply(_autocast_input(x, dtype), base.weight, base.bias, dtype)
    for name in self.active_adapters:
        if name not in self.lora_A.keys():
            continue
        dropout = self.lora_dropout[name]
        # peft: dropout before the cast
        inner = _autocast_input(x, dtype) if isinstance(dropout, torch.nn.Identity) else dropout(x)
        result = result + self.lora_B[name](self.lora_A[name](inner)) * self.scaling[name]
    return result


def _lean_mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """A gated MLP's forward, `down(silu(gate(x)) * up(x))`, keeping gate and up but not silu(gate)
    for the backward (grpo_core.llama's `SwiGLU`: bitwise the same values and gradients)."""
    if not torch.is_grad_enabled():
        return type(self).forward(self, x)
    return self.down_proj(SwiGLU.apply(self.gate_proj(x), self.up_proj(x)))


def apply_lora_settings(model: Any, settings: LoraSettings) -> Any:
    """`apply_lora` from a config section."""
    return apply_lora(model, settings.r, settings.alpha, settings.dropout, settings.target_modules)


def _unwrap(model: Any) -> Any:
    """The module inside a DistributedDataParallel wrapper (or the model itself)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.module
    return model


def _adapter_layers(model: Any) -> list[Any]:
    """The LoRA-injected layers inside `model` (also when it wraps `peft_model.get_base_model()`)."""
    from peft.tuners.tuners_utils import BaseTunerLayer  # only with LoRA (see apply_lora)

    return [m for m in _unwrap(model).modules() if isinstance(m, BaseTunerLayer)]


def has_adapter(model: Any) -> bool:
    """True when `model` is, or wraps, a LoRA model: its reference is the base, adapter disabled."""
    if "peft" not in sys.modules:  # nothing can hold an adapter, and importing peft is heavy
        return False
    from peft import PeftModel  # only with LoRA (see apply_lora)

    return isinstance(_unwrap(model), PeftModel) or bool(_adapter_layers(model))


def inner_model(model: Any) -> Any:
    """The causal LM a peft model wraps (its LoRA layers injected), or `model` itself."""
    inner = _unwrap(model)
    return inner.get_base_model() if hasattr(inner, "get_base_model") and has_adapter(inner) else inner


def mergeable(model: Any) -> bool:
    """Whether every adapter layer in `model` is plain LoRA on a linear layer, so its inference weight is
    W + scale * B @ A (`linear_weights`): no DoRA or other variant, no LoRA bias, no adapted embedding."""
    from peft.tuners.lora import Linear  # only with LoRA (see apply_lora)

    return all(type(layer) is Linear and not layer.lora_variant and not any(layer.lora_bias.values())
               and not layer.fan_in_fan_out for layer in _adapter_layers(model))


def linear_weights(linear: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) that a linear layer applies at inference. For a LoRA layer (`mergeable`), the base
    weight plus each active adapter's scale * B @ A, as peft's merge computes it (dropout is off at
    inference), in a new tensor: the layer itself is left as it is."""
    base = getattr(linear, "base_layer", None)
    if base is None:
        return linear.weight, linear.bias
    weight = base.weight
    if not (linear.disable_adapters or linear.merged):  # merged: the base weight already holds the update
        for name in linear.active_adapters:
            if name in linear.lora_A.keys():
                weight = weight + linear.get_delta_weight(name).to(weight.dtype)
    return weight, base.bias


@contextmanager
def reference_mode(model: Any) -> Iterator[Any]:
    """Run forwards inside this block as the frozen base model: adapter disabled, no autograd.

    `model` is the peft model, or any module wrapping its layers (DDP, a log-prob wrapper around
    `peft_model.get_base_model()`). Yields the unwrapped module; call it inside the block:

        with reference_mode(policy) as ref:
            ref_logps = ref(prompt_ids, prompt_mask, completion_ids, completion_mask)
    """
    from peft import PeftModel  # only with LoRA (see apply_lora)

    inner = _unwrap(model)
    if isinstance(inner, PeftModel):
        with inner.disable_adapter(), torch.no_grad():
            yield inner
        return
    layers = [layer for layer in _adapter_layers(inner) if not layer.disable_adapters]
    if not layers and not _adapter_layers(inner):
        raise ValueError("reference_mode needs a LoRA (peft) model; full fine-tuning needs a reference copy")
    # Without the PeftModel at hand, switch the layers themselves, as its disable_adapter() does.
    for layer in layers:
        layer.enable_adapters(False)
    try:
        with torch.no_grad():
            yield inner
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute activations in the backward instead of storing them (less memory, ~30% more compute).

    Non-reentrant checkpointing; with frozen input embeddings (LoRA) their output is marked as
    requiring grad, or the checkpointed blocks would see no input needing gradients.
    """
    base = _unwrap(model)
    base = base.get_base_model() if has_adapter(base) else base
    if hasattr(base, "activation_checkpointing_enable"):
        # transformers >= 5: handles the input-grad hook itself (also for peft models).
        base.activation_checkpointing_enable({"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if not base.get_input_embeddings().weight.requires_grad:
            base.enable_input_require_grads()
    base.config.use_cache = False  # a KV cache is useless (and warned about) while checkpointing


def trainable_parameters(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    params = list(_unwrap(model).parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def save_model(model: Any, tokenizer: Any, directory: str | Path, merged: bool = True) -> Path:
    """Save to `directory` atomically: the merged model, or (`merged=False`) the adapter alone.

    Merging works on a copy, so the training model keeps its adapter. A model without an adapter
    is saved whole either way (there is nothing to merge, and no adapter to save alone).
    """
    inner = _unwrap(model)
    directory = Path(directory)
    with atomic_directory(directory) as tmp:
        if has_adapter(inner) and merged:
            # deepcopy costs one model's memory for a moment; merging in place would change the
            # weights under a training model, and merge/unmerge round trips drift in float.
            plain = copy.deepcopy(inner).merge_and_unload()
            save_model_dir(plain, tokenizer, tmp)
            del plain
        else:
            save_model_dir(inner, tokenizer, tmp)
    return directory


def load_adapter(base_model: Any, adapter_dir: str | Path, trainable: bool = False) -> Any:
    """The base model with the adapter saved in `adapter_dir` (by `save_model(..., merged=False)`)."""
    from peft import PeftModel  # only with LoRA (see apply_lora)

    return PeftModel.from_pretrained(base_model, str(adapter_dir), is_trainable=trainable)


def is_adapter_dir(directory: str | Path) -> bool:
    """True when `directory` holds an adapter alone (it needs its base model to load)."""
    return (Path(directory) / "adapter_config.json").is_file()
