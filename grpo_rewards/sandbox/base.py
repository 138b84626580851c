"""The sandbox backend contract (`grpo_rewards_sandboxes` hook).

A backend runs one untrusted program and reports what happened. It never raises for anything
the program does; a failure of the backend itself is `status="infra"`, which scorers map to
`None` (an infrastructure failure must not teach the model that its code was wrong).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from grpo_rewards.scorer import NoParams, first_doc_line, validate_params

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "infra"]


@dataclass(frozen=True)
class Limits:
    wall_s: float = 5.0          # wall-clock limit, enforced by killing the process group
    cpu_s: float | None = None   # RLIMIT_CPU; defaults to wall_s rounded up
    memory_mb: int = 512         # RLIMIT_AS
    output_bytes: int = 1 << 20  # stdout and stderr are each cut here (status output_limit)
    file_size_mb: int = 16       # RLIMIT_FSIZE
    processes: int = 16          # RLIMIT_NPROC, threads included (binds only a non-root uid); a run's
                                 # worst-case memory is processes x memory_mb (AS is per process),
                                 # in the local sandbox (processes + 4) x memory_mb for a run with a
                                 # peer: its limit also counts the peers made ahead, which may have ended
    open_files: int = 64         # RLIMIT_NOFILE


@dataclass(frozen=True)
class ExecResult:
    status: Status
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    seconds: float = 0.0
    detail: str = ""  # why, for infra/memory/timeout

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Job:
    """One run: `code` (a Python program) with `stdin`, under `limits`.

    `peer`: a second Python program, run in a process of its own beside `code`'s, under the same
    limits and isolation, that shares nothing with it (no memory, no descriptors, no ancestor
    that held `code` or `stdin`) but a connected socket, fd 3 in both. The run is `code`'s: its
    stdout, stderr and exit make the result; the peer's output is discarded, and it ends with the
    run. `peer_input`: what the peer reads first on its socket, sent on `code`'s behalf before
    `code` starts (so the peer can work on it while `code`'s process starts). The peer's
    statements before its last only define (functions, classes, imports, constants; or warm the
    code up, leaving nothing behind) and its last starts it: a backend may run the definitions
    once for many peers. So does `code` of a job with a peer: a backend may run its definitions
    once for many jobs in one process, putting the module's globals back after each, so a job
    keeps its state in globals it binds, never in objects the definitions made (a class's
    attributes, a module-level dict)."""

    code: str
    stdin: str = ""
    limits: Limits = field(default_factory=Limits)
    peer: str = ""
    peer_input: bytes = b""


# How a backend without its own support runs a job with a peer: the job's program starts the
# peer as a fresh interpreter (`python -I`: it holds nothing of the job's process) on one end of
# a socket pair, sends the peer its input, then runs the job's code with the other end as fd 3.
_PEER_BOOT = "import os, sys; fd = int(sys.argv[2]); fd == 3 or (os.dup2(fd, 3), os.close(fd)); exec(sys.argv[1])"
_LAUNCH = """\
import os, socket, subprocess, sys
_mine, _theirs = socket.socketpair()
subprocess.Popen([sys.executable, "-I", "-c", {boot!r}, {peer!r}, str(_theirs.fileno())],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 pass_fds=(_theirs.fileno(),))
_mine.sendall({peer_input!r})
_fd = _mine.detach()
_theirs.close()
_fd == 3 or (os.dup2(_fd, 3), os.close(_fd))
exec(compile({code!r}, "main.py", "exec"))
"""


def launcher(job: Job) -> str:
    """One program that runs `job` (with its peer) in any Python sandbox that can start processes."""
    return _LAUNCH.format(boot=_PEER_BOOT, peer=job.peer, peer_input=job.peer_input, code=job.code) \
        if job.peer else job.code


class SandboxBackend(ABC):
    """One way of running untrusted code: the local layered sandbox, a remote service, ...

    Subclasses set `name` (the registry name, `sandbox: NAME` in a `code_tests` spec) and, when
    the backend has options, `Params`: a pydantic model validated like a scorer's (in the spec,
    with errors at `scorers[i].params.sandbox.params.FIELD`), shown by `grpo-rewards list` and
    `schema` and in the docs tables. The constructor takes the validated `Params` instance (or a
    mapping, or keyword arguments) and should stay cheap: start workers or connections on first use.
    """

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    # Whether `run_many` takes its jobs lazily (a generator it consumes as it goes); otherwise
    # callers hand it a list.
    lazy_jobs: ClassVar[bool] = False

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.params = validate_params(self.Params, params, kwargs)

    @classmethod
    def description(cls) -> str:
        return first_doc_line(cls)

    @abstractmethod
    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        """Run `code` (a Python program) with `stdin`; never raises for the program's behaviour."""

    def run_many(self, jobs: Sequence[Job] | Iterable[Job]) -> list[ExecResult]:
        """Run several jobs, one result each, in order; backends with a worker pool override this
        to run them in parallel. A list, unless the backend sets `lazy_jobs`: then any iterable,
        whose later jobs may still be made while the first ones run."""
        return [self.run(launcher(j), j.stdin, j.limits) for j in jobs]

    def start(self) -> None:
        """Begin starting workers or connections in the background; returns at once. Optional:
        `run_many` starts whatever is not started."""

    def close(self) -> None:
        """Stop worker processes or connections. Safe to call twice."""
