"""A small pool of worker processes with a hard, killing wall-clock limit per task.

Why not `multiprocessing.Pool` or `concurrent.futures`: neither can kill one task that hangs
inside C code (a long big-integer operation, any C loop that never checks for signals) and
replace just that worker, and `multiprocessing` refuses to start children from a daemonic
process such as a PyTorch DataLoader worker.

Each pool has a zygote: a fresh interpreter started with `subprocess` (vfork/posix_spawn on
Linux: it never copies the multi-GB training process, and it imports only this package and the
task's module, never the trainer's torch), in a session of its own (a Ctrl-C aimed at the
trainer is not for it). The zygote runs the pool's `init` once (imports, warm-up), freezes its
heap, and then forks each worker on request: a worker starts warm in milliseconds, and so does
the replacement of one killed for a timeout. Between requests it runs the pool's `prime` work
(caches that make later tasks cheaper) once; forks made after that have them too, and the pool
swaps its earlier workers for such forks between batches. The pool hands the zygote one end of a
socketpair per worker and gets back the worker's pidfd (SCM_RIGHTS on the zygote's SOCK_SEQPACKET
control socket), so a kill can never hit a recycled pid. Workers talk pickled frames with the
pool over their socket and die with the zygote (parent-death signal); the zygote kills and reaps
them when the pool stops it, closes its control socket, or dies.

Use: `WorkerPool("package.module:function", size=2, memory_mb=1024)`, then
`pool.map(chunks, timeout_s)` where a chunk is a list of picklable tasks that one worker runs in
order (so per-chunk state such as a parsed gold answer is reused). Each task gets a `TaskResult`.
A task past `timeout_s` is first interrupted inside the worker (a Python-level exception, cheap);
if it does not stop within a grace period the worker is killed and replaced (the pool keeps its
size). The tasks of a chunk behind one whose worker was killed or died come back as `not_run`:
the caller decides whether to resubmit them. `map` is thread-safe (one batch at a time) and works from any thread.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_rewards.sandbox import layers, runner

_HEADER = struct.Struct("!I")
# The worker interrupts itself at the limit; the parent kills it this much later.
KILL_GRACE_S = 0.5
# How long a dispatched chunk may wait for its worker to start it.
START_ALLOWANCE_S = 10.0
# Limit of one step of the zygote's priming (see `WorkerPool`'s `prime`): a guard against a step
# that hangs, generous because no task waits for it and a busy machine stretches the wall clock.
PRIME_STEP_LIMIT_S = 5.0
# How long the zygote may take to fork a worker, and to stop.
FORK_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_CONTROL_BUF = 1 << 16


@dataclass(slots=True)
class TaskResult:
    """Outcome of one task: status ok | error | timeout | died | not_run | unavailable."""

    status: str
    value: Any = None
    detail: str = ""


# ---------------------------------------------------------------------------------------------
# Framing (both sides)


def _encode(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        part = os.read(fd, n - len(buf))
        if not part:
            return None
        buf += part
    return buf


# ---------------------------------------------------------------------------------------------
# Zygote and worker side


class SoftTimeout(BaseException):
    """Raised inside a worker at the task's limit. A BaseException so that libraries which catch
    `Exception` (math-verify does) cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise SoftTimeout()


def _zygote_main() -> None:
    control = socket.socket(fileno=os.dup(0))
    # fds 0 and 1 are no one's business: a library's prints go to stderr (the pool discards it).
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    sys.stdout = sys.stderr
    init = pickle.loads(control.recv(_CONTROL_BUF) or pickle.dumps({}))
    if init.get("parent") != os.getppid():
        return  # the pool died while we started
    func = _prepare(init)
    prime = _resolve(init["prime"]) if init.get("prime") else None
    _Zygote(control, func, init["parent"], prime).serve()


def _prepare(init: dict) -> Callable[[Any], Any]:
    """What every worker inherits from the start: the memory cap, imports, warm-up, a frozen heap."""
    if init.get("memory_mb"):
        import resource

        limit = int(init["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    func = _resolve(init["target"])
    if init.get("init"):
        _resolve(init["init"])()  # heavy imports now, so that no task's time limit pays for them
    signal.signal(signal.SIGALRM, _on_alarm)
    _freeze_heap()
    return func


def _freeze_heap() -> None:
    """Move what start-up and priming built (modules, parser tables) out of the collector's sight.
    They live as long as the process, and every full collection would scan them all: with sympy and
    math-verify loaded, ~0.1 s, a straggler in whichever task it lands. Frozen, the pages also stay
    shared between the zygote and its workers (a collection writes to every object it scans)."""
    gc.collect()
    gc.freeze()


def _prime_step(step: Callable[[], Any]) -> bool:
    """One step of the pool's priming; False when it is done, failed or overran its limit.
    Priming is optional: a failure ends it, and the workers serve all the same."""
    try:
        signal.setitimer(signal.ITIMER_REAL, PRIME_STEP_LIMIT_S)
        try:
            return bool(step())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException:  # noqa: BLE001
        return False


class _Zygote:
    """The zygote's loop: fork a worker per request, reap and report the ones that end, and prime
    (`prime` steps) while no request waits, reporting ("primed",) once that is done."""

    def __init__(self, control: socket.socket, func: Callable[[Any], Any], parent: int,
                 prime: Callable[[], Any] | None) -> None:
        self.control, self.func, self.parent, self.prime = control, func, parent, prime
        self.children: set[int] = set()
        # SIGCHLD wakes the loop through this pipe, so exits are reported at once.
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def serve(self) -> None:
        try:
            self.control.send(pickle.dumps(("ready", os.getpid(), self.prime is None)))
            while os.getppid() == self.parent:  # polled too: a forked copy of the pool may hold its end open
                readable = select.select([self.control, self.wake_r], [], [], 0.0 if self.prime else 1.0)[0]
                if self.prime and not readable:
                    self._prime_a_step()
                    continue
                if self.wake_r in readable:
                    os.read(self.wake_r, 512)
                self._reap()
                if self.control in readable and not self._request():
                    break
        except OSError:
            pass  # the control socket broke: the pool is gone
        finally:
            self._kill_children()

    def _prime_a_step(self) -> None:
        if _prime_step(self.prime):
            return
        self.prime = None
        _freeze_heap()  # what priming built, too
        self.control.send(pickle.dumps(("primed",)))

    def _request(self) -> bool:
        msg, fds, _, _ = socket.recv_fds(self.control, _CONTROL_BUF, 1)
        if not msg:
            return False  # the pool closed its end, or died
        kind = pickle.loads(msg)[0]
        if kind == "fork" and len(fds) == 1:
            self._fork(fds[0])
            return True
        for fd in fds:
            os.close(fd)
        return kind != "stop"

    def _fork(self, sock_fd: int) -> None:
        zygote = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory, for now: the pool retries later
            os.close(sock_fd)
            self.control.send(pickle.dumps(("fork_failed", str(exc))))
            return
        if pid == 0:
            try:
                _worker_child(sock_fd, self.func, zygote)
            finally:
                os._exit(0)
        os.close(sock_fd)
        self.children.add(pid)
        pidfd = os.pidfd_open(pid)  # before any reap: the pid cannot have been recycled yet
        try:
            socket.send_fds(self.control, [pickle.dumps(("forked", pid))], [pidfd])
        finally:
            os.close(pidfd)

    def _reap(self) -> None:
        for pid in list(self.children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.children.discard(pid)
                try:  # only for the pool's error messages: never worth blocking the zygote
                    self.control.send(pickle.dumps(("exited", pid, status)), socket.MSG_DONTWAIT)
                except BlockingIOError:
                    pass

    def _kill_children(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in self.children:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
        self.children.clear()


def _worker_child(sock_fd: int, func: Callable[[Any], Any], zygote: int) -> None:
    layers.prctl(layers.PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the zygote, whatever else misses
    if os.getppid() != zygote:
        return  # the zygote died while we forked
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # Only our socket: a worker holding the control socket would hide the zygote's exit from the pool.
    runner.close_fds_except({sock_fd})
    _serve(sock_fd, func)


def _serve(fd: int, func: Callable[[Any], Any]) -> None:
    while True:
        header = _read_exact(fd, _HEADER.size)
        if header is None:
            return  # the pool closed the socket or died
        tasks, timeout_s = pickle.loads(_read_exact(fd, _HEADER.unpack(header)[0]) or b"")
        _write_all(fd, _encode(("start", None, "")))  # the clock of the first task starts now
        for task in tasks:
            _write_all(fd, _encode(_run_one(func, task, timeout_s)))


def _resolve(name: str) -> Callable[..., Any]:
    module_name, _, func_name = name.partition(":")
    return getattr(importlib.import_module(module_name), func_name)


def _run_one(func: Callable[[Any], Any], task: Any, timeout_s: float) -> tuple[str, Any, str]:
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            value = func(task)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        pickle.dumps(value)  # fail here, as this task's error, rather than in the frame writer
        return ("ok", value, "")
    except SoftTimeout:
        return ("timeout", None, f"interrupted after {timeout_s:g} s")
    except MemoryError:
        return ("error", None, "MemoryError: the worker's memory cap was reached")
    except BaseException as exc:  # noqa: BLE001 - a task's failure is its result, never the worker's end
        return ("error", None, f"{type(exc).__name__}: {exc}"[:500])


# ---------------------------------------------------------------------------------------------
# Parent side


class _ZygoteHandle:
    """The pool's view of its zygote process."""

    def __init__(self, init: dict) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from grpo_rewards.workers import _zygote_main; _zygote_main()"],
                stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env, close_fds=True, start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        self.owner = os.getpid()  # a forked child (DataLoader worker) must never stop it
        self.started = time.monotonic()
        self.exits: dict[int, int] = {}  # pid -> wait status, as the zygote reports them
        self.primed = False  # whether forks made from now on inherit the finished priming
        self.alive = self._send({**init, "parent": os.getpid()})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _send(self, obj: Any, fds: Sequence[int] = ()) -> bool:
        try:
            socket.send_fds(self.control, [pickle.dumps(obj)], list(fds))
            return True
        except OSError:
            return False

    def _receive(self, deadline: float) -> tuple[tuple, list[int]] | None:
        """The next message (one already waiting even past the deadline); None on EOF or at the
        deadline. Exit reports are filed in `exits`, readiness and priming noted."""
        wait = max(0.0, deadline - time.monotonic())
        if not self.alive or not select.select([self.control], [], [], wait)[0]:
            return None
        try:
            data, fds, _, _ = socket.recv_fds(self.control, _CONTROL_BUF, 1)
        except OSError:
            data, fds = b"", []
        if not data:
            self.alive = False
            return None
        msg = pickle.loads(data)
        if msg[0] == "primed" or (msg[0] == "ready" and msg[2]):  # ready: True when there is no priming
            self.primed = True
        if msg[0] == "exited":
            self.exits[msg[1]] = msg[2]
            while len(self.exits) > 64:  # reports nobody asked for (workers the pool killed itself)
                del self.exits[next(iter(self.exits))]
        return msg, fds

    def _expect(self, kinds: tuple[str, ...], deadline: float) -> tuple[tuple, list[int]] | None:
        while (received := self._receive(deadline)) is not None:
            if received[0][0] in kinds:
                return received
            for fd in received[1]:
                os.close(fd)
        return None

    def wait_ready(self, timeout_s: float) -> bool:
        self.alive = self.alive and self._expect(("ready",), self.started + timeout_s) is not None
        return self.alive

    def _read_until(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Read messages (which note priming and exits) until `done()`, the timeout or EOF."""
        deadline = time.monotonic() + timeout_s
        while not done() and (received := self._receive(deadline)) is not None:
            for fd in received[1]:  # a late fork reply: its worker is not ours any more
                os.close(fd)

    def wait_primed(self, timeout_s: float) -> bool:
        """Whether the zygote has finished priming, waiting up to `timeout_s` (0: only what has arrived)."""
        self._read_until(lambda: self.primed, timeout_s)
        return self.primed

    def fork(self) -> _Worker | None:
        if not self.alive:
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sent = self._send(("fork",), [theirs.fileno()])
        finally:
            theirs.close()
        reply = self._expect(("forked", "fork_failed"), time.monotonic() + FORK_TIMEOUT_S) if sent else None
        if reply is None or reply[0][0] != "forked" or len(reply[1]) != 1:
            ours.close()
            self.alive = self.alive and reply is not None  # a failed fork leaves the zygote serving
            return None
        (_, pid), (pidfd,) = reply
        return _Worker(ours, pid, pidfd, self, primed=self.primed)  # a "primed" report precedes its fork's

    def exit_status(self, pid: int, timeout_s: float) -> int | None:
        self._read_until(lambda: pid in self.exits, timeout_s)
        return self.exits.pop(pid, None)

    def stop(self) -> None:
        if os.getpid() != self.owner:
            return  # inherited through fork: the process belongs to our parent
        self._send(("stop",))  # it kills and reaps its workers, then exits
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its session: the zygote and every worker
            except OSError:
                pass
            self.proc.wait()
        self.alive = False
        self.control.close()


class _Worker:
    """One worker process and the chunk it is running."""

    def __init__(self, sock: socket.socket, pid: int, pidfd: int, zygote: _ZygoteHandle, primed: bool) -> None:
        self.sock, self.pid, self.pidfd, self.zygote, self.primed = sock, pid, pidfd, zygote, primed
        self.owner = os.getpid()  # a forked child (DataLoader worker) must never kill these
        self.fd = sock.fileno()
        self.buf = b""
        self.chunk: int | None = None  # index of the chunk being run
        self.tasks: list[int] = []  # task indices of that chunk still to report
        self.deadline = 0.0

    def send(self, obj: Any) -> bool:
        try:
            self.sock.sendall(_encode(obj))
            return True
        except OSError:
            return False

    def exited(self) -> bool:
        try:
            return bool(select.select([self.pidfd], [], [], 0)[0])  # a pidfd is readable once it exits
        except (OSError, ValueError):
            return True

    def read_messages(self) -> list[Any] | None:
        """Messages now available; None when the worker has exited (EOF)."""
        try:
            data = os.read(self.fd, 1 << 20)
        except OSError:
            data = b""
        if not data:
            return None
        self.buf += data
        out = []
        while len(self.buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self.buf)
            if len(self.buf) < _HEADER.size + n:
                break
            out.append(pickle.loads(self.buf[_HEADER.size : _HEADER.size + n]))
            self.buf = self.buf[_HEADER.size + n :]
        return out

    def kill(self) -> None:
        if os.getpid() != self.owner:
            return  # inherited through fork: the process belongs to our parent
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            select.select([self.pidfd], [], [], 5.0)  # until it has exited
        except OSError:
            pass  # already gone
        self.sock.close()
        os.close(self.pidfd)
        self.pidfd = -1

    def death_detail(self) -> str:
        status = self.zygote.exit_status(self.pid, 1.0)  # its socket closed: it is exiting, or about to
        code = None if status is None else os.waitstatus_to_exitcode(status)
        if code is not None and code < 0:
            return f"worker killed by signal {signal.Signals(-code).name}"
        return f"worker exited with status {code}"


def platform_gap() -> str | None:
    """What this platform lacks for a pool (pidfds, SCM_RIGHTS over SOCK_SEQPACKET socket pairs, a
    parent-death signal: Linux 5.3 or later has them all); None when nothing is missing."""
    if sys.platform != "linux" or not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return f"the worker pool needs Linux 5.3 or later (pidfds, a parent-death signal); this is {sys.platform}"
    return None


class WorkerPool:
    """`size` worker processes running `target` ("module:function") on tasks, started lazily.

    `init` ("module:function", optional) runs once in the zygote before any worker is forked.
    `prime` ("module:function", optional) is then called in the zygote, between its requests,
    until it returns False: work that makes later tasks cheaper (caches a fork inherits), in short
    steps (each under `PRIME_STEP_LIMIT_S`; one that raises or overruns ends the priming). The
    workers start without waiting for it; once it is done, each `map` first replaces the workers
    forked before by forks that have it (milliseconds each). Both are paid once per pool, not per
    worker, and again only if the zygote itself has to be restarted.
    """

    def __init__(self, target: str, size: int = 2, memory_mb: int | None = 1024, init: str | None = None,
                 startup_timeout_s: float = 120.0, prime: str | None = None) -> None:
        self.target, self.size, self.memory_mb, self.init = target, max(1, int(size)), memory_mb, init
        self.prime = prime
        self.startup_timeout_s = startup_timeout_s
        self._workers: list[_Worker] = []
        self._zygotes: list[_ZygoteHandle] = []  # the current one, if any
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.kills = 0  # workers killed for overrunning, for tests and stats
        weakref.finalize(self, _shutdown, self._workers, self._zygotes)
        atexit.register(_shutdown, self._workers, self._zygotes)

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._workers]

    @property
    def zygote_pid(self) -> int | None:
        return self._zygotes[0].pid if self._zygotes else None

    def _ensure_workers(self) -> None:
        if self._pid != os.getpid():
            # We are a forked child (a DataLoader worker): those processes belong to the parent.
            self._workers.clear()
            self._zygotes.clear()
            self._pid = os.getpid()
        for w in [w for w in self._workers if w.exited()]:
            self._workers.remove(w)
            w.kill()
        zygote = self._live_zygote()
        if zygote is not None:
            zygote.wait_primed(0.0)
            for w in [w for w in self._workers if zygote.primed and not w.primed]:  # all idle: between batches
                self._workers.remove(w)
                w.kill()
        while zygote is not None and len(self._workers) < self.size:
            worker = zygote.fork()
            if worker is None:
                break
            self._workers.append(worker)

    def _live_zygote(self) -> _ZygoteHandle | None:
        if self._zygotes and self._zygotes[0].alive and self._zygotes[0].proc.poll() is None:
            return self._zygotes[0]
        _shutdown(self._workers, self._zygotes)  # its workers died with it
        zygote = _ZygoteHandle({"target": self.target, "memory_mb": self.memory_mb, "init": self.init,
                                "prime": self.prime})
        self._zygotes.append(zygote)
        if not zygote.wait_ready(self.startup_timeout_s):
            _shutdown(self._workers, self._zygotes)
            return None
        return zygote

    def _new_worker(self) -> _Worker | None:
        """A replacement, forked from the running zygote (never restarted mid-batch)."""
        return self._zygotes[0].fork() if self._zygotes else None

    def map(self, chunks: Sequence[Sequence[Any]], timeout_s: float) -> list[list[TaskResult]]:
        """Run every chunk (a list of tasks, run in order by one worker); one result per task.
        RuntimeError, saying what is missing, where the platform cannot run the pool."""
        gap = platform_gap()
        if gap:
            raise RuntimeError(gap)
        with self._lock:
            self._ensure_workers()
            return _Batch(self, chunks, timeout_s).run()

    def wait_primed(self, timeout_s: float) -> bool:
        """Start the pool if needed, wait until its priming is done and its workers have it; whether
        they have (False past the timeout, or when the zygote cannot start)."""
        gap = platform_gap()
        if gap:
            raise RuntimeError(gap)
        with self._lock:
            self._ensure_workers()
            primed = bool(self._zygotes) and self._zygotes[0].wait_primed(timeout_s)
            self._ensure_workers()
            return primed and all(w.primed for w in self._workers)

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                _shutdown(self._workers, self._zygotes)
            self._workers.clear()
            self._zygotes.clear()


def _shutdown(workers: list[_Worker], zygotes: list[_ZygoteHandle]) -> None:
    for w in workers:
        w.kill()
    workers.clear()
    for z in zygotes:
        z.stop()
    zygotes.clear()


class _Batch:
    """The event loop of one `map` call: dispatch chunks to idle workers, collect, enforce limits."""

    def __init__(self, pool: WorkerPool, chunks: Sequence[Sequence[Any]], timeout_s: float) -> None:
        self.pool, self.chunks, self.timeout_s = pool, [list(c) for c in chunks], float(timeout_s)
        self.results: list[list[TaskResult | None]] = [[None] * len(c) for c in self.chunks]
        self.queue = deque(i for i, c in enumerate(self.chunks) if c)
        self.running = 0

    def run(self) -> list[list[TaskResult]]:
        while self.queue or self.running:
            self._dispatch()
            if not self.running:
                break  # no worker is left to take the queued chunks
            self._wait_and_collect()
            self._enforce_deadlines()
        for i in self.queue:
            self._finish_chunk(i, TaskResult("unavailable", detail="no worker process could be started"))
        return [[r or TaskResult("not_run") for r in chunk] for chunk in self.results]

    def _dispatch(self) -> None:
        for w in list(self.pool._workers):
            if self.queue and w.chunk is None:
                i = self.queue.popleft()
                w.chunk, w.tasks = i, list(range(len(self.chunks[i])))
                # Until the worker says it started: its socket, or the machine, may be slow.
                w.deadline = time.monotonic() + self.timeout_s + KILL_GRACE_S + START_ALLOWANCE_S
                self.running += 1
                if not w.send((self.chunks[i], self.timeout_s)):
                    self._worker_lost(w, w.death_detail())

    def _wait_and_collect(self) -> None:
        now = time.monotonic()
        # Only busy workers have a deadline (an idle one's is stale: it would spin).
        deadlines = [w.deadline for w in self.pool._workers if w.chunk is not None]
        wait = max(0.0, min(deadlines, default=now + 1.0) - now)
        fds = {w.fd: w for w in self.pool._workers}
        readable, _, _ = select.select(list(fds), [], [], wait)
        for fd in readable:
            w = fds[fd]
            if w not in self.pool._workers:
                continue  # replaced while handling an earlier descriptor
            messages = w.read_messages()
            for msg in messages or []:
                self._handle(w, msg)
            if messages is None:
                self._worker_lost(w, w.death_detail())

    def _handle(self, w: _Worker, msg: tuple) -> None:
        if w.chunk is None or not w.tasks:
            return
        if msg[0] == "start":
            w.deadline = time.monotonic() + self.timeout_s + KILL_GRACE_S
            return
        status, value, detail = msg
        self.results[w.chunk][w.tasks.pop(0)] = TaskResult(status, value, detail)
        w.deadline = time.monotonic() + self.timeout_s + KILL_GRACE_S
        if not w.tasks:
            self._end_chunk(w)

    def _end_chunk(self, w: _Worker) -> None:
        w.chunk, w.tasks = None, []
        self.running -= 1

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for w in list(self.pool._workers):
            if w.chunk is not None and now > w.deadline:
                self.pool.kills += 1
                self._worker_lost(w, f"killed after {self.timeout_s:g} s", status="timeout")

    def _worker_lost(self, w: _Worker, detail: str, status: str = "died") -> None:
        if w.chunk is not None:
            self.results[w.chunk][w.tasks[0]] = TaskResult(status, None, detail)
            self._end_chunk(w)
        w.kill()
        workers = self.pool._workers
        workers.remove(w)
        replacement = self.pool._new_worker()
        if replacement is not None:
            workers.append(replacement)

    def _finish_chunk(self, i: int, result: TaskResult) -> None:
        self.results[i] = [result] * len(self.chunks[i])
