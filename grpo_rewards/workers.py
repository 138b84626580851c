"""A small pool of worker processes with a hard, killing wall-clock limit per task.

Why not `multiprocessing.Pool` or `concurrent.futures`: neither can kill one task that hangs
inside C code (a long big-integer operation, any C loop that never checks for signals) and
replace just that
worker, and `multiprocessing` refuses to start children from a daemonic process such as a
PyTorch DataLoader worker. So each worker here is a fresh interpreter started with
`subprocess` (vfork/posix_spawn on Linux: it never copies the multi-GB training process, and it
imports only this package and the task's module, never the trainer's torch) and talks pickled
frames over its stdin/stdout pipes.

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

_HEADER = struct.Struct("!I")
# The worker interrupts itself at the limit; the parent kills it this much later.
KILL_GRACE_S = 0.5
# How long a dispatched chunk may wait for its worker to start it.
START_ALLOWANCE_S = 10.0
# Limit of one step of idle work (see `WorkerPool`'s `idle`).
IDLE_STEP_LIMIT_S = 0.5


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


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        part = os.read(fd, n - len(buf))
        if not part:
            return None
        buf += part
    return buf


# ---------------------------------------------------------------------------------------------
# Worker side


class SoftTimeout(BaseException):
    """Raised inside a worker at the task's limit. A BaseException so that libraries which catch
    `Exception` (math-verify does) cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise SoftTimeout()


def _worker_main() -> None:
    # Keep the protocol pipe private: anything a library prints goes to stderr instead.
    in_fd, out_fd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    header = _read_exact(in_fd, _HEADER.size)
    if header is None:
        return
    init = pickle.loads(_read_exact(in_fd, _HEADER.unpack(header)[0]) or b"")
    if init.get("memory_mb"):
        import resource

        limit = int(init["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    func = _resolve(init["target"])
    if init.get("init"):
        _resolve(init["init"])()  # heavy imports now, so that no task's time limit pays for them
    idle = _resolve(init["idle"]) if init.get("idle") else None
    signal.signal(signal.SIGALRM, _on_alarm)
    _freeze_heap()
    os.write(out_fd, _encode(("ready", os.getpid())))
    while True:
        while idle is not None and not select.select([in_fd], [], [], 0)[0]:
            if not _run_idle(idle):
                idle = None
                _freeze_heap()
        header = _read_exact(in_fd, _HEADER.size)
        if header is None:
            return  # parent closed the pipe or died
        tasks, timeout_s = pickle.loads(_read_exact(in_fd, _HEADER.unpack(header)[0]) or b"")
        os.write(out_fd, _encode(("start", None, "")))  # the clock of the first task starts now
        for task in tasks:
            os.write(out_fd, _encode(_run_one(func, task, timeout_s)))


def _freeze_heap() -> None:
    """Move what start-up and warm-up built (modules, parser tables) out of the collector's sight.
    They live as long as the worker, and every full collection would scan them all: with sympy and
    math-verify loaded, ~0.1 s, a straggler in whichever task it lands."""
    gc.collect()
    gc.freeze()


def _run_idle(step: Callable[[], Any]) -> bool:
    """One step of the pool's idle work; False when it is done, failed or overran its limit.
    A step is short (a task arriving meanwhile waits for it, before its own clock starts)."""
    try:
        signal.setitimer(signal.ITIMER_REAL, IDLE_STEP_LIMIT_S)
        try:
            return bool(step())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException:  # noqa: BLE001 - idle work is optional: stop it, keep serving tasks
        return False


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


class _Worker:
    """One worker process and the chunk it is running."""

    def __init__(self, target: str, memory_mb: int | None, init: str | None, idle: str | None = None) -> None:
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from grpo_rewards.workers import _worker_main; _worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, close_fds=True, start_new_session=True,  # a Ctrl-C aimed at the trainer is not ours
        )
        self.owner = os.getpid()  # a forked child (DataLoader worker) must never kill these
        self.fd = self.proc.stdout.fileno()
        self.buf = b""
        self.ready = False
        self.started = time.monotonic()
        self.chunk: int | None = None  # index of the chunk being run
        self.tasks: list[int] = []  # task indices of that chunk still to report
        self.deadline = 0.0
        self.send({"target": target, "memory_mb": memory_mb, "init": init, "idle": idle})

    def send(self, obj: Any) -> bool:
        try:
            self.proc.stdin.write(_encode(obj))
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

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
            self.proc.kill()
        except OSError:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def death_detail(self) -> str:
        try:
            code = self.proc.wait(timeout=1.0)  # its pipe closed: it is exiting, or about to
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            return f"worker killed by signal {signal.Signals(-code).name}"
        return f"worker exited with status {code}"


class WorkerPool:
    """`size` worker processes running `target` ("module:function") on tasks, started lazily.

    `init` ("module:function", optional) runs once in each worker before it takes tasks.
    `idle` ("module:function", optional) is called repeatedly while a worker has no message
    waiting, until it returns False: warm-up work that must not delay start-up, in short steps
    (each under `IDLE_STEP_LIMIT_S`; one that raises or overruns ends the idle work).
    """

    def __init__(self, target: str, size: int = 2, memory_mb: int | None = 1024, init: str | None = None,
                 startup_timeout_s: float = 120.0, idle: str | None = None) -> None:
        self.target, self.size, self.memory_mb, self.init = target, max(1, int(size)), memory_mb, init
        self.idle = idle
        self.startup_timeout_s = startup_timeout_s
        self._workers: list[_Worker] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.kills = 0  # workers killed for overrunning, for tests and stats
        weakref.finalize(self, _kill_all, self._workers)
        atexit.register(_kill_all, self._workers)

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def _ensure_workers(self) -> None:
        if self._pid != os.getpid():
            # We are a forked child (a DataLoader worker): those processes belong to the parent.
            self._workers.clear()
            self._pid = os.getpid()
        self._workers[:] = [w for w in self._workers if w.proc.poll() is None]
        while len(self._workers) < self.size:
            self._workers.append(self._new_worker())

    def _new_worker(self) -> _Worker:
        return _Worker(self.target, self.memory_mb, self.init, self.idle)

    def map(self, chunks: Sequence[Sequence[Any]], timeout_s: float) -> list[list[TaskResult]]:
        """Run every chunk (a list of tasks, run in order by one worker); one result per task."""
        with self._lock:
            self._ensure_workers()
            return _Batch(self, chunks, timeout_s).run()

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                _kill_all(self._workers)
            self._workers.clear()


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        w.kill()
    workers.clear()


class _Batch:
    """The event loop of one `map` call: dispatch chunks to idle workers, collect, enforce limits."""

    def __init__(self, pool: WorkerPool, chunks: Sequence[Sequence[Any]], timeout_s: float) -> None:
        self.pool, self.chunks, self.timeout_s = pool, [list(c) for c in chunks], float(timeout_s)
        self.results: list[list[TaskResult | None]] = [[None] * len(c) for c in self.chunks]
        self.queue = deque(i for i, c in enumerate(self.chunks) if c)
        self.running = 0
        self.failed_starts = 0

    def run(self) -> list[list[TaskResult]]:
        while self.queue or self.running:
            self._dispatch()
            if not self.running and not any(not w.ready for w in self.pool._workers):
                break  # nothing alive can take the queued chunks
            self._wait_and_collect()
            self._enforce_deadlines()
        for i in self.queue:
            self._finish_chunk(i, TaskResult("unavailable", detail="no worker process could be started"))
        return [[r or TaskResult("not_run") for r in chunk] for chunk in self.results]

    def _dispatch(self) -> None:
        for w in list(self.pool._workers):
            if self.queue and w.ready and w.chunk is None:
                i = self.queue.popleft()
                w.chunk, w.tasks = i, list(range(len(self.chunks[i])))
                # Until the worker says it started: its pipe, or the machine, may be slow.
                w.deadline = time.monotonic() + self.timeout_s + KILL_GRACE_S + START_ALLOWANCE_S
                self.running += 1
                if not w.send((self.chunks[i], self.timeout_s)):
                    self._worker_lost(w, w.death_detail())

    def _wait_and_collect(self) -> None:
        now = time.monotonic()
        # Only busy and starting workers have a deadline (an idle one's is stale: it would spin).
        deadlines = [w.deadline for w in self.pool._workers if w.ready and w.chunk is not None]
        deadlines += [w.started + self.pool.startup_timeout_s for w in self.pool._workers if not w.ready]
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
        if msg[0] == "ready":
            w.ready = True
            return
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
            if w.ready and w.chunk is not None and now > w.deadline:
                self.pool.kills += 1
                self._worker_lost(w, f"killed after {self.timeout_s:g} s", status="timeout")
            elif not w.ready and now > w.started + self.pool.startup_timeout_s:
                self._worker_lost(w, "worker did not start in time")

    def _worker_lost(self, w: _Worker, detail: str, status: str = "died") -> None:
        if w.chunk is not None:
            self.results[w.chunk][w.tasks[0]] = TaskResult(status, None, detail)
            self._end_chunk(w)
        elif not w.ready:
            self.failed_starts += 1
        self._replace(w, restart=self.failed_starts < self.pool.size)

    def _replace(self, w: _Worker, restart: bool = True) -> None:
        w.kill()
        workers = self.pool._workers
        workers.remove(w)
        if restart:
            workers.append(self.pool._new_worker())

    def _finish_chunk(self, i: int, result: TaskResult) -> None:
        self.results[i] = [result] * len(self.chunks[i])


if __name__ == "__main__":
    _worker_main()
