"""The composite's score cache: a batch in which half the completions repeat, scored with the cache
on and off, side by side in one run.

What a collapsing policy produces: each prompt's G = 8 completions are 4 distinct ones, each twice
(the completions and golds are math_bench's: CHAMP solution texts with a final answer in one of
eight styles). One composite holds the math workers open for the whole run, as a trainer's does,
so no timed run pays their start; every timed run builds fresh composites (every cache starts
empty) and gets a batch of its own (its own seed), so the workers' parse caches are as cold as for
a new training step. Two cases:

- `cold`: one batch, empty caches: only the repeats within the batch can be saved;
- `next step`: the same batch scored again by the same composite (a policy that has stopped
  changing), so the repeats across batches are saved too.

Configurations: `off` (no caching at all: no score cache, and math_accuracy with `cache_size: 0`,
which verifies every sample, repeats too), `today` (no score cache, math_accuracy as it ships: it
verifies each distinct (gold, answer) pair once per batch and keeps a verdict cache of its own)
and `on` (the score cache, math_accuracy as it ships). Scorers: math_accuracy, and think_format +
repetition, cheap text scorers without a cache of their own (for them `today` is `off`). The
totals of every configuration are checked equal once, on one batch, before the timed runs.

    flock /tmp/bench.lock python bench/cache_bench.py [--golds 64] [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from math_bench import build_cases  # noqa: E402 - the bench directory is not a package

from grpo_rewards import build  # noqa: E402
from grpo_rewards.fileio import write_atomic  # noqa: E402

G = 8
SPECS = {
    "math_accuracy": [{"scorer": "math_accuracy"}],
    "think_format+repetition": [{"scorer": "think_format"}, {"scorer": "repetition"}],
}


def half_duplicate_batch(golds: int, seed: int = 0) -> list[dict]:
    """`golds` prompts x G completions; each prompt's completions are 4 distinct ones, each twice."""
    samples, *_ = build_cases(golds, G // 2, seed=seed)
    batch = []
    for g in range(golds):
        distinct = samples[g * (G // 2):(g + 1) * (G // 2)]
        for s in distinct + distinct:
            batch.append({"prompt": f"problem {g}", "completion": s.completion, "answer": s.reference["answer"]})
    return batch


CONFIGS = ("off", "today", "on")


def spec_of(scorers: list[dict], config: str) -> dict:
    scorers = [dict(s) for s in scorers]
    for s in scorers:
        if s["scorer"] == "math_accuracy" and config == "off":
            s["params"] = {"cache_size": 0}  # its own verdict cache
    return {"cache_size": 4096 if config == "on" else 0, "scorers": scorers}


def time_once(spec: dict, batch: list[dict], steps: int) -> tuple[float, list, float | None]:
    """Seconds to score `batch` `steps` times with one fresh composite; its last totals; hit rate."""
    with build(spec) as reward:
        start = time.perf_counter()
        for _ in range(steps):
            out = reward.score(batch, group_size=G)
        seconds = time.perf_counter() - start
        return seconds, out.totals, reward.cache.hit_rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--golds", type=int, default=64, help="prompts in the batch (x 8 completions)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions of each configuration")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    batch = half_duplicate_batch(args.golds)
    distinct = len({(r["prompt"], r["completion"]) for r in batch})
    print(f"batch: {len(batch)} completions, {distinct} distinct; load average {os.getloadavg()[0]:.2f}")
    # One composite holds the math workers open for the whole run (as a trainer's does), so no
    # timed run pays their start; each timed run gets a batch of its own (its own seed), so the
    # workers' parse caches are as cold as for a new training step's completions.
    with build(spec_of(SPECS["math_accuracy"], "off")) as holder:
        holder.score(half_duplicate_batch(4, seed=10_000), group_size=G)
        results = run_all(args, batch)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        write_atomic(args.json, json.dumps(results, indent=2) + "\n")
    return 0


def run_all(args: argparse.Namespace, batch: list[dict]) -> dict:
    results, seed = {}, 0
    for name, scorers in SPECS.items():
        configs = CONFIGS if name == "math_accuracy" else ("off", "on")
        # Equal results first, on one batch: the caches change no value.
        totals = {c: time_once(spec_of(scorers, c), batch, 2)[1] for c in configs}
        assert all(t == totals["off"] for t in totals.values()), "a cache changed a result"
        for case, steps in (("cold", 1), ("next step", 2)):
            times: dict[str, list[float]] = {c: [] for c in configs}
            hit_rate = None
            for _ in range(args.repeats):  # the configurations alternate, so load changes hit all alike
                for config in configs:
                    seed += 1
                    seconds, _, rate = time_once(spec_of(scorers, config), half_duplicate_batch(args.golds, seed), steps)
                    times[config].append(seconds)
                    hit_rate = rate if config == "on" else hit_rate
            med = {c: statistics.median(times[c]) for c in configs}
            row = {f"{c}_s": med[c] for c in configs} | {"hit_rate": hit_rate}
            row |= {f"speedup_vs_{c}": med[c] / med["on"] for c in configs if c != "on"}
            results[f"{name} / {case}"] = row
            print(f"{name:24s} {case:9s}  " + "  ".join(f"{c} {med[c]:7.3f} s" for c in configs) + "  " +
                  "  ".join(f"on vs {c} {med[c] / med['on']:5.2f}x" for c in configs if c != "on") +
                  f"  hit rate {hit_rate:.2f}")
    return results


if __name__ == "__main__":
    raise SystemExit(main())
