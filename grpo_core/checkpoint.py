"""Checkpoints: written to a temporary directory, then renamed, so a crash never leaves half of one.

`checkpoint-<step>/` holds the model and tokenizer (`save_pretrained`; with LoRA the adapter alone,
`adapter_model.safetensors`, a few MB: resume rebuilds the base from `model.name_or_path` and
loads the adapter into it), `trainer_state.pt`
(optimizer, scheduler, step, data position, the pending rollout when `num_iterations > 1`, the
logging window) and `rank<r>.pt` per rank (its RNG states: python, numpy, torch, cuda; and its
share of a pending rollout).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from grpo_core.metrics import METRICS_FILE
from grpo_rewards.errors import UserError
from grpo_rewards.fileio import write_atomic

PATTERN = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.pt"
COMPLETE_FILE = "complete.json"  # written when a run reaches its last step
ADAPTER_FILE = "adapter_model.safetensors"  # what peft's save_pretrained writes


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoints(output_dir: str | Path) -> list[Path]:
    """Finished checkpoints, oldest first."""
    root = Path(output_dir)
    found = [(int(m.group(1)), p) for p in root.glob("checkpoint-*") if (m := PATTERN.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def mark_complete(output_dir: Path, step: int) -> None:
    """Record that the run in `output_dir` finished at `step`, so `--resume` knows there is nothing to do."""
    write_atomic(Path(output_dir) / COMPLETE_FILE, json.dumps({"step": step}) + "\n")


def completed_step(output_dir: Path) -> int | None:
    """The step a finished run in `output_dir` ended at; None while unfinished (or never run)."""
    try:
        return int(json.loads((Path(output_dir) / COMPLETE_FILE).read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prepare_output_dir(output_dir: Path, resume: bool, overwrite: bool, is_main: bool) -> Path | None:
    """The checkpoint to resume from, if any; refuses to mix a fresh run into an old one."""
    found = checkpoints(output_dir)
    if resume:
        done = completed_step(output_dir)
        if not found and done is not None:
            raise UserError(f"the run in {output_dir} finished at step {done} without checkpoints (save_steps: 0), "
                            "so it cannot continue; set save_steps to train runs you may extend")
        return found[-1] if found else None
    if found and not overwrite:
        raise UserError(f"{output_dir} already has checkpoints ({found[-1].name}); pass --resume to continue "
                        "that run, or set overwrite_output_dir: true to start afresh")
    if is_main:
        for old in found:
            shutil.rmtree(old, ignore_errors=True)
        (output_dir / METRICS_FILE).unlink(missing_ok=True)
        (output_dir / COMPLETE_FILE).unlink(missing_ok=True)
    return None


def _barrier(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()


def save_checkpoint(output_dir: str | Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    rank_state: dict[str, Any], rank: int = 0, world_size: int = 1, keep: int | None = None) -> Path:
    """Every rank calls this (each writes its RNG and `rank_state`); rank 0 writes the rest and renames."""
    final = Path(output_dir) / f"checkpoint-{step}"
    # Not fileio.atomic_directory: every rank writes into the temporary directory, so its name must
    # be known to all of them without a broadcast (atomic_directory's is random, one process's).
    tmp = Path(output_dir) / f".tmp-checkpoint-{step}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier(world_size)
    torch.save({**rank_state, "rng": rng_state()}, tmp / f"rank{rank}.pt")
    _barrier(world_size)  # every rank's file is in before rank 0 renames the directory
    if rank == 0:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save(state, tmp / STATE_FILE)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in checkpoints(output_dir)[:-keep] if keep else []:
            shutil.rmtree(old, ignore_errors=True)
    _barrier(world_size)
    return final


def load_adapter_weights(model: torch.nn.Module, directory: Path) -> None:
    """Load a checkpoint's adapter into `model`, a peft model whose base is already built."""
    from peft import PeftModel, set_peft_model_state_dict  # optional and heavy: only with LoRA

    if not isinstance(model, PeftModel):
        raise UserError(f"{directory}: holds a LoRA adapter, but the configured model has no `lora:` section")
    try:
        result = set_peft_model_state_dict(model, load_file(directory / ADAPTER_FILE, device="cpu"))
    except RuntimeError as exc:  # size mismatch: another rank or other target modules
        raise UserError(f"{directory}: the adapter does not fit the configured `lora:` section ({exc})") from None
    missing = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or missing:
        raise UserError(f"{directory}: the adapter does not fit the configured `lora:` section "
                        f"(missing {missing[:5]}, unexpected {result.unexpected_keys[:5]})")


def load_weights(model: torch.nn.Module, directory: Path) -> None:
    """Load `model.safetensors` into `model`; keys left out because they are tied to saved ones are fine.
    A LoRA checkpoint (the adapter alone) loads into the adapter of `model`, a peft model."""
    if (directory / ADAPTER_FILE).is_file():
        return load_adapter_weights(model, directory)
    files = sorted(directory.glob("model*.safetensors"))
    if not files:
        raise UserError(f"{directory}: no model weights (model.safetensors)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f, device="cpu"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tensors = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    loaded = {id(tensors[k]) for k in state if k in tensors}
    untied = [k for k in missing if id(tensors.get(k)) not in loaded]
    if unexpected or untied:
        raise UserError(f"{directory}: weights do not fit the configured model "
                        f"(missing {untied[:5]}, unexpected {unexpected[:5]})")


def load_checkpoint(directory: Path, model: torch.nn.Module, rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore weights and this rank's RNG; returns (trainer state, this rank's state) for the caller."""
    load_weights(model, directory)
    rank_file = directory / f"rank{rank}.pt"
    if not rank_file.exists():
        raise UserError(f"{directory}: no state for rank {rank} (was it written with another world size?)")
    rank_state = torch.load(rank_file, weights_only=False)
    set_rng_state(rank_state.pop("rng"))
    legacy_tokens = rank_state.pop("dapo_tokens", None)  # older checkpoints kept it beside the rollout
    if legacy_tokens is not None and rank_state.get("rollout") is not None:
        rank_state["rollout"]["loss_tokens"] = legacy_tokens
    return torch.load(directory / STATE_FILE, weights_only=False), rank_state
