"""Tokenizer and model loading (local, hub, aliases; LoRA) and the frozen reference copy."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
import transformers  # a lazy module: the Auto classes load their mappings only when a run uses them
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from grpo_core import llama
from grpo_core.data import get_tokenizer_factory
from grpo_core.hub import resolve_model
from grpo_core.lora import apply_lora_settings, enable_gradient_checkpointing
from grpo_core.runtime import DTYPES
from grpo_rewards.errors import UserError


def load_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    if name.startswith("builtin:"):
        tokenizer = get_tokenizer_factory(name.removeprefix("builtin:"))()
    else:
        try:
            tokenizer = _generic_tokenizer(name) or _auto_tokenizer(name, trust_remote_code)
        except OSError as exc:
            raise UserError(f"model.tokenizer: cannot load {name!r}: {exc}") from None
    if tokenizer.eos_token_id is None:
        raise UserError(f"tokenizer {name!r} has no eos_token: completions could never end")
    if tokenizer.pad_token_id is None:  # pad may equal EOS: the completion mask comes from the first EOS
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


_GENERIC_TOKENIZERS = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def _generic_tokenizer(name: str) -> Any:
    """A directory whose tokenizer is transformers' generic `tokenizer.json` class, loaded through that class.

    It is the class AutoTokenizer picks for it; going through AutoTokenizer's mappings also imports
    accelerate and sympy, a large share of a small run's memory. None for anything else.
    """
    config = Path(name) / "tokenizer_config.json"
    if not (config.is_file() and (Path(name) / "tokenizer.json").is_file()):
        return None
    try:
        tokenizer_class = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        return None
    if tokenizer_class not in _GENERIC_TOKENIZERS:
        return None
    return TokenizersBackend.from_pretrained(name)


def _auto_tokenizer(name: str, trust_remote_code: bool) -> Any:
    return transformers.AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)


def model_source(model_cfg: Any) -> str | None:
    """The local directory `model.name_or_path` names (alias, .gguf file or hub id resolved through
    grpo_core.hub; a clear UserError when it is unavailable offline), or None for a config-built model."""
    if model_cfg.name_or_path is None:
        return None
    return str(resolve_model(model_cfg.name_or_path))


def config_from_kwargs(model_cfg: Any, tokenizer: Any) -> Any:
    """The HF config of a model built from `model.config` kwargs, with the tokenizer's vocabulary size
    and special ids."""
    kwargs = dict(model_cfg.config)
    kwargs.setdefault("vocab_size", len(tokenizer))
    for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
        if getattr(tokenizer, key, None) is not None:
            kwargs.setdefault(key, getattr(tokenizer, key))
    return transformers.AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)


def build_model(model_cfg: Any, tokenizer: Any, source: str | None = None, lora: Any = None,
                native: bool = True) -> torch.nn.Module:
    """The policy, from a checkpoint directory (`source`, see `model_source`) or built from HF config
    kwargs (seeded by the caller); wrapped in a LoRA adapter when `lora` settings are given.

    grpo_core.llama's module runs it where it can (`model.implementation`, and `native`), else
    transformers' class: LoRA (peft wraps transformers' classes), remote code, other architectures.
    """
    dtype = DTYPES[model_cfg.dtype]
    if model_cfg.name_or_path is not None:
        source = source or model_source(model_cfg)
    blocked = ("model.implementation is transformers" if model_cfg.implementation == "transformers" else
               "LoRA (peft wraps transformers' classes)" if lora is not None else
               "trust_remote_code" if model_cfg.trust_remote_code else
               "generation_backend is hf" if not native else None)
    model, reason = None, blocked
    if source is not None:
        if not blocked:
            try:
                model = llama.from_pretrained(source, llama.read_config(source), dtype)
            except ValueError as exc:
                reason = str(exc)
        if model is None:
            model = _transformers_model(model_cfg, source, dtype, reason)
    else:
        config = config_from_kwargs(model_cfg, tokenizer)
        reason = blocked or llama.native_unsupported(config)
        if reason is None:
            model = llama.from_config(llama.Config.from_dict(config.to_dict()), dtype)
        else:
            _check_implementation(model_cfg, reason)
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    if model.get_input_embeddings().num_embeddings < len(tokenizer):
        raise UserError(f"the model's vocabulary ({model.get_input_embeddings().num_embeddings}) is smaller than "
                        f"the tokenizer's ({len(tokenizer)})")
    if lora is not None:
        model = apply_lora_settings(model, lora)
    if model_cfg.gradient_checkpointing:
        # Also marks the embeddings' output as requiring grad when they are frozen (LoRA).
        enable_gradient_checkpointing(model)  # generate() still uses a KV cache; training forwards do not
    return model


def _check_implementation(model_cfg: Any, reason: str) -> None:
    if model_cfg.implementation == "grpo_core":
        raise UserError(f"model.implementation: grpo_core cannot run this model: {reason}")


def _transformers_model(model_cfg: Any, source: str, dtype: torch.dtype, reason: str | None) -> torch.nn.Module:
    _check_implementation(model_cfg, reason or "")
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=model_cfg.trust_remote_code)
    except OSError as exc:
        raise UserError(f"model.name_or_path: cannot load {model_cfg.name_or_path!r}: {exc}") from None


def _frozen(param: torch.Tensor, dtype: torch.dtype) -> torch.nn.Parameter:
    return torch.nn.Parameter(param.detach().to(dtype), requires_grad=False)


def frozen_copy(model: torch.nn.Module, matmul_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The reference policy of full fine-tuning: a frozen copy of the initial weights (only when beta > 0;
    with LoRA the reference is the policy itself with its adapter disabled, see grpo_core.lora).

    `matmul_dtype` (the autocast dtype): linear weights are stored in it. Autocast would cast them
    to it on every forward anyway (it caches casts only of weights that require grad), so the
    log-probs are the same and the copy costs half the memory; norms and embeddings, which
    autocast leaves in float32, stay float32.
    """
    memo: dict[int, Any] = {}  # low-precision copies handed to deepcopy: float32 originals are never copied
    tied_heads = []
    if matmul_dtype is not None:
        embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            if id(module.weight) in embeddings:
                tied_heads.append(name)  # its own copy below; the embeddings stay float32
            else:
                memo[id(module.weight)] = _frozen(module.weight, matmul_dtype)
            if module.bias is not None:
                memo[id(module.bias)] = _frozen(module.bias, matmul_dtype)
    ref = copy.deepcopy(model, memo).eval()
    ref.requires_grad_(False)
    for name in tied_heads:
        head = ref.get_submodule(name)
        head.weight = _frozen(head.weight, matmul_dtype)
    return ref
