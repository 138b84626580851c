"""The local layered sandbox: a pool of zygote processes (see zygote.py) behind `SandboxBackend`.

Each zygote is a fresh `python -I zygote.py` started with `subprocess` (posix_spawn/vfork: the
training process is never copied) and an empty environment; it forks one child per execution.
This side hands jobs to idle zygotes, enforces a backstop deadline in case a zygote itself
stops answering, and replaces any zygote that dies. A zygote that dies mid-run gets the job
again on its replacement; dying twice on the same program is that program's doing (`error`),
a zygote that stops answering is `infra` (scorers map it to None, never to 0).
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.sandbox.base import ExecResult, Job, Limits, SandboxBackend

log = logging.getLogger(__name__)

ZYGOTE_PATH = str(Path(__file__).with_name("zygote.py"))
STARTUP_TIMEOUT_S = 60.0
# The zygote enforces each run's wall clock itself; this side only steps in this much later.
BACKSTOP_S = 10.0

# What each layer protects; what it means when missing is the same sentence negated.
LAYERS = {
    "zygote": "programs are forked from a small separate process, never from the caller",
    "uid": "programs run as a fresh non-root uid: process limits bind and nothing of root's is writable",
    "user_namespace": "as non-root: gives the zygote the right to create the other namespaces",
    "drop_caps": "as non-root in a user namespace: programs hold no capabilities in it",
    "net_namespace": "no network at all (not even 127.0.0.1), no shared IPC objects",
    "mount_namespace": "mounts below are private to the sandbox",
    "private_tmp": "/tmp, /var/tmp and /dev/shm are empty size-capped tmpfs: the host's temp files are unseen",
    "hidden_home": "directories the sandbox uid cannot enter (root's home) are replaced by empty ones",
    "pid_namespace": "each run is its own PID namespace: killing its init kills daemons and forks too",
    "rlimits": "address space, CPU seconds, processes, file size, open files, no core dumps (hard limits)",
    "pdeathsig": "a program dies with its zygote even if every other kill misses it",
    "no_new_privs": "setuid binaries cannot raise privileges",
    "landlock": "filesystem: read only system/Python paths, write only the run's dir; TCP and signals out denied",
    "seccomp": "no namespaces, mounts, ptrace, eBPF, keyrings, perf, userfaultfd, io_uring or modules",
    "probe_run": "a trivial program ran through every active layer",
}


def default_read_paths() -> list[str]:
    """System and Python installation directories a program may read (Landlock allow-list)."""
    paths = {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/localtime", "/etc/ssl/certs"}
    paths.update(p for p in sys.path if p and os.path.isdir(p) and _is_python_dir(p))
    for prefix in {sys.base_prefix, sys.base_exec_prefix}:
        paths.add(os.path.join(prefix, "lib"))
    return sorted(p for p in paths if os.path.exists(p))


def _is_python_dir(path: str) -> bool:
    name = os.path.basename(path.rstrip("/"))
    return name in ("site-packages", "dist-packages", "lib-dynload") or name.startswith("python3")


class _Zygote:
    """One zygote process, seen from the pool."""

    def __init__(self, uid: int | None, scratch_mb: int) -> None:
        to_child, from_parent = os.pipe()[::-1]  # (write end, read end)
        from_child, to_parent = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", ZYGOTE_PATH], stdin=from_parent, stdout=to_parent, stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/", close_fds=True, start_new_session=True,
        )
        os.close(from_parent)
        os.close(to_parent)
        self.requests = Connection(to_child, readable=False)
        self.replies = Connection(from_child, writable=False)
        self.uid = uid
        self.started = time.monotonic()
        self.info: dict | None = None  # the zygote's "ready" report
        self.jobs: deque[int] = deque()  # job indices sent and not answered, oldest (running) first
        self.deadline = 0.0  # backstop for the oldest
        self.requests.send({"uid": uid, "parent": os.getpid(), "scratch_mb": scratch_mb,
                            "read_paths": default_read_paths()})

    def send(self, job_id: int, job: Job) -> bool:
        try:
            self.requests.send(("run", job_id, {"code": job.code, "stdin": job.stdin, "limits": asdict(job.limits)}))
            return True
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            pass
        for conn in (self.requests, self.replies):
            conn.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class LocalSandboxParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: int | None = Field(None, ge=1, le=256, description="Zygote processes, each running one program "
                                "at a time; null: min(4, CPU count).")
    scratch_mb: int = Field(128, ge=8, le=65536, description="Size of each zygote's private /tmp tmpfs, MB.")
    require: list[str] = Field(default_factory=list, description="Layers that must be active (see `grpo-rewards "
                               "sandbox-check`); while one is missing every run is `infra`.")

    @field_validator("require")
    @classmethod
    def _known_layers(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in LAYERS]
        if unknown:
            raise ValueError(f"unknown sandbox layer(s) {unknown}; known: {', '.join(sorted(LAYERS))}")
        return names


class LocalSandbox(SandboxBackend):
    """Runs Python programs in the layered local sandbox, `workers` at a time."""

    name = "local"
    Params = LocalSandboxParams

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.size = self.params.workers or max(1, min(4, os.cpu_count() or 1))
        self.scratch_mb = self.params.scratch_mb
        self.require = tuple(self.params.require)
        # One random non-root uid per zygote slot: RLIMIT_NPROC counts per uid, so runs in
        # different slots (or different pools on one host) never share a process budget.
        base = 1_000_000 + secrets.randbelow(1 << 30)
        self._uids = [base + i if os.geteuid() == 0 else None for i in range(self.size)]
        self._zygotes: list[_Zygote] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._warned = False
        self.restarts = 0
        weakref.finalize(self, _kill_all, self._zygotes)
        atexit.register(_kill_all, self._zygotes)

    # ---- public ---------------------------------------------------------------------------

    def layers(self) -> dict[str, str]:
        """Layer name -> "" when active on this host, else why not. Starts the pool if needed."""
        with self._lock:
            self._ensure()
            self._wait_ready()
            for z in self._zygotes:
                if z.info is not None:
                    return {"zygote": "", **z.info["layers"]}
        return {"zygote": "no zygote process could be started"}

    @property
    def pids(self) -> list[int]:
        return [z.proc.pid for z in self._zygotes]

    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        return self.run_many([Job(code, stdin or "", limits or Limits())])[0]

    def run_many(self, jobs: Sequence[Job]) -> list[ExecResult]:
        with self._lock:
            try:
                self._ensure()
                return _Batch(self, list(jobs)).run()
            except OSError as exc:  # e.g. no process could be spawned: the host, not the programs
                return [ExecResult("infra", detail=f"sandbox pool: {exc}") for _ in jobs]

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                _kill_all(self._zygotes)
            self._zygotes.clear()

    # ---- pool management ------------------------------------------------------------------

    def _ensure(self) -> None:
        if self._pid != os.getpid():  # a forked child: those zygotes belong to the parent
            self._zygotes.clear()
            self._pid = os.getpid()
        alive = [z for z in self._zygotes if z.proc.poll() is None]
        for z in self._zygotes:
            if z not in alive:
                z.kill()
        self._zygotes[:] = alive
        used = {z.uid for z in alive}
        for uid in self._uids:
            if len(self._zygotes) >= self.size:
                break
            if uid is None or uid not in used:
                self._zygotes.append(_Zygote(uid, self.scratch_mb))
                used.add(uid)

    def _wait_ready(self) -> None:
        for z in self._zygotes:
            if z.info is None and z.replies.poll(max(0.0, z.started + STARTUP_TIMEOUT_S - time.monotonic())):
                self._on_message(z)

    def _on_message(self, z: _Zygote):
        """Read one message; returns it, or None when the zygote is gone."""
        try:
            msg = z.replies.recv()
        except (EOFError, OSError):
            return None
        if msg[0] == "ready":
            z.info = msg[1]
            self._check_layers(msg[1]["layers"])
        return msg

    def _check_layers(self, layers: dict[str, str]) -> None:
        missing = {n: why for n, why in layers.items() if why and not why.startswith("n/a")}
        if missing and not self._warned:
            self._warned = True
            log.warning("sandbox layers missing on this host (see `grpo-rewards sandbox-check`): %s",
                        "; ".join(f"{n}: {why}" for n, why in missing.items()))

    def _missing_required(self, z: _Zygote) -> list[str]:
        return [n for n in self.require if (z.info or {}).get("layers", {}).get(n, "missing") != ""]

    def _replace(self, z: _Zygote) -> None:
        z.kill()
        self._zygotes.remove(z)
        self.restarts += 1
        # The replacement reuses the uid and starts by killing whatever still runs under it.
        self._zygotes.append(_Zygote(z.uid, self.scratch_mb))


def _kill_all(zygotes: list[_Zygote]) -> None:
    for z in zygotes:
        z.kill()
    zygotes.clear()


class _Batch:
    """One `run_many` call: dispatch to zygotes, collect, enforce the backstop deadline.

    Each zygote holds up to PIPELINE jobs: the next one is already in its pipe when a run
    ends, so no round trip through this process sits between two runs."""

    PIPELINE = 2

    def __init__(self, pool: LocalSandbox, jobs: list[Job]) -> None:
        self.pool, self.jobs = pool, jobs
        self.results: list[ExecResult | None] = [None] * len(jobs)
        self.queue = deque(range(len(jobs)))
        self.attempts = [0] * len(jobs)
        self.failed_starts = 0

    def run(self) -> list[ExecResult]:
        while self.queue or any(z.jobs for z in self.pool._zygotes):
            self._dispatch()
            if not any(z.jobs or z.info is None for z in self.pool._zygotes):
                break  # nothing alive can take the queued jobs
            self._wait()
        for i in self.queue:
            self.results[i] = ExecResult("infra", detail="no sandbox worker could be started")
        return [r or ExecResult("infra", detail="lost") for r in self.results]

    def _dispatch(self) -> None:
        for _ in range(self.PIPELINE):
            for z in list(self.pool._zygotes):
                if not self.queue or z.info is None or len(z.jobs) >= self.PIPELINE:
                    continue
                missing = self.pool._missing_required(z)
                if missing:
                    while self.queue:
                        self.results[self.queue.popleft()] = ExecResult(
                            "infra", detail=f"required sandbox layer(s) not active: {', '.join(missing)}")
                    return
                i = self.queue.popleft()
                if not z.jobs:
                    self._start_clock(z, i)
                z.jobs.append(i)
                if not z.send(i, self.jobs[i]):
                    self._lost(z)

    def _start_clock(self, z: _Zygote, i: int) -> None:
        z.deadline = time.monotonic() + self.jobs[i].limits.wall_s + BACKSTOP_S
        self.attempts[i] += 1

    def _wait(self) -> None:
        now = time.monotonic()
        deadlines = [z.deadline if z.info else z.started + STARTUP_TIMEOUT_S for z in self.pool._zygotes
                     if z.jobs or z.info is None]
        timeout = max(0.0, min(deadlines, default=now + 1) - now)
        by_conn = {z.replies: z for z in self.pool._zygotes}
        for conn in wait(list(by_conn), timeout):
            z = by_conn[conn]
            if z not in self.pool._zygotes:
                continue
            msg = self.pool._on_message(z)
            if msg is None:
                self._lost(z)
            elif msg[0] == "result" and z.jobs and msg[1] == z.jobs[0]:
                self.results[z.jobs.popleft()] = ExecResult(**msg[2])
                if z.jobs:
                    self._start_clock(z, z.jobs[0])
        now = time.monotonic()
        for z in list(self.pool._zygotes):
            if z.jobs and now > z.deadline:
                self.results[z.jobs.popleft()] = ExecResult("infra", detail="the sandbox worker stopped answering")
                self._requeue_waiting(z)
                self.pool._replace(z)
            elif z.info is None and now > z.started + STARTUP_TIMEOUT_S:
                self._lost(z)

    def _requeue_waiting(self, z: _Zygote) -> None:
        """Jobs queued behind the running one never started: they go back to the queue as they were."""
        self.queue.extendleft(reversed(z.jobs))
        z.jobs.clear()

    def _lost(self, z: _Zygote) -> None:
        """The zygote died (or could not be written to)."""
        if z.jobs:
            i = z.jobs.popleft()
            self._requeue_waiting(z)
            if self.attempts[i] < 2:
                self.queue.appendleft(i)  # not attributable yet: run it again on a fresh zygote
            else:
                self.results[i] = ExecResult("error", detail="the sandbox worker died twice running this program")
        elif z.info is None:
            self.failed_starts += 1
            if self.failed_starts >= self.pool.size:
                z.kill()
                self.pool._zygotes.remove(z)
                return
        self.pool._replace(z)


@hookimpl
def grpo_rewards_sandboxes():
    return [LocalSandbox]
