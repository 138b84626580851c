"""Does GRPO make the model better? Base eval, one training run per seed, each final model evaluated
against the base on the same held-out problems, then a table and a plot of the eval curve over seeds.

    .venv/bin/python scripts/learning_experiment.py examples/smollm2_rg.yaml --seeds 1 2 3 \\
        --eval-size 512 --out docs/results/rg_experiment

Every stage is a real `grpo-train` / `grpo-train eval` command (printed before it runs), each under
`nice` when asked. A stage whose output exists is skipped (training continues with --resume), so a
stopped experiment is continued by running the same command again. Writes in --out:
base.json, seed_<S>/ (the run, eval.json), summary.json, results.md (the table), curve.png. The base is
evaluated after the seeds and each gain is computed from the two result files, so `--seeds 2` on one
core and `--seeds 3` on another, in separate commands, fill one --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from grpo_core.evaluate import compare
from grpo_rewards.fileio import atomic_path, write_atomic

BIN = Path(sys.executable).parent


def run(command: list[str], nice: int | None) -> dict[str, float]:
    """Run a command to completion; its wall seconds, CPU seconds and peak RSS (GiB), from wait4."""
    command = (["nice", "-n", str(nice)] if nice is not None else []) + command
    print("+ " + shlex.join(command), file=sys.stderr, flush=True)
    started = time.perf_counter()
    proc = subprocess.Popen(command)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"learning_experiment: {command[0]} exited with {proc.returncode}; fix it and run again to continue")
    return {"wall_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_gib": usage.ru_maxrss / 2**20}  # ru_maxrss is in KiB on Linux


def eval_command(args: argparse.Namespace, output: Path, *extra: str, num_samples: int | None = None) -> list[str]:
    samples = args.num_samples if num_samples is None else num_samples
    return [str(BIN / "grpo-train"), "eval", args.config, "--size", str(args.eval_size), "--num-samples",
            str(samples), "--threads", str(args.threads), "--output", str(output), "--no-progress",
            *[x for s in args.set for x in ("--set", s)], *args.set_eval, *extra]


def train_and_eval(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    run_dir = args.out / f"seed_{seed}"
    record: dict[str, Any] = {"seed": seed}
    cost_file = run_dir / "cost.json"
    if not (run_dir / "complete.json").exists():  # a finished run's adapter may be gone (results kept in git)
        sets = [f"seed={seed}", f"output_dir={run_dir.resolve()}", f"torch_threads={args.threads}",
                "report_to=[]", *args.set]
        if args.max_steps:
            sets.append(f"max_steps={args.max_steps}")
        cost = run([str(BIN / "grpo-train"), args.config, "--resume", *[x for s in sets for x in ("--set", s)]],
                   args.nice)
        write_atomic(cost_file, json.dumps(cost))
    record["train"] = json.loads(cost_file.read_text()) if cost_file.exists() else {}
    if args.train_only:
        return record
    eval_file = run_dir / "eval.json"
    if not eval_file.exists():
        record["eval_cost"] = run(eval_command(args, eval_file, "--adapter", str(run_dir / "final"), "--seed", str(seed)),
                                  args.nice)
    record["eval"] = json.loads(eval_file.read_text())
    record["metrics"] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    return record


def trl_run(args: argparse.Namespace) -> dict[str, Any]:
    """TRL on the same recipe under a wall-clock budget; each adapter checkpoint evaluated like the
    in-training evals (the config's eval_size, greedy), the last one also on --eval-size (greedy unless
    --trl-num-samples)."""
    out = args.out / f"trl_seed_{args.trl_seed}"
    if not (out / "clock.jsonl").exists() or not list(out.glob("checkpoint-*")):
        run([sys.executable, str(Path(__file__).with_name("trl_recipe.py")), args.config, "--seed", str(args.trl_seed),
             "--budget-minutes", str(args.trl_budget_minutes), "--save-steps", str(args.trl_save_steps),
             "--out", str(out), *[x for s in args.set for x in ("--set", s)]], args.nice)
    if args.train_only:
        return {}
    clock = {e["step"]: e for e in map(json.loads, (out / "clock.jsonl").read_text().splitlines())}
    curve = []
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    for checkpoint in checkpoints:
        result_file = checkpoint / "heldout.json"
        if not result_file.exists():
            run([str(BIN / "grpo-train"), "eval", args.config, "--adapter", str(checkpoint), "--num-samples", "0",
                 "--threads", str(args.threads), "--output", str(result_file), "--no-progress",
                 *[x for s in args.set for x in ("--set", s)]], args.nice)
        step = int(checkpoint.name.split("-")[1])
        accuracy = json.loads(result_file.read_text())["metrics"]["greedy_accuracy"]["value"]
        curve.append({"step": step, "minutes": clock[step]["wall_s"] / 60, "accuracy": accuracy})
    final = out / "eval.json"
    if checkpoints and not final.exists():
        run(eval_command(args, final, "--adapter", str(checkpoints[-1]), "--seed", str(args.trl_seed),
                         num_samples=args.trl_num_samples), args.nice)
    return {"curve": curve, "eval": json.loads(final.read_text()) if final.exists() else None}


def paired_gain(result: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """`result` minus the base on the same problems (what `grpo-train eval --compare` computes)."""
    settings = result["settings"]
    return compare(result, base, settings["seed"], settings["bootstrap_rounds"])


def grpo_core_curve(run_record: dict[str, Any], key: str) -> list[dict[str, float]]:
    """(minutes of training, held-out accuracy) at each in-training eval: step times summed."""
    minutes, curve = 0.0, []
    for entry in run_record["metrics"]:
        minutes += entry.get("step_seconds", 0.0) / 60
        if key in entry:
            curve.append({"step": entry["step"], "minutes": minutes, "accuracy": entry[key]})
    return curve


def interval(entry: dict[str, Any], signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(entry['value'])} [{f.format(entry['low'])}, {f.format(entry['high'])}]"


def table(base: dict[str, Any], runs: list[dict[str, Any]], pass_key: str) -> str:
    """The markdown table: base and each seed, greedy accuracy and pass@k with intervals, the paired gain, cost."""
    lines = [f"| model | greedy accuracy [95% CI] | {pass_key} [95% CI] | greedy gain vs base [paired 95% CI] | "
             f"{pass_key} gain | steps | s/step | wall | peak RSS |",
             "|---|---|---|---|---|---|---|---|---|"]
    m = base["metrics"]
    lines.append(f"| base | {interval(m['greedy_accuracy'])} | {interval(m[pass_key]) if pass_key in m else '-'} "
                 f"| | | | | {base.get('seconds', 0):.0f} s (eval) | |")
    for r in runs:
        m, c, cost = r["eval"]["metrics"], r["eval"]["comparison"], r["train"]
        steps = [e for e in r["metrics"] if "step_seconds" in e]
        per_step = sorted(e["step_seconds"] for e in steps)[len(steps) // 2] if steps else float("nan")
        lines.append(f"| seed {r['seed']} | {interval(m['greedy_accuracy'])} | "
                     f"{interval(m[pass_key]) if pass_key in m else '-'} | {interval(c['greedy_accuracy'], True)} | "
                     f"{interval(c[pass_key], True) if pass_key in c else '-'} | {len(steps)} | {per_step:.1f} | "
                     f"{cost.get('wall_s', 0) / 60:.1f} min | {cost.get('peak_rss_gib', 0):.2f} GiB |")
    gains = [r["eval"]["comparison"]["greedy_accuracy"]["value"] for r in runs]
    if gains:
        seeds = f"{len(gains)} seed{'s' if len(gains) > 1 else ''}"
        lines.append(f"\nMean greedy gain over {seeds}: {sum(gains) / len(gains):+.3f}; "
                     f"seeds whose paired interval excludes 0: "
                     f"{sum(r['eval']['comparison']['greedy_accuracy']['low'] > 0 for r in runs)} of {len(runs)}.")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict[str, Any]], key: str, path: Path) -> None:
    """The in-training eval curve: the mean over seeds, a band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    curves = [{e["step"]: e[key] for e in r["metrics"] if key in e} for r in runs]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    if not steps:
        return
    values = np.array([[c[s] for s in steps] for c in curves])  # (seeds, evals)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.fill_between(steps, values.min(0), values.max(0), alpha=0.25, label=f"lowest to highest of {len(runs)} seeds")
    for row in values:
        ax.plot(steps, row, color="C0", linewidth=0.7, alpha=0.5)
    ax.plot(steps, values.mean(0), color="C0", marker="o", label="mean over seeds")
    ax.set(xlabel="training step", ylabel=key.replace("eval/", "held-out greedy "), ylim=(0, 1))
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")


def plot_against_time(curves: dict[str, list[dict[str, float]]], path: Path) -> None:
    """Held-out greedy accuracy against training wall time, one line per trainer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, curve in curves.items():
        ax.plot([c["minutes"] for c in curve], [c["accuracy"] for c in curve], marker="o", label=label)
    ax.set(xlabel="training wall time (minutes; evaluation excluded)", ylabel="held-out greedy accuracy", ylim=(0, 1))
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="the training recipe (e.g. examples/smollm2_rg.yaml)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-size", type=int, default=512, help="held-out problems of the before/after evals")
    parser.add_argument("--num-samples", type=int, default=8, help="samples per problem for pass@k (0: greedy only)")
    parser.add_argument("--max-steps", type=int, help="override the recipe's max_steps (a pilot)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--nice", type=int, help="run every command under nice -n N")
    parser.add_argument("--set", action="append", default=[], help="override a config value, for training and "
                        "every eval (KEY=VALUE, repeatable)")
    parser.add_argument("--set-eval", action="append", default=[], metavar="ARG",
                        help="an extra argument for every eval, e.g. --set-eval=--batch-size=16 (repeatable)")
    parser.add_argument("--trl-seed", type=int, help="also train this seed with TRL's GRPOTrainer (scripts/trl_recipe.py)")
    parser.add_argument("--trl-budget-minutes", type=float, default=45.0)
    parser.add_argument("--trl-num-samples", type=int, default=0, help="samples per problem in TRL's final eval "
                        "(0: greedy only; the comparison with TRL is held-out accuracy against training time)")
    parser.add_argument("--trl-save-steps", type=int, default=20, help="TRL adapter checkpoints (evaluated) every N steps")
    parser.add_argument("--out", type=Path, default=Path("docs/results/rg_experiment"),
                        help="where results go; the default is kept in git (adapters and checkpoints are ignored)")
    parser.add_argument("--train-only", action="store_true", help="run the training stages (every seed, then TRL) "
                        "and stop; a later run without it evaluates them, so runs compare under one machine state")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [train_and_eval(args, seed) for seed in args.seeds]
    if args.train_only:
        if args.trl_seed is not None:
            trl_run(args)
        return 0
    # The base is evaluated last and compared at report time, so seeds and the base can run as
    # separate commands on separate cores, in any order.
    base_file = args.out / "base.json"
    if not base_file.exists():
        run(eval_command(args, base_file), args.nice)
    base = json.loads(base_file.read_text())
    for r in runs:
        r["eval"]["comparison"] = paired_gain(r["eval"], base)
    pass_key = f"pass@{args.num_samples}"
    accuracy_key = f"eval/{base['accuracy_scorer']}"
    write_atomic(args.out / "results.md", table(base, runs, pass_key))
    plot(runs, accuracy_key, args.out / "curve.png")
    summary = {"base": base["metrics"], "runs": [{"seed": r["seed"], "metrics": r["eval"]["metrics"],
                                                  "comparison": r["eval"]["comparison"], "train": r["train"]}
                                                 for r in runs]}
    if args.trl_seed is not None:
        trl = trl_run(args)
        curves = {f"TRL GRPOTrainer (seed {args.trl_seed})": trl["curve"]}
        for r in runs:  # every seed: how far one seed of either trainer is from another
            curves[f"grpo_core (seed {r['seed']})"] = grpo_core_curve(r, accuracy_key)
        plot_against_time(curves, args.out / "vs_trl.png")
        summary["trl"] = {"curve": trl["curve"], "metrics": trl["eval"] and trl["eval"]["metrics"],
                          "comparison": trl["eval"] and paired_gain(trl["eval"], base)}
    write_atomic(args.out / "summary.json", json.dumps(summary, indent=1))
    print((args.out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
