"""The sandbox's part of each pool worker: isolate it once, then fork one child per execution.

The local sandbox's pool (see `grpo_rewards/procpool`) starts its zygote as `python -I` with an
empty environment and finds this module and its siblings on the zygote's path as top-level
modules: only the standard library, `layers.py`, `runner.py` and the pool's own `zygote.py` are
ever imported (never the project or torch), so forking costs a millisecond or two where forking
a training process costs >100 ms. The zygote imports `PRELOAD` once (`preload`); each worker it
forks becomes one executor (`start`, with its slot's uid) and runs jobs (`run_task`).

Per worker, once: private network, IPC and UTS namespaces (no network at all), a private mount
namespace with size- and inode-capped empty tmpfs on /tmp, /var/tmp and /dev/shm, and an empty
tmpfs over every directory that the sandbox uid cannot traverse (root's home, which holds this
Python) with only the Python installation bound back read-only.
Per execution: a process forked by the *seed* (a child this worker forks before it receives any
job, so that no ancestor of a program's process ever held another job's text, input or output)
as PID 1 of a new PID namespace, so that killing it kills everything it started (daemons too).
It gets: a fresh dir as cwd (the same path every run, so the environment that names it is set
once per worker: PATH, HOME, TMPDIR, LANG and nothing else), stdin from a memfd or /dev/null,
only fds 0-2, rlimits (hard = soft), a non-root uid, a parent-death signal, no_new_privs,
Landlock and a seccomp filter; then its code runs in this (forked) interpreter. The seed makes
it ahead of its job, isolated and waiting for the run's descriptors; the worker sends them,
enforces the wall clock and the output cap, and learns how it ended from the seed, its parent.
A job with a peer (code_tests' assertion tests) is the exception: its code runs in one long-lived
process per worker, isolated the same way, job after job (why, and what keeps runs apart:
runner.py, "the long-lived tests' process"); its peer is the process the seed made.
"""

from __future__ import annotations

import ast
import errno
import fcntl
import itertools
import json
import os
import select
import signal
import _signal
import socket
import struct
import sys
import tempfile
import time

import layers  # noqa: I001  (stdlib-only siblings, top-level modules in the sandbox's zygote)
import runner
import zygote

# Modules the programs commonly import, loaded once here so that each forked child has them
# already (imports after the uid drop can also only read what Landlock allows).
PRELOAD = ("base64 importlib.util marshal fcntl array bisect collections copy dataclasses datetime decimal enum "
           "fractions functools hashlib heapq io itertools json math numbers operator random re statistics "
           "string struct textwrap traceback types typing unicodedata atexit linecache numbers pickle socket")
PROGRAM = "main.py"
PER_RUN = ("pid_namespace", "rlimits", "uid", "drop_caps", "pdeathsig", "no_new_privs", "landlock", "seccomp")
PEER_FD = 3  # a job's peer and its code hold their end of the socket here
CONTROL_FD = 4  # the tests' process's socket to its worker (see runner.serve_runs)
PEERS_AHEAD = 4  # peers the seed makes per request, each waiting for a job of the kind asked
# The most processes a worker keeps under its uid beside a peer (the peers made ahead, the tests'
# process): RLIMIT_NPROC counts them, so the peer's limit is raised by as many.
KEPT_PROCESSES = PEERS_AHEAD + 1
# A plain run's process (a job without a peer) is made one at a time, asked for after each reply:
# then no other process of the uid but the tests' process runs beside it, so its RLIMIT_NPROC
# (which counts them all) is the one the job asked for, and it is made while the next job comes.
PLAIN_AHEAD = 1
# The seed's report of a plain run's process that ended: its pid, wait status and CPU seconds.
REPORT = struct.Struct("=iid")
REPORT_WAIT_S = 5.0  # how long the worker waits for it once the process has ended
SEED_COMPILED_KEEP = 8  # programs kept compiled (the same few for every run: one per scorer kind)
# Handlers a run must not inherit from its worker.
_RESET_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2)
POLL_S = 0.05  # output pipes are drained this often while a program runs
# Files and directories a private tmpfs holds, per MB of its size: one per 4 KiB page, as many as
# could each hold a page. Without a limit a program could make millions of empty ones, and
# removing its directory after the reply (runner.remove_tree) would take as long.
INODES_PER_MB = 256
EXIT_DRAIN_S = 0.5  # after the program exits, how long its leftover children may keep its pipes open


class Executor:
    """One pool worker's sandbox: its namespaces, its uid, and the runs it forks."""

    def __init__(self, init: dict) -> None:
        self.uid: int | None = init.get("uid")
        self.root = os.geteuid() == 0
        self.layers: dict[str, str] = {}  # name -> "" when active, else why not
        self.scratch = "/tmp"
        self.rundir = ""  # each run's working directory, made afresh at this path
        self.scratch_mb = int(init.get("scratch_mb", 128))
        self.read_paths = sorted({p for p in init.get("read_paths", []) if p})
        self.pid = os.getpid()
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
        self.per_run: set[str] = set()
        self.leftover = ""
        self.seed: socket.socket | None = None  # to the seed, which forks the jobs' processes
        # The seed's reports of plain runs' ends (see REPORT): its end in the seed, ours here.
        self.exits: socket.socket | None = None
        self.asked = ""  # the kind of process (see _kind) last asked of the seed
        self.asked_plain = False  # whether that kind is a plain run's
        self.last_kind = (None, None, None, "")  # (peer, limits, processes kept, kind): jobs come in runs of one kind
        self.ahead = 0  # how many of those the seed made and this worker has not taken yet
        self.reads_restricted = False  # in the seed: its own Landlock layer governs what peers read
        self.peer: dict | None = None  # the running job's peer: pid, pidfd, directory
        self.tests: dict | None = None  # the long-lived process that runs jobs with a peer (runner.serve_runs)
        self.watched: tuple[set, list] | None = None  # what its runs could change (runner.watched_dicts)
        self.compiled: dict[str, tuple] = {}  # source -> _parts: jobs' code (with a peer) and, in the seed, peers
        self.prepared: dict[str, tuple] = {}  # in the seed: peer source -> (code, module, streams), see _prepared
        self.peer_pids: set[int] = set()  # in the seed: its peers with a pidfd open, not reaped yet (see _reap)
        self.plain_pids: set[int] = set()  # in the seed: those of them that are plain runs' (their ends reported)
        self.report: dict = {}  # what setup() found, for the pool's ("layers",) task

    # ---- once per worker -------------------------------------------------------------------

    def setup(self) -> None:
        if not self.root:
            self.layers["uid"] = "n/a: not root, programs keep this user's uid"
            self._try("user_namespace", self._user_namespace)
        else:
            self.layers["user_namespace"] = "n/a: running as root, the namespaces need no user namespace"
            self.layers["drop_caps"] = "n/a: running as root, the uid change clears every capability"
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
        # Run directories (the run's, the peers' made ahead) live in one directory: the tests'
        # process, which outlives runs, may write below it (Landlock holds a directory, not a name).
        self.runs = os.path.join(self.scratch, "runs")
        os.mkdir(self.runs, 0o711)
        self.rundir = os.path.join(self.runs, "run")
        # What every run's environment is, set here once: setting it in each forked run cost that
        # run ~100 page faults (copy-on-write) of os.environ's machinery.
        os.environ.clear()
        os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=self.rundir, TMPDIR=self.rundir, LANG="C.UTF-8")
        self._probe()
        if self.uid is not None:
            self._sweep_uid()  # a previous worker with this uid may have died mid-run
        self._start_seed()
        self.report = {"layers": self.layers, "uid": self.uid, "pid": os.getpid(),
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
        """Empty size- and inode-capped tmpfs over /tmp, /var/tmp and /dev/shm (in our mount
        namespace only): scratch space is bounded, and what the host keeps there is neither seen
        nor touched.

        A Python installation under a temp dir (a clone or venv in /tmp) is bound back read-only:
        each such directory is opened before the tmpfs covers it and re-mounted from that fd."""
        under_tmp = [p for p in self.read_paths if os.path.isdir(p)
                     and any(p == d or p.startswith(d + "/") for d in runner.TMP_DIRS)]
        outermost = [p for p in under_tmp if not any(p.startswith(q + "/") for q in under_tmp)]
        kept = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in outermost]
        try:
            for path in runner.TMP_DIRS:
                if os.path.isdir(path):
                    mode = "0711" if path == "/tmp" else "1777"
                    mb = self.scratch_mb if path == "/tmp" else 16
                    layers.mount("tmpfs", path, "tmpfs", layers.MS_NOSUID | layers.MS_NODEV,
                                 f"size={mb}m,nr_inodes={mb * INODES_PER_MB},mode={mode}")
            for path, fd in kept:
                os.makedirs(path, mode=0o755, exist_ok=True)
                layers.mount(f"/proc/self/fd/{fd}", path, None, layers.MS_BIND | layers.MS_REC)
                layers.mount(None, path, None, layers.MS_BIND | layers.MS_REMOUNT | layers.MS_RDONLY)
        finally:
            for _, fd in kept:
                os.close(fd)

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
            top = runner.first_untraversable(path)
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
        if not self.root and self.layers.get("user_namespace") != "":
            self.layers["drop_caps"] = "n/a: no user namespace, so no capabilities to drop"
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
        limits = runner.parse_limits(job.get("limits") or {})
        peer = job.get("peer") or ""
        kind = "" if probe else self._kind(peer, job.get("limits") or {})
        channel: tuple = ()
        try:
            workdir = self.rundir
            if os.path.lexists(workdir):  # a cleanup that did not happen
                runner.remove_tree(workdir)
            program = None
            if peer:  # the code of a job with a peer is the caller's, the same for many runs: compiled once here
                program = self._parts(job["code"], os.path.join(workdir, PROGRAM))
            if probe:  # before the seed exists: the one program this worker forks itself
                self._make_dir(workdir)
            else:  # the process the seed made for it: its directory becomes the run's
                channel = (self._take_peer(kind, workdir, plain=not peer),)
            if peer:
                zygote.write_all(channel[0], job.get("peer_input") or b"")  # the peer starts on it now
            else:
                with open(os.path.join(workdir, PROGRAM), "w", encoding="utf-8", errors="surrogatepass") as f:
                    f.write(job["code"])
            stdin_fd = runner.stdin_fd(job.get("stdin") or "")
            pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, setup status
        except OSError as exc:
            for fd in channel:
                runner.close_quietly(fd)
            self._end_peer()
            self.leftover = self.rundir
            return runner.result("infra", detail=f"could not prepare the run: {exc}", started=started)
        try:
            if peer:  # the job's code runs in the tests' process, which set itself up when it started
                pid = self._tests_process((program, kind), limits)
                socket.send_fds(self.tests["control"], [b"run"], [stdin_fd, pipes[0][1], pipes[1][1], channel[0]])
                os.write(pipes[2][1], b"ready\n")
            elif probe:
                pid = self._fork_probe(workdir, stdin_fd, pipes, limits)
            else:  # its process waits, isolated, for the run's descriptors
                pid = self._send_run(channel[0], [stdin_fd, *(w for _, w in pipes)])
            if peer and not self.ahead:
                self._ask_peers(kind, plain=False)  # the next jobs', made while this one runs
            for fd in channel:  # the peer's end is its process's alone: a process that ends closes the channel
                os.close(fd)
            channel = ()
            os.close(stdin_fd)
            for _, w in pipes:
                os.close(w)
            return self._collect(pid, [r for r, _ in pipes], limits, started, probe)
        except OSError as exc:
            self._end_peer()
            self._end_tests()
            return runner.result("infra", detail=f"could not start the program: {exc}", started=started)
        finally:
            for fd in [stdin_fd, *(fd for pair in pipes for fd in pair), *channel]:
                runner.close_quietly(fd)
            self.leftover = workdir  # removed by cleanup(), after the reply has gone out

    def _fork_probe(self, workdir: str, stdin_fd: int, pipes: list, limits: dict) -> int:
        """The probe's program, forked by this worker (as PID 1 of a new PID namespace): its pid."""
        pid, pidns_error = self._fork(True)
        if pid == 0:
            try:
                fds = {0: stdin_fd, 1: pipes[0][1], 2: pipes[1][1]}
                self._child(workdir, fds, pipes[2][1], limits, True, pidns_error, None, os.path.join(workdir, PROGRAM))
            finally:
                os._exit(127)
        return pid

    def _send_run(self, channel: int, fds: list[int]) -> int:
        """Start a plain run: its process (see runner.run_when_sent) gets `fds` over its channel."""
        sock = socket.socket(fileno=channel)
        try:
            socket.send_fds(sock, [b"run"], fds)
        finally:
            sock.detach()
        return self.peer["pid"]

    def _kind(self, peer: str, limits: dict) -> str:
        """The seed's request for a job's process: a peer's code and the limits, or for a plain
        run (no peer) the limits and how many processes of the uid run beside it (the tests'
        process, if any). Made once for a run of jobs of one kind: escaping the code for each
        job cost more than comparing it with the last job's."""
        kept = 0 if peer else int(self.tests is not None)
        last_peer, last_limits, last_kept, kind = self.last_kind
        if peer != last_peer or limits != last_limits or kept != last_kept:
            kind = json.dumps({"peer": peer, "limits": limits} if peer else {"limits": limits, "kept": kept})
            self.last_kind = (peer, limits, kept, kind)
        return kind

    def _parts(self, source: str, path: str) -> tuple:
        """Code with definitions (a job's with a peer, a peer's) as (its definitions, its last
        statement, the source), compiled once under the name `path`: the definitions run once, in
        the module every run starts from (base.Job: they only define). Definitions None for code
        without statements, whose second part is then the whole code. SyntaxError as `compile`."""
        parts = self.compiled.get(source)
        if parts is None:
            if len(self.compiled) >= SEED_COMPILED_KEEP:
                self.compiled.clear()
            try:
                *definitions, start = ast.parse(source).body
                parts = (compile(ast.Module(definitions, []), path, "exec", dont_inherit=True),
                         compile(ast.Module([start], []), path, "exec", dont_inherit=True), source)
            except ValueError:  # not one statement
                parts = (None, compile(source, path, "exec", dont_inherit=True), source)
            self.compiled[source] = parts
        return parts

    @staticmethod
    def _defined(parts: tuple, path: str) -> tuple:
        """(the code each run runs, the `__main__` holding the definitions), the definitions run
        here; the whole code and no module where they fail (each run then reports it)."""
        definitions, code, source = parts
        if definitions is None:
            return code, None
        module = runner.main_module(path)
        try:
            exec(definitions, module.__dict__)
            return code, module
        except Exception:  # noqa: BLE001
            return compile(source, path, "exec", dont_inherit=True), None

    def _make_dir(self, path: str) -> None:
        os.mkdir(path, 0o700)
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)

    # ---- the seed: a clean process that forks the jobs' processes, each ahead of its job --------

    def _start_seed(self) -> None:
        """Fork the seed now, before this worker has received any job: the processes it forks
        (programs and peers) hold nothing of any job but what their own socket brings."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        exits, their_exits = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            mine.close()
            exits.close()
            self.exits = their_exits
            try:
                self._seed(theirs)
            finally:
                os._exit(0)
        theirs.close()
        their_exits.close()
        self.seed, self.exits = mine, exits

    def _seed(self, sock: socket.socket) -> None:
        """Per request (see _kind: a peer's code and limits, or a plain run's limits): fork
        PEERS_AHEAD such peers (PLAIN_AHEAD plain runs' processes), each isolated and waiting on
        its end of a new channel, in a directory of its own; answer each with its pid, the
        channel's other end and its status pipe (where a layer that failed is written)."""
        layers.prctl(layers.PR_SET_PDEATHSIG, signal.SIGKILL)  # ends with its worker
        self.pid = os.getpid()  # the parent its peers check for
        for sig in _RESET_SIGNALS:  # once here, not in each peer
            signal.signal(sig, signal.SIG_DFL)
        # A peer the worker killed is reaped at once: until then it counts against its uid's
        # process limit (and so against the running program's). Reaped, its CPU time counts as
        # the seed's children's.
        signal.signal(signal.SIGCHLD, lambda signum, frame: self._reap())
        # Every peer's output goes nowhere (holding the run's pipes, it would keep the run waiting
        # for its death): /dev/null on 0-2 here, so that each inherits it.
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        self._restrict_seed()
        made = itertools.count()
        while message := sock.recv(1 << 20):
            request = json.loads(message)
            plain = "peer" not in request
            path = os.path.join(self.rundir, PROGRAM if plain else "peer.py")
            prepared = None if plain else self._prepared(request["peer"], path)
            limits = self._peer_limits(request, plain)
            # Every peer's directory and descriptors first, then the forks back to back: each fork
            # makes the seed's memory copy-on-write again, and the seed's Python between two forks
            # would copy a few hundred pages.
            peers = [self._peer_parts(next(made)) for _ in range(PLAIN_AHEAD if plain else PEERS_AHEAD)]
            for peer in peers:
                if "error" not in peer:
                    self._fork_peer(peer, prepared, limits, path)
            for peer in peers:
                fds, ruleset = peer.pop("fds", []), peer.pop("ruleset", None)
                socket.send_fds(sock, [json.dumps(peer).encode()], [fds[1], fds[2], fds[4]] if peer.get("pid") else [])
                for fd in [*fds, *([] if ruleset is None else [ruleset])]:
                    os.close(fd)

    @staticmethod
    def _peer_limits(request: dict, plain: bool) -> dict:
        """The limits a requested process is isolated under. RLIMIT_NPROC counts every process of
        the uid, so it is raised by those its worker keeps beside it. A plain run's process
        receives its run's descriptors after its isolation: its descriptor limit leaves room for
        them until it lowers it to the one asked for (runner.run_when_sent)."""
        limits = runner.parse_limits(request["limits"])
        rlimits = limits["rlimits"]
        if plain:
            rlimits["RLIMIT_NPROC"] += request["kept"]
            limits["open_files"] = rlimits["RLIMIT_NOFILE"]
            rlimits["RLIMIT_NOFILE"] = max(rlimits["RLIMIT_NOFILE"], PEER_FD + 1 + runner.SENT_FDS)
        else:
            rlimits["RLIMIT_NPROC"] += KEPT_PROCESSES
        return limits

    def _peer_parts(self, number: int) -> dict:
        """A peer's directory, channel ends and status pipe (r, w), or why they could not be made
        (its pidfd is added when it is forked); and the Landlock layer it adds over the seed's,
        made here rather than in each peer (a peer without it makes the layer itself)."""
        fds: list[int] = []
        try:
            workdir = os.path.join(self.runs, f"peer-{number}")
            self._make_dir(workdir)
            fds = [*(s.detach() for s in socket.socketpair()), *os.pipe()]
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            return {"pid": 0, "error": str(exc)}
        peer = {"dir": workdir, "fds": fds}
        if self.reads_restricted:
            try:
                peer["ruleset"] = layers.landlock_ruleset([], [workdir, "/dev/null"], self.landlock_abi, reads=False)
            except OSError:
                pass
        return peer

    def _prepared(self, source: str, path: str) -> tuple:
        """In the seed: a peer's code as (the code each run runs, its `__main__`, its standard
        streams), its definitions run once (`_defined`) and its streams made once."""
        found = self.prepared.get(source)
        if found is None:
            if len(self.prepared) >= SEED_COMPILED_KEEP:
                self.prepared.clear()
            found = self.prepared[source] = (*self._defined(self._parts(source, path), path), runner.standard_streams())
        return found

    def _fork_peer(self, peer: dict, prepared: tuple, limits: dict, path: str) -> None:
        fds = peer["fds"]
        try:
            pid, pidns_error = self._fork("pid_namespace" in self.per_run)
        except OSError as exc:
            peer.update(pid=0, error=str(exc))
            return
        if pid == 0:
            try:  # 0-2: the seed's /dev/null
                code, module, streams = prepared or (None, None, ())
                self._child(peer["dir"], {PEER_FD: fds[0]}, fds[3], limits, False, pidns_error, code, path,
                            role="plain" if prepared is None else "run", module=module, streams=streams,
                            ruleset=peer.get("ruleset"))
            finally:
                os._exit(127)
        # The worker ends it by this pidfd, not by its pid: the seed reaps a peer as soon as it ends,
        # after which its pid may name another process. Not before its pidfd is open (`_reap`): a
        # peer that answers unasked may have ended already, and a zombie still has its pidfd.
        try:
            peer["fds"].append(os.pidfd_open(pid))
            peer["pid"] = pid
        except OSError as exc:  # out of descriptors: the peer gets EOF once its channel is closed, and ends
            peer.update(pid=0, error=f"no descriptor for the program's process: {exc}")
        if prepared is None:
            self.plain_pids.add(pid)
        self.peer_pids.add(pid)
        self._reap()  # it may have ended already, with its SIGCHLD handled before it was in peer_pids

    def _restrict_seed(self) -> None:
        """The seed's own Landlock layer: read the system and Python paths, write only below the
        run directories. Each peer then adds a layer that limits writing to its directory, so
        the read rules are made once here instead of in every peer."""
        if "landlock" not in self.per_run:
            return
        try:
            layers.landlock_restrict(self.read_paths + runner.DEVICES, [self.runs, "/dev/null"], self.landlock_abi)
            self.reads_restricted = True
        except OSError:
            pass  # each peer then makes the whole layer itself

    def _reap(self) -> None:
        """Reap the peers that have ended, of those in `peer_pids` only: one forked but without its
        pidfd yet stays a zombie until it is in the set. A plain run's process is reported to
        the worker, which is not its parent and so can learn how it ended from no one else."""
        for pid in list(self.peer_pids):
            try:
                done, wstatus, usage = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:  # reaped already, by this handler run within another
                self.peer_pids.discard(pid)
                continue
            if not done:
                continue
            self.peer_pids.discard(pid)
            if pid in self.plain_pids:
                self.plain_pids.discard(pid)
                try:  # never blocks the seed: a report that does not fit makes that run infra
                    self.exits.send(REPORT.pack(pid, wstatus, usage.ru_utime + usage.ru_stime), socket.MSG_DONTWAIT)
                except OSError:
                    pass

    def _ask_peers(self, kind: str, plain: bool) -> None:
        """Ask the seed for PEERS_AHEAD peers (PLAIN_AHEAD plain runs' processes) of this kind,
        taken by `_take_peer`."""
        try:
            self.seed.send(kind.encode())
        except OSError:
            os._exit(70)  # the seed is gone: the pool replaces this worker (a new seed needs a clean one)
        self.asked, self.asked_plain, self.ahead = kind, plain, PLAIN_AHEAD if plain else PEERS_AHEAD

    def _take_peer(self, kind: str, workdir: str, plain: bool) -> int:
        """The job's process (`plain`: the program's; else its peer), made ahead when the last
        job's was of the same kind: its directory becomes the run's (renamed: its Landlock rule
        holds the directory, not the name); returns the worker's end of its channel."""
        if self.ahead and self.asked != kind:  # made for other code or limits
            self._drop_peers()
        if not self.ahead:
            self._ask_peers(kind, plain)
        self.ahead -= 1
        channel = self._receive_peer()
        os.rename(self.peer["dir"], workdir)
        return channel

    def _drop_peers(self) -> None:
        while self.ahead:
            self.ahead -= 1
            try:
                os.close(self._receive_peer())
            except OSError:
                pass
            self._end_peer()

    def _receive_peer(self) -> int:
        try:
            message, fds, _, _ = socket.recv_fds(self.seed, 1 << 16, 3)
        except OSError:
            message = b""
        if not message:
            os._exit(70)  # the seed is gone: the pool replaces this worker
        answer = json.loads(message)
        if not answer["pid"]:
            raise OSError(errno.EAGAIN, f"no process for the program: {answer['error']}")
        self.peer = {"pid": answer["pid"], "dir": answer["dir"], "pidfd": fds[2]}
        try:
            status = os.read(fds[1], 4096).decode(errors="replace")  # at once for a peer made ahead
        finally:
            os.close(fds[1])
        if status != "ready\n":
            os.close(fds[0])
            raise OSError(errno.EPERM, f"the program's process: {status.partition(' ')[2].strip() or 'died'}")
        return fds[0]

    # ---- the tests' process: one per worker, for job after job with a peer (see runner.py) -------

    def _tests_process(self, kind: tuple, limits: dict) -> int:
        """The pid of the tests' process for jobs of this kind (the code's `_parts`, the limits),
        started now (isolated under every layer; Landlock lets it write below the run directories'
        parent) unless running already. It runs the definitions of the jobs' code once: compiled
        here, once for every tests' process of this worker."""
        if self.tests is not None and (self.tests["kind"][0] is not kind[0] or self.tests["kind"][1] != kind[1]):
            self._end_tests()
        if self.tests is not None:
            return self.tests["pid"]
        if self.watched is None:  # once: each tests' process inherits it
            self.watched = (set(sys.modules), runner.watched_dicts(dict(sys.modules)))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        status_r, status_w = os.pipe()
        # Its CPU limit covers all its runs; each run is held to its wall clock by this worker.
        limits = {**limits, "rlimits": {**limits["rlimits"]}}
        cpu = limits["rlimits"]["RLIMIT_CPU"][0] * runner.SERVE_RUNS
        limits["rlimits"]["RLIMIT_CPU"] = (cpu, cpu + 1)
        try:
            pid, pidns_error = self._fork("pid_namespace" in self.per_run)
            if pid == 0:
                try:
                    mine.close()
                    self._child(self.runs, {0: None, 1: None, 2: None, CONTROL_FD: theirs.fileno()}, status_w,
                                limits, False, pidns_error, kind[0], os.path.join(self.rundir, PROGRAM), role="serve")
                finally:
                    os._exit(127)
            self.tests = {"pid": pid, "control": mine, "kind": kind, "cpu": cpu, "runs": 0}
            os.close(status_w)
            status_w = -1
            status = bytearray()
            while chunk := os.read(status_r, 4096):  # until it is ready (it closes its end) or gone
                status += chunk
        finally:
            theirs.close()
            for fd in (status_r, status_w):
                runner.close_quietly(fd)
        if not runner.status_lines(status).get("ready"):
            self._end_tests()
            why = status.decode(errors="replace").partition(" ")[2].strip() or "died"
            raise OSError(errno.EPERM, f"the tests' process: {why}")
        return pid

    def _tests_reply(self) -> int | None:
        """After a run: the tests' process's exit code for it, or None when the process ended."""
        try:
            message = self.tests["control"].recv(64, socket.MSG_DONTWAIT)
        except OSError:
            message = b""
        if not message:
            return None
        code, clean = (int(x) for x in message.split())
        self.tests["runs"] += 1
        if not clean or self.tests["runs"] >= runner.SERVE_RUNS:  # a fresh one for the next job
            self._end_tests()
        return code

    def _end_tests(self) -> None:
        tests, self.tests = self.tests, None
        if tests is None:
            return
        tests["control"].close()  # it leaves at its next read, or dies here
        try:
            os.kill(tests["pid"], signal.SIGKILL)
            os.waitpid(tests["pid"], 0)
        except OSError:
            pass

    def cleanup(self) -> None:
        """After each reply: the run's files are removed, then (its directory needs room there)
        the next plain run's process is asked for (see PLAIN_AHEAD)."""
        if self.leftover:
            runner.remove_tree(self.leftover)
            self.leftover = ""
        if self.asked_plain and not self.ahead:
            self._ask_peers(self.asked, plain=True)

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

    def _child(self, workdir: str, fds: dict, status_w: int, limits: dict, probe: bool, pidns_error: str, program,
               path: str, role: str = "run", module=None, streams: tuple = (), ruleset: int | None = None) -> None:
        """In a forked child: the probe's program, or (forked by the seed) a process waiting for
        its job. `fds`: its descriptors, target -> fd (None: /dev/null); then every per-run layer,
        then by `role`: "run", `program` (compiled; None: the file at `path`) as `python path`
        would run it (a peer's in the `module` and with the `streams` the seed prepared), once;
        "plain", the file at `path` once its run's descriptors come (runner.run_when_sent);
        "serve" (the tests' process), `program` is the jobs' `_parts`, whose definitions run here
        once, under every layer, and whose last statement runs for each job its worker sends.
        `ruleset`: its Landlock layer, made by the seed."""
        status_w = fcntl.fcntl(status_w, fcntl.F_DUPFD_CLOEXEC, CONTROL_FD + 1)
        if probe:
            os.write(status_w, f"setup pid_namespace {pidns_error}\n".encode())
        elif pidns_error:
            os.write(status_w, f"infra pid_namespace {pidns_error}\n".encode())
            os._exit(1)
        # Its own process group, but not setsid(): with scheduler autogroups a new session costs
        # a new CFS task group (measured: ~3 ms per run here). The zygote has no terminal anyway.
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDWR) if None in fds.values() else None
        for target, fd in fds.items():
            os.dup2(null if fd is None else fd, target)
        zygote.close_fds_except({*fds, status_w, *([] if ruleset is None else [ruleset])})
        if not self._isolate(workdir, limits, status_w, probe, ruleset):
            os._exit(1)
        # The zygote died during the setup (its death signal may have come too early)? In a PID
        # namespace the parent reads as 0 either way; there the replacement's uid sweep acts.
        if os.getppid() not in (self.pid, 0):
            os._exit(1)
        if role == "serve":
            program, module = self._defined(program, path)
        os.write(status_w, b"ready\n")
        os.close(status_w)
        if role == "serve":
            os._exit(runner.serve_runs(CONTROL_FD, path, program, self.watched, module))
        if role == "plain":
            os._exit(runner.run_when_sent(PEER_FD, path, limits["open_files"]))
        os._exit(runner.run_main(path, program, module=module, streams=streams))

    def _isolate(self, workdir: str, limits: dict, status_w: int, probe: bool, ruleset: int | None = None) -> bool:
        """This process's per-run layers; False (written to `status_w`) when a required one failed."""
        for sig in _RESET_SIGNALS:  # by _signal: signal's enum wrappers would copy pages of the seed
            if _signal.getsignal(sig) != _signal.SIG_DFL:
                _signal.signal(sig, _signal.SIG_DFL)
        os.chdir(workdir)
        os.umask(0o077)
        steps = [("rlimits", lambda: layers.set_rlimits(limits["rlimits"]))]
        if self.uid is not None:
            steps.append(("uid", lambda: layers.drop_to_uid(self.uid)))
        elif self.layers.get("user_namespace") == "":
            steps.append(("drop_caps", layers.drop_capabilities))
        steps += [
            ("pdeathsig", lambda: layers.prctl(layers.PR_SET_PDEATHSIG, signal.SIGKILL)),
            ("no_new_privs", lambda: layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)),
            ("landlock", (lambda: layers.landlock_enforce(ruleset)) if ruleset is not None else
                         lambda: layers.landlock_restrict([] if self.reads_restricted else self.read_paths + runner.DEVICES,
                                                          [workdir, "/dev/null"], self.landlock_abi,
                                                          reads=not self.reads_restricted)),
            ("seccomp", layers.seccomp_restrict),
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
                    return False
        return True

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
            runner.grow_pipe(fd, cap + 1)
        # A plain run's process is the seed's child: its pidfd came from the seed, and so will its end.
        plain = self.peer is not None and self.peer["pid"] == pid
        pidfd = self.peer["pidfd"] if plain else os.pidfd_open(pid)
        waits = [pidfd, self.tests["control"]] if self.tests is not None and self.tests["pid"] == pid else [pidfd]
        try:
            killed = self._watch(pid, waits, bufs, (out_fd, err_fd), cap, started + limits["wall_s"])
            ended = self._ended(pid, waits, killed, limits, plain)
        finally:
            if not plain:
                os.close(pidfd)
            self._end_peer()
        if ended is None:
            return runner.result("infra", detail="the seed did not report how the program's process ended",
                                 started=started)
        wstatus, used, cpu = ended
        if killed is None and used >= cpu:
            # Init of a PID namespace ignores SIGXCPU: the hard limit's SIGKILL ends it instead.
            killed = "cpu"
        self._drain_after_exit(bufs, fds, cap)
        if "pid_namespace" not in self.per_run and self.uid is not None:
            self._sweep_uid()  # nothing else would catch a setsid + double-fork daemon
        return runner.verdict(bufs[out_fd], bufs[err_fd], bufs[status_fd], killed, wstatus, limits, started, probe)

    def _watch(self, pid: int, waits: list, bufs: dict, outputs: tuple[int, int], cap: int,
               deadline: float) -> str | None:
        """Until the program ends (or the tests' process answers), drain its output at each
        slice; kill it at the deadline or past the cap. Why it was killed, or None."""
        while True:
            now = time.monotonic()
            if now >= deadline:
                self._kill(pid, waits[0])
                return "timeout"
            exited = bool(select.select(waits, [], [], min(deadline - now, POLL_S))[0])
            if self._drain(bufs, *outputs, cap):
                self._kill(pid, waits[0])
                return "output_limit"
            if exited:
                return None

    def _ended(self, pid: int, waits: list, killed: str | None, limits: dict, plain: bool) -> tuple | None:
        """(wait status, CPU seconds used, CPU limit) of the run that ended; None when a plain
        run's end was not reported."""
        cpu = limits["rlimits"]["RLIMIT_CPU"][0]
        code = self._tests_reply() if len(waits) > 1 and killed is None else None
        if code is not None:  # a run of the tests' process, which goes on
            return code << 8, 0.0, cpu
        if len(waits) > 1:  # the tests' process ended (or was killed): reaped here
            cpu, self.tests = self.tests["cpu"], None
            waits[1].close()
        if plain:
            reported = self._reported_end(pid)
            return None if reported is None else (*reported, cpu)
        _, wstatus, usage = os.wait4(pid, 0)
        return wstatus, usage.ru_utime + usage.ru_stime, cpu

    def _reported_end(self, pid: int) -> tuple[int, float] | None:
        """The wait status and CPU seconds of the plain run's process `pid`, which has ended, as
        the seed reports them once it has reaped it (reports of processes dropped unused are
        skipped); None when none comes in time or the seed is gone."""
        deadline = time.monotonic() + REPORT_WAIT_S
        while select.select([self.exits], [], [], max(0.0, deadline - time.monotonic()))[0]:
            report = self.exits.recv(REPORT.size)
            if len(report) != REPORT.size:
                return None
            ended, wstatus, used = REPORT.unpack(report)
            if ended == pid:
                return wstatus, used
        return None

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

    def _end_peer(self) -> None:
        """The run is over: so is its peer, and (as init of its PID namespace) all it started."""
        peer, self.peer = self.peer, None
        if peer is None:
            return
        try:
            signal.pidfd_send_signal(peer["pidfd"], signal.SIGKILL)
        except OSError:
            pass
        os.close(peer["pidfd"])
        if os.path.lexists(peer["dir"]):  # not taken by a run
            runner.remove_tree(peer["dir"])

    def _kill(self, pid: int, pidfd: int) -> None:
        """Kill the program and everything it started: by its pidfd, as the seed may have reaped
        it and its pid name another process. With the PID namespace, killing its init (the
        program) kills every process in it; without, its process group goes too (a group's id
        stays taken while a member lives) and, with a uid of its own, every process of that uid."""
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        if "pid_namespace" in self.per_run:
            return
        try:
            os.kill(-pid, signal.SIGKILL)
        except OSError:
            pass
        if self.uid is not None:
            self._sweep_uid()


_executor: Executor | None = None


def preload() -> None:
    """In the zygote, once: what every worker and every program inherits."""
    for name in PRELOAD.split():
        __import__(name)
    try:
        layers._seccomp_fprog()  # the filter, built once for every forked run
    except OSError:
        pass  # the probe reports it


def start(slot: int, args: dict) -> None:
    """In a new worker: become the executor of `slot` (its uid), isolated and probed."""
    global _executor
    _executor = Executor({"uid": args["uids"][slot], "scratch_mb": args["scratch_mb"], "read_paths": args["read_paths"]})
    _executor.setup()


def run_task(task: tuple) -> dict:
    """("layers",): what `setup` found; ("run", job): the job's result."""
    if task[0] == "layers":
        return _executor.report
    try:
        return _executor.run(task[1])
    except Exception as exc:  # noqa: BLE001 - every job gets an answer
        return runner.result("infra", detail=f"sandbox worker error: {type(exc).__name__}: {exc}")


def cleanup() -> None:
    """After each reply has gone out: remove the run's files."""
    _executor.cleanup()
