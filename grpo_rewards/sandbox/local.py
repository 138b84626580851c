"""The local layered sandbox: a process pool (see `grpo_rewards/procpool`) whose workers isolate
themselves and fork one child per execution (see executor.py), behind `SandboxBackend`.

The pool's zygote is a fresh `python -I` interpreter (posix_spawn/vfork: the training process is
never copied) with an empty environment that never imports the project. Each worker enforces its
runs' wall clock itself; the pool steps in only `BACKSTOP_S` later, in case a worker stops
answering (`infra`: scorers map it to None, never to 0). A worker that dies mid-run is replaced
and the job runs again on its replacement; dying twice on the same program is that program's
doing (`error`).
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.procpool import TaskResult, WorkerPool
from grpo_rewards.sandbox.base import ExecResult, Job, Limits, SandboxBackend
from grpo_rewards.scorer import ParamsModel

log = logging.getLogger(__name__)

SANDBOX_DIR = str(Path(__file__).resolve().parent)
STARTUP_TIMEOUT_S = 60.0
# The worker enforces each run's wall clock itself; the pool only steps in this much later.
BACKSTOP_S = 10.0
# Jobs sent ahead to each worker: the next one is already in its socket when a run ends.
PIPELINE = 2

# What each layer protects; what it means when missing is the same sentence negated.
LAYERS = {
    "zygote": "programs are forked from a small separate process, never from the caller",
    "uid": "programs run as a fresh non-root uid: process limits bind and nothing of root's is writable",
    "user_namespace": "as non-root: gives the worker the right to create the other namespaces",
    "drop_caps": "as non-root in a user namespace: programs hold no capabilities in it",
    "net_namespace": "no network at all (not even 127.0.0.1); the worker's own IPC and UTS namespaces",
    "mount_namespace": "mounts below are private to the sandbox",
    "private_tmp": "/tmp, /var/tmp and /dev/shm are empty tmpfs, capped in size and file count: the host's temp "
                   "files are unseen",
    "hidden_home": "directories the sandbox uid cannot enter (root's home) are replaced by empty ones",
    "pid_namespace": "each run is its own PID namespace: killing its init kills daemons and forks too",
    "rlimits": "address space, CPU seconds, processes, file size, open files, no core dumps (hard limits)",
    "pdeathsig": "a program dies with its worker even if every other kill misses it",
    "no_new_privs": "setuid binaries cannot raise privileges",
    "landlock": "filesystem: read only system/Python paths, write only the run's dir; TCP and signals out denied",
    "seccomp": "no namespaces, mounts, ptrace, eBPF, keyrings, perf, userfaultfd, io_uring, modules, IPC objects, "
               "file watches, or sockets but internet ones",
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


class LocalSandboxParams(ParamsModel):
    workers: int | None = Field(None, ge=1, le=256, description="Worker processes, each running one program "
                                "at a time; null: min(4, CPU count).")
    scratch_mb: int = Field(128, ge=8, le=65536, description="Size of each worker's private /tmp tmpfs, MB.")
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
    lazy_jobs = True

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.size = self.params.workers or max(1, min(4, os.cpu_count() or 1))
        self.scratch_mb = self.params.scratch_mb
        self.require = tuple(self.params.require)
        self._pool = _executor_pool(self.size, self.scratch_mb)
        self._report: dict | None = None  # the first worker's ("layers",) answer
        self._lock = threading.Lock()
        self._warned = False

    # ---- public ---------------------------------------------------------------------------

    def layers(self) -> dict[str, str]:
        """Layer name -> "" when active on this host, else why not. Starts the pool if needed."""
        report = self._layer_report()
        if report is None:
            return {"zygote": "no zygote process could be started"}
        return {"zygote": "", **report["layers"]}

    @property
    def pids(self) -> list[int]:
        """The workers' pids (each one's runs are its children)."""
        return self._pool.pids

    @property
    def uids(self) -> list[int]:
        """The uids the runs get (running as root), one per worker slot."""
        return [u for u in self._pool.program.worker_args["uids"] if u is not None]

    @property
    def restarts(self) -> int:
        return self._pool.restarts

    def start(self) -> None:
        self._pool.start()

    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        return self.run_many([Job(code, stdin or "", limits or Limits())])[0]

    def run_many(self, jobs: Iterable[Job]) -> list[ExecResult]:
        """Runs `jobs` `workers` at a time; a lazy iterable is taken a job at a time as workers
        have room, so making the next jobs overlaps the runs of the earlier ones."""
        jobs, taken = iter(jobs), []  # on a pool failure: those taken, then the rest, each gets its answer
        early = []  # made while the pool boots (see `start`), rather than after it
        while self._pool.booting and (job := next(jobs, None)) is not None:
            early.append(job)
        jobs = itertools.chain(early, jobs)
        try:
            report = self._layer_report()
            if report is None:
                return [ExecResult("infra", detail="no sandbox worker could be started") for _ in jobs]
            missing = [n for n in self.require if report["layers"].get(n, "missing") != ""]
            if missing:
                detail = f"required sandbox layer(s) not active: {', '.join(missing)}"
                return [ExecResult("infra", detail=detail) for _ in jobs]
            return self._run_twice_at_most(jobs, taken)
        except (OSError, RuntimeError) as exc:  # e.g. no process could be spawned: the host, not the programs
            return [ExecResult("infra", detail=f"sandbox pool: {exc}") for _ in [*taken, *jobs]]

    def close(self) -> None:
        self._pool.close()

    # ---- through the pool -----------------------------------------------------------------

    def _run_twice_at_most(self, jobs: Iterable[Job], taken: list[Job]) -> list[ExecResult]:
        """A worker that dies mid-run is not attributable yet: the job runs again on a fresh one.
        `taken` collects the jobs as the pool takes them."""

        def chunks(todo: Iterable[Job]):
            for job in todo:
                yield [("run", {"code": job.code, "stdin": job.stdin, "limits": dict(vars(job.limits)),
                                "peer": job.peer, "peer_input": job.peer_input})]

        def limit(chunk: list[tuple]) -> float:
            return chunk[0][1]["limits"]["wall_s"] + BACKSTOP_S

        def taking():
            for job in jobs:
                taken.append(job)
                yield job

        outcomes = [outcome for [outcome] in self._pool.map(chunks(taking()), limit)]
        retry = [i for i, outcome in enumerate(outcomes) if outcome.status == "died"]
        if retry:
            for i, [outcome] in zip(retry, self._pool.map(chunks(taken[i] for i in retry), limit), strict=True):
                outcomes[i] = outcome
        return [_exec_result(outcome) for outcome in outcomes]

    def _layer_report(self) -> dict | None:
        with self._lock:
            if self._report is None:
                [[outcome]] = self._pool.map([[("layers",)]], STARTUP_TIMEOUT_S)
                if outcome.status == "ok":
                    self._report = outcome.value
                    self._warn_missing(outcome.value["layers"])
            return self._report

    def _warn_missing(self, layers: dict[str, str]) -> None:
        missing = {n: why for n, why in layers.items() if why and not why.startswith("n/a")}
        if missing and not self._warned:
            self._warned = True
            log.warning("sandbox layers missing on this host (see `grpo-rewards sandbox-check`): %s",
                        "; ".join(f"{n}: {why}" for n, why in missing.items()))


def _executor_pool(size: int, scratch_mb: int) -> WorkerPool:
    # One random non-root uid per worker slot (kept by its replacement, which first kills whatever
    # still runs under it): RLIMIT_NPROC counts per uid, so runs in different slots (or different
    # pools on one host) never share a process budget.
    base = 1_000_000 + secrets.randbelow(1 << 30)
    uids = [base + i if os.geteuid() == 0 else None for i in range(size)]
    return WorkerPool("executor:run_task", size, memory_mb=None, init="executor:preload",
                      startup_timeout_s=STARTUP_TIMEOUT_S, pipeline=PIPELINE, start_allowance_s=STARTUP_TIMEOUT_S,
                      worker_init="executor:start", after="executor:cleanup", path=(SANDBOX_DIR,),
                      worker_args={"uids": uids, "scratch_mb": scratch_mb, "read_paths": default_read_paths()},
                      isolated=True, interrupt=False, worker_session=True)


def _exec_result(outcome: TaskResult) -> ExecResult:
    if outcome.status == "ok":
        return ExecResult(**outcome.value)
    detail = {
        "died": "the sandbox worker died twice running this program",
        "timeout": "the sandbox worker stopped answering",
        "unavailable": f"no sandbox worker could run this program: {outcome.detail}",
    }.get(outcome.status, f"sandbox worker: {outcome.status} {outcome.detail}".strip())
    return ExecResult("error" if outcome.status == "died" else "infra", detail=detail)


@hookimpl
def grpo_rewards_sandboxes():
    return [LocalSandbox]
