"""The process side of the pool: the zygote's loop, the workers it forks, and the frames they speak.

Standard library only, and never `threading` (a process that has imported it forks slower:
~1.3 ms -> ~3.5 ms measured here). The local sandbox's zygote runs this file as the top-level
module `zygote` in a `python -I` interpreter with an empty environment, so that the programs it
runs inherit neither the project nor its dependencies; the math pool's zygote imports it as
`grpo_rewards.procpool.zygote` (its tasks catch this module's `SoftTimeout`).

The zygote runs the pool's `init` once, freezes its heap and forks a worker per request (a
SOCK_SEQPACKET control socket; the worker's socket end comes in and its pidfd goes back over
SCM_RIGHTS). Between requests it runs the pool's `prime` steps. A worker first runs the pool's
`worker_init` for its slot, then serves chunks of tasks over its stream socket in pickled frames.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import pickle
import resource
import select
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any

HEADER = struct.Struct("!I")
# Limit of one step of the zygote's priming: a guard against a step that hangs, generous because no
# task waits for it and a busy machine stretches the wall clock.
PRIME_STEP_LIMIT_S = 5.0
CONTROL_BUF = 1 << 16
_PR_SET_PDEATHSIG = 1


# ---------------------------------------------------------------------------------------------
# Frames: a 4-byte length, then a pickle (both sides)


def encode_frame(obj: Any) -> bytes:
    """One length-prefixed pickle frame (what `decode_frames` takes apart)."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def decode_frames(buf: bytearray) -> list[Any]:
    """Take every complete frame off the front of `buf`."""
    out, start = [], 0
    while len(buf) - start >= HEADER.size:
        (n,) = HEADER.unpack_from(buf, start)
        if len(buf) - start < HEADER.size + n:
            break
        out.append(pickle.loads(buf[start + HEADER.size : start + HEADER.size + n]))
        start += HEADER.size + n
    del buf[:start]
    return out


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        part = os.read(fd, n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def close_fds_except(keep: set[int]) -> None:
    """Close every descriptor from 3 up but those in `keep`."""
    top = 3
    for fd in sorted(keep | {2}):
        if fd > top:
            os.closerange(top, fd)
        top = max(top, fd + 1)
    os.closerange(top, 1 << 16)


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class SoftTimeout(BaseException):
    """Raised inside a worker at the task's limit. A BaseException so that libraries which catch
    `Exception` (math-verify does) cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise SoftTimeout()


# ---------------------------------------------------------------------------------------------
# The zygote


def main() -> None:
    control = socket.socket(fileno=os.dup(0))
    # fds 0 and 1 are no one's business: a library's prints go to stderr (the pool discards it).
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    sys.stdout = sys.stderr
    init = pickle.loads(control.recv(CONTROL_BUF) or pickle.dumps({}))
    if init.get("parent") != os.getppid():
        return  # the pool died while we started
    _Zygote(control, init).serve()
    # Its workers are reaped and it holds nothing to flush (its output goes nowhere): it exits at
    # once, without the interpreter's teardown of every module it preloaded, which the pool's close waits for.
    os._exit(0)


def _resolve(name: str | None) -> Callable[..., Any] | None:
    if not name:
        return None
    module_name, _, func_name = name.partition(":")
    return getattr(importlib.import_module(module_name), func_name)


def _freeze_heap() -> None:
    """Move what start-up and priming built (modules, parser tables) out of the collector's sight:
    no full collection scans them again, and their pages stay shared with the forks."""
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
    """Fork a worker per request, reap and report the ones that end, and prime (`prime` steps)
    while no request waits, reporting ("primed",) once that is done."""

    def __init__(self, control: socket.socket, init: dict) -> None:
        self.control, self.parent = control, init["parent"]
        self.worker_args, self.worker_session = init.get("worker_args"), init.get("worker_session")
        if init.get("memory_mb"):
            limit = int(init["memory_mb"]) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        sys.path[:0] = init.get("path", [])  # only to find the pool's functions: tasks never see it
        self.func, self.after = _resolve(init["target"]), _resolve(init.get("after"))
        self.worker_init, self.prime = _resolve(init.get("worker_init")), _resolve(init.get("prime"))
        warm_up = _resolve(init.get("init"))
        del sys.path[: len(init.get("path", []))]
        if warm_up:
            warm_up()  # heavy imports now, so that no task's time limit pays for them
        signal.signal(signal.SIGALRM, _on_alarm)  # the tasks' and the priming's soft limits
        _freeze_heap()
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
        msg, fds, _, _ = socket.recv_fds(self.control, CONTROL_BUF, 1)
        if not msg:
            return False  # the pool closed its end, or died
        request = pickle.loads(msg)
        if request[0] == "fork" and len(fds) == 1:
            self._fork(fds[0], request[1])
            return True
        for fd in fds:
            os.close(fd)
        return request[0] != "stop"

    def _fork(self, sock_fd: int, slot: int) -> None:
        zygote = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory, for now: the pool retries later
            os.close(sock_fd)
            self.control.send(pickle.dumps(("fork_failed", str(exc))))
            return
        if pid == 0:
            try:
                self._become_worker(sock_fd, zygote, slot)
            finally:
                os._exit(0)
        os.close(sock_fd)
        self.children.add(pid)
        pidfd = os.pidfd_open(pid)  # before any reap: the pid cannot have been recycled yet
        try:
            socket.send_fds(self.control, [pickle.dumps(("forked", pid))], [pidfd])
        finally:
            os.close(pidfd)

    def _become_worker(self, sock_fd: int, zygote: int, slot: int) -> None:
        die_with_parent()  # dies with the zygote, whatever else misses
        if os.getppid() != zygote:
            return  # the zygote died while we forked
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if self.worker_session:
            os.setsid()  # with scheduler autogroups, a session is a CPU share: one per worker
        # Only our socket: a worker holding the control socket would hide the zygote's exit from the pool.
        close_fds_except({sock_fd})
        failure = ""
        if self.worker_init:
            try:
                self.worker_init(slot, self.worker_args)
            except BaseException as exc:  # noqa: BLE001 - reported with every task, never a silent death
                failure = f"the worker's set-up failed: {type(exc).__name__}: {exc}"[:500]
        _serve(sock_fd, self.func, self.after, failure)

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


# ---------------------------------------------------------------------------------------------
# A worker


def _serve(fd: int, func: Callable[[Any], Any], after: Callable[[], Any] | None, failure: str) -> None:
    """Run chunks until the pool closes the socket. Each chunk is (tasks, limit): limit is the
    seconds after which a task is interrupted inside the worker, or None (the pool only kills)."""
    while True:
        header = read_exact(fd, HEADER.size)
        if header is None:
            return  # the pool closed the socket or died
        tasks, limit = pickle.loads(read_exact(fd, HEADER.unpack(header)[0]) or b"")
        for n, task in enumerate(tasks):
            if n == 0 or after:  # its clock starts now; and a death in after() is no later task's
                write_all(fd, encode_frame(("start", None, "")))
            write_all(fd, encode_frame(("unavailable", None, failure) if failure else _run_one(func, task, limit)))
            if after:
                after()  # work the caller need not wait for (the sandbox removes the run's files)


def _run_one(func: Callable[[Any], Any], task: Any, limit: float | None) -> tuple[str, Any, str]:
    try:
        if limit:
            signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            value = func(task)
        finally:
            if limit:
                signal.setitimer(signal.ITIMER_REAL, 0)
        pickle.dumps(value)  # fail here, as this task's error, rather than in the frame writer
        return ("ok", value, "")
    except SoftTimeout:
        return ("timeout", None, f"interrupted after {limit:g} s")
    except MemoryError:
        return ("error", None, "MemoryError: the worker's memory cap was reached")
    except BaseException as exc:  # noqa: BLE001 - a task's failure is its result, never the worker's end
        return ("error", None, f"{type(exc).__name__}: {exc}"[:500])
