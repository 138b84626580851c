"""Helpers of the sandbox executor that need no executor state: limits, pipes, the verdict, and
running a program as `python main.py` would inside the forked interpreter.

Standard library only, imported by executor.py as a sibling module (the sandbox's zygote never
imports the project).
"""

from __future__ import annotations

import atexit
import builtins
import fcntl
import _thread
import gc
import io
import operator
import os
import random
import resource
import shutil
import signal
import _signal
import socket
import sys
import time
import traceback
import types
import warnings

TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
DEVICES = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]


def first_untraversable(path: str) -> str | None:
    """The first ancestor of `path` that others may not enter (no o+x), or None."""
    parts = os.path.abspath(path).split(os.sep)[1:]
    current = ""
    for part in parts:
        current += os.sep + part
        try:
            st = os.stat(current)
            if os.path.isdir(current) and not st.st_mode & 0o001:
                return current
        except OSError:
            return None
    return None


def parse_limits(given: dict) -> dict:
    wall = float(given.get("wall_s", 5.0))
    cpu_s = max(1, int(-(-float(given.get("cpu_s") or wall) // 1)))
    mem = int(given.get("memory_mb", 512)) << 20
    rlimits = {
        "RLIMIT_AS": mem,
        "RLIMIT_CPU": (cpu_s, cpu_s + 1),  # SIGXCPU at the soft limit, SIGKILL a second later
        "RLIMIT_CORE": 0,
        "RLIMIT_NPROC": int(given.get("processes", 16)),
        "RLIMIT_NOFILE": int(given.get("open_files", 64)),
        "RLIMIT_FSIZE": int(given.get("file_size_mb", 16)) << 20,
    }
    return {"wall_s": wall, "output_bytes": int(given.get("output_bytes", 1 << 20)), "rlimits": rlimits,
            "memory_mb": mem >> 20}


def stdin_fd(data: str) -> int:
    if not data:
        return os.open(os.devnull, os.O_RDONLY)
    fd = os.memfd_create("stdin", 0)
    os.write(fd, data.encode("utf-8", "surrogatepass"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def grow_pipe(fd: int, size: int) -> None:
    """Make the pipe hold `size` bytes where the host allows (fcntl F_SETPIPE_SZ)."""
    for attempt in (min(size, 1 << 24), 1 << 20, 1 << 16):
        try:
            fcntl.fcntl(fd, 1031, attempt)  # F_SETPIPE_SZ
            return
        except OSError:
            continue


def remove_tree(path: str) -> None:
    """Remove a run's directory, whatever shape its program gave it. shutil.rmtree first, in this
    process (the usual tree: no process to start); it recurses (a RecursionError past ~1000
    levels) and stops at a directory its program made unreadable, so GNU rm finishes (no depth
    or path-length limit, never follows a symlink, stays on this file system), after
    `chmod -R u+rwx` where rm could not enter (a worker with no capability to override modes).
    Tools rather than a hand-written walk: theirs is the well-kept one. The private /tmp's
    inode limit bounds their work."""
    try:
        shutil.rmtree(path)
        return
    except (OSError, RecursionError):
        pass
    for tool, *args in (("rm", "-rf"), ("chmod", "-R", "u+rwx"), ("rm", "-rf")):
        if not os.path.lexists(path):
            return
        _run_tool(tool, [*args, *(["--one-file-system"] if tool == "rm" else []), "--", path])


def _run_tool(name: str, args: list[str]) -> None:
    """Run a system tool to its end (posix_spawn: the worker stays without the threads that
    subprocess would import)."""
    tool = shutil.which(name, path="/usr/bin:/bin")
    if tool is None:
        return
    # What it could not remove goes unsaid: the caller looks for what is left.
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    try:
        os.waitpid(os.posix_spawn(tool, [name, *args], {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                                  file_actions=quiet), 0)
    except OSError:
        pass


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def status_lines(buf: bytes) -> dict:
    out: dict = {"setup": [], "infra": None}
    for line in buf.decode(errors="replace").splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "setup":
            out["setup"].append(rest)
        elif kind == "infra":
            out["infra"] = rest
        elif kind == "ready":
            out["ready"] = True
    return out


def result(status: str, stdout: str = "", stderr: str = "", exit_code=None, detail: str = "", started: float = 0.0,
            **extra) -> dict:
    return {"status": status, "stdout": stdout, "stderr": stderr, "exit_code": exit_code, "detail": detail,
            "seconds": round(time.monotonic() - started, 6), **extra}


def verdict(out: bytes, err: bytes, status_buf: bytes, killed: str | None, wstatus: int, limits: dict,
             started: float, probe: bool) -> dict:
    st = status_lines(bytes(status_buf))
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    extra = {"setup": st["setup"]} if probe else {}
    common = dict(stdout=stdout, stderr=stderr, started=started, **extra)
    if st["infra"]:
        return result("infra", detail=f"sandbox layer failed: {st['infra']}", **common)
    if killed == "timeout":
        return result("timeout", detail=f"wall-clock limit of {limits['wall_s']:g} s", **common)
    if killed == "cpu" and os.WIFSIGNALED(wstatus):
        return result("timeout", exit_code=-os.WTERMSIG(wstatus), detail="CPU time limit", **common)
    if killed == "output_limit":
        return result("output_limit", detail=f"output cut at {limits['output_bytes']} bytes", **common)
    if not st.get("ready"):
        return result("infra", detail=f"the sandbox setup did not complete (wait status {wstatus})", **common)
    if os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU:
            return result("timeout", exit_code=-sig, detail="CPU time limit", **common)
        if sig == signal.SIGXFSZ:
            return result("error", exit_code=-sig, detail="file size limit", **common)
        return result("error", exit_code=-sig, detail=f"killed by {name}", **common)
    code = os.WEXITSTATUS(wstatus)
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if code != 0 and last.startswith("MemoryError"):
        return result("memory", exit_code=code, detail=f"memory limit of {limits['memory_mb']} MB", **common)
    return result("ok" if code == 0 else "error", exit_code=code, detail=last if code else "", **common)


def main_module(path: str) -> types.ModuleType:
    """A fresh `__main__` for the program at `path`."""
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
    return module


def standard_streams() -> tuple:
    """sys.stdin, sys.stdout and sys.stderr on descriptors 0, 1 and 2, as `python main.py` has them."""
    return (io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="surrogateescape"),
            io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="surrogateescape"),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                             line_buffering=True))


def run_main(path: str, program=None, freeze: bool = True, import_dir: bool = True, module=None,
             streams: tuple = ()) -> int:
    """Run the program as `python main.py` would, inside this forked interpreter: the file at
    `path`, or `program` (compiled already) under that name; `import_dir`: with its directory
    first on the import path, as `python main.py` has it; `module`: the `__main__` it runs in
    (a fresh one by default); `streams`: its `standard_streams()`, made ahead (fresh by default)."""
    sys.stdin, sys.stdout, sys.stderr = streams or standard_streams()
    sys.argv = [path]
    # What the program inherits from its worker is not its garbage: a collection that walked it
    # would copy (copy-on-write) every page it touches.
    if freeze:
        gc.freeze()
    if import_dir:
        sys.path.insert(0, os.path.dirname(path))
    module = module or main_module(path)
    sys.modules["__main__"] = module
    code = 0
    try:
        if program is None:
            with open(path, encoding="utf-8", errors="surrogatepass") as f:
                source = f.read()
            # dont_inherit: not this file's `from __future__ import annotations`, as `python main.py` would
            program = compile(source, path, "exec", dont_inherit=True)
        exec(program, module.__dict__)
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException as exc:  # noqa: BLE001 - report it the way the interpreter would
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)  # without this frame
        code = 1
    try:
        if "threading" in sys.modules:  # like the interpreter: wait for non-daemon threads
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        code = code or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken pipe is the program's business
            pass
    return code


def exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    try:
        print(value, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass
    return 1


SENT_FDS = 4  # what the worker sends a plain run's process: its stdin, stdout, stderr and status pipe


def run_when_sent(channel: int, path: str, open_files: int) -> int:
    """A plain run's process (no peer), made ahead of its run by the seed: wait on `channel` for
    the run's stdin, stdout, stderr and status pipe, put the first three on 0-2, keep nothing else
    open and say "ready"; then run the program at `path` as `python main.py` would. Its
    descriptor limit, raised by the seed so that they could arrive, is lowered to `open_files`."""
    sock = socket.socket(fileno=channel)
    try:
        message, fds, _, _ = socket.recv_fds(sock, 16, SENT_FDS)
    except OSError:
        message, fds = b"", []
    sock.detach()
    if not message or len(fds) != SENT_FDS:
        return 0  # not taken: its worker dropped it
    status = fds[3]
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.closerange(3, status)
    os.closerange(status + 1, 1 << 16)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    os.write(status, b"ready\n")
    os.close(status)
    return run_main(path)


# ---- the long-lived tests' process of jobs with a peer -------------------------------------
#
# Why: a job with a peer (code_tests' assertion tests) is two processes, and on a busy core a
# fresh process cost more than the tests it ran (fork's page-table copy, copy-on-write faults and
# exit: ~5 ms of the ~15 ms a HumanEval sample cost; docs/benchmarks.md). Its code is trusted (the
# reference's tests and our runtime) and receives only plain data from the program's process, so
# one isolated process per worker runs job after job, the tests of each in a fresh namespace,
# while every program still gets a fresh process of its own from the seed. What one run could
# leave to the next is reset here (`Baseline`) and what cannot be reset ends the process (the
# next job gets a fresh one), as do a crash, a timeout and every SERVE_RUNS runs.
# Not a smaller fork template: the worker forked is ~15 MB (10 MB private), and what a fork
# costs is mostly the child's copy-on-write faults and its exit, which any forked interpreter
# pays (a bare `pass` process ~2 ms). Not the worker itself: it keeps the rights to make
# namespaces and mounts, and a hung test could not be killed without killing it.

SERVE_RUNS = 64
RUN_FDS = 4  # per run the worker sends the run's stdin, stdout, stderr and the channel to the peer (fd 3)


def watched_dicts(modules: dict) -> list[dict]:
    """The namespaces a run could change: each of these modules' and each class's they define
    (a run may set `json.JSONEncoder.x = 1`)."""
    found: dict[int, dict] = {}
    for name, module in modules.items():
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict:
            continue
        found[id(namespace)] = namespace
        for value in namespace.values():
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for real in gc.get_referents(value.__dict__):  # the class's own dict, behind its proxy
                    found[id(real)] = real
    return list(found.values())


def _version_tags(dicts: list[dict]):
    """A reader of these dicts' version tags, all at once, or None. CPython 3.11 and 3.12 keep in
    each dict's header a tag that every change of the dict renews (PEP 509): reading it, unlike
    comparing the dict with a copy, writes nothing, so a fresh tests' process copies no page of
    its parent's to check ~850 namespaces. The tags are read through one memoryview over the span
    of the headers by one itemgetter call, not through a ctypes object made for each dict.
    Checked here on a probe dict; elsewhere (or a build whose header differs) the namespaces are
    compared in full with copies."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 11), (3, 12)) or \
            hasattr(sys, "getobjects") or not dicts:  # getobjects: a Py_TRACE_REFS build, a longer header
        return None
    try:
        import ctypes  # optional: a Python built without it compares copies instead

        probe = {0: 0}
        tags = [id(d) + 24 for d in (*dicts, probe)]  # after the reference count, the type and the item count
        low = min(tags)
        span = (ctypes.c_char * (max(tags) + 8 - low)).from_address(low)
        read = operator.itemgetter(*((tag - low) // 8 for tag in tags))
        view = memoryview(span).cast("B").cast("Q")
        before = read(view)[-1]
        probe[0] = 1
        if read(view)[-1] == before:
            return None
    except (ImportError, OSError, ValueError, TypeError):
        return None
    # What the view reads stays alive with the reader: the dicts and `probe` (read, then ignored)
    return lambda: (read(view), probe, dicts)[0][:-1]


def _raw_environ() -> dict:
    """os.environ's own dict (bytes to bytes): compared without decoding every entry."""
    raw = getattr(os.environ, "_data", None)
    return raw if type(raw) is dict else dict(os.environ)


class Baseline:
    """What the tests' process was before its first run, and `restore()` after each run: True
    when the run left nothing behind that a fresh process would not have (or it was reset).
    `watched`: `watched_dicts` of the modules loaded when the worker made it (its children
    inherit the list; making it touches every object they hold)."""

    def __init__(self, watched: tuple[set, list]) -> None:
        self.modules = dict(sys.modules)
        names, dicts = watched
        dicts = dicts + watched_dicts({n: m for n, m in self.modules.items() if n not in names})
        # Changed by every run and put back by restore(): compared in full with a copy.
        self.copied = [(d, dict(d)) for d in (sys.__dict__, globals())]
        self.tagged = [d for d in dicts if d is not sys.__dict__ and d is not globals()]
        self.read = _version_tags(self.tagged)
        if self.read is None:
            self.copied += [(d, dict(d)) for d in self.tagged]
            self.tagged = []
        self.tags = self.read() if self.tagged else ()
        self.streams = (sys.stdin, sys.stdout, sys.stderr, sys.argv, sys.path[:])
        self.environ = dict(_raw_environ())
        self.filters = warnings.filters[:]
        self.cwd = os.getcwd()
        self.knobs = (sys.getrecursionlimit(), sys.get_int_max_str_digits(), sys.getswitchinterval(),
                      gc.isenabled(), gc.get_threshold())
        # _signal: signal's enum wrappers cost more than the rest of restore()
        self.signals = {s: _signal.getsignal(s) for s in _signal.valid_signals()
                        if s not in (signal.SIGKILL, signal.SIGSTOP)}
        self.threads = _thread._count

    def restore(self) -> bool:
        sys.stdin, sys.stdout, sys.stderr, sys.argv, path = self.streams
        sys.path[:] = path
        for name in [n for n in sys.modules if n not in self.modules]:  # imported afresh by the next run
            del sys.modules[name]
        sys.modules.update(self.modules)  # __main__ and any the run removed
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in self.signals.items():
            if _signal.getsignal(signum) is not handler:
                _signal.signal(signum, handler)
        limit, digits, interval, enabled, threshold = self.knobs
        sys.setrecursionlimit(limit)
        sys.set_int_max_str_digits(digits)
        sys.setswitchinterval(interval)
        (gc.enable if enabled else gc.disable)()
        gc.set_threshold(*threshold)
        os.chdir(self.cwd)
        random.seed()  # as after a fork (random's at-fork hook)
        for now, then in self.copied:  # where a warning was shown once ("default" action): not yet, afresh
            if "__warningregistry__" in now and "__warningregistry__" not in then:
                del now["__warningregistry__"]
        try:  # the rest cannot be put back faithfully: changed, this process ends
            return self.threads() == 0 and _raw_environ() == self.environ and warnings.filters == self.filters and \
                all(now == then for now, then in self.copied) and (not self.tagged or self.read() == self.tags)
        except Exception:  # noqa: BLE001 - a value whose == raises counts as changed
            return False


def serve_runs(control: int, path: str, program, watched: tuple[set, list], module=None) -> int:
    """The tests' process: per message on `control`, the run's descriptors (0-3), then its code
    runs as `run_main` runs it (in `module`, which holds the code's definitions and whose globals
    are put back after each job, or in a fresh one), and the reply is its exit code and whether it
    left this process clean. Returns (to exit) after a run that was not clean or at the worker's
    end; the worker ends it after SERVE_RUNS runs."""
    sock = socket.socket(fileno=control)
    defined = dict(module.__dict__) if module is not None else None  # put back after each job
    gc.freeze()
    baseline = Baseline(watched)
    _hold_run_fds(control)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 64, RUN_FDS)
        except OSError:
            return 0
        if not message or len(fds) != RUN_FDS:
            return 0
        for target, fd in enumerate(fds):  # each received above 0-3, which /dev/null holds
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(os.path.dirname(path))  # the run's directory, made afresh for each run
        # Not on the import path: the program's process writes there, and a module it planted
        # (named as one the tests import) would run on the tests' side.
        code = run_main(path, program, freeze=False, import_dir=False, module=module)
        if defined is not None:  # what the job bound in the module goes now, as a fresh module's would
            bound = module.__dict__
            for name in [n for n in bound if n not in defined]:
                del bound[name]
            bound.update(defined)
        clean = baseline.restore()
        # The run's garbage goes now: a socket or file object of it collected during a later run
        # would close that run's descriptor of the same number. What survives is frozen, so the
        # next collection walks only the next run's objects (1 ms a run otherwise, growing).
        gc.collect()
        gc.freeze()
        # The run's descriptors (and any it opened) closed before the reply: the worker reads its
        # output to the end, and the peer sees the channel close.
        _hold_run_fds(control)
        sock.send(f"{code} {int(clean)}".encode())
        if not clean:
            return 0


def _hold_run_fds(control: int) -> None:
    """Close every descriptor but `control` and hold 0-3 with /dev/null, so that the next run's
    descriptors arrive above them."""
    os.closerange(0, control)
    os.closerange(control + 1, 1 << 16)
    null = os.open(os.devnull, os.O_RDWR)  # 0, the lowest free
    for target in range(1, RUN_FDS):
        os.dup2(null, target)
