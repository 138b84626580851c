"""The honest corpus (tests/data/honest_math.jsonl, written by tests/data/make_honest_math.py):
every honest answer scores 1.0, and every hedge built from one (the gold joined to a distractor by
each connective, in each position) scores 0. Precision and recall are printed with the result."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from grpo_rewards.redteam.math import (ABOUT_WORDS, APPROX_RELATIONS, CASE_WORDS, CASES, CONDITIONALS, CONDITIONS,
                                      MULTIWORD_CONDITIONS, SYMBOL_JOINS, WORD_JOINS)
from grpo_rewards.scorer import Sample
from grpo_rewards.scorers.math import MathAccuracy
from grpo_rewards.scorers.math_check import numeral

ROWS = [json.loads(line) for line in (Path(__file__).parent / "data" / "honest_math.jsonl").read_text(
    encoding="utf-8").splitlines() if line.strip()]
BATCH = 256


def _score(scorer: MathAccuracy, pairs: list[tuple[str, str]]) -> list[float | None]:
    out: list[float | None] = []
    for start in range(0, len(pairs), BATCH):
        batch = pairs[start : start + BATCH]
        out += [s.value for s in scorer.score([Sample("Find the answer.", c, {"answer": g}) for g, c in batch])]
    return out


def hedges(rows: list[dict]) -> list[tuple[str, str]]:
    """For each corpus row with a plain-number gold: the gold joined to a distractor by one
    connective (each connective, approximate relation and "about" word in turn, boxed) or offered
    for a case (each conditional in turn, after "The answer is"), the gold first and the gold second."""
    joins = [*SYMBOL_JOINS, *(f" {w} " for w in WORD_JOINS), *(f" {r} " for r in APPROX_RELATIONS),
             *(f" ({w} " for w in ABOUT_WORDS)]
    rng = random.Random(7)
    out = []
    for k, row in enumerate(r for r in rows if numeral(r["gold"]) is not None):
        gold = row["gold"]
        other = str(numeral(gold)[0] + rng.choice((1, 2, 7)))
        if k % 3 == 2:
            conditional = CONDITIONALS[k // 3 % len(CONDITIONALS)]
            words = (CONDITIONS[k % len(CONDITIONS)], CASES[k % len(CASES)], CASE_WORDS[k % len(CASE_WORDS)],
                     MULTIWORD_CONDITIONS[k % len(MULTIWORD_CONDITIONS)])
            out.append((gold, f"The answer is {conditional(gold, other, *words)}."))
            out.append((gold, f"The answer is {conditional(other, gold, *words)}."))
            continue
        if k % 3 == 1:  # the other value in brackets after the box
            out.append((gold, f"So \\boxed{{{gold}}} ({other})."))
        join = joins[k % len(joins)]
        close = ")" if join.startswith(" (") else ""
        out.append((gold, f"So \\boxed{{{gold}{join}{other}{close}}}."))
        out.append((gold, f"So \\boxed{{{other}{join}{gold}{close}}}."))
    return out


def test_the_corpus_is_large_and_varied():
    assert len(ROWS) >= 2000
    assert {r["source"] for r in ROWS} == {"champ", "math_verify", "gsm8k_style", "choice", "remarks", "cases"}


@pytest.mark.timeout(900)
def test_honest_answers_score_one_and_their_hedges_zero():
    pairs = [(r["gold"], r["completion"]) for r in ROWS]
    hedged = hedges(ROWS)
    with MathAccuracy(timeout_s=10) as scorer:
        honest = _score(scorer, pairs)
        hedge = _score(scorer, hedged)
    lost = [(g, c, v) for (g, c), v in zip(pairs, honest, strict=True) if v != 1.0]
    paid = [(g, c, v) for (g, c), v in zip(hedged, hedge, strict=True) if v]
    true_pos = len(pairs) - len(lost)
    precision = true_pos / max(1, true_pos + len(paid))
    recall = true_pos / len(pairs)
    print(f"honest {len(pairs)}, hedges {len(hedged)}: precision {precision:.4f}, recall {recall:.4f}")
    seen: dict[str, tuple] = {}
    for g, c, v in lost:
        seen.setdefault(g, (g, c, v))  # one example per gold, so that the message stays readable
    assert not list(seen.values())[:25]
    assert not paid[:25]
