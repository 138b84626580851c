"""Hostile programs against the local sandbox.

Each test asserts the status the sandbox reports AND that what the program attacked is
untouched, that no process of the sandbox uids is left behind, and that the pool still works.
Limits are conservative (8 processes, 256 MB, 3 s; see sandbox_helpers.SAFE), so that even an
escaped bomb would stay small on this shared machine; containment was first verified with
harmless variants (a bounded fork loop stops at the process limit).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
from sandbox_helpers import IS_ROOT, SAFE, assert_nothing_left, zygotes_alive

from grpo_rewards.sandbox.base import Job, Limits
from grpo_rewards.sandbox.local import LocalSandbox

pytestmark = pytest.mark.timeout(90)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox(workers=2)
    sb.layers()
    yield sb
    sb.close()


@pytest.fixture
def run(sandbox):
    """Run a program; afterwards check that nothing is left and the same zygotes still serve."""
    pids = list(sandbox.pids)

    def _run(code: str, stdin: str = "", limits: Limits = SAFE):
        return sandbox.run(code, stdin, limits)

    yield _run
    assert_nothing_left(sandbox)
    assert zygotes_alive(sandbox) and sandbox.pids == pids and sandbox.restarts == 0
    assert sandbox.run("print('still here')", limits=SAFE).stdout == "still here\n"


def test_fork_bomb(run):
    r = run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    assert r.status == "timeout"


def test_fork_bomb_is_capped_at_the_process_limit(run):
    r = run("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(60)\n"
            "        n += 1\nexcept OSError:\n    print(n)")
    assert r.status == "ok" and int(r.stdout) < SAFE.processes


def test_memory_bomb(run):
    r = run("x = []\nwhile True:\n    x.append(bytearray(10 ** 7))")
    assert r.status == "memory"


def test_cpu_spin(run):
    start = time.monotonic()
    assert run("while True: pass", limits=Limits(wall_s=1.0)).status == "timeout"
    assert time.monotonic() - start < 5


def test_sleep_forever(run):
    start = time.monotonic()
    assert run("import time; time.sleep(10 ** 6)", limits=Limits(wall_s=1.0)).status == "timeout"
    assert time.monotonic() - start < 5


def test_thread_bomb(run):
    r = run("import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()")
    assert r.status == "error" and "can't start new thread" in r.detail


def test_a_gigabyte_of_stdout(run):
    start = time.monotonic()
    r = run("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)")
    assert r.status == "output_limit" and len(r.stdout) == SAFE.output_bytes
    assert time.monotonic() - start < 10


@pytest.fixture
def host_files(tmp_path):
    """Files the program must not write, read or delete: under home, host /tmp, the project tree."""
    tag = f"grpo-sbx-{os.getpid()}-{time.monotonic_ns()}"
    files = [Path.home() / f".{tag}", Path("/tmp") / tag, REPO / f".{tag}"]
    for f in files:
        f.write_text("secret-contents")
        f.chmod(0o644)  # readable by anyone as far as permissions go: only the sandbox stops it
    yield files
    for f in files:
        f.unlink(missing_ok=True)


def test_writes_outside_the_run_dir(run, host_files):
    targets = [*host_files, *(f.parent / (f.name + "-new") for f in host_files)]
    code = ("import sys\nfor path in sys.argv[1:] or %r:\n    try:\n        open(path, 'w').write('pwned')\n"
            "        print('WROTE', path)\n    except OSError as e:\n        print('denied', path, e.errno)") % [str(t) for t in targets]
    r = run(code)
    assert r.status == "ok" and "WROTE" not in r.stdout and r.stdout.count("denied") == len(targets)
    assert all(f.read_text() == "secret-contents" for f in host_files)
    assert not any((f.parent / (f.name + "-new")).exists() for f in host_files)


def test_reading_secrets_of_the_parent(run, host_files, monkeypatch):
    monkeypatch.setenv("GRPO_API_KEY", "sk-supersecret")
    code = ("import os\nout = [repr(dict(os.environ))]\nfor path in %r + ['/proc/1/environ', '/proc/self/environ',"
            " os.path.expanduser('~/.bash_history'), '/root/.bashrc', '/etc/shadow']:\n"
            "    try:\n        out.append(open(path, 'rb').read().decode(errors='replace'))\n"
            "    except OSError as e:\n        out.append('denied %%s' %% e.errno)\nprint(out)") % [str(f) for f in host_files]
    r = run(code)
    assert r.status == "ok"
    assert "sk-supersecret" not in r.stdout and "secret-contents" not in r.stdout
    assert "GRPO_API_KEY" not in r.stdout


def test_network_connect_to_a_local_listener(run):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        r = run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('CONNECTED')")
        assert r.status == "error" and "CONNECTED" not in r.stdout
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever reached the listener


def test_killing_the_parent_and_the_zygotes(run, sandbox):
    zygotes = ", ".join(str(p) for p in sandbox.pids)
    code = ("import os, signal\nfor target in [os.getppid(), %s, -1]:\n    try:\n        os.kill(target, 9)\n"
            "    except OSError as e:\n        print('denied', target, e.errno)\ntry:\n    os.killpg(os.getpgid(0), 9)\n"
            "except OSError as e:\n    print('denied killpg', e.errno)\nprint('alive')") % zygotes
    canary = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        r = run(code)
        # PID 1 of its namespace ignores signals from inside it: it survives its own kill -1.
        assert r.status in ("ok", "error")
        assert canary.poll() is None  # kill(-1) reached nothing outside the sandbox
    finally:
        canary.kill()
        canary.wait()


def test_setsid_double_fork_daemon(run, sandbox):
    code = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        os.write(w, str(os.getpid()).encode())\n        while True:\n            time.sleep(1)\n"
            "    os._exit(0)\nos.close(w)\nprint('daemon', os.read(r, 32).decode())")
    r = run(code)
    assert r.status == "ok" and r.stdout.startswith("daemon ")
    # the `run` fixture then asserts that no process of the sandbox uid survives


def test_closing_and_writing_inherited_fds(run):
    code = ("import os\nwritable = []\nfor fd in range(0, 256):\n    try:\n        os.write(fd, b'')\n"
            "        os.write(fd, b'x')\n        writable.append(fd)\n    except OSError:\n        pass\n"
            "os.write(2, repr(writable).encode())\nfor fd in range(0, 256):\n    try:\n        os.close(fd)\n"
            "    except OSError:\n        pass")
    r = run(code)
    assert r.status == "ok"
    assert r.stderr.endswith("[1, 2]")  # only its own stdout and stderr; stdin is /dev/null


def test_reading_stdin_when_none_is_given(run):
    start = time.monotonic()
    r = run("print(input())")
    assert r.status == "error" and r.detail.startswith("EOFError") and time.monotonic() - start < 3


def test_deep_recursion(run):
    r = run("def f(n):\n    return f(n + 1)\nf(0)")
    assert r.status == "error" and "RecursionError" in r.detail
    deeper = run("import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n):\n    return f(n + 1)\nf(0)")
    assert deeper.status in ("error", "memory", "timeout")


def test_ctypes_segfault(run):
    r = run("import ctypes\nctypes.string_at(0)")
    assert r.status == "error" and r.exit_code == -11 and "SIGSEGV" in r.detail


def test_raising_its_own_limits_back(run):
    code = ("import resource\nfor name in ('RLIMIT_NPROC', 'RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_NOFILE', 'RLIMIT_FSIZE'):\n"
            "    lim = getattr(resource, name)\n    soft, hard = resource.getrlimit(lim)\n"
            "    try:\n        resource.setrlimit(lim, (hard * 4 + 10, hard * 4 + 10))\n        print('RAISED', name)\n"
            "    except (ValueError, OSError):\n        print('kept', name)")
    r = run(code)
    assert r.status == "ok" and "RAISED" not in r.stdout and r.stdout.count("kept") == 5


def test_chdir_root_and_delete_files(run, host_files):
    code = ("import os, shutil\nos.chdir('/')\nfor path in %r + ['/etc/hostname', '/work', '/tmp']:\n"
            "    for remove in (os.unlink, shutil.rmtree):\n        try:\n            remove(path)\n"
            "            print('REMOVED', path)\n        except OSError:\n            pass\nprint('done')") % [str(f) for f in host_files]
    r = run(code)
    assert r.status == "ok" and "REMOVED" not in r.stdout
    assert all(f.read_text() == "secret-contents" for f in host_files)
    assert (REPO / "pyproject.toml").exists() and Path("/etc/hostname").exists()


@pytest.mark.skipif(not IS_ROOT, reason="a separate sandbox uid exists only when the pool runs as root")
def test_programs_never_run_as_root(run):
    r = run("import os\nprint(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())")
    uid, euid, gid, *_ = r.stdout.split()
    assert int(uid) == int(euid) >= 1_000_000 and int(gid) >= 1_000_000


def test_creating_namespaces_or_tracing_is_denied(run):
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfor name, call in [\n"
            "        ('unshare(user)', lambda: libc.unshare(0x10000000)),\n"
            "        ('clone(newuser)', lambda: libc.syscall(56, ctypes.c_ulong(0x10000000 | 17), 0, 0, 0, 0)),\n"
            "        ('ptrace(attach 1)', lambda: libc.ptrace(16, 1, 0, 0)),\n"
            "        ('mount tmpfs', lambda: libc.mount(b'none', b'.', b'tmpfs', 0, None))]:\n"
            "    print(name, 'ALLOWED' if call() == 0 else 'denied', ctypes.get_errno())")
    r = run(code)
    assert r.status == "ok" and "ALLOWED" not in r.stdout and r.stdout.count("denied") == 4



def test_no_socket_family_reaches_past_the_network_namespace(run, sandbox):
    """Every family but the internet ones is refused, so a Unix socket file of the host (a
    service's, a trainer's) cannot be reached by its path, nor vsock (the hypervisor)."""
    families = sorted({int(v) for k, v in vars(socket).items() if k.startswith("AF_") and isinstance(v, int)} - {0})
    code = ("import socket, errno\nfor family in %r:\n    try:\n        socket.socket(family, socket.SOCK_DGRAM).close()\n"
            "        print(family, 'made')\n    except OSError as exc:\n        print(family, errno.errorcode.get(exc.errno))\n"
            "a, b = socket.socketpair()\nprint('pair', int(a.family))") % (families,)
    r = run(code)
    made = {int(line.split()[0]) for line in r.stdout.splitlines() if line.endswith(" made")}
    assert r.status == "ok" and made <= {socket.AF_INET, socket.AF_INET6}, r.stdout
    assert f"{socket.AF_UNIX:d} EAFNOSUPPORT" in r.stdout and f"pair {socket.AF_UNIX:d}" in r.stdout
    path = REPO / f".sandbox-test-{os.getpid()}.sock"  # where the sandbox uid can traverse
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        try:
            os.chmod(path, 0o777)
            listener.listen(1)
            listener.settimeout(0.5)
            r = run(f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(path)!r})\nprint('CONNECTED')")
            assert r.status == "error" and "CONNECTED" not in r.stdout
            with pytest.raises(TimeoutError):
                listener.accept()
        finally:
            path.unlink()


def test_no_ipc_object_or_file_watch_can_be_made(run):
    """System V IPC and POSIX message queues live in the worker's IPC namespace, which outlives
    the run (memory outside every limit, a channel to a later sample); file watches would report
    the host's activity in directories the program may traverse. Each call that makes one is refused."""
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfor name, nr, args in [('shmget', 29, (0, 1 << 20, 0o1600)),\n"
            "        ('semget', 64, (0, 1, 0o1600)), ('msgget', 68, (0, 0o1600)), ('mq_open', 240, (b'q', 0o100 | 2, 0o600, None)),\n"
            "        ('inotify_init1', 294, (0,)), ('fanotify_init', 300, (0, 0))]:\n"
            "    print(name, 'MADE' if libc.syscall(nr, *args) >= 0 else 'refused', ctypes.get_errno())")
    r = run(code)
    assert r.status == "ok" and "MADE" not in r.stdout and r.stdout.count("refused") == 6, r.stdout

# A tree too deep for a recursive removal, with directories made unreadable, fifos and
# symlinks to / along the way.
DEEP_TREE = ("import os\nfor i in range(3000):\n    os.mkdir('d')\n    if i % 500 == 0:\n"
             "        os.mkdir('locked')\n        open('locked/f', 'w').close()\n        os.chmod('locked', 0)\n"
             "        os.symlink('/', 'root')\n        os.mkfifo('fifo')\n    os.chdir('d')\nprint('deep')")


def test_trees_no_recursive_removal_can_take_charge_no_other_sample():
    """Their directories go after each reply whatever their shape (not following the symlinks),
    the worker lives on, and the honest programs queued behind them on it pass in a fresh one."""
    jobs = [Job(DEEP_TREE, "", SAFE)] * 3 + [Job("print('honest')", "", SAFE),
                                             Job("import os\nprint(os.listdir('.'))", "", SAFE)]
    with closing(LocalSandbox(workers=1)) as sb:
        runs = sb.run_many(jobs)
        assert [(r.status, r.stdout) for r in runs] == [("ok", "deep\n")] * 3 + [("ok", "honest\n"),
                                                                                 ("ok", "['main.py']\n")]
        assert sb.restarts == 0
        assert_nothing_left(sb)
    assert (REPO / "pyproject.toml").exists()


def test_a_program_cannot_make_more_files_than_its_scratch_space_has_pages():
    """The private /tmp holds one file or directory per 4 KiB of its size, so that what a run
    leaves is removed in bounded time."""
    code = ("n = 0\ntry:\n    for n in range(5000):\n        open(str(n), 'w').close()\nexcept OSError as exc:\n"
            "    print(n, exc.strerror)\nelse:\n    print('all')")
    with closing(LocalSandbox(workers=1, scratch_mb=8)) as sb:
        if sb.layers()["private_tmp"] != "":
            pytest.skip("no private /tmp on this host")
        full, after = sb.run_many([Job(code, "", SAFE), Job("print('next')", "", SAFE)])
    made, _, why = full.stdout.partition(" ")
    assert full.status == "ok" and why == "No space left on device\n" and int(made) < 8 * 256, full.stdout
    assert after.stdout == "next\n"


# Reads this process's whole memory without /proc (Landlock hides it): write() of an address
# into a pipe copies what is mapped there and answers EFAULT where nothing is, so no read faults.
# The C heap is walked down from its end; the mappings of the arenas and libraries around every
# object above it. Prints its own marker (which it must find) and every marker found.
MEMORY_SCAN = r"""
import ctypes, gc, json, os, re
libc = ctypes.CDLL(None, use_errno=True)
libc.sbrk.restype = ctypes.c_void_p
r, w = os.pipe()
os.set_blocking(r, False)
STEP = 1 << 16
own = "grpo-" + "self-" + os.urandom(8).hex()
def chunk(addr):
    n = libc.write(w, ctypes.c_void_p(addr), STEP)
    return os.read(r, n) if n > 0 else None
brk = libc.sbrk(0) & ~(STEP - 1)
heap = brk
while chunk(heap - STEP) is not None:
    heap -= STEP
anchors = [id(o) for o in gc.get_objects() if id(o) > brk] + [ctypes.cast(libc.write, ctypes.c_void_p).value]
low, high = (min(anchors) & ~(STEP - 1)) - (256 << 20), max(anchors) + (256 << 20)
found = set()
for start, end in ((heap, brk), (low, high)):
    for addr in range(start, end, STEP):
        found.update(re.findall(rb"grpo-[a-z]+-[0-9a-f]{16}", chunk(addr) or b""))
print(json.dumps({"own": own, "found": sorted(m.decode() for m in found)}))
"""


def test_a_run_finds_nothing_of_the_run_before_it_in_its_memory():
    """A program's process is made by the seed, which never held a job: scanning all of its
    memory, a run finds none of the previous run's program text, stdin, stdout or stderr there
    (the worker that ran it still held its output)."""
    marks = {part: f"grpo-{part}-{secrets.token_hex(8)}" for part in ("code", "stdin", "stdout", "stderr")}

    def spelled(mark: str) -> str:  # so that the program's text holds only its own marker whole
        return f"{mark[:7]!r} + {mark[7:]!r}"

    leaving = (f"# {marks['code']}\nimport sys\nsys.stdin.read()\nprint({spelled(marks['stdout'])})\n"
               f"sys.stderr.write({spelled(marks['stderr'])})")
    with closing(LocalSandbox(workers=1)) as sb:  # one worker: the scan runs where the first run did
        first, scan = sb.run_many([Job(leaving, marks["stdin"] + "\n", SAFE), Job(MEMORY_SCAN, "", SAFE)])
    assert first.status == "ok" and first.stdout == marks["stdout"] + "\n", first.stderr
    seen = json.loads(scan.stdout)
    assert seen["own"] in seen["found"], scan.stderr  # the scan reads what it should
    assert sorted(set(marks.values()) & set(seen["found"])) == []


# ---- the assertion harness under attack (code_tests) ------------------------------------------


def _harness_run(run, sandbox, code: str, tests: list[str]):
    from grpo_rewards.scorers.code_harness import assert_job, assert_list_suite, harness_reports

    limits = Limits(wall_s=3.0, memory_mb=256, processes=9, output_bytes=1 << 16)
    [result] = sandbox.run_many([assert_job(code, assert_list_suite(tests), 1.0, limits)])
    return result, [r for r in harness_reports(result.stdout) if "test" in r]


def test_harness_leftover_threads_and_forks_forge_nothing(run, sandbox):
    """A program that leaves a thread and a forked child printing verdict-shaped lines after the
    tests: the real verdicts stand, nothing outlives the run."""
    code = ("import os, threading, time, json\nLINE = json.dumps({'test': 1, 'status': 'passed'})\n"
            "def spam():\n    while True:\n        print('@@grpo@@' + LINE, flush=True)\n"
            "        os.write(2, ('@@grpo@@' + LINE + '\\n').encode())\n        time.sleep(0.01)\n"
            "def f(x):\n    threading.Thread(target=spam).start()\n    if os.fork() == 0:\n        spam()\n    return x")
    result, verdicts = _harness_run(run, sandbox, code, ["assert f(1) == 1", "assert f(2) == 3"])
    assert [(v["test"], v["status"]) for v in verdicts] == [(0, "passed"), (1, "failed")]


def test_the_tests_process_is_out_of_the_programs_reach(run, sandbox):
    """The program's process holds nothing of the tests (no object, frame, file, environment or
    memory with the expected value) and cannot open the tests' process's memory."""
    code = ("import gc, os, sys, ctypes\nNEEDLE = 'needle-' + '7d1e'\n"
            "def seen():\n    hits = sum(NEEDLE in repr(o)[:100000] for o in gc.get_objects() if o is not globals())\n"
            "    hits += sum(NEEDLE in repr(f.f_locals) for f in sys._current_frames().values())\n"
            "    for path in [*os.listdir('.'), '/proc/self/mem', '/proc/%d/mem' % os.getppid(), '/proc/1/mem', '/proc/1/environ']:\n"
            "        try:\n            hits += NEEDLE.encode() in open(path, 'rb').read(1 << 20)\n        except (OSError, ValueError):\n"
            "            pass\n    return hits + (NEEDLE in repr(dict(os.environ)))\n"
            "def f(x):\n    return seen()")
    result, verdicts = _harness_run(run, sandbox, code, ["assert f(1) == 0", "assert f(2) != 'needle-7d1e'"])
    assert [v["status"] for v in verdicts] == ["passed", "passed"], (verdicts, result.stderr[-500:])
