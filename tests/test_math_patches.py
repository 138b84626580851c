"""The shortcuts of `math_patches` return exactly what the code they bypass returns."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from grpo_rewards.scorers import math_check, math_patches

CASES = Path(__file__).parent / "data" / "math_verify_cases.jsonl"


@pytest.fixture(scope="module")
def parser():
    math_check._mv()  # installs the shortcuts
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    assert math_patches.installed() and _Latex2Sympy.parse_number is math_patches._parse_number
    return _Latex2Sympy()


def _same(a, b) -> bool:
    from sympy import Float, srepr

    if isinstance(a, Float) or isinstance(b, Float):
        return type(a) is type(b) and a._mpf_ == b._mpf_ and a._prec == b._prec
    return type(a) is type(b) and srepr(a) == srepr(b)


def _number_texts() -> list[str]:
    rng = random.Random(3)
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
    texts = ["0", "00", "007", "10", "1,000", "0,5", "12,345,678", "1.5", "0.50", "00.5", "1,000.25", "3.14159265358979323846",
             "1e5", "1.5e-3", ".5", "5.", "1_000", "٣", "²", "1 000", "9" * 1000, "9" * 1001, "1" * 5000, "1." + "5" * 40]
    for _ in range(300):
        n = rng.choice([1, 2, 3, 6, 17, 30])
        texts.append(digits(n))
        texts.append(f"{digits(rng.randint(1, 8))}.{digits(rng.randint(1, 20))}")
        texts.append(",".join(digits(3) for _ in range(rng.randint(1, 4))))
    return texts


def test_numbers_parse_exactly_as_sympy_number_would(parser):
    original = math_patches._originals["parse_number"]
    shortcut = 0
    for text in _number_texts():
        try:
            want = original(parser, text)
        except Exception as exc:  # noqa: BLE001 - then the shortcut must fail the same way (it hands these over)
            with pytest.raises(type(exc)):
                math_patches._parse_number(parser, text)
            continue
        got = math_patches._parse_number(parser, text)
        assert _same(got, want), (text, got, want)
        plain = text.replace(",", "")
        shortcut += bool(math_patches._INTEGER.fullmatch(plain) or math_patches._DECIMAL.fullmatch(plain))
    assert shortcut > 800  # the comparison covers the shortcut, not only the hand-over


def test_latex_with_numbers_parses_to_the_same_trees():
    """Whole parses through math-verify, with and without the shortcut."""
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy
    from sympy import srepr

    texts = ["\\frac{12}{0.50}", "1,000 + 2.5x", "007 \\cdot 3", "x^{2} - 10x + 25", "\\sqrt{2.25}", "3.0\\%",
             "\\{1, 2, 3\\}", "(0.1, 2]", "12,345", "2^{10} = 1024", "1.5e3"]
    def parse_all():
        math_check._mv().parser.parse_latex_cached.cache_clear()
        return [[srepr(p) for p in math_check._parse("\\boxed{" + t + "}", ("latex", "expr"))] for t in texts]
    math_check._mv()
    patched = parse_all()
    try:
        _Latex2Sympy.parse_number = math_patches._originals["parse_number"]
        plain = parse_all()
    finally:
        _Latex2Sympy.parse_number = math_patches._parse_number
    assert patched == plain and all(patched)


def _fuzz_latex(count: int, seed: int) -> list[str]:
    """Concatenations of LaTeX fragments: valid and broken expressions, sets, relations, ±."""
    rng = random.Random(seed)
    parts = ["x", "n", "2", "13", "0.5", "+", "-", "\\pm", "=", "<", "\\le", ",", ";", "(", ")", "[", "]",
             "\\{", "\\}", "\\left(", "\\right)", "\\frac{", "}{", "}", "{", "^", "^{", "_", "\\sqrt{", "!",
             "\\cdot", "\\pi", "\\infty", "\\cup", "\\in", "\\sin", "|", "\\%", "\\text{cm}", "a", "b"]
    return ["".join(rng.choice(parts) + rng.choice(["", " "]) for _ in range(rng.randint(1, 14)))
            for _ in range(count)]


def _parse_all(texts):
    from latex2sympy2_extended.latex2sympy2 import latex2sympy
    from sympy import srepr

    out = []
    for text in texts:
        try:
            out.append(srepr(latex2sympy(text)))
        except Exception as exc:  # noqa: BLE001 - a failure is a result too: it must be the same one
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def test_full_context_memo_changes_no_parse():
    """The same strings parsed with ANTLR's own full-context predictions and with the memo (twice:
    filling it, then answering from it): identical trees and identical failures. (The key holds
    every input of ANTLR's computation; on these strings the rule-context and precedence parts
    never changed a prediction, so a key without them would pass here too: they stay by design.)"""
    from antlr4.atn.ParserATNSimulator import ParserATNSimulator

    math_check._mv()
    texts = math_check._prime_forms(300) + _fuzz_latex(1500, seed=7)
    texts += [json.loads(line)[field] for line in CASES.read_text(encoding="utf-8").splitlines() if line.strip()
              for field in ("gold", "prediction")]
    texts += [t for t in texts if len(t) < 60]  # shared prefixes and repeats: the memo answers these
    saved = {name: getattr(ParserATNSimulator, name) for name in ("computeStartState", "execATNWithFullContext")}
    try:
        for name in saved:
            setattr(ParserATNSimulator, name, math_patches._originals[name])
        plain = _parse_all(texts)
    finally:
        for name, patched in saved.items():
            setattr(ParserATNSimulator, name, patched)
    math_patches._ll_memo.clear()
    before = dict(math_patches._ll_stats)
    assert _parse_all(texts) == plain
    assert _parse_all(texts) == plain
    hits, stored = (math_patches._ll_stats[k] - before[k] for k in ("hits", "stored"))
    assert hits > 1000 and hits > 3 * stored, (hits, stored)  # not vacuous: the memo answered most
    assert sum(r.startswith("Exception") for r in plain) > 300  # and broken inputs were among them
