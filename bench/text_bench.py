"""Text scorers on 10,000 completions of 2,000 characters, on one core; TRL's functions side by side.

    python bench/text_bench.py [--n 10000] [--chars 2000] [--repeat 3] [--cases REGEX]

Prints a markdown table (best of `--repeat` runs, seconds per batch) to paste into docs/benchmarks.md.
Target: every scorer under 2 s per 10,000 completions. Where TRL ships an equivalent, it runs on the
same data in the same process, so the ratio is meaningful on a noisy shared machine.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' local BPE tokenizer

from grpo_rewards.scorer import Sample, Score  # noqa: E402
from grpo_rewards.scorers import text  # noqa: E402

WORDS = ("the answer is we compute then add multiply so get step first next finally x = 42 7 3 "
         "sum of numbers carry result check 我们 计算 答案 是 😀").split()


def completion(rng: random.Random, chars: int) -> str:
    parts, size = [], 0
    while size < chars - 60:
        if rng.random() < 0.08:
            word = f"\nStep {rng.randint(1, 9)}: "
        else:
            word = rng.choice(WORDS) + " "
        parts.append(word)
        size += len(word)
    body = "".join(parts)[: chars - 60]
    answer = rng.choice(['{"answer": 42}', "42", '{"answer": "x"}'])
    return f"<think>{body}</think>\n<answer>{answer}</answer>".ljust(chars)[:chars]


def best_of(repeat: int, fn) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of `repeat` runs: CPU time is what the shared machine's
    load distorts least."""
    runs = []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--chars", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="", help="only the scorers whose label matches this regex")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    rng = random.Random(0)
    texts = [completion(rng, args.chars) for _ in range(args.n)]

    from _text_helpers import build_tokenizer
    from transformers import AutoTokenizer

    # Trained on this corpus with a real-sized vocabulary: ~4 characters per token, as with real tokenizers.
    tok_dir = build_tokenizer(Path(tempfile.mkdtemp(prefix="bench-bpe-")), texts[:200], vocab_size=4000)
    ids = AutoTokenizer.from_pretrained(tok_dir)(texts, add_special_tokens=False)["input_ids"]
    plain = [Sample("", t) for t in texts]
    with_ids = [Sample("", t, {"completion_ids": x}) for t, x in zip(texts, ids, strict=True)]
    correctness = {"math": [Score(float(i % 2)) for i in range(args.n)]}
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}

    cases = [  # (label, scorer, samples, results)
        ("think_format", text.ThinkFormat(), plain, None),
        ("think_format (TRL-compatible params)", text.ThinkFormat(answer_tag=None), plain, None),
        ("tag_count", text.TagCount(), plain, None),
        ("regex_format (full)", text.RegexFormat(pattern=r"<think>.*?</think>\s*<answer>.*?</answer>\s*"), plain, None),
        ("length (chars)", text.Length(target=1500, tolerance=200), plain, None),
        ("length (tokenizer)", text.Length(target=600, tokenizer=str(tok_dir)), plain, None),
        ("cosine_length (completion_ids)", text.CosineLength(correctness_from="math", max_len=1000, unit="tokens"),
         with_ids, correctness),
        ("overlong_punishment (completion_ids)", text.OverlongPunishment(max_length=1000, buffer=200, unit="tokens"),
         with_ids, None),
        ("repetition (words)", text.Repetition(), plain, None),
        ("repetition (completion_ids)", text.Repetition(), with_ids, None),
        ("reasoning_steps", text.ReasoningSteps(), plain, None),
        ("language_consistency (script)", text.LanguageConsistency(target="en"), plain, None),
        ("json_schema", text.JsonSchema(json_schema=schema), plain, None),
    ]
    from trl.rewards import get_repetition_penalty_reward, get_soft_overlong_punishment, think_format_reward

    conversational = [[{"role": "assistant", "content": t}] for t in texts]
    peers = {
        "think_format (TRL-compatible params)": lambda: think_format_reward(conversational),
        "overlong_punishment (completion_ids)": lambda: get_soft_overlong_punishment(1000, 200)(completion_ids=ids),
        "repetition (completion_ids)": lambda: get_repetition_penalty_reward(3, -1.0)(completion_ids=ids),
    }
    print(f"{args.n} completions x {args.chars} chars, one core, best of {args.repeat}; "
          f"{sum(map(len, ids)) / len(ids):.0f} tokens per completion\n")
    print("| scorer | ours wall (s) | ours CPU (s) | TRL wall (s) | TRL CPU (s) | CPU ratio ours / TRL |")
    print("|---|---|---|---|---|---|")
    for label, scorer, samples, results in cases:
        if not re.search(args.cases, label):
            continue
        wall, cpu = best_of(args.repeat, lambda s=scorer, x=samples, r=results: s.score(x, r))
        peer = peers.get(label)
        row = f"| {label} | {wall:.3f} | {cpu:.3f} |"
        if peer:
            peer_wall, peer_cpu = best_of(args.repeat, peer)
            row += f" {peer_wall:.3f} | {peer_cpu:.3f} | {cpu / max(peer_cpu, 1e-9):.2f} |"
        else:
            row += " - | - | - |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
