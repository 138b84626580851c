"""Where a run executes: the device, the process group under torchrun, autocast, and heap hygiene.

Device `auto` picks cuda > mps > cpu. Under torchrun (WORLD_SIZE > 1) each rank joins a process
group (NCCL on CUDA, gloo otherwise) and uses cuda:LOCAL_RANK when on CUDA.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import sys
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

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:  # (b, ...) -> (world * b, ...), rank order
        if self.world_size == 1:
            return t
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts)

    def gather_columns(self, columns: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each named float column (b,) or (b, k) of every rank, (world * b, ...), in one collective."""
        widths = {name: 1 if t.dim() == 1 else t.size(1) for name, t in columns.items()}
        packed = self.gather_rows(torch.cat([t.float().reshape(t.size(0), -1) for t in columns.values()], 1))
        parts = packed.split(list(widths.values()), 1)
        return {name: part.squeeze(1) if columns[name].dim() == 1 else part for name, part in zip(widths, parts)}

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(t)
        return t

    def sum_over_ranks(self, values: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Each named tensor summed over ranks, as floats (lists for vectors): one collective, one sync."""
        flat = self.all_sum(torch.cat([v.float().reshape(-1) for v in values.values()])).tolist()
        out, start = {}, 0
        for name, value in values.items():
            part, start = flat[start:start + value.numel()], start + value.numel()
            out[name] = part if value.dim() else part[0]
        return out

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t


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
        atexit.register(close_process_group)
    if bf16 is None:  # auto: only where bf16 is native and fast
        bf16 = dev.type == "cuda" and torch.cuda.is_bf16_supported()
    return Runtime(dev, rank, world_size, torch.bfloat16 if bf16 else None)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache
def _glibc() -> Any:
    """The C library when it is glibc 2.33+ (`malloc_trim`, `mallinfo2`); None elsewhere (musl, macOS)."""
    if sys.platform != "linux":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim  # noqa: B018 - raises AttributeError where it is missing
    except (OSError, AttributeError):
        return None
    return libc


def release_free_heap(device: torch.device, min_free_mib: int = 32) -> bool:
    """Return the pages of freed CPU tensors to the system when at least `min_free_mib` MiB of the
    heap are free; True when it did.

    Why: glibc keeps freed heap pages resident. The tensors of a small model (under glibc's
    32 MiB mmap ceiling) live in the heap, and those freed earlier in a step leave holes that the
    backward pass's gradients do not fit into, so it grows the heap while much of it sits free.
    A trim once after each forward pass lowers a step's peak for a few percent of step time; below
    the threshold the saving is not worth that (figures: docs/benchmarks.md, "grpo_core's measured
    choices"). Freed CUDA memory is torch's caching allocator's, not glibc's, and is left alone.
    """
    libc = _glibc() if device.type == "cpu" else None
    if libc is None or libc.mallinfo2().fordblks < min_free_mib << 20:
        return False
    libc.malloc_trim(0)
    return True


def close_process_group() -> None:
    """Leave the process group cleanly (idempotent; registered at exit by `setup_runtime`).

    The barrier first: gloo's worker thread frees a finished collective's tensors later, and needs
    the GIL for it; destroying the group while holding the GIL joins that thread and can deadlock
    (seen: a rank hung forever at exit after its last all_gather). Waiting in a barrier releases the
    GIL until every rank is there.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
