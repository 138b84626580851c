"""instruction_following vs lm-eval's IFEval checker on the same cases, strict and loose.

    python bench/ifeval_bench.py [--n 10000] [--chars 2000] [--instructions 3] [--repeat 3]
                                 [--modes strict loose] [--no-libraries]

Each response is about `--chars` characters of English prose with `--instructions` instructions drawn
from all 25 types (kwargs from tests/_instruction_cases.py's builders). Both checkers run in this
process, one core, on the same cases, taking turns on chunks of 500; the table gives the median of
`--repeat` rounds and the ratio.
A second table times the libraries alone on the same responses (sentence splitting, capital words from
Treebank tokens, language detection), which is where the time goes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _ifeval_oracle import lm_eval_ifeval, reference_verdicts  # noqa: E402
from _instruction_cases import BUILDERS, LANGUAGE_TEXTS, SENTENCES  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from grpo_rewards.scorer import Sample  # noqa: E402
from grpo_rewards.scorers.instructions import InstructionFollowing, nlp  # noqa: E402


def make_cases(n: int, chars: int, k: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    ids = sorted(BUILDERS)
    out = []
    for _ in range(n):
        chosen = rng.sample(ids, k)
        text = ""
        while len(text) < chars:
            text += rng.choice(SENTENCES + LANGUAGE_TEXTS["en"]) + (" " if rng.random() < 0.9 else "\n\n")
        out.append({"instruction_id_list": chosen, "kwargs": [BUILDERS[c](rng)[0] for c in chosen],
                    "completion": text[:chars]})
    return out


def run_ours(cases: list[dict], mode: str) -> float:
    scorer = InstructionFollowing(mode=mode, reward="fraction")
    samples = [Sample("Write.", c["completion"], c) for c in cases]
    start = time.perf_counter()
    scorer.score(samples)
    return time.perf_counter() - start


def run_reference(cases: list[dict], mode: str) -> float:
    start = time.perf_counter()
    for c in cases:
        reference_verdicts(c["instruction_id_list"], c["kwargs"], "Write.", c["completion"], mode)
    return time.perf_counter() - start


def interleaved(cases: list[dict], mode: str, chunk: int = 500) -> tuple[float, float]:
    """(ours, lm-eval's) seconds over all cases, the two taking turns on chunks of `chunk` cases so that
    the shared machine's drifting speed weighs on both alike."""
    ours = theirs = 0.0
    for start in range(0, len(cases), chunk):
        part = cases[start:start + chunk]
        ours += run_ours(part, mode)
        theirs += run_reference(part, mode)
    return ours, theirs


def run_library(cases: list[dict], fn) -> float:
    start = time.perf_counter()
    for c in cases:
        fn(c["completion"])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--instructions", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=("strict", "loose"), default=["strict", "loose"])
    parser.add_argument("--no-libraries", action="store_true", help="skip the libraries-alone table")
    args = parser.parse_args()
    cases = make_cases(args.n, args.chars, args.instructions)
    lm_eval_ifeval()
    import langdetect  # the oracle memoises langdetect.detect for the tests; time the real one

    langdetect.detect = getattr(langdetect.detect, "__wrapped__", langdetect.detect)
    # Each side loads its models before the clock starts (Punkt, NLTK, langdetect's profiles).
    nlp.sentences("Warm up. Both."), nlp.word_tokens("Warm up."), nlp.detect_language("warm up the detector")
    warm = ["language:response_language", "length_constraints:number_sentences", "change_case:capital_word_frequency"]
    warm_kwargs = [{"language": "en"}, {"num_sentences": 2, "relation": "at least"},
                   {"capital_frequency": 1, "capital_relation": "at least"}]
    reference_verdicts(warm, warm_kwargs, "Write.", "Warm up the DETECTOR. Both.", "strict")
    table = Table(title=f"{args.n:,} responses of {args.chars:,} chars, {args.instructions} instructions each "
                  f"(median of {args.repeat}, seconds)")
    for column in ("mode", "instruction_following", "lm-eval", "speed-up"):
        table.add_column(column)
    for mode in args.modes:
        rounds = [interleaved(cases, mode) for _ in range(args.repeat)]
        ours, theirs = statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)
        table.add_row(mode, f"{ours:.2f}", f"{theirs:.2f}", f"{theirs / ours:.1f}x")
    console = Console()
    console.print(table)
    if args.no_libraries:
        return
    libs = Table(title=f"libraries alone, once over the {args.n:,} responses (seconds)")
    for column in ("step", "ours", "lm-eval's"):
        libs.add_column(column)
    import nltk  # loaded by the oracle already; here for its reference functions
    libs.add_row("sentences (Punkt)", f"{run_library(cases, nlp.sentences):.2f}",
                 f"{run_library(cases, nltk.tokenize.sent_tokenize):.2f}")
    libs.add_row("capital words (Treebank tokens)", f"{run_library(cases, nlp.count_capital_words):.2f}",
                 f"{run_library(cases, lambda t: sum(w.isupper() for w in nltk.word_tokenize(t))):.2f}")
    libs.add_row("language (langdetect)", f"{run_library(cases, nlp.detect_language):.2f}",
                 f"{run_library(cases, langdetect.detect):.2f}")
    console.print(libs)


if __name__ == "__main__":
    main()
