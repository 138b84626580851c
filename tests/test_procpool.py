"""The process pool's own options, as the local sandbox uses them: an isolated zygote that finds
its functions on a path, per-worker set-up with slots kept by replacements, per-chunk limits,
chunks pipelined to a worker and requeued when it is killed, and work after each reply."""

from __future__ import annotations

import os
import signal
import time

import pytest

from grpo_rewards.procpool import WorkerPool

pytestmark = pytest.mark.timeout(60)
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def _pool(size: int = 1, **options) -> WorkerPool:
    return WorkerPool("_procpool_tasks:evaluate", size, memory_mb=None, isolated=True, path=(TESTS_DIR,), **options)


def test_an_isolated_zygote_imports_neither_the_project_nor_threading_and_hides_its_path():
    pool = _pool()
    try:
        probe = "sorted(m for m in sys.modules if m.split('.')[0] in ('grpo_rewards', 'pydantic', 'threading'))"
        [[modules, path, env]] = pool.map([[probe, f"{TESTS_DIR!r} in sys.path", "sorted(__import__('os').environ)"]], 5)
        assert (modules.value, path.value) == ([], False)
        assert env.value == ["LANG", "PATH"]  # the trainer's environment stays out
    finally:
        pool.close()


def test_each_worker_is_set_up_for_its_slot_and_a_replacement_keeps_the_slot():
    pool = _pool(2, worker_init="_procpool_tasks:remember_slot", worker_args={"uids": [7, 8]})
    try:
        assert sorted(c[0].value for c in pool.map([["SLOT"], ["SLOT"]], 5)) == [(0, {"uids": [7, 8]}),
                                                                                (1, {"uids": [7, 8]})]
        before = list(pool.pids)
        [[died, _]] = pool.map([["__import__('os')._exit(0)", "1"]], 5)
        assert died.status == "died" and pool.restarts == 1 and len(set(pool.pids) - set(before)) == 1
        assert sorted(c[0].value[0] for c in pool.map([["SLOT"], ["SLOT"]], 5)) == [0, 1]
    finally:
        pool.close()


def test_a_worker_whose_set_up_fails_answers_unavailable_with_the_reason():
    pool = _pool(worker_init="_procpool_tasks:refuse")
    try:
        [results] = pool.map([["1", "2"]], 5)
        assert [r.status for r in results] == ["unavailable", "unavailable"]
        assert "ValueError: slot 0 refuses" in results[0].detail
    finally:
        pool.close()


def test_pipelined_chunks_behind_a_killed_worker_run_on_its_replacement():
    # Without interruption a task is only killed, at its own chunk's limit; the chunks already sent
    # behind it never started, so they run on the replacement, not as not_run.
    pool = _pool(pipeline=2, interrupt=False)
    try:
        hang = "__import__('time').sleep(30)"
        results = pool.map([[hang], ["1"], ["2"]], [0.5, 5, 5])
        assert [r[0].status for r in results] == ["timeout", "ok", "ok"]
        assert [r[0].value for r in results[1:]] == [1, 2] and "killed after 0.5 s" in results[0][0].detail
        assert (pool.kills, pool.restarts) == (1, 1)
    finally:
        pool.close()


def test_a_worker_that_ends_in_the_work_after_a_reply_charges_no_task_it_had_not_started():
    # The chunk sent behind (pipelined) and the next task of the same chunk had not started when
    # the worker ended after its reply: the first runs on the replacement, the second is not_run.
    pool = _pool(pipeline=2, after="_procpool_tasks:end_if_asked")
    try:
        results = pool.map([["end_after_reply()"], ["6 * 7"], ["end_after_reply()", "1"], ["2"]], 5)
        assert [[(r.status, r.value) for r in chunk] for chunk in results] == [
            [("ok", "asked")], [("ok", 42)], [("ok", "asked"), ("not_run", None)], [("ok", 2)]]
        assert pool.restarts == 2
    finally:
        pool.close()


def test_a_worker_that_never_starts_a_chunk_ends_each_with_an_answer():
    pool = _pool(pipeline=2, worker_init="_procpool_tasks:end_at_once")
    try:
        results = pool.map([["1"], ["2"]], 5)
        assert [chunk[0].status for chunk in results] == ["unavailable", "unavailable"]
        assert "before starting it" in results[0][0].detail
    finally:
        pool.close()


def test_work_after_each_reply_runs_once_per_task():
    pool = _pool(after="_procpool_tasks:count_reply")
    try:
        [results] = pool.map([["REPLIES"] * 3], 5)
        assert [r.value for r in results] == [0, 1, 2]
    finally:
        pool.close()


def test_lazy_chunks_are_taken_as_workers_have_room_and_a_failing_source_raises_after_the_sent_ones():
    pool = _pool(pipeline=1)
    try:
        taken = []  # when the pool took each chunk (CLOCK_MONOTONIC is the host's, in every process)

        def chunks():
            for i in range(3):
                taken.append(time.monotonic())
                yield [f"{i}", "__import__('time').sleep(0.05) or __import__('time').monotonic()"]

        results = pool.map(chunks(), lambda chunk: 5.0)
        assert [c[0].value for c in results] == [0, 1, 2]
        finished = [c[1].value for c in results]
        assert taken[1] > finished[0] and taken[2] > finished[1]  # one worker, no room: none taken ahead

        def failing():
            yield ["1"]
            raise KeyError("the source broke")

        with pytest.raises(KeyError, match="the source broke"):
            pool.map(failing(), 5)
        # Nothing of that batch is left in the worker's socket for the next one.
        assert [[r.value for r in c] for c in pool.map([["7"], ["8"]], 5)] == [[7], [8]]
        with pytest.raises(ValueError):
            pool.map([["1"], ["2"]], [5])  # one limit for two chunks
    finally:
        pool.close()


def test_start_boots_the_pool_in_the_background_and_map_uses_what_it_booted():
    pool = _pool(2)
    try:
        pool.start()
        assert pool.booting and not pool.pids  # it returned before the boot
        deadline = time.monotonic() + 30
        while pool.booting and time.monotonic() < deadline:
            time.sleep(0.01)
        booted = sorted(pool.pids)
        assert len(booted) == 2  # both workers forked, with no map
        pool.start()  # up already: nothing more starts
        assert not pool.booting
        assert [c[0].value for c in pool.map([["1 + 1"], ["2 + 2"]], 5)] == [2, 4]
        assert sorted(pool.pids) == booted
    finally:
        pool.close()


def test_a_close_right_after_start_leaves_no_process():
    pool = _pool(2)
    pool.start()
    pool.close()
    if pool._starting is not None:
        pool._starting.join(30)
    assert pool.pids == [] and pool.zygote_pid is None


def test_a_child_forked_while_the_pool_boots_can_use_it():
    pool = _pool(1)
    try:
        pool.start()
        assert pool.booting
        pid = os.fork()
        if pid == 0:  # the boot thread's lock was held at the fork: the child must not wait on it
            signal.alarm(20)
            try:
                [[result]] = pool.map([["6 * 7"]], 5)
                os._exit(0 if result.value == 42 else 1)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        pool.close()
