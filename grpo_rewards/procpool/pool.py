"""A pool of worker processes with a hard, killing wall-clock limit per task (the parent's side).

Why not `multiprocessing.Pool` or `concurrent.futures`: neither can kill one task that hangs
inside C code and replace just that worker, and `multiprocessing` refuses to start children from a
daemonic process such as a PyTorch DataLoader worker.

Each pool has a zygote (see zygote.py): a fresh interpreter started with `subprocess` (it never
copies the multi-GB training process), in a session of its own (a Ctrl-C aimed at the trainer is
not for it), which forks every worker warm. The pool receives each worker's pidfd, so a kill can
never hit a recycled pid. `map(chunks, timeout_s)` runs chunks (lists of tasks one worker runs in
order); a task past its limit is interrupted inside the worker when the pool allows it, and its
worker is killed and replaced (the same slot, the pool keeps its size) when that does not stop it.
The tasks of a chunk behind one whose worker was killed or died come back as `not_run`; chunks
queued behind it on that worker never started and run elsewhere, as does a chunk the worker had
not started yet when it died (in the work after a reply, say): a task is charged with its
worker's death only once the worker has said it started it. `map` is thread-safe (one batch
at a time) and works from any thread.
"""

from __future__ import annotations

import atexit
import itertools
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_rewards.procpool.zygote import CONTROL_BUF, decode_frames, encode_frame

# The worker interrupts itself at the limit; the parent kills it this much later.
KILL_GRACE_S = 0.5
# How long a dispatched chunk may wait for its worker to start it.
START_ALLOWANCE_S = 10.0
# How often a chunk goes back to the queue because its worker ended before starting it; then
# it is `unavailable` (a worker that can never start a chunk must not make the batch loop).
START_TRIES = 3
# How long the zygote may take to fork a worker, and to stop.
FORK_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
ZYGOTE_DIR = str(Path(__file__).resolve().parent)
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent.parent)


@dataclass(slots=True)
class TaskResult:
    """Outcome of one task: status ok | error | timeout | died | not_run | unavailable."""

    status: str
    value: Any = None
    detail: str = ""


@dataclass(frozen=True)
class Program:
    """What the zygote and its workers run ("module:function" names, resolved in the zygote).

    `target(task)` runs each task. `init()` runs once in the zygote before any fork (imports,
    warm-up). `prime()` is called in the zygote between its requests until it returns False (caches
    a fork inherits). `worker_init(slot, worker_args)` runs in each worker before it serves (slot:
    0..size-1, kept by a replacement). `after()` runs in the worker after each result has gone out.
    `isolated`: the zygote is `python -I` with an empty environment and never imports the project;
    its functions are then found on `path`. `interrupt`: a task at its limit is first interrupted
    inside the worker (SoftTimeout), else only killed. `worker_session`: each worker starts a
    session of its own; where the scheduler groups tasks by session (autogroup), each worker then
    gets a CPU share as a separate program would, rather than the pool sharing one.
    """

    target: str
    init: str | None = None
    prime: str | None = None
    worker_init: str | None = None
    worker_args: Any = None
    after: str | None = None
    memory_mb: int | None = None
    path: tuple[str, ...] = ()
    isolated: bool = False
    interrupt: bool = True
    worker_session: bool = False

    def command(self) -> tuple[list[str], dict[str, str], str | None]:
        """The zygote's command line, environment and working directory."""
        if self.isolated:
            code = f"import sys; sys.path.insert(0, {ZYGOTE_DIR!r}); import zygote; del sys.path[0]; zygote.main()"
            return [sys.executable, "-I", "-c", code], {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, "/"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        return [sys.executable, "-c", "from grpo_rewards.procpool.zygote import main; main()"], env, None

    def init_message(self) -> dict:
        return {"target": self.target, "init": self.init, "prime": self.prime, "worker_init": self.worker_init,
                "worker_args": self.worker_args, "after": self.after, "memory_mb": self.memory_mb,
                "path": list(self.path), "worker_session": self.worker_session, "parent": os.getpid()}


def platform_gap() -> str | None:
    """What this platform lacks for a pool (pidfds, SCM_RIGHTS over SOCK_SEQPACKET socket pairs, a
    parent-death signal: Linux 5.3 or later has them all); None when nothing is missing."""
    if sys.platform != "linux" or not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return f"the worker pool needs Linux 5.3 or later (pidfds, a parent-death signal); this is {sys.platform}"
    return None


class _ZygoteHandle:
    """The pool's view of its zygote process."""

    def __init__(self, program: Program) -> None:
        command, env, cwd = program.command()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(command, stdin=theirs.fileno(), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env=env, cwd=cwd, close_fds=True,
                                         start_new_session=True)
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
        self.alive = self._send(program.init_message())

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
            data, fds, _, _ = socket.recv_fds(self.control, CONTROL_BUF, 1)
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

    def fork(self, slot: int) -> _Worker | None:
        if not self.alive:
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sent = self._send(("fork", slot), [theirs.fileno()])
        finally:
            theirs.close()
        reply = self._expect(("forked", "fork_failed"), time.monotonic() + FORK_TIMEOUT_S) if sent else None
        if reply is None or reply[0][0] != "forked" or len(reply[1]) != 1:
            ours.close()
            self.alive = self.alive and reply is not None  # a failed fork leaves the zygote serving
            return None
        (_, pid), (pidfd,) = reply
        return _Worker(ours, pid, pidfd, self, primed=self.primed, slot=slot)  # "primed" precedes its fork's reply

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


@dataclass(eq=False)
class _Worker:
    """One worker process and the chunks sent to it."""

    sock: socket.socket
    pid: int
    pidfd: int
    zygote: _ZygoteHandle
    primed: bool
    slot: int
    owner: int = field(default_factory=os.getpid)  # a forked child (DataLoader worker) must never kill it
    buf: bytearray = field(default_factory=bytearray)
    inflight: deque[int] = field(default_factory=deque)  # chunk indices sent, the running one first
    tasks: list[int] = field(default_factory=list)  # task indices of the running chunk still to report
    started: bool = False  # whether it said it started the first of those (only then is a death that task's)
    deadline: float = 0.0

    @property
    def fd(self) -> int:
        return self.sock.fileno()

    def send(self, obj: Any) -> bool:
        try:
            self.sock.sendall(encode_frame(obj))
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
        return decode_frames(self.buf)

    def kill(self, wait: bool = True) -> None:
        """SIGKILL it; `wait`: until it has exited, then close its descriptors (once)."""
        if os.getpid() != self.owner or self.pidfd < 0:
            return  # inherited through fork (the process belongs to our parent), or killed already
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            if wait:
                select.select([self.pidfd], [], [], 5.0)  # until it has exited
        except OSError:
            pass  # already gone
        if not wait:
            return
        self.sock.close()
        os.close(self.pidfd)
        self.pidfd = -1

    def death_detail(self) -> str:
        status = self.zygote.exit_status(self.pid, 1.0)  # its socket closed: it is exiting, or about to
        code = None if status is None else os.waitstatus_to_exitcode(status)
        if code is not None and code < 0:
            return f"worker killed by signal {signal.Signals(-code).name}"
        return f"worker exited with status {code}"


class WorkerPool:
    """`size` worker processes running `target` ("module:function") on tasks, started lazily.

    `init`, `prime` and the keyword-only options are those of `Program`. Once priming is done,
    each `map` first replaces the workers forked before by forks that have it (milliseconds each).
    `pipeline`: chunks sent ahead to one worker, so that no round trip sits between two of them.
    `start_allowance_s`: how long a worker may take to start a chunk (its `worker_init` included).
    """

    def __init__(self, target: str, size: int = 2, memory_mb: int | None = 1024, init: str | None = None,
                 startup_timeout_s: float = 120.0, prime: str | None = None, *, pipeline: int = 1,
                 start_allowance_s: float = START_ALLOWANCE_S, **program: Any) -> None:
        self.program = Program(target, init=init, prime=prime, memory_mb=memory_mb, **program)
        self.size, self.pipeline = max(1, int(size)), max(1, int(pipeline))
        self.startup_timeout_s, self.start_allowance_s = startup_timeout_s, start_allowance_s
        self._workers: list[_Worker] = []
        self._zygotes: list[_ZygoteHandle] = []  # the current one, if any
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._starting: threading.Thread | None = None  # see start()
        self._closes = 0  # a boot started before a close() does not boot
        self.kills = 0  # workers killed for overrunning, for tests and stats
        self.restarts = 0  # workers replaced after a death or a kill
        weakref.finalize(self, _shutdown, self._workers, self._zygotes)
        atexit.register(_shutdown, self._workers, self._zygotes)
        _POOLS.add(self)

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
            self.restarts += 1
        zygote = self._live_zygote()
        if zygote is not None:
            zygote.wait_primed(0.0)
            for w in [w for w in self._workers if zygote.primed and not w.primed]:  # all idle: between batches
                self._workers.remove(w)
                w.kill()
        free = sorted(set(range(self.size)) - {w.slot for w in self._workers})
        for slot in free if zygote is not None else ():
            worker = zygote.fork(slot)
            if worker is None:
                break
            self._workers.append(worker)

    def _live_zygote(self) -> _ZygoteHandle | None:
        if self._zygotes and self._zygotes[0].alive and self._zygotes[0].proc.poll() is None:
            return self._zygotes[0]
        _shutdown(self._workers, self._zygotes)  # its workers died with it
        zygote = _ZygoteHandle(self.program)
        self._zygotes.append(zygote)
        if not zygote.wait_ready(self.startup_timeout_s):
            _shutdown(self._workers, self._zygotes)
            return None
        return zygote

    def _replace(self, lost: _Worker) -> None:
        """Kill `lost` and fork its replacement from the running zygote (never restarted mid-batch)."""
        lost.kill()
        self._workers.remove(lost)
        self.restarts += 1
        replacement = self._zygotes[0].fork(lost.slot) if self._zygotes else None
        if replacement is not None:
            self._workers.append(replacement)

    def map(self, chunks: Iterable[Sequence[Any]],
            timeout_s: float | Sequence[float] | Callable[[Sequence[Any]], float]) -> list[list[TaskResult]]:
        """Run every chunk (a list of tasks, run in order by one worker); one result per task.
        `timeout_s`: each task's limit, one limit per chunk, or a function of the chunk giving it.
        `chunks` may be lazy: each is taken only when a worker has room for it, so the work that
        makes the next chunk overlaps the runs of the earlier ones. RuntimeError, saying what is
        missing, where the platform cannot run the pool."""
        gap = platform_gap()
        if gap:
            raise RuntimeError(gap)
        if callable(timeout_s):
            source = ((chunk, timeout_s(chunk)) for chunk in chunks)
        elif isinstance(timeout_s, int | float):
            source = zip(chunks, itertools.repeat(float(timeout_s)))
        else:  # strict: limits short or over are a ValueError (raised once the chunks sent are in)
            source = zip(chunks, timeout_s, strict=True)
        with self._lock:
            self._ensure_workers()
            return _Batch(self, source).run()

    def start(self) -> None:
        """Boot the zygote and fork the workers on a thread, and return at once: the caller goes on
        (loading data, making its first tasks) while the pool boots on another core. `map` waits
        for that boot where it comes first (not for priming). No-op where the platform lacks a pool,
        and where the pool is in use (a map holds it: it is up or booting)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self._workers and not self.booting and platform_gap() is None:
                self._starting = threading.Thread(target=self._boot, args=(self._closes,), name="procpool-start",
                                                  daemon=True)
                self._starting.start()
        finally:
            self._lock.release()

    @property
    def booting(self) -> bool:
        """Whether a `start` is still booting the pool."""
        return self._starting is not None and self._starting.is_alive()

    def _boot(self, closes: int) -> None:
        with self._lock:
            if closes != self._closes:
                return  # closed since start()
            try:
                self._ensure_workers()
            except OSError:
                pass  # e.g. no process could be spawned: the first map meets it again and says so

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
            self._closes += 1
            if self._pid == os.getpid():
                _shutdown(self._workers, self._zygotes)
            self._workers.clear()
            self._zygotes.clear()


# A child forked while a pool's lock was held (by a boot thread, or a map on another thread) would
# inherit it held, with no thread left to release it: each pool gets a fresh lock in the child.
_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


def _fresh_locks_in_child() -> None:
    for pool in list(_POOLS):
        pool._lock, pool._starting = threading.Lock(), None


os.register_at_fork(after_in_child=_fresh_locks_in_child)


def _shutdown(workers: list[_Worker], zygotes: list[_ZygoteHandle]) -> None:
    for w in workers:  # all signalled first: each tears its namespaces down while the others do
        w.kill(wait=False)
    for w in workers:
        w.kill()
    workers.clear()
    for z in zygotes:
        z.stop()
    zygotes.clear()


class _Batch:
    """The event loop of one `map` call: dispatch chunks to workers, collect, enforce limits."""

    def __init__(self, pool: WorkerPool, source: Iterator[tuple[Sequence[Any], float]]) -> None:
        self.pool, self.source = pool, source
        self.chunks: list[list[Any]] = []
        self.limits: list[float] = []
        self.results: list[list[TaskResult | None]] = []
        self.queue: deque[int] = deque()  # taken from the source (or sent back by a lost worker), not sent
        self.unstarted: dict[int, int] = {}  # chunk -> how often its worker ended before starting it
        self.running = 0  # chunks sent and not finished
        self.exhausted = False
        self.failure: BaseException | None = None  # raised by the source: re-raised once the sent chunks are in

    def run(self) -> list[list[TaskResult]]:
        while self.queue or not self.exhausted or self.running:
            self._dispatch()  # takes from the source only for a worker with room
            if not self.running:
                break  # no worker is left to take the queued chunks
            self._wait_and_collect()
            self._enforce_deadlines()
        if self.failure is not None:
            raise self.failure
        while self._pull():  # no worker could be started: the rest is taken to say so
            pass
        for i in self.queue:
            self.results[i] = [TaskResult("unavailable", detail="no worker process could be started")] * len(
                self.chunks[i])
        return [[r or TaskResult("not_run") for r in chunk] for chunk in self.results]

    def _pending(self) -> bool:
        """Whether a chunk waits to be sent; takes the next one from the source when none is queued."""
        while not self.queue and self._pull():
            pass
        return bool(self.queue)

    def _pull(self) -> bool:
        """Take the next chunk from the source into the queue; False once the source is done."""
        if self.exhausted:
            return False
        try:
            chunk, limit = next(self.source)
        except StopIteration:
            self.exhausted = True
            return False
        except BaseException as exc:  # noqa: BLE001 - the chunks already sent must come back first
            self.failure, self.exhausted = exc, True
            return False
        self.chunks.append(list(chunk))
        self.limits.append(float(limit))
        self.results.append([None] * len(self.chunks[-1]))
        if self.chunks[-1]:
            self.queue.append(len(self.chunks) - 1)
        return True

    def _dispatch(self) -> None:
        for _ in range(self.pool.pipeline):  # first one chunk to each worker, then one more each
            for w in list(self.pool._workers):
                if len(w.inflight) >= self.pool.pipeline or w not in self.pool._workers or not self._pending():
                    continue
                i = self.queue.popleft()
                if not w.inflight:
                    self._arm(w, i)
                w.inflight.append(i)
                self.running += 1
                if not w.send((self.chunks[i], self.limits[i] if self.pool.program.interrupt else None)):
                    self._worker_lost(w, w.death_detail())

    def _arm(self, w: _Worker, i: int) -> None:
        """Chunk `i` is next on `w`: until the worker says it started, its socket or the machine may be slow."""
        w.tasks = list(range(len(self.chunks[i])))
        w.started = False
        w.deadline = time.monotonic() + self.limits[i] + KILL_GRACE_S + self.pool.start_allowance_s

    def _wait_and_collect(self) -> None:
        now = time.monotonic()
        # Only busy workers have a deadline (an idle one's is stale: it would spin).
        deadlines = [w.deadline for w in self.pool._workers if w.inflight]
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
        if not w.inflight or not w.tasks:
            return
        chunk = w.inflight[0]
        w.deadline = time.monotonic() + self.limits[chunk] + KILL_GRACE_S
        if msg[0] == "start":
            w.started = True
            return
        self.results[chunk][w.tasks.pop(0)] = TaskResult(*msg)
        # The next task starts at once, or (with work after each reply) when the worker says so.
        w.started = bool(w.tasks) and not self.pool.program.after
        if not w.tasks:
            w.inflight.popleft()
            self.running -= 1
            if w.inflight:
                self._arm(w, w.inflight[0])

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for w in list(self.pool._workers):
            if w.inflight and now > w.deadline:
                self.pool.kills += 1
                self._worker_lost(w, f"killed after {self.limits[w.inflight[0]]:g} s", status="timeout")

    def _worker_lost(self, w: _Worker, detail: str, status: str = "died") -> None:
        """The running chunk's current task gets `status` if the worker had started it, and the
        rest of the chunk stays not_run; a chunk it had not started yet is no task's doing (the
        worker may have died in the work after the last reply) and goes back to the queue, as do
        the chunks sent behind it."""
        if w.inflight:
            head = w.inflight.popleft()
            self.running -= 1 + len(w.inflight)
            self.queue.extendleft(reversed(w.inflight))
            w.inflight.clear()
            if w.started:
                self.results[head][w.tasks[0]] = TaskResult(status, None, detail)
            elif len(w.tasks) == len(self.chunks[head]):
                self._requeue_unstarted(head, detail)
        self.pool._replace(w)

    def _requeue_unstarted(self, i: int, detail: str) -> None:
        tries = self.unstarted[i] = self.unstarted.get(i, 0) + 1
        if tries < START_TRIES:
            self.queue.appendleft(i)
            return
        why = f"its worker ended {tries} times before starting it: {detail}"
        self.results[i][0] = TaskResult("unavailable", None, why)
