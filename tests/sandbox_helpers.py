"""Shared pieces of the sandbox tests: a pool with conservative limits and a leftover-process check."""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

from grpo_rewards.sandbox.base import Limits
from grpo_rewards.sandbox.local import SANDBOX_DIR, LocalSandbox

# Conservative on purpose: a bomb that escaped one of these would still be small.
SAFE = Limits(wall_s=3.0, memory_mb=256, processes=8, output_bytes=1 << 16, file_size_mb=4, open_files=32)
IS_ROOT = os.geteuid() == 0


def _peers_ahead() -> int:
    """executor.PEERS_AHEAD, read from its source: executor.py runs in the sandbox's zygote beside
    sibling modules (layers, runner, zygote) that the tests' process does not import."""
    tree = ast.parse(Path(SANDBOX_DIR, "executor.py").read_text(encoding="utf-8"))
    return next(ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PEERS_AHEAD")


PEERS_AHEAD = _peers_ahead()


def sandbox_uids(sandbox: LocalSandbox) -> set[int]:
    return set(sandbox.uids)


def _status(pid: str) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except OSError:
        return {}


def processes_of(uids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, command, parent pid) of every live (non-zombie) process whose real uid is in `uids`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = _status(entry)
        uid = int(fields.get("Uid", "-1").split()[0])
        if uid in uids and not fields.get("State", "").strip().startswith("Z"):
            found.append((int(entry), fields.get("Name", "").strip(), int(fields.get("PPid", "0"))))
    return found


def left_over(sandbox: LocalSandbox) -> list[tuple[int, str, int]]:
    """Processes of the sandbox uids that no run should have left: all of them but, per worker,
    the programs' processes its seed (a child of the worker) made ahead for the next jobs
    (executor.PEERS_AHEAD) and the one tests' process (a child of the worker) that runs job
    after job with a peer."""
    seeds = {int(e) for e in filter(str.isdigit, os.listdir("/proc"))
             if int(_status(e).get("PPid", "0")) in sandbox.pids}
    found = processes_of(sandbox_uids(sandbox))
    kept = []
    for parents, per_worker in ((seeds, PEERS_AHEAD), (set(sandbox.pids), 1)):
        these = [p for p in found if p[2] in parents]
        kept += these if len(these) <= len(sandbox.pids) * per_worker else []
    return [p for p in found if p not in kept]


def assert_nothing_left(sandbox: LocalSandbox, wait_s: float = 3.0) -> None:
    """No process of the sandbox uids survives the run (a short wait for the kernel's teardown)."""
    assert sandbox_uids(sandbox) or not IS_ROOT
    deadline = time.monotonic() + wait_s
    while left_over(sandbox) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left_over(sandbox) == []


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
