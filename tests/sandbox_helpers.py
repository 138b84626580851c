"""Shared pieces of the sandbox tests: a pool with conservative limits and a leftover-process check."""

from __future__ import annotations

import os
import time

from grpo_rewards.sandbox.base import Limits
from grpo_rewards.sandbox.local import LocalSandbox

# Conservative on purpose: a bomb that escaped one of these would still be small.
SAFE = Limits(wall_s=3.0, memory_mb=256, processes=8, output_bytes=1 << 16, file_size_mb=4, open_files=32)
IS_ROOT = os.geteuid() == 0


def sandbox_uids(sandbox: LocalSandbox) -> set[int]:
    return set(sandbox.uids)


def processes_of(uids: set[int]) -> list[tuple[int, str]]:
    """(pid, command) of every live (non-zombie) process whose real uid is in `uids`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields.get("Uid", "-1").split()[0])
        if uid in uids and not fields.get("State", "").strip().startswith("Z"):
            found.append((int(entry), fields.get("Name", "").strip()))
    return found


def assert_nothing_left(sandbox: LocalSandbox, wait_s: float = 3.0) -> None:
    """No process of the sandbox uids survives the run (a short wait for the kernel's teardown)."""
    uids = sandbox_uids(sandbox)
    assert uids or not IS_ROOT
    deadline = time.monotonic() + wait_s
    while processes_of(uids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(uids) == []


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def zygotes_alive(sandbox: LocalSandbox) -> bool:
    """The pool's zygote and every worker (each a small process forking the runs) are running."""
    return all(running(pid) for pid in [sandbox._pool.zygote_pid, *sandbox.pids])
