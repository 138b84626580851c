"""Inputs that make sympy hang or eat memory: every sample returns within its limit, the pool
survives (killed workers are replaced), and the normal samples of a mixed batch are scored right."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.math import MathAccuracy
from grpo_rewards.procpool import WorkerPool

LIMIT_S = 1.0
random.seed(1234)
RANDOM_UNICODE = "".join(chr(random.randrange(0x20, 0x2FFFF)) for _ in range(400))

PATHOLOGICAL = {
    "power tower": "9^{9^{9^{9}}}",
    "10,000-char expression": "+".join(["7"] * 5000),
    "deeply nested fractions": "\\frac{1}{" * 300 + "2" + "}" * 300,
    "frac with missing braces": "\\frac{1}{2",
    "frac with stray braces": "\\frac12}{",
    "huge factorial": "(10^{10})!",
    "huge power": "123456789^{123456789}",
    "random unicode": RANDOM_UNICODE,
    "open LaTeX environment": "\\begin{pmatrix} 1 & 2 \\\\ 3 & \\begin{cases} x",
    "lone surrogate": "\ud800\udfff\ud800",
}


@pytest.fixture(scope="module")
def scorer():
    with MathAccuracy(timeout_s=LIMIT_S) as s:
        s.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])  # start the pool
        yield s


@pytest.mark.timeout(60)
@pytest.mark.parametrize("side", ["answer", "gold"])
@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_each_returns_within_the_limit(scorer, name, side):
    expr = PATHOLOGICAL[name]
    if side == "answer":
        sample = Sample(completion=f"The answer is $\\boxed{{{expr}}}$", reference={"answer": "5"})
    else:
        sample = Sample(completion="\\boxed{5}", reference={"answer": expr})
    start = time.monotonic()
    result = scorer.score([sample])[0]
    assert time.monotonic() - start < LIMIT_S + 1.0
    assert result.value != 1.0
    if result.value is None:
        assert result.info["reason"] in ("timeout", "unparseable gold"), result.info


# Extraction runs in the trainer's process, before any worker limit: it must stay linear.
HUGE_COMPLETIONS = {
    "unclosed \\( after a phrase": "The answer is " + "\\(" * 100_000,
    "unclosed boxes": "\\boxed{" * 100_000,
    "boxes in a row": "\\boxed{1} " * 100_000,
    "unclosed answer tags": "<answer>" * 100_000,
    "phrases": "the answer is " * 50_000,
    "one long word": "x" * 1_000_000,
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(HUGE_COMPLETIONS))
def test_huge_completions_are_scored_quickly(scorer, name):
    start = time.monotonic()
    result = scorer.score([Sample(completion=HUGE_COMPLETIONS[name], reference={"answer": "5"})])[0]
    assert time.monotonic() - start < LIMIT_S + 5.0
    assert result.value != 1.0


@pytest.mark.timeout(120)
def test_mixed_batch_scores_the_normal_samples(scorer):
    normal = [("\\boxed{\\frac{1}{2}}", "0.5", 1.0), ("The answer is 12.", "12", 1.0), ("#### 7", "8", 0.0),
              ("<answer>x+1</answer>", "1+x", 1.0), ("no answer at all", "3", 0.0)]
    samples, expected = [], []
    for i, expr in enumerate(PATHOLOGICAL.values()):
        samples.append(Sample(completion=f"\\boxed{{{expr}}}", reference={"answer": str(i)}))
        expected.append("pathological")
        completion, gold, value = normal[i % len(normal)]
        samples.append(Sample(completion=completion, reference={"answer": gold}))
        expected.append(value)
    pids_before = len(scorer._pool.pids)
    start = time.monotonic()
    results = scorer.score(samples)
    elapsed = time.monotonic() - start
    for result, want in zip(results, expected, strict=True):
        if want != "pathological":
            assert result.value == want, result.info
        else:
            assert result.value != 1.0
    # Two workers share the pathological samples; each costs at most the limit plus the kill grace.
    assert elapsed < len(PATHOLOGICAL) * (LIMIT_S + 1.0)
    assert len(scorer._pool.pids) == pids_before


@pytest.mark.timeout(120)
def test_killed_workers_are_replaced_and_their_pending_samples_rescored():
    # The OOM killer (or anything else) killing the workers mid-batch: the sample being checked is
    # None ("worker died"), the samples queued behind it are resubmitted and scored.
    with MathAccuracy(timeout_s=10, workers=1) as s:  # one worker, so the kill surely hits the busy one
        s.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])
        old = list(s._pool.pids)
        batch = [Sample(completion=c, reference={"answer": "5"})
                 for c in ["\\boxed{123456789^{123456789}}", "\\boxed{5}", "\\boxed{6}"]]
        killer = threading.Timer(3.0, lambda: [os.kill(pid, 9) for pid in old])
        killer.start()
        results = s.score(batch)
        killer.join()
        assert results[0].value is None and results[0].info["reason"] == "worker died", results[0].info
        assert [r.value for r in results[1:]] == [1.0, 0.0], results
        assert len(s._pool.pids) == 1 and s._pool.pids != old
        # A death is about the machine, not the sample: it is not cached, the next batch retries it.
        assert ("5", "123456789^{123456789}", "answer") not in s._cache
        assert ("5", "5", "answer") in s._cache


def test_worker_address_space_is_capped():
    with MathAccuracy(memory_mb=512) as s:
        s.score([Sample(completion="\\boxed{1}", reference={"answer": "1"})])
        for pid in s._pool.pids:
            with open(f"/proc/{pid}/limits") as f:
                line = next(x for x in f if x.startswith("Max address space"))
            assert line.split()[3] == str(512 * 1024 * 1024)


# -- the pool itself, with stdlib targets so the tasks are real code, not stand-ins -----------

@pytest.fixture(scope="module")
def eval_pool():
    pool = WorkerPool("builtins:eval", size=2, memory_mb=256)
    yield pool
    pool.close()


@pytest.mark.timeout(60)
def test_pool_kills_a_task_stuck_in_c_code(eval_pool):
    # The builtin sum over a range is one C loop that never checks for signals: only a kill stops it.
    hang = "sum(range(10 ** 13))"
    eval_pool.map([["1"]], 5)
    before = list(eval_pool.pids)
    start = time.monotonic()
    [results] = eval_pool.map([["1 + 1", hang, "2 + 2"]], 1.0)
    assert time.monotonic() - start < 1.0 + 1.5
    assert [r.status for r in results] == ["ok", "timeout", "not_run"]
    assert results[0].value == 2 and "killed" in results[1].detail
    assert len(eval_pool.pids) == 2 and eval_pool.pids != before
    assert [r.value for r in eval_pool.map([["3 * 3"]], 5)[0]] == [9]  # the replacement works


@pytest.mark.timeout(60)
def test_pool_interrupts_python_code_without_killing(eval_pool):
    eval_pool.map([["1"]], 5)
    before = sorted(eval_pool.pids)
    [results] = eval_pool.map([["__import__('time').sleep(30)", "5"]], 0.5)
    assert [r.status for r in results] == ["timeout", "ok"] and results[1].value == 5
    assert sorted(eval_pool.pids) == before


@pytest.mark.timeout(60)
def test_pool_memory_cap_turns_a_hog_into_an_error(eval_pool):
    [results] = eval_pool.map([["bytearray(4 * 1024 ** 3)", "len(bytearray(10 ** 6))"]], 10)
    assert results[0].status == "error" and "MemoryError" in results[0].detail
    assert results[1].value == 10 ** 6


@pytest.mark.timeout(60)
def test_pool_reports_a_worker_that_exits(eval_pool):
    [results] = eval_pool.map([["__import__('os')._exit(3)", "1"]], 5)
    assert results[0].status == "died" and "status 3" in results[0].detail
    assert results[1].status == "not_run"
    assert eval_pool.map([["4"]], 5)[0][0].value == 4


@pytest.mark.timeout(60)
def test_math_workers_do_not_import_the_trainers_heavy_modules():
    import torch  # noqa: F401 - the parent has torch loaded, as a trainer does

    probe = "sorted({m.split('.')[0] for m in __import__('sys').modules} & {'torch', 'numpy', 'transformers'})"
    result = _in_a_warm_worker(probe)
    assert result.status == "ok" and result.value == []


def _in_a_warm_worker(probe: str):
    """`probe` evaluated in a worker of a pool warmed up as math_accuracy's is."""
    pool = WorkerPool("builtins:eval", size=1, init="grpo_rewards.scorers.math_check:warm_up")
    try:
        [[result]] = pool.map([[probe]], 30)
        return result
    finally:
        pool.close()


@pytest.mark.timeout(60)
def test_pool_that_cannot_start_reports_unavailable():
    pool = WorkerPool("no_such_module_for_grpo_tests:f", size=2)
    try:
        start = time.monotonic()
        [results] = pool.map([["x", "y"]], 5)
        assert [r.status for r in results] == ["unavailable", "unavailable"]
        assert time.monotonic() - start < 30
    finally:
        pool.close()


def test_without_linux_the_scorer_says_what_is_missing_instead_of_scoring(monkeypatch):
    from grpo_rewards.procpool import pool

    monkeypatch.setattr(pool.sys, "platform", "darwin")
    with MathAccuracy() as scorer:
        [score] = scorer.score([Sample("q", "The answer is $\\boxed{2}$.", {"answer": "2"})])
    assert score.value is None and score.info["reason"] == "worker unavailable"
    assert "needs Linux" in score.info["detail"] and "darwin" in score.info["detail"]


def _probe(expr_in_math_check: str) -> str:
    return f"(lambda m: {expr_in_math_check})(__import__('grpo_rewards.scorers.math_check', fromlist=['_']))"


@pytest.mark.timeout(400)
def test_priming_runs_once_in_the_zygote_and_every_worker_inherits_it():
    # math_accuracy's priming: the zygote parses generated forms (ANTLR learns its predictions) once,
    # between its requests. The first workers do not wait for it; once it is done they are swapped
    # for forks that have it, and a worker killed for a timeout is replaced by another primed fork.
    pool = WorkerPool("builtins:eval", size=2, init="grpo_rewards.scorers.math_check:warm_up",
                      prime="grpo_rewards.scorers.math_check:prime_parser")
    left = _probe("-1 if m._prime_left is None else m._prime_left")
    try:
        first = [chunk[0].value for chunk in pool.map([[left], [left]], 5)]
        # forked and served before the zygote's priming began (-1: its first prime step had not run,
        # which happens on a loaded machine) or while most of the forms were still to prime
        assert all(left_to_prime == -1 or left_to_prime > 100 for left_to_prime in first), first
        assert pool.wait_primed(300)  # ~800 parses: tens of seconds on a loaded core
        assert [chunk[0].value for chunk in pool.map([[left], [left]], 5)] == [0, 0]
        before = list(pool.pids)
        [[killed, _]] = pool.map([["sum(range(10 ** 13))", "1"]], 0.5)
        assert killed.status == "timeout" and pool.pids != before and len(pool.pids) == 2
        start = time.monotonic()
        assert [chunk[0].value for chunk in pool.map([[left]] * 4, 5)] == [0] * 4
        assert time.monotonic() - start < 1.0  # the replacement is a fork: no import, no priming
        workers_cpu = [_cpu_s(pid) for pid in pool.pids]
        assert max(workers_cpu) < 0.5, workers_cpu  # the priming's seconds were the zygote's, not theirs
        assert _cpu_s(pool.zygote_pid) > 1.0
    finally:
        pool.close()


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.timeout(60)
def test_priming_that_fails_stops_and_the_workers_still_serve():
    pool = WorkerPool("builtins:eval", size=1, prime="builtins:exit")  # SystemExit on the first step
    try:
        assert [r.value for r in pool.map([["2 + 3", "7"]], 5)[0]] == [5, 7]
        assert pool.map([["8"]], 5)[0][0].value == 8
    finally:
        pool.close()


@pytest.mark.timeout(60)
def test_worker_freezes_its_warm_heap_so_full_collections_stay_short():
    # With sympy and math-verify loaded, a full collection scanning the start-up heap took ~0.1 s
    # inside whichever task it landed in; frozen in the zygote before the workers fork, it does not.
    result = _in_a_warm_worker("(__import__('gc').get_freeze_count(), len(__import__('gc').get_objects()))")
    frozen, unfrozen = result.value
    assert frozen > 100_000 and unfrozen < frozen // 10, result


@pytest.mark.timeout(60)
def test_a_dead_parent_leaves_no_zygote_and_no_worker_behind():
    # The trainer killed outright (no atexit, no finaliser): the zygote sees its control socket
    # close, kills and reaps its workers and exits; the workers also die with the zygote.
    import json
    import signal
    import subprocess
    import sys

    code = ("import json, os, sys\n"
            "from grpo_rewards.procpool import WorkerPool\n"
            "pool = WorkerPool('builtins:eval', size=2, memory_mb=256)\n"
            "assert pool.map([['1'], ['2']], 5)\n"
            "print(json.dumps([pool.zygote_pid] + pool.pids), flush=True)\n"
            "os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = json.loads(proc.stdout)
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _running(pid)]


def test_workers_are_out_of_reach_of_the_trainers_ctrl_c(eval_pool):
    # A terminal's Ctrl-C signals the foreground process group: the zygote's session is its own.
    eval_pool.map([["1"]], 5)
    for pid in [eval_pool.zygote_pid] + eval_pool.pids:
        assert os.getpgid(pid) != os.getpgid(0) and os.getsid(pid) != os.getsid(0)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has exited and only waits for its parent's reaping)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
