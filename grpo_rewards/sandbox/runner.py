"""Helpers of the sandbox executor that need no executor state: limits, pipes, the verdict, and
running a program as `python main.py` would inside the forked interpreter.

Standard library only, imported by executor.py as a sibling module (the sandbox's zygote never
imports the project).
"""

from __future__ import annotations

import atexit
import builtins
import fcntl
import gc
import io
import os
import signal
import sys
import time
import traceback
import types

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


def run_main(path: str, program=None) -> int:
    """Run the program as `python main.py` would, inside this forked interpreter: the file at
    `path`, or `program` (compiled already) under that name."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="surrogateescape")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="surrogateescape")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True)
    sys.argv = [path]
    # What the program inherits from its worker is not its garbage: a collection that walked it
    # would copy (copy-on-write) every page it touches.
    gc.freeze()
    sys.path.insert(0, os.path.dirname(path))
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
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
