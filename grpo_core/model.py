"""Devices, process groups, tokenizer and model loading (local, hub, aliases; LoRA), the frozen reference.

Device `auto` picks cuda > mps > cpu. Under torchrun (WORLD_SIZE > 1) each rank joins a process
group (NCCL on CUDA, gloo otherwise) and uses cuda:LOCAL_RANK when on CUDA.
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from grpo_rewards.errors import UserError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    rank: int
    world_size: int
    autocast_dtype: torch.dtype | None  # None: no autocast

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError("device: cuda requested but no CUDA device is available")
        return torch.device("cuda", local_rank)
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("device: mps requested but MPS is not available")
    return torch.device(name)


def setup_runtime(device: str, bf16: bool | None, threads: int | None = None) -> Runtime:
    """Pick the device, join the process group under torchrun, decide on autocast."""
    if threads is not None:
        torch.set_num_threads(threads)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = True
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    if bf16 is None:  # auto: only where bf16 is native and fast
        bf16 = dev.type == "cuda" and torch.cuda.is_bf16_supported()
    return Runtime(dev, rank, world_size, torch.bfloat16 if bf16 else None)


def load_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    if name.startswith("builtin:"):
        from grpo_core.data import get_tokenizer_factory

        tokenizer = get_tokenizer_factory(name.removeprefix("builtin:"))()
    else:
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
        except OSError as exc:
            raise UserError(f"model.tokenizer: cannot load {name!r}: {exc}") from None
    if tokenizer.eos_token_id is None:
        raise UserError(f"tokenizer {name!r} has no eos_token: completions could never end")
    if tokenizer.pad_token_id is None:  # pad may equal EOS: the completion mask comes from the first EOS
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def model_source(model_cfg: Any) -> str | None:
    """The local directory `model.name_or_path` names (alias, .gguf file or hub id resolved through
    grpo_core.hub; a clear UserError when it is unavailable offline), or None for a config-built model."""
    if model_cfg.name_or_path is None:
        return None
    from grpo_core.hub import resolve_model

    return str(resolve_model(model_cfg.name_or_path))


def build_model(model_cfg: Any, tokenizer: Any, source: str | None = None, lora: Any = None) -> torch.nn.Module:
    """The policy, from a checkpoint directory (`source`, see `model_source`) or built from HF config
    kwargs (seeded by the caller); wrapped in a LoRA adapter when `lora` settings are given."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = DTYPES[model_cfg.dtype]
    if model_cfg.name_or_path is not None:
        source = source or model_source(model_cfg)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=dtype, trust_remote_code=model_cfg.trust_remote_code)
        except OSError as exc:
            raise UserError(f"model.name_or_path: cannot load {model_cfg.name_or_path!r}: {exc}") from None
    else:
        kwargs = dict(model_cfg.config)
        kwargs.setdefault("vocab_size", len(tokenizer))
        for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
            if getattr(tokenizer, key, None) is not None:
                kwargs.setdefault(key, getattr(tokenizer, key))
        config = AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if model.get_input_embeddings().num_embeddings < len(tokenizer):
        raise UserError(f"the model's vocabulary ({model.get_input_embeddings().num_embeddings}) is smaller than "
                        f"the tokenizer's ({len(tokenizer)})")
    if lora is not None:
        from grpo_core.lora import apply_lora_settings

        model = apply_lora_settings(model, lora)
    if model_cfg.gradient_checkpointing:
        from grpo_core.lora import enable_gradient_checkpointing

        # Also marks the embeddings' output as requiring grad when they are frozen (LoRA).
        enable_gradient_checkpointing(model)  # generate() still uses a KV cache; training forwards do not
    return model


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The reference policy of full fine-tuning: a frozen copy of the initial weights (only when beta > 0;
    with LoRA the reference is the policy itself with its adapter disabled, see grpo_core.lora)."""
    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref
