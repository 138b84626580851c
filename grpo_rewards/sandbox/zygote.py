"""The sandbox zygote: a small long-lived process that forks one child per execution.

Started by `LocalSandbox` as `python -I zygote.py` with an empty environment: it imports only
the standard library and `layers.py` (never the project or torch), so forking it costs a
millisecond or two where forking a training process costs >100 ms.

Per zygote, once: private network, IPC and UTS namespaces (no network at all), a private mount
namespace with a size-capped tmpfs for the scratch directories, and an empty tmpfs over every
directory that the sandbox uid cannot traverse (root's home, which holds this Python) with only
the Python installation bound back read-only.
Per execution: fork a supervisor (new session, new PID namespace), which forks the program as
PID 1 of that namespace, so killing it kills everything the program started (daemons too).
The program then gets: a fresh scratch dir as cwd, a cleared environment, stdin from a memfd
or /dev/null, only fds 0-2, rlimits (hard = soft), a non-root uid, parent-death signal,
no_new_privs, and Landlock; then its code runs in this (forked) interpreter.

Protocol: pickled frames on fds 0 (requests) and 1 (replies), framed as `multiprocessing.connection`
frames them (the pool side uses that class). Not imported here: it pulls in `threading`, and a
process that has imported `threading` forks several times slower (measured: ~1 ms -> ~4 ms).
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import pickle
import struct

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layers  # noqa: E402  (stdlib-only sibling, imported without the package)

del sys.path[0]

# Modules the programs commonly import, loaded once here so that each forked child has them
# already (imports after the uid drop can also only read what Landlock allows).
PRELOAD = ("base64 importlib.util marshal fcntl array bisect collections copy dataclasses datetime decimal enum fractions functools hashlib heapq "
           "io itertools json math numbers operator random re statistics string struct textwrap "
           "traceback types typing unicodedata atexit")
PROGRAM = "main.py"
PER_RUN = ("pid_namespace", "rlimits", "uid", "pdeathsig", "no_new_privs", "landlock")
POLL_S = 0.05  # output pipes are drained this often while a program runs
EXIT_DRAIN_S = 0.5  # after the program exits, how long its leftover children may keep its pipes open


class Zygote:
    def __init__(self, init: dict) -> None:
        self.uid: int | None = init.get("uid")
        self.root = os.geteuid() == 0
        self.layers: dict[str, str] = {}  # name -> "" when active, else why not
        self.scratch = "/tmp"
        self.scratch_mb = int(init.get("scratch_mb", 128))
        self.read_paths = sorted({p for p in init.get("read_paths", []) if p})
        self.pid = os.getpid()
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
        self.per_run: set[str] = set()
        self.leftover = ""

    # ---- once per zygote ------------------------------------------------------------------

    def setup(self) -> dict:
        for name in PRELOAD.split():
            __import__(name)
        if not self.root:
            self.layers["uid"] = "n/a: not root, programs keep this user's uid"
            self._try("user_namespace", self._user_namespace)
        else:
            self.layers["user_namespace"] = "n/a: running as root, the namespaces need no user namespace"
        self._try("net_namespace", lambda: layers.unshare(layers.CLONE_NEWNET | layers.CLONE_NEWIPC | layers.CLONE_NEWUTS))
        if self._try("mount_namespace", lambda: (layers.unshare(layers.CLONE_NEWNS),
                                                 layers.mount(None, "/", None, layers.MS_REC | layers.MS_PRIVATE))):
            if not self._try("private_tmp", self._private_tmp):
                self.scratch = tempfile.mkdtemp(prefix="grpo-sandbox-")  # on the host: removed at exit
            if self.uid is not None:
                self._try("hidden_home", self._hide_untraversable)
        else:
            self.layers["private_tmp"] = self.layers["hidden_home"] = "needs the mount namespace"
        if self.uid is None:
            self.layers.setdefault("hidden_home", "needs a separate uid (root)")
        if self.layers["private_tmp"] and self.scratch == "/tmp":
            self.scratch = tempfile.mkdtemp(prefix="grpo-sandbox-")  # on the host: removed at exit
        self.landlock_abi = layers.landlock_abi()
        self._probe()
        if self.uid is not None:
            self._sweep_uid()  # a previous zygote with this uid may have died mid-run
        return {"layers": self.layers, "uid": self.uid, "pid": os.getpid(),
                "landlock": layers.landlock_features(self.landlock_abi)}

    def _try(self, name: str, action) -> bool:
        try:
            action()
            self.layers[name] = ""
            return True
        except OSError as exc:
            self.layers[name] = str(exc) or type(exc).__name__
            return False

    def _private_tmp(self) -> None:
        """Empty size-capped tmpfs over /tmp, /var/tmp and /dev/shm (in our mount namespace only):
        scratch space is bounded, and what the host keeps there is neither seen nor touched."""
        if any(p == d or p.startswith(d + "/") for p in self.read_paths for d in _TMP_DIRS):
            raise OSError(errno.EBUSY, "the Python installation lies under a temp dir")
        for path in _TMP_DIRS:
            if os.path.isdir(path):
                mode = "0711" if path == "/tmp" else "1777"
                layers.mount("tmpfs", path, "tmpfs", layers.MS_NOSUID | layers.MS_NODEV,
                             f"size={self.scratch_mb if path == '/tmp' else 16}m,mode={mode}")

    def _user_namespace(self) -> None:
        uid, gid = os.getuid(), os.getgid()
        layers.unshare(layers.CLONE_NEWUSER)
        layers.write_id_maps(uid, gid)
        # Become PID 1 of a PID namespace that this user namespace owns: only then may the
        # zygote setns() back into its own PID namespace after making one for each run.
        layers.unshare(layers.CLONE_NEWPID)
        child = os.fork()
        if child:
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        layers.prctl(layers.PR_SET_PDEATHSIG, signal.SIGKILL)
        self.pid = os.getpid()
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)

    def _hide_untraversable(self) -> None:
        """Cover each directory the sandbox uid cannot enter (e.g. /root, 0700) with an empty
        tmpfs, binding back read-only only the Python paths beneath it."""
        blocked: dict[str, list[str]] = {}
        outermost = [p for p in self.read_paths if os.path.isdir(p)
                     and not any(p.startswith(q + "/") for q in self.read_paths)]
        for path in outermost:
            top = _first_untraversable(path)
            if top is not None:
                blocked.setdefault(top, []).append(path)
        stage = os.path.join(self.scratch, ".stage")
        for n, (top, paths) in enumerate(blocked.items()):
            staged = []
            for i, path in enumerate(paths):
                target = os.path.join(stage, f"{n}-{i}")
                os.makedirs(target, exist_ok=True)
                layers.mount(path, target, None, layers.MS_BIND | layers.MS_REC)
                staged.append((path, target))
            layers.mount("tmpfs", top, "tmpfs", layers.MS_NOSUID | layers.MS_NODEV, "size=1m,mode=0755")
            for path, target in staged:
                os.makedirs(path, mode=0o755, exist_ok=True)
                layers.mount(target, path, None, layers.MS_BIND | layers.MS_REC)
                layers.mount(None, path, None, layers.MS_BIND | layers.MS_REMOUNT | layers.MS_RDONLY)
        if blocked:
            layers.mount("tmpfs", stage, "tmpfs", layers.MS_NOSUID | layers.MS_NODEV, "size=1m,mode=0700")

    def _probe(self) -> None:
        """Apply every per-execution layer once in a throwaway child and record which held."""
        result = self.run({"code": "print('ok')", "stdin": "", "limits": {}}, probe=True)
        self.cleanup()
        for line in result.pop("setup", []):
            name, _, why = line.partition(" ")
            self.layers[name] = why
        if self.uid is None:
            self.layers["uid"] = self.layers.get("uid", "not root")
        self.per_run = {n for n in PER_RUN if self.layers.get(n) == ""}
        self.layers["probe_run"] = "" if result["status"] == "ok" and result["stdout"] == "ok\n" else (
            f"{result['status']}: {result['detail'] or result['stderr'][-300:]}")

    def _sweep_uid(self) -> None:
        """Kill every process of the sandbox uid: a helper with that uid calls kill(-1, SIGKILL),
        which reaches exactly the processes it may signal (not itself)."""
        pid = os.fork()
        if pid == 0:
            try:
                os.setresuid(self.uid, self.uid, self.uid)
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            os._exit(0)
        os.waitpid(pid, 0)

    # ---- once per execution ---------------------------------------------------------------

    def run(self, job: dict, probe: bool = False) -> dict:
        started = time.monotonic()
        limits = _limits(job.get("limits") or {})
        pidns = "pid_namespace" in self.per_run or probe
        try:
            workdir = tempfile.mkdtemp(prefix="run-", dir=self.scratch)
            if self.uid is not None:
                os.chown(workdir, self.uid, self.uid)
            with open(os.path.join(workdir, PROGRAM), "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(job["code"])
            stdin_fd = _stdin_fd(job.get("stdin") or "")
            pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, setup status
        except OSError as exc:
            return _result("infra", detail=f"could not prepare the run: {exc}", started=started)
        try:
            pid, pidns_error = self._fork(pidns)
            if pid == 0:
                try:
                    self._program(workdir, stdin_fd, pipes, limits, probe, pidns_error)
                finally:
                    os._exit(127)
            os.close(stdin_fd)
            for _, w in pipes:
                os.close(w)
            return self._collect(pid, [r for r, _ in pipes], limits, started, probe)
        except OSError as exc:
            return _result("infra", detail=f"could not start the program: {exc}", started=started)
        finally:
            for fd in [stdin_fd, *(fd for pair in pipes for fd in pair)]:
                _close(fd)
            self.leftover = workdir  # removed by cleanup(), after the reply has gone out

    def cleanup(self) -> None:
        if self.leftover:
            shutil.rmtree(self.leftover, ignore_errors=True)
            self.leftover = ""

    def _fork(self, pidns: bool) -> tuple[int, str]:
        """Fork the program; with the layer, as PID 1 of a new PID namespace. unshare(CLONE_NEWPID)
        only affects later children and cannot be repeated, so the zygote returns to its own
        namespace (setns) right after each fork: one fork per run, no intermediate process."""
        error = ""
        if pidns:
            try:
                layers.unshare(layers.CLONE_NEWPID)
            except OSError as exc:
                error = str(exc)
        pid = os.fork()
        if pid and pidns and not error:
            layers.setns(self.own_pidns, layers.CLONE_NEWPID)
        return pid, error

    def _program(self, workdir: str, stdin_fd: int, pipes: list, limits: dict, probe: bool, pidns_error: str) -> None:
        status_w = pipes[2][1]
        if probe:
            os.write(status_w, f"setup pid_namespace {pidns_error}\n".encode())
        elif pidns_error:
            os.write(status_w, f"infra pid_namespace {pidns_error}\n".encode())
            os._exit(1)
        # Its own process group, but not setsid(): with scheduler autogroups a new session costs
        # a new CFS task group (measured: ~3 ms per run here). The zygote has no terminal anyway.
        os.setpgid(0, 0)
        for target, fd in ((0, stdin_fd), (1, pipes[0][1]), (2, pipes[1][1])):
            os.dup2(fd, target)
        _close_fds_except({0, 1, 2, status_w})
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(workdir)
        os.umask(0o077)
        os.environ.clear()
        os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=workdir, TMPDIR=workdir, LANG="C.UTF-8")
        steps = [("rlimits", lambda: layers.set_rlimits(limits["rlimits"]))]
        if self.uid is not None:
            steps.append(("uid", lambda: layers.drop_to_uid(self.uid)))
        elif self.layers.get("user_namespace") == "":
            steps.append(("uid", layers.drop_capabilities))
        steps += [
            ("pdeathsig", lambda: layers.prctl(layers.PR_SET_PDEATHSIG, signal.SIGKILL)),
            ("no_new_privs", lambda: layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)),
            ("landlock", lambda: layers.landlock_restrict(self.read_paths + _DEVICES, [workdir, "/dev/null"],
                                                          self.landlock_abi)),
        ]
        for name, step in steps:
            if not probe and name not in self.per_run:
                continue
            try:
                if name == "landlock" and self.landlock_abi < 1:
                    raise OSError(errno.ENOSYS, "Landlock is not available in this kernel")
                step()
                if probe:
                    os.write(status_w, f"setup {name} \n".encode())
            except OSError as exc:
                os.write(status_w, f"{'setup' if probe else 'infra'} {name} {exc}\n".encode())
                if not probe:
                    os._exit(1)
        # The zygote died during the setup (its death signal may have come too early)? In a PID
        # namespace the parent reads as 0 either way; there the replacement's uid sweep acts.
        if os.getppid() not in (self.pid, 0):
            os._exit(1)
        os.write(status_w, b"ready\n")
        os.close(status_w)
        os._exit(_run_main(os.path.join(workdir, PROGRAM)))

    def _collect(self, pid: int, fds: list[int], limits: dict, started: float, probe: bool) -> dict:
        """Wait for the program, keeping the output under its cap; then drain the pipes.

        Waits on the process (pidfd), not on its pipes: a run that ends within one poll slice
        wakes this process once. The pipes are enlarged, so the program rarely blocks on
        output, and they are drained at every slice; every wake-up counts on a busy host."""
        out_fd, err_fd, status_fd = fds
        bufs = {fd: bytearray() for fd in fds}
        cap = limits["output_bytes"]
        for fd in fds:
            os.set_blocking(fd, False)
        for fd in (out_fd, err_fd):
            _grow_pipe(fd, cap + 1)
        deadline = started + limits["wall_s"]
        pidfd = os.pidfd_open(pid)
        killed = None
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    killed = killed or "timeout"
                    self._kill(pid)
                    break
                exited = bool(select.select([pidfd], [], [], min(deadline - now, POLL_S))[0])
                if self._drain(bufs, out_fd, err_fd, cap) and killed is None:
                    killed = "output_limit"
                    self._kill(pid)
                    break
                if exited:
                    break
            _, wstatus, usage = os.wait4(pid, 0)
        finally:
            os.close(pidfd)
        if killed is None and usage.ru_utime + usage.ru_stime >= limits["rlimits"]["RLIMIT_CPU"][0]:
            # Init of a PID namespace ignores SIGXCPU: the hard limit's SIGKILL ends it instead.
            killed = "cpu"
        self._drain_after_exit(bufs, fds, cap)
        if "pid_namespace" not in self.per_run and self.uid is not None:
            self._sweep_uid()  # nothing else would catch a setsid + double-fork daemon
        return _verdict(bufs[out_fd], bufs[err_fd], bufs[status_fd], killed, wstatus, limits, started, probe)

    @staticmethod
    def _drain(bufs: dict, out_fd: int, err_fd: int, cap: int) -> bool:
        """Read what the output pipes hold; True when either went over the cap."""
        over = False
        for fd in (out_fd, err_fd):
            while len(bufs[fd]) <= cap:
                try:
                    data = os.read(fd, 1 << 20)
                except BlockingIOError:
                    break
                if not data:
                    break
                bufs[fd] += data
            if len(bufs[fd]) > cap:
                del bufs[fd][cap:]
                over = True
        return over

    @staticmethod
    def _drain_after_exit(bufs: dict, fds: list[int], cap: int) -> None:
        """Read to EOF; leftover processes (no PID namespace) may hold a pipe: give up after a bit."""
        until = time.monotonic() + EXIT_DRAIN_S
        open_fds = set(fds)
        while open_fds and time.monotonic() < until:
            for fd in list(open_fds):
                try:
                    data = os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not data or len(bufs[fd]) > cap:
                    open_fds.discard(fd)
                else:
                    bufs[fd] += data
            if open_fds:
                select.select(list(open_fds), [], [], max(0.0, until - time.monotonic()))
        for fd in fds[:2]:
            del bufs[fd][cap:]

    def _kill(self, pid: int) -> None:
        """Kill the program and everything it started.
        With the PID namespace, killing its init (the program) kills every process in it."""
        for target in (pid, -pid):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
        if "pid_namespace" not in self.per_run and self.uid is not None:
            self._sweep_uid()


_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
_DEVICES = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]


def _first_untraversable(path: str) -> str | None:
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


def _limits(given: dict) -> dict:
    wall = float(given.get("wall_s", 5.0))
    cpu_s = max(1, int(-(-float(given.get("cpu_s") or wall) // 1)))
    mem = int(given.get("memory_mb", 512)) << 20
    rlimits = {
        "RLIMIT_AS": mem, "RLIMIT_CPU": (cpu_s, cpu_s + 1),  # SIGXCPU at soft, SIGKILL a second later "RLIMIT_CORE": 0,
        "RLIMIT_NPROC": int(given.get("processes", 32)), "RLIMIT_NOFILE": int(given.get("open_files", 64)),
        "RLIMIT_FSIZE": int(given.get("file_size_mb", 16)) << 20,
    }
    return {"wall_s": wall, "output_bytes": int(given.get("output_bytes", 1 << 20)), "rlimits": rlimits,
            "memory_mb": mem >> 20}


def _stdin_fd(data: str) -> int:
    if not data:
        return os.open(os.devnull, os.O_RDONLY)
    fd = os.memfd_create("stdin", 0)
    os.write(fd, data.encode("utf-8", "surrogatepass"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _grow_pipe(fd: int, size: int) -> None:
    """Make the pipe hold `size` bytes where the host allows (fcntl F_SETPIPE_SZ)."""
    import fcntl

    for attempt in (min(size, 1 << 24), 1 << 20, 1 << 16):
        try:
            fcntl.fcntl(fd, 1031, attempt)  # F_SETPIPE_SZ
            return
        except OSError:
            continue


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _close_fds_except(keep: set[int]) -> None:
    top = 3
    for fd in sorted(keep | {2}):
        if fd > top:
            os.closerange(top, fd)
        top = max(top, fd + 1)
    os.closerange(top, 1 << 16)


def _status_lines(buf: bytes) -> dict:
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


def _result(status: str, stdout: str = "", stderr: str = "", exit_code=None, detail: str = "", started: float = 0.0,
            **extra) -> dict:
    return {"status": status, "stdout": stdout, "stderr": stderr, "exit_code": exit_code, "detail": detail,
            "seconds": round(time.monotonic() - started, 6), **extra}


def _verdict(out: bytes, err: bytes, status_buf: bytes, killed: str | None, wstatus: int, limits: dict,
             started: float, probe: bool) -> dict:
    st = _status_lines(bytes(status_buf))
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    extra = {"setup": st["setup"]} if probe else {}
    common = dict(stdout=stdout, stderr=stderr, started=started, **extra)
    if st["infra"]:
        return _result("infra", detail=f"sandbox layer failed: {st['infra']}", **common)
    if killed == "timeout":
        return _result("timeout", detail=f"wall-clock limit of {limits['wall_s']:g} s", **common)
    if killed == "cpu" and os.WIFSIGNALED(wstatus):
        return _result("timeout", exit_code=-os.WTERMSIG(wstatus), detail="CPU time limit", **common)
    if killed == "output_limit":
        return _result("output_limit", detail=f"output cut at {limits['output_bytes']} bytes", **common)
    if not st.get("ready"):
        return _result("infra", detail=f"the sandbox setup did not complete (wait status {wstatus})", **common)
    if os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU:
            return _result("timeout", exit_code=-sig, detail="CPU time limit", **common)
        if sig == signal.SIGXFSZ:
            return _result("error", exit_code=-sig, detail="file size limit", **common)
        return _result("error", exit_code=-sig, detail=f"killed by {name}", **common)
    code = os.WEXITSTATUS(wstatus)
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if code != 0 and last.startswith("MemoryError"):
        return _result("memory", exit_code=code, detail=f"memory limit of {limits['memory_mb']} MB", **common)
    return _result("ok" if code == 0 else "error", exit_code=code, detail=last if code else "", **common)


def _run_main(path: str) -> int:
    """Run the program as `python main.py` would, inside this forked interpreter."""
    import atexit
    import builtins
    import io
    import traceback
    import types

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="surrogateescape")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="surrogateescape")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True)
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(path))
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    code = 0
    try:
        with open(path, encoding="utf-8", errors="surrogatepass") as f:
            source = f.read()
        exec(compile(source, path, "exec"), module.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc.code)
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


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    try:
        print(value, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass
    return 1


class _Frames:
    """Length-prefixed pickles, byte-compatible with multiprocessing.connection.Connection."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            part = os.read(self.read_fd, n - len(buf))
            if not part:
                raise EOFError
            buf += part
        return buf

    def recv(self):
        (size,) = struct.unpack("!i", self._read(4))
        if size == -1:
            (size,) = struct.unpack("!Q", self._read(8))
        return pickle.loads(self._read(size))

    def send(self, obj) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        header = struct.pack("!i", len(data)) if len(data) < 0x7FFFFFFF else struct.pack("!iQ", -1, len(data))
        view = memoryview(header + data)
        while view:
            view = view[os.write(self.write_fd, view):]


def main() -> None:
    conn = _Frames(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    init = conn.recv()
    layers.prctl(layers.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != init["parent"]:
        return  # the pool died while we started
    zygote = Zygote(init)
    conn.send(("ready", zygote.setup()))
    while True:
        try:
            kind, job_id, job = conn.recv()
        except (EOFError, OSError):
            break
        if kind == "stop":
            break
        try:
            result = zygote.run(job)
        except Exception as exc:  # noqa: BLE001 - the zygote must answer every job
            result = _result("infra", detail=f"zygote error: {type(exc).__name__}: {exc}")
        conn.send(("result", job_id, result))
        zygote.cleanup()
    if zygote.scratch != "/tmp":
        shutil.rmtree(zygote.scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
