"""The part of `math_accuracy` that runs inside worker processes: math-verify parse and verify.

Tasks (tuples, so they pickle small):
  ("gold", gold, options)              -> ("ok", None) or ("unparseable", detail)
  ("verify", gold, answer, options)    -> ("ok", bool), ("no_math", detail) for an answer that is
                                          not math, or ("unparseable", detail) for the gold
`options` is a `CheckOptions` tuple. math-verify's own SIGALRM timeouts are disabled here: the
pool's per-task interrupt and kill are the limits (they also cover `parse`, which upstream's
alarm does not always stop).
"""

from __future__ import annotations

import cmath
import logging
import re
from collections import OrderedDict
from fractions import Fraction
from typing import Any, NamedTuple

from grpo_rewards.workers import SoftTimeout

_GOLD_CACHE_SIZE = 1024
_ANSWER_CACHE_SIZE = 4096
_INTEGER = re.compile(r"\s*-?\d{1,1000}\s*")
# Math delimiters or a box: math-verify finds the expression itself. `\$` is a dollar sign.
_DELIMITED = re.compile(r"(?<!\\)\$|\\boxed|\\\(|\\\[")


class CheckOptions(NamedTuple):
    match_types: tuple[str, ...]  # "latex", "expr"
    float_rounding: int
    numeric_precision: int
    strict: bool
    allow_set_relation_comp: bool
    answer_mode: str  # "answer": an extracted answer; "whole": math-verify searches the whole text
    gold_mode: str  # "auto": bare golds are read as \boxed{...}; "raw": as math-verify reads them


_math_verify: Any = None


def _mv() -> Any:
    """math-verify, imported on first use with its timeout warnings silenced (we time out ourselves)."""
    global _math_verify
    if _math_verify is None:
        import math_verify
        import math_verify.grader
        import math_verify.parser

        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        _math_verify = math_verify
    return _math_verify


def _targets(match_types: tuple[str, ...]) -> list[Any]:
    mv = _mv()
    return [mv.LatexExtractionConfig(boxed_match_priority=0) if m == "latex" else mv.ExprExtractionConfig()
            for m in match_types]


def _is_math(value: Any) -> bool:
    from sympy import Basic, MatrixBase

    return isinstance(value, (Basic, MatrixBase))


def _parse(text: str, match_types: tuple[str, ...]) -> list[Any]:
    return _mv().parse(text, _targets(match_types), parsing_timeout=None)


def _parse_answer(text: str, opts: CheckOptions, is_gold: bool) -> list[Any]:
    """Parsed forms of a gold or an extracted answer; [] when nothing parses as math."""
    raw = (opts.gold_mode == "raw") if is_gold else (opts.answer_mode == "whole")
    if raw:
        return _parse(text, opts.match_types)
    if _INTEGER.fullmatch(text):
        from sympy import Integer

        return [Integer(text), text.strip()]  # what math-verify's LaTeX parse gives, without ANTLR
    delimited = _DELIMITED.search(text) is not None
    # A bare answer ("\frac12", "(1,2]") is not found by math-verify's latex search without
    # delimiters; inside \boxed{} it is, and boxed normalisation applies.
    candidates = [text] if delimited else ["\\boxed{" + text + "}", text]
    for candidate in candidates:
        parsed = _parse(candidate, opts.match_types)
        if any(_is_math(p) for p in parsed):
            return parsed
    return []


# Three or more plain words and no digit: a remark ("see the solutions manual"), not an answer.
# Shorter texts ("odd", "no solution") and words inside \text{...} stay legitimate golds.
_PROSE = re.compile(r"(?<![\\\w])[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z]{2,}){2,}(?![\w])")
_TEXT_COMMAND = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}")


def _looks_like_prose(gold: str) -> bool:
    return not any(c.isdigit() for c in gold) and _PROSE.search(_TEXT_COMMAND.sub(" ", gold)) is not None


class _Lru(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


_golds = _Lru(_GOLD_CACHE_SIZE)
_answers = _Lru(_ANSWER_CACHE_SIZE)
_GOLD_TIMED_OUT = "gold timed out"


def _gold(gold: str, opts: CheckOptions) -> list[Any] | str:
    """Parsed gold, or a string saying why there is none. Failures are cached too, so a chunk's
    later tasks do not spend the limit again on a gold that already hung."""
    key = (gold, opts.match_types, opts.gold_mode)
    if key in _golds:
        _golds.move_to_end(key)
        return _golds[key]
    if opts.gold_mode != "raw" and not _DELIMITED.search(gold) and _looks_like_prose(gold):
        # Wrapped in \boxed{}, prose parses as a product of one-letter symbols, and every
        # answer would be scored 0 against "see the solutions manual".
        _golds.put(key, "the gold answer is prose, not a math expression")
        return _golds[key]
    try:
        parsed = _parse_answer(gold, opts, is_gold=True)
    except SoftTimeout:
        _golds.put(key, _GOLD_TIMED_OUT)
        raise
    value = parsed if parsed else "math-verify found no expression in the gold answer"
    _golds.put(key, value)
    return value


def _answer(answer: str, opts: CheckOptions) -> list[Any]:
    key = (answer, opts.match_types, opts.answer_mode)
    if key not in _answers:
        _answers.put(key, _parse_answer(answer, opts, is_gold=False))
    return _answers[key]


def _same_text(answer: str, gold: str) -> bool:
    def norm(text: str) -> str:
        text = text.strip()
        if text.startswith("\\boxed{") and text.endswith("}"):
            text = text[7:-1]
        return " ".join(text.strip("$").split())

    return norm(answer) == norm(gold)


def warm_up() -> None:
    """Import math-verify and sympy and run one parse and verify, before any task's clock runs."""
    opts = CheckOptions(("latex", "expr"), 6, 15, True, False, "answer", "auto")
    _verify(_parse_answer("\\frac{1}{2}", opts, True), _parse_answer("0.5", opts, False), opts)


def run_task(task: tuple) -> tuple[str, Any]:
    kind, gold, *rest = task
    opts = CheckOptions(*rest[-1])
    parsed_gold = _gold(gold, opts)
    if isinstance(parsed_gold, str):
        return ("timeout" if parsed_gold == _GOLD_TIMED_OUT else "unparseable", parsed_gold)
    if kind == "gold":
        return ("ok", None)
    if opts.answer_mode == "answer" and _same_text(rest[0], gold):
        return ("ok", True)  # the gold parsed, and verify(x, x) holds: skip the costly part
    parsed_answer = _answer(rest[0], opts)
    if not parsed_answer:
        return ("no_math", "math-verify found no expression in the answer")
    return ("ok", _verify(parsed_gold, parsed_answer, opts))


def _verify(golds: list[Any], answers: list[Any], opts: CheckOptions) -> bool:
    """math-verify's `verify` over every (gold, answer) pair, gold first, skipping the pairs that a
    numeric evaluation shows to differ (see `_clearly_different`)."""
    for gold in golds:
        for answer in answers:
            if opts.strict and _clearly_different(gold, answer):
                continue
            if _mv().verify(gold, answer, float_rounding=opts.float_rounding,
                            numeric_precision=opts.numeric_precision, strict=opts.strict,
                            allow_set_relation_comp=opts.allow_set_relation_comp, timeout_seconds=None):
                return True
    return False


_PROBES = ((Fraction(13, 10), Fraction(17, 10), Fraction(23, 10)), (Fraction(29, 10), Fraction(11, 10), Fraction(19, 10)))


def _clearly_different(gold: Any, answer: Any) -> bool:
    """True when two symbolic expressions take clearly different values at a probe point.

    For two plain expressions with variables, math-verify's verdict is `simplify(gold - answer)
    == 0` (after cheaper checks that can only say "equal"); that costs up to hundreds of ms when
    they differ, which is what most wrong answers do. If gold - answer is far from 0 at a point,
    it is not identically 0, so that verdict is False. Anything else (numbers, percentages,
    relations, sets, matrices, lone symbols, an evaluation that fails) goes to math-verify.
    """
    from sympy import Expr, MatrixExpr, Rational, Symbol, UnevaluatedExpr

    if not (isinstance(gold, Expr) and isinstance(answer, Expr)):
        return False
    if isinstance(gold, (Symbol, MatrixExpr)) or isinstance(answer, (Symbol, MatrixExpr)):
        return False
    symbols = sorted(gold.free_symbols | answer.free_symbols, key=str)
    if not symbols or len(symbols) > 3 or gold.has(UnevaluatedExpr) or answer.has(UnevaluatedExpr):
        return False
    for probe in _PROBES:
        point = {x: Rational(v.numerator, v.denominator) for x, v in zip(symbols, probe)}
        try:
            a, b = complex(gold.subs(point).evalf(30)), complex(answer.subs(point).evalf(30))
        except (TypeError, ValueError, ArithmeticError):
            return False
        if not all(map(cmath.isfinite, (a, b))):
            return False
        if abs(a - b) > 1e-6 * max(1.0, abs(a), abs(b)):
            return True
    return False
