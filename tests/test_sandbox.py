"""The local sandbox's ordinary behaviour: layers, statuses, parallel pool, recovery, plugin, check CLI."""

from __future__ import annotations

import json
import os
import subprocess
import shutil
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import replace

import pytest
from sandbox_helpers import IS_ROOT, SAFE, assert_nothing_left, running, zygotes_alive

from grpo_rewards.registry import get_registry
from grpo_rewards.sandbox import check, runner
from grpo_rewards.sandbox.base import Job, Limits
from grpo_rewards.sandbox.local import LAYERS, LocalSandbox

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sandbox():
    sb = LocalSandbox(workers=2)
    yield sb
    sb.close()


def test_every_layer_is_probed_and_reported(sandbox):
    layers = sandbox.layers()
    assert set(LAYERS) <= set(layers)  # no layer silently absent from the report
    assert layers["zygote"] == "" and layers["probe_run"] == ""
    expected = ["rlimits", "no_new_privs", "pdeathsig"]
    if IS_ROOT:  # as root this kernel (6.x, Landlock ABI 7) gives every layer; CI runs as root
        expected += ["net_namespace", "pid_namespace", "landlock", "private_tmp", "hidden_home", "seccomp"]
    for name in expected:
        assert layers[name] == "", f"{name}: {layers[name]}"
    assert (layers["uid"] == "") == IS_ROOT


def test_ok_error_and_exit_codes(sandbox):
    ok = sandbox.run("print(6 * 7)", limits=SAFE)
    assert (ok.status, ok.stdout, ok.exit_code) == ("ok", "42\n", 0)
    err = sandbox.run("def f():\n    raise KeyError('k')\nf()", limits=SAFE)
    assert err.status == "error" and err.exit_code == 1
    assert err.detail == "KeyError: 'k'" and 'main.py", line 3' in err.stderr
    assert "zygote" not in err.stderr  # the traceback shows the program, not the sandbox
    assert sandbox.run("import sys; sys.exit(3)", limits=SAFE).exit_code == 3
    assert sandbox.run("raise SystemExit('bye')", limits=SAFE).stderr == "bye\n"


def test_stdin_is_given_or_empty(sandbox):
    assert sandbox.run("print(input()[::-1])", "abc\n", SAFE).stdout == "cba\n"
    r = sandbox.run("import sys; print(repr(sys.stdin.read()))", limits=SAFE)
    assert (r.status, r.stdout) == ("ok", "''\n")


def test_program_sees_a_clean_private_world(sandbox, tmp_path_factory):
    host_file = f"/tmp/grpo-host-{os.getpid()}"
    open(host_file, "w").close()
    code = ("import os, json\n"
            "print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd(), 'uid': os.getuid(), 'pid': os.getpid(),"
            f" 'host_file': os.path.exists({host_file!r})}}))")
    os.environ["GRPO_TEST_SECRET"] = "hunter2"
    try:
        r = sandbox.run(code, limits=SAFE)
    finally:
        del os.environ["GRPO_TEST_SECRET"]
        os.unlink(host_file)
    assert r.status == "ok", r.stderr
    seen = json.loads(r.stdout)
    assert set(seen["env"]) == {"PATH", "HOME", "TMPDIR", "LANG"}
    assert seen["env"]["HOME"] == seen["cwd"] and seen["cwd"].endswith("/run")  # made afresh each run
    layers = sandbox.layers()
    if layers["pid_namespace"] == "":
        assert seen["pid"] == 1  # init of its own PID namespace
    if layers["private_tmp"] == "":
        assert seen["host_file"] is False  # a private /tmp: the host's files are not there
    if IS_ROOT:
        assert seen["uid"] >= 1_000_000


def test_files_written_stay_in_the_run_dir_and_vanish(sandbox):
    r = sandbox.run("open('out.txt', 'w').write('x' * 100); print(open('out.txt').read()[:3])", limits=SAFE)
    assert (r.status, r.stdout) == ("ok", "xxx\n")
    again = sandbox.run("import os; print(os.listdir('/tmp'), os.listdir('.'))", limits=SAFE)
    assert "out.txt" not in again.stdout


def test_statuses_timeout_memory_output_limit(sandbox):
    assert sandbox.run("while True: pass", limits=Limits(wall_s=1.0)).status == "timeout"
    mem = sandbox.run("x = bytearray(400 * 1024 * 1024)", limits=SAFE)
    assert mem.status == "memory" and "256 MB" in mem.detail
    out = sandbox.run("print('y' * 100_000)", limits=Limits(output_bytes=1000))
    assert out.status == "output_limit" and len(out.stdout) == 1000
    big = sandbox.run("open('big', 'wb').write(b'0' * (8 << 20))", limits=SAFE)  # over file_size_mb=4
    assert big.status == "error" and "File too large" in big.detail


def test_a_program_runs_as_python_main_py_would(sandbox):
    """Its name, file and arguments, its exit handlers, os._exit's code, a stdin larger than a
    pipe, a descriptor limit below the four its process receives the run's on, and the output
    cap on stderr: as under `python main.py`, whichever process made the program's."""
    code = ("import atexit, os, resource, sys\natexit.register(lambda: print('at exit'))\n"
            "print(__name__, os.path.basename(__file__), sys.argv == [__file__], "
            "resource.getrlimit(resource.RLIMIT_NOFILE))")
    r = sandbox.run(code, limits=replace(SAFE, open_files=4))
    assert (r.status, r.stdout) == ("ok", "__main__ main.py True (4, 4)\nat exit\n"), r.stderr
    ended = sandbox.run("import os\nprint('x', flush=True)\nos._exit(7)", limits=SAFE)
    assert (ended.status, ended.exit_code, ended.stdout) == ("error", 7, "x\n")
    assert sandbox.run("import sys\nprint(len(sys.stdin.read()))", "x" * (3 << 20), SAFE).stdout == f"{3 << 20}\n"
    err = sandbox.run("import sys\nsys.stderr.write('e' * 100_000)", limits=replace(SAFE, output_bytes=1000))
    assert err.status == "output_limit" and err.stderr == "e" * 1000


def test_cpu_limit_is_a_timeout(sandbox):
    r = sandbox.run("while True: pass", limits=Limits(wall_s=10.0, cpu_s=1.0))
    assert r.status == "timeout" and r.detail == "CPU time limit" and r.seconds < 9.5  # before the wall clock


@pytest.mark.timeout(60)
def _leave_a_tree(top: str, outside: str) -> None:
    """3000 levels (past a recursive walk's limit and PATH_MAX), with unreadable directories,
    fifos and symlinks out of it along the way."""
    here = os.open(".", os.O_RDONLY)
    try:
        os.chdir(top)
        for i in range(3000):
            os.mkdir("d")
            if i % 500 == 0:
                os.mkdir("locked")
                open("locked/f", "w").close()
                os.chmod("locked", 0)
                os.symlink(outside, "out")
                os.mkfifo("fifo")
            os.chdir("d")
    finally:
        os.fchdir(here)
        os.close(here)


@pytest.mark.skipif(not IS_ROOT, reason="makes the tree also as another user, who cannot override modes")
def test_a_run_directory_is_removed_whatever_its_shape():
    outside = tempfile.mkdtemp()
    open(os.path.join(outside, "kept"), "w").close()
    parent = tempfile.mkdtemp()
    os.chown(parent, 65534, 65534)
    try:
        os.mkdir(os.path.join(parent, "root"))
        _leave_a_tree(os.path.join(parent, "root"), outside)
        runner.remove_tree(os.path.join(parent, "root"))
        pid = os.fork()
        if pid == 0:  # as a user without capabilities: unreadable directories stop rm too
            try:
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                os.mkdir(os.path.join(parent, "user"))
                _leave_a_tree(os.path.join(parent, "user"), outside)
                runner.remove_tree(os.path.join(parent, "user"))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert os.listdir(parent) == [] and os.listdir(outside) == ["kept"]
    finally:
        shutil.rmtree(outside)
        subprocess.run(["rm", "-rf", parent], check=True)


def test_run_many_is_parallel_and_in_order(sandbox):
    jobs = [Job(f"import time; time.sleep(0.4); print({i})", "", SAFE) for i in range(6)]
    start = time.monotonic()
    results = sandbox.run_many(jobs)
    elapsed = time.monotonic() - start
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
    assert elapsed < 6 * 0.4 * 0.9  # two zygotes: well under the serial time


def test_run_many_takes_a_generator_a_job_at_a_time(sandbox):
    made = []

    def jobs():
        for i in range(5):
            made.append(i)
            yield Job(f"print({i})", "", SAFE)

    assert sandbox.lazy_jobs and [r.stdout for r in sandbox.run_many(jobs())] == [f"{i}\n" for i in range(5)]
    assert made == list(range(5))


def test_start_returns_at_once_and_the_first_jobs_are_made_while_the_pool_boots():
    sb = LocalSandbox(workers=1)
    try:
        sb.start()
        assert not sb.pids  # start() did not wait for the pool
        booted_when_made = []

        def jobs():
            for i in range(3):
                booted_when_made.append(bool(sb.pids))
                yield Job(f"print({i})", "", SAFE)

        assert [r.stdout for r in sb.run_many(jobs())] == ["0\n", "1\n", "2\n"]
        assert booted_when_made[0] is False and sb.layers()["zygote"] == ""
        pids = [sb._pool.zygote_pid, *sb.pids]
    finally:
        sb.close()
    assert not any(running(pid) for pid in pids)


def test_a_pool_that_cannot_start_answers_each_job_after_start(monkeypatch):
    sb = LocalSandbox(workers=1)
    monkeypatch.setattr(sb._pool, "map", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no pidfds here")))
    try:
        sb.start()
        runs = sb.run_many(Job(f"print({i})", "", SAFE) for i in range(3))
        assert [(r.status, r.detail) for r in runs] == [("infra", "sandbox pool: no pidfds here")] * 3
    finally:
        sb.close()


PEER_ECHO = ("import os, socket\ns = socket.socket(fileno=3)\nprint('peer stdout is discarded')\n"
             "os.write(2, b'peer stderr joins\\n')\ns.sendall(str(os.getpid()).encode() + b' ' + s.recv(100))")


def test_a_jobs_peer_runs_beside_it_sharing_only_a_socket(sandbox):
    """`Job.peer` runs in a process of its own (forked from a seed that never held a job, PID 1 of
    a PID namespace of its own as the job's process is of another), under the job's layers; the
    two meet on fd 3; the peer's output is dropped; the peer holds nothing of the job."""
    code = ("import gc, os, socket\ns = socket.socket(fileno=3)\ns.sendall(b'secret-' + b'4c1f')\n"
            "pid, echoed = s.recv(100).split()\nprint(int(pid) == os.getpid() == 1, echoed.decode())")
    peer = PEER_ECHO.replace("s.recv(100))", "s.recv(100) + (b'-seen' if any('secret-4c1f' in str(o) for o in "
                             "__import__('gc').get_objects()) else b''))")
    runs = sandbox.run_many([Job(code, "stdin-secret-4c1f", SAFE, peer=peer) for _ in range(3)])
    for r in runs:
        assert r.status == "ok" and r.stdout == "True secret-4c1f\n", (r.stdout, r.stderr)
        assert "peer stderr" not in r.stderr and "discarded" not in r.stdout + r.stderr


def test_a_peer_made_ahead_gets_its_input_first_and_shares_only_a_fresh_run_directory(sandbox):
    """Peers are made (isolated, waiting) ahead of their jobs; each job's peer reads the job's
    `peer_input` first, finds the run's directory empty (nothing of an earlier run) and writes
    there (the job's process reads it), and nowhere else."""
    code = ("import socket\ns = socket.socket(fileno=3)\nanswer = s.recv(200).decode()\n"
            "print(answer, open('from_peer').read())")
    peer = ("import os, socket\ns = socket.socket(fileno=3)\ngot = s.recv(100).decode()\n"
            "seen = sorted(os.listdir('.'))\nopen('from_peer', 'w').write(got)\n"
            "try:\n    open('/tmp/outside', 'w')\n    outside = 'written'\nexcept OSError:\n    outside = 'denied'\n"
            "s.sendall(f'{seen} {outside}'.encode())\ns.recv(1)")
    runs = sandbox.run_many([Job(code, "", SAFE, peer=peer, peer_input=f"input-{i}".encode()) for i in range(4)])
    assert [r.stdout for r in runs] == [f"[] denied input-{i}\n" for i in range(4)], [r.stderr for r in runs]
    assert_nothing_left(sandbox)


def test_a_peer_writes_only_in_its_own_directory(sandbox):
    """The seed's Landlock layer lets it make every peer's directory; each peer's own layer lets
    it write only in its own: not in the directories of the peers made ahead beside it (same uid,
    so file permissions would allow it), nor in their parent."""
    code = "import socket\nprint(socket.socket(fileno=3).recv(400).decode())"
    peer = ("import os, socket\ns = socket.socket(fileno=3)\ns.recv(2)\nwritten = []\n"
            "for name in ['../x', *(f'../peer-{n}/x' for n in range(64))]:\n"
            "    try:\n        open(name, 'w').write('planted')\n        written.append(name)\n"
            "    except OSError:\n        pass\n"
            "s.sendall(repr(written).encode())")
    # Each peer writes once its job has come (its directory is then the run's, named "run").
    runs = sandbox.run_many([Job(code, "", SAFE, peer=peer, peer_input=b"go") for _ in range(6)])
    assert [r.stdout for r in runs] == ["[]\n"] * 6, [r.stderr for r in runs]


def test_a_peer_made_ahead_for_other_limits_is_not_taken(sandbox):
    """The peer made ahead for the last job's limits is dropped when the next job's differ."""
    code = "import socket\nprint(socket.socket(fileno=3).recv(20).decode())"
    peer = ("import resource, socket\n"
            "socket.socket(fileno=3).sendall(str(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20).encode())")
    sizes = [256, 256, 200, 256, 200, 200]
    runs = sandbox.run_many([Job(code, "", replace(SAFE, memory_mb=mb), peer=peer) for mb in sizes])
    assert [r.stdout for r in runs] == [f"{mb}\n" for mb in sizes], [(r.status, r.detail, r.stderr) for r in runs]
    assert_nothing_left(sandbox)


def test_a_peer_ends_with_its_run_and_shares_its_process_limit(sandbox):
    """A peer that would run forever ends when the run does; a job without a peer has no fd 3."""
    forever = "import time\nwhile True:\n    time.sleep(1)"
    started = time.monotonic()
    done, alone = sandbox.run_many([Job("print('done')", "", SAFE, peer=forever),
                                    Job("import os\ntry:\n    os.fstat(3)\n    print('fd 3')\nexcept OSError:\n"
                                        "    print('no fd 3')", "", SAFE)])
    assert done.stdout == "done\n" and alone.stdout == "no fd 3\n"
    assert time.monotonic() - started < SAFE.wall_s
    assert_nothing_left(sandbox)


def test_jobs_with_a_peer_share_a_tests_process_that_no_change_of_a_run_outlives():
    """The code of jobs with a peer runs job after job in one process per worker (its CPU time
    adds up), each run in a fresh module with fresh descriptors; a run that changed what cannot
    be put back (a module's attribute) leaves the next job a fresh process, as does a timeout."""
    burn = ("import socket, time\nsocket.socket(fileno=3).sendall(b'x')\nt = time.process_time()\n"
            "while time.process_time() - t < 0.05:\n    pass\nprint(time.process_time() >= 0.05 * int(input()))")
    peer = "import socket\nsocket.socket(fileno=3).recv(1)"
    fresh = "import json, time\nprint(hasattr(json, 'leak'), time.process_time() < 0.05)"
    sb = LocalSandbox(workers=1)
    try:
        runs = sb.run_many([Job(burn, str(n), SAFE, peer=peer) for n in (1, 2, 3)])
        assert [r.stdout for r in runs] == ["True\n"] * 3, [r.stderr for r in runs]
        jobs = [Job("import json\njson.leak = 1", "", SAFE, peer=peer), Job(fresh, "", SAFE, peer=peer),
                Job("while True:\n    pass", "", replace(SAFE, wall_s=0.5), peer=peer),
                Job(fresh, "", replace(SAFE, wall_s=0.5), peer=peer)]
        runs = sb.run_many(jobs)
        assert [r.status for r in runs] == ["ok", "ok", "timeout", "ok"]
        assert runs[1].stdout == runs[3].stdout == "False True\n", [r.stderr for r in runs]
        assert_nothing_left(sb)
    finally:
        sb.close()


def test_jobs_with_and_without_a_peer_interleaved_on_one_worker_each_get_their_own_result():
    """Each change of kind (a peer or none, other limits) drops the processes the seed made ahead
    for the last kind; every job still gets its own output and exit code."""
    peer = "import socket\ns = socket.socket(fileno=3)\ns.sendall(s.recv(9))"
    echoed = "import socket\nprint(socket.socket(fileno=3).recv(9).decode())"
    plain = "import sys\nprint(input() * 2)\nsys.exit(int(input()))"
    jobs, expected = [], []
    for i in range(4):
        jobs += [Job(plain, f"{i}\n{i}\n", SAFE), Job(echoed, "", SAFE, peer=peer, peer_input=f"peer-{i}".encode()),
                 Job(plain, f"{i + 4}\n{i}\n", replace(SAFE, memory_mb=200)), Job(plain, f"{i}\n0\n", SAFE)]
        expected += [(f"{i}{i}\n", i), (f"peer-{i}\n", 0), (f"{i + 4}{i + 4}\n", i), (f"{i}{i}\n", 0)]
    with closing(LocalSandbox(workers=1)) as sb:
        runs = sb.run_many(jobs)
        assert [(r.stdout, r.exit_code) for r in runs] == expected, [(r.status, r.detail) for r in runs]
        assert sb.restarts == 0
        assert_nothing_left(sb)


def test_the_tests_process_reads_namespaces_version_tags_where_the_interpreter_keeps_them():
    """The check that a run changed no module's or class's namespace reads their version tags on
    CPython 3.11 and 3.12 (elsewhere it compares copies): every change renews a tag."""
    from grpo_rewards.sandbox import runner

    namespaces = [{"x": 1}, dict(vars(runner)), {}]  # far apart in memory and near each other
    read = runner._version_tags(namespaces)
    if sys.implementation.name == "cpython" and sys.version_info[:2] in ((3, 11), (3, 12)):
        assert read is not None
    if read is not None:
        before = read()
        assert read() == before  # reading changes nothing
        namespaces[0]["x"] = 2
        changed = read()
        namespaces[2]["y"] = 1
        last = read()
        assert [a != b for a, b in zip(before, changed)] == [True, False, False]
        assert [a != b for a, b in zip(changed, last)] == [False, False, True]


def test_inherited_objects_are_frozen_but_the_programs_garbage_is_collected(sandbox):
    """The child freezes what it inherits (no copy-on-write by the collector); the program's own
    cycles are still collected."""
    prog = ("import gc\nfrozen = gc.get_freeze_count()\nclass Node:\n    pass\n"
            "for _ in range(100):\n    a, b = Node(), Node()\n    a.b, b.a = b, a\ndel a, b\n"
            "print(frozen > 1000, gc.collect() >= 2)")
    [r] = sandbox.run_many([Job(prog, "", SAFE)])
    assert r.stdout == "True True\n", r.stderr


def test_a_killed_zygote_is_replaced_and_its_job_rerun():
    sb = LocalSandbox(workers=1)
    try:
        sb.layers()
        victim = sb.pids[0]
        jobs = [Job("import time; time.sleep(1.5); print('done')", "", SAFE)]
        killer = subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(0.5); os.kill({victim}, 9)"])
        [result] = sb.run_many(jobs)
        killer.wait(10)
        assert result.status == "ok" and result.stdout == "done\n"  # rerun on the replacement
        assert sb.restarts == 1 and sb.pids != [victim] and zygotes_alive(sb)
        assert_nothing_left(sb)
    finally:
        sb.close()


def test_required_layer_missing_gives_infra():
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        LocalSandbox(require=["teleport"])
    sb = LocalSandbox(workers=1, require=["user_namespace"] if IS_ROOT else ["uid"])  # n/a here: not active
    try:
        r = sb.run("print(1)")
        assert r.status == "infra" and "required sandbox layer" in r.detail
    finally:
        sb.close()


def test_close_stops_every_zygote():
    sb = LocalSandbox(workers=2)
    sb.layers()
    pids = [sb._pool.zygote_pid, *sb.pids]
    sb.close()
    assert not any(running(pid) for pid in pids)
    sb.close()  # twice is fine


def test_zygote_never_imports_the_project_or_torch(sandbox):
    r = sandbox.run("import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                    "('torch', 'grpo_rewards', 'pydantic', 'numpy', 'threading')))", limits=SAFE)
    assert r.stdout == "[]\n"


def test_registered_as_the_local_sandbox_plugin():
    assert get_registry().sandbox("local") is LocalSandbox


def test_sandbox_check_prints_every_layer_and_exits_0(capsys):
    assert check.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["layer"] for row in report["layers"]] == list(LAYERS)
    assert all(row["got"] == row["expected"] for row in report["live"])
    assert check.main(["--no-live"]) == 0
    assert "landlock" in capsys.readouterr().out


def test_sandbox_check_explains_a_missing_layer():
    rows = check.layer_rows({"landlock": "Landlock is not available in this kernel", "uid": "n/a: not root"})
    by_name = {name: (state, meaning) for name, state, meaning in rows}
    assert by_name["landlock"][0] == "MISSING" and "not available" in by_name["landlock"][1]
    assert by_name["uid"][0] == "not needed"
    assert by_name["zygote"][0] == "MISSING"  # not reported means missing, never assumed


def test_rlimits_match_the_requested_limits():
    code = ("import resource\nprint([resource.getrlimit(getattr(resource, 'RLIMIT_' + n)) for n in "
            "('AS', 'CORE', 'NPROC', 'NOFILE', 'FSIZE', 'CPU')])")
    with closing(LocalSandbox(workers=1)) as fresh:  # no job with a peer yet: the worker keeps no process
        r = fresh.run(code, limits=Limits(wall_s=3.0, memory_mb=300, processes=7, open_files=40, file_size_mb=5))
    assert eval(r.stdout) == [(300 << 20, 300 << 20), (0, 0), (7, 7), (40, 40), (5 << 20, 5 << 20), (3, 4)]


@pytest.mark.skipif(not IS_ROOT, reason="RLIMIT_NPROC binds only the sandbox's own uid (root)")
def test_the_processes_a_worker_keeps_do_not_count_against_a_program():
    """RLIMIT_NPROC counts every process of the uid, and a worker keeps some under it after a job
    with a peer (the peers made ahead, the tests' process): a program forks as many children
    then as on a fresh worker."""
    forks = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
             "            time.sleep(60)\n        n += 1\nexcept OSError:\n    print(n)")
    # Like code_tests' peers, these wait for their input: those made ahead stay alive.
    peer_job = Job("import socket\nprint(socket.socket(fileno=3).recv(9).decode())", "", SAFE,
                   peer="import socket\ns = socket.socket(fileno=3)\ns.sendall(s.recv(9))", peer_input=b"ok")
    with closing(LocalSandbox(workers=1)) as fresh:
        alone = fresh.run(forks, limits=SAFE)
        assert fresh.run_many([peer_job])[0].stdout == "ok\n"
        beside = fresh.run(forks, limits=SAFE)
        for _ in range(20):  # the seed reaps the peer the worker killed as soon as it is scheduled
            if beside.stdout == alone.stdout:
                break
            time.sleep(0.05)
            beside = fresh.run(forks, limits=SAFE)
    assert alone.status == beside.status == "ok" and int(alone.stdout) == SAFE.processes - 1
    assert beside.stdout == alone.stdout
