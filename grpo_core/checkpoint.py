"""Checkpoints: written to a temporary directory, then renamed, so a crash never leaves half of one.

`checkpoint-<step>/` holds the model and tokenizer (`save_pretrained`), `trainer_state.pt`
(optimizer, scheduler, step, data position, the pending rollout when `num_iterations > 1`, the
logging window) and `rank<r>.pt` per rank (its RNG states: python, numpy, torch, cuda; and its
share of a pending rollout).
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from grpo_rewards.errors import UserError

PATTERN = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.pt"


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


def _barrier(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()


def save_checkpoint(output_dir: str | Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    rank_state: dict[str, Any], rank: int = 0, world_size: int = 1, keep: int | None = None) -> Path:
    """Every rank calls this (each writes its RNG and `rank_state`); rank 0 writes the rest and renames."""
    final = Path(output_dir) / f"checkpoint-{step}"
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


def load_weights(model: torch.nn.Module, directory: Path) -> None:
    """Load `model.safetensors` into `model`; keys left out because they are tied to saved ones are fine."""
    from safetensors.torch import load_file

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
    return torch.load(directory / STATE_FILE, weights_only=False), rank_state
