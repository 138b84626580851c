"""math_accuracy vs the per-sample serial math-verify call of open-r1's `accuracy_reward`.

Same 2,000 completions for both (250 golds x 8 completions, mixed formats), in one run:
throughput (completions/s) and agreement with the labels the completions were built with.

Golds and reasoning texts come from CHAMP (`pip install -c constraints.txt champ-dataset`, MIT):
270 competition problems with gold answers, each with real GPT-3.5/GPT-4/PaLM 2 solutions. A
completion is a real solution text followed by a final answer in one of eight styles, right
(an equivalent form: LaTeX, plain, decimal, thousands separators, expanded) or wrong (perturbed),
so its label is known by construction. As samples of one prompt do, the 8 completions of a gold
repeat answers: each draws its answer from two right forms and two wrong answers. Golds CHAMP cannot supply (prose answers) are topped up
with generated ones.

    python bench/math_bench.py [--golds 250] [--per-gold 8] [--workers 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import sympy
from sympy.parsing.sympy_parser import convert_xor, implicit_multiplication_application, parse_expr, standard_transformations

from grpo_rewards.scorer import Sample
from grpo_rewards.scorers import math_patches
from grpo_rewards.scorers.math import MathAccuracy

_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor)
STYLES = ["boxed", "answer_tag", "final_answer", "the_answer_is", "gsm8k", "bare", "minerva", "no_answer"]


@dataclass
class Item:
    gold: str  # as a dataset stores it (LaTeX without delimiters)
    expr: sympy.Expr
    reasoning: str
    source: str


# -- golds -------------------------------------------------------------------------------------

def _champ_gold(answer: str) -> sympy.Expr | None:
    """CHAMP's plain-text answer as a sympy expression, or None when it is prose or a system."""
    answer = re.split(r",? or equivalently ", answer)[-1]
    answer = re.sub(r"\s*\(i\.e\.,[^)]*\)", "", answer).strip()
    answer = re.sub(r"^(-?\d+) [a-z]+$", r"\1", answer)  # "98 values" -> "98"
    if "=" in answer or re.search(r"[A-Za-z]{3,}", answer.replace("sqrt", "")) or "," in answer:
        return None
    try:
        expr = parse_expr(answer, transformations=_TRANSFORMS)
    except Exception:  # noqa: BLE001 - anything sympy cannot read is simply not used
        return None
    return expr if isinstance(expr, sympy.Expr) and len(expr.free_symbols) <= 2 else None


def _without_anchors(text: str) -> str:
    """A model's solution minus its own final-answer markers, so that only the final line we append
    says what the answer is (the numbers and LaTeX of the reasoning stay, as distractors)."""
    text = re.sub(r"\\(?:boxed|fbox)\s*", "", text)
    text = re.sub(r"answer", "result", text, flags=re.IGNORECASE)
    return text.replace("####", "")


def champ_items() -> list[Item]:
    try:
        import champ_dataset
    except ImportError:
        # Generated golds alone give figures that do not compare with docs/benchmarks.md: refuse.
        sys.exit("bench/math_bench.py needs CHAMP's problems: pip install -c constraints.txt champ-dataset "
                 "(in the `bench` extra, which `all` and scripts/setup.sh include)")
    items = []
    for problem in champ_dataset.load("v0").problems.values():
        expr = _champ_gold(problem.answer)
        if expr is None:
            continue
        texts = [m.text for c in problem.conversations.values() for m in c.messages
                 if m.role.startswith("Model") and len(m.text or "") > 200]
        reasoning = texts[len(items) % len(texts)] if texts else problem.text
        items.append(Item(sympy.latex(expr), expr, _without_anchors(reasoning[-6000:]), "champ"))
    return items


def generated_items(n: int, rng: random.Random, integers_only: bool = False) -> list[Item]:
    x = sympy.Symbol("x")
    makers = [lambda: sympy.Integer(rng.randint(0, 5000))] if integers_only else [
        lambda: sympy.Integer(rng.randint(-50, 5000)),
        lambda: sympy.Rational(rng.randint(1, 40), rng.choice([2, 3, 4, 5, 8, 12])),
        lambda: sympy.Float(round(rng.uniform(0, 100), 2)),
        lambda: rng.randint(2, 9) * sympy.sqrt(rng.choice([2, 3, 5, 7])),
        lambda: sympy.expand((x + rng.randint(1, 5)) * (x - rng.randint(1, 5))),
        lambda: rng.randint(2, 6) * sympy.pi,
    ]
    items = []
    for i in range(n):
        expr = makers[i % len(makers)]()
        reasoning = (f"We set up the equation from the statement. Step 1 gives {rng.randint(2, 99)}; "
                     f"step 2 subtracts {rng.randint(2, 9)} and divides by {rng.randint(2, 9)}. Checking with "
                     f"$x = {rng.randint(1, 9)}$ confirms the pattern.")
        items.append(Item(sympy.latex(expr), expr, reasoning, "generated"))
    return items


# -- completions -------------------------------------------------------------------------------

def _plain(expr: sympy.Expr) -> str | None:
    """The expression as a person types it without LaTeX (`x^2 + 1`, `3/4`), when that is natural:
    not for functions or constants (`sqrt(3)`, `pi` are Python's spelling, not a model's)."""
    text = str(expr).replace("**", "^")
    return None if re.search(r"[A-Za-z]{2,}", text) else text


def equivalent_form(expr: sympy.Expr, rng: random.Random) -> str:
    forms = [sympy.latex(expr)] + [f for f in [_plain(expr)] if f]
    if expr.is_Integer and abs(int(expr)) >= 1000:
        forms.append(f"{int(expr):,}")
    if expr.is_Rational and not expr.is_Integer and 10 ** 6 % int(expr.q) == 0:
        forms.append(str(float(expr)))
    expanded = sympy.expand(expr)
    if expanded != expr:
        forms.append(sympy.latex(expanded))
    return rng.choice(forms)


def wrong_form(expr: sympy.Expr, rng: random.Random) -> str:
    wrong = rng.choice([expr + 1, 2 * expr, expr - 2]) if expr != 0 else sympy.Integer(3)
    return rng.choice([sympy.latex(wrong)] + [f for f in [_plain(wrong)] if f])


def completion(item: Item, style: str, answer: str) -> str:
    r = item.reasoning
    return {
        "boxed": f"{r}\n\nTherefore the answer is $\\boxed{{{answer}}}$.",
        "answer_tag": f"<think>\n{r}\n</think>\n<answer>{answer}</answer>",
        "final_answer": f"{r}\n\n**Final Answer:** ${answer}$",
        "the_answer_is": f"{r}\nThe answer is {answer}.",
        "gsm8k": f"{r}\n#### {answer}",
        "bare": answer,
        "minerva": f"{r}\nFinal Answer: The final answer is ${answer}$. I hope it is correct.",
        "no_answer": r,
    }[style]


def build_cases(golds: int, per_gold: int, seed: int = 0,
                integers: bool = False) -> tuple[list[Sample], list[float], list[str], Counter]:
    """`integers`: GSM8K-like generated integer golds only (CHAMP solution texts still as reasoning)."""
    rng = random.Random(seed)
    items = [] if integers else champ_items()[:golds]
    items += generated_items(golds - len(items), rng, integers_only=integers)
    if integers:  # real reasoning texts around generated integer answers
        texts = [i.reasoning for i in champ_items()]
        items = [Item(i.gold, i.expr, texts[k % len(texts)], "generated") for k, i in enumerate(items)]
    samples, labels, styles = [], [], []
    for i, item in enumerate(items):
        # Samples of one prompt repeat answers: each completion's answer is one of two right forms
        # and two wrong answers drawn for this gold.
        candidates = [(True, equivalent_form(item.expr, rng)), (True, equivalent_form(item.expr, rng)),
                      (False, wrong_form(item.expr, rng)), (False, wrong_form(item.expr, rng))]
        for j in range(per_gold):
            style = STYLES[(i + j) % len(STYLES)]
            right, answer = rng.choice(candidates)
            right = right and style != "no_answer"
            if style == "gsm8k" and not item.expr.is_Number:
                style = "boxed"  # GSM8K answers are numbers
            samples.append(Sample(completion=completion(item, style, answer), reference={"answer": item.gold}))
            labels.append(1.0 if right else 0.0)
            styles.append(style)
    return samples, labels, styles, Counter(i.source for i in items)


# -- the two scorers ---------------------------------------------------------------------------

def baseline_scores(samples: list[Sample]) -> list[float | None]:
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)  # a deprecation line per call
    """open-r1's accuracy_reward as documented: per sample, serially, parse the gold (first match), parse
    the completion with LaTeX extraction anchored on boxes / "final answer" (boxed first), verify
    gold first; a gold that does not parse is skipped (None). Timeouts: math-verify's own SIGALRM."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify

    answer_config = [LatexExtractionConfig(
        normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                 equations=True, boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)]
    out = []
    for s in samples:
        gold = parse(f"${s.reference['answer']}$", extraction_mode="first_match")
        if not gold:
            out.append(None)
            continue
        answer = parse(s.completion_text, extraction_config=answer_config, extraction_mode="first_match")
        out.append(float(verify(gold, answer)))
    return out


def ours_scores(scorer: MathAccuracy, samples: list[Sample], batch: int) -> list[float | None]:
    out = []
    for start in range(0, len(samples), batch):
        out += [s.value for s in scorer.score(samples[start : start + batch])]
    return out


def agreement(values: list[float | None], labels: list[float], styles: list[str]) -> dict:
    by_style: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for v, y, st in zip(values, labels, styles, strict=True):
        by_style[st][0] += (v or 0.0) == y
        by_style[st][1] += 1
    agree = sum(a for a, _ in by_style.values())
    return {"agree": agree, "total": len(labels), "rate": agree / len(labels), "none": values.count(None),
            "by_style": {k: f"{a}/{n}" for k, (a, n) in sorted(by_style.items())}}


def _cpu_s(pids: list[int], parent: bool = True) -> float:
    """CPU seconds (user + system) used so far by this process (unless not `parent`) and the given children."""
    total = time.process_time() if parent else 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _wait_until_idle(pids: list[int], quiet_s: float = 0.5, limit_s: float = 60.0) -> float:
    """Seconds until the workers used no CPU for `quiet_s` (at most `limit_s`)."""
    start = time.perf_counter()
    last = _cpu_s(pids, parent=False)
    while time.perf_counter() - start < limit_s:
        time.sleep(quiet_s)
        now = _cpu_s(pids, parent=False)
        if now == last:
            break
        last = now
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--golds", type=int, default=250)
    ap.add_argument("--per-gold", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="completions per score() call (a GRPO step's batch)")
    ap.add_argument("--warm-golds", type=int, default=100, help="generated golds of the untimed warm-up set")
    ap.add_argument("--integers", action="store_true", help="GSM8K-like integer golds instead of CHAMP's")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)

    samples, labels, styles, sources = build_cases(args.golds, args.per_gold, integers=args.integers)
    print(f"{len(samples)} completions, {args.golds} golds ({dict(sources)}), styles {dict(Counter(styles))}")
    # Both sides first score a warm-up set with other (generated) golds: imports done and the
    # LaTeX parser's tables learnt, as after a training run's first steps, while every cache is
    # still cold for the timed completions.
    rng = random.Random(1000)
    warm_samples = [Sample(completion=completion(item, STYLES[i % 7], equivalent_form(item.expr, rng)),
                           reference={"answer": item.gold})
                    for i, item in enumerate(generated_items(args.warm_golds, rng) * 2)]
    baseline_scores(warm_samples)
    with MathAccuracy(workers=args.workers, timeout_s=5) as scorer:
        # Pool start-up: the zygote imports sympy and math-verify, warms up and forks the workers
        # (the first score returns then); it primes the LaTeX parser (`math_check.prime_parser`,
        # once per pool) meanwhile, and the workers are swapped for primed forks once that is done,
        # as they would be during a training run's first steps. Both reported with their CPU seconds
        # (zygote, workers and this process).
        t0, c0 = time.perf_counter(), time.process_time()
        scorer.score(warm_samples[:1])
        startup = time.perf_counter() - t0
        pool = scorer._ensure_pool()
        if not pool.wait_primed(600):
            sys.exit("the math workers' priming did not finish")
        primed = time.perf_counter() - t0
        pids = [pool.zygote_pid] + pool.pids
        startup_cpu = time.process_time() - c0 + _cpu_s(pids, parent=False)
        ours_scores(scorer, warm_samples, args.batch)
        quiet_s = _wait_until_idle(pids)  # nothing of ours may still run when the clock starts
        t0, c0 = time.perf_counter(), _cpu_s(pids)
        ours = ours_scores(scorer, samples, args.batch)
        ours_t, ours_cpu = time.perf_counter() - t0, _cpu_s(pids) - c0
    # The baseline runs math-verify as shipped: our exact shortcuts live in the workers only.
    assert not math_patches.installed()
    t0, c0 = time.perf_counter(), time.process_time()
    base = baseline_scores(samples)
    base_t, base_cpu = time.perf_counter() - t0, time.process_time() - c0
    result = {
        "completions": len(samples), "workers": args.workers, "batch": args.batch,
        "ours_per_s": len(samples) / ours_t, "baseline_per_s": len(samples) / base_t, "ratio": base_t / ours_t,
        "ours_cpu_s": ours_cpu, "baseline_cpu_s": base_cpu, "cpu_ratio": base_cpu / ours_cpu,
        "pool_startup_s": startup, "pool_primed_s": primed, "pool_startup_cpu_s": startup_cpu, "quiet_wait_s": quiet_s,
        "ours_agreement": agreement(ours, labels, styles),
        "baseline_agreement": agreement(base, labels, styles), "sources": dict(sources),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
