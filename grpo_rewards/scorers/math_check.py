"""The part of `math_accuracy` that runs inside worker processes: math-verify parse and verify.

Tasks (tuples, so they pickle small):
  ("gold", gold, options)              -> ("ok", None) or ("unparseable", detail)
  ("verify", gold, answer, options)    -> ("ok", bool), ("no_math", detail) for an answer that is
                                          not math, or ("unparseable", detail) for the gold
  ("verify", gold, (a, b, ...), options) -> the same for candidates that are one value, else
                                          ("several", detail): the hedge check of `math.py` (a
                                          `Rounded` candidate must be the first rounded); with
                                          answer_mode "any", ("ok", whether any candidate matches)
`options` is a `CheckOptions` tuple. math-verify's own SIGALRM timeouts are disabled here: the
pool's per-task interrupt and kill are the limits (they also cover `parse`, which upstream's
alarm does not always stop).
"""

from __future__ import annotations

import cmath
import importlib
import itertools
import logging
import random
import re
from collections import OrderedDict
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, NamedTuple

from grpo_rewards.answer import Rounded
from grpo_rewards.patterns import LazyPattern
from grpo_rewards.scorers import math_patches
from grpo_rewards.procpool import SoftTimeout

_GOLD_CACHE_SIZE = 1024
_ANSWER_CACHE_SIZE = 4096
_INTEGER = LazyPattern(re.compile, r"\s*-?\d{1,1000}\s*")
# Math delimiters or a box: math-verify finds the expression itself. `\$` is a dollar sign.
_DELIMITED = LazyPattern(re.compile, r"(?<!\\)\$|\\boxed|\\\(|\\\[")


class CheckOptions(NamedTuple):
    match_types: tuple[str, ...]  # "latex", "expr"
    float_rounding: int
    numeric_precision: int
    strict: bool
    allow_set_relation_comp: bool
    answer_mode: str  # "answer": an extracted answer; "whole": math-verify searches the whole text; "any":
    # candidates of which any may match (`allow_several_values`)
    gold_mode: str  # "auto": bare golds are read as \boxed{...}; "raw": as math-verify reads them


_math_verify: Any = None


def _mv() -> Any:
    """math-verify, imported on first use with its timeout warnings silenced (we time out ourselves)
    and the exact shortcuts of `math_patches` installed."""
    global _math_verify
    if _math_verify is None:
        # Heavy (~1.6 s with sympy): imported in the math workers, not by every registry load.
        import math_verify
        import math_verify.grader
        import math_verify.parser

        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        math_patches.install()
        _math_verify = math_verify
    return _math_verify


def _targets(match_types: tuple[str, ...]) -> list[Any]:
    mv = _mv()
    return [mv.LatexExtractionConfig(boxed_match_priority=0) if m == "latex" else mv.ExprExtractionConfig()
            for m in match_types]


def _is_math(value: Any) -> bool:
    from sympy import Basic, MatrixBase  # heavy (~1.3 s): only the math workers import it

    return isinstance(value, (Basic, MatrixBase))


def _parse(text: str, match_types: tuple[str, ...]) -> list[Any]:
    return _mv().parse(text, _targets(match_types), parsing_timeout=None)


def _parse_answer(text: str, opts: CheckOptions, is_gold: bool) -> list[Any]:
    """Parsed forms of a gold or an extracted answer; [] when nothing parses as math."""
    raw = (opts.gold_mode == "raw") if is_gold else (opts.answer_mode == "whole")
    if raw:
        return _parse(text, opts.match_types)
    if _INTEGER.fullmatch(text):
        from sympy import Integer  # heavy: only the math workers import it

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
_PROSE = LazyPattern(re.compile, r"(?<![\\\w])[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z]{2,}){2,}(?![\w])")
_TEXT_COMMAND = LazyPattern(re.compile, r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}")


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


# Modules sympy imports on first use along math-verify's comparisons (found by replaying math-verify's
# 270 upstream cases after warm-up). `simplify` alone pulls in sympy.physics.units: ~0.2 s of CPU
# that would otherwise land inside some sample's time limit, in every worker.
_LAZY_IMPORTS = ("sympy.physics.units", "sympy.assumptions.wrapper", "sympy.sets.setexpr",
                 "sympy.sets.handlers.issubset", "sympy.sets.handlers.functions")


def warm_up() -> None:
    """Import math-verify, sympy and what sympy imports lazily, and run one parse and verify, before
    any task's clock runs."""
    opts = CheckOptions(("latex", "expr"), 6, 15, True, False, "answer", "auto")
    for name in _LAZY_IMPORTS:
        importlib.import_module(name)
    _verify(_parse_answer("\\frac{1}{2}", opts, True), _parse_answer("0.5", opts, False), opts)


# ANTLR (under math-verify's LaTeX parser) memoises its parse-path predictions per process, and
# a worker's first few hundred distinct answers pay to learn them: measured, each parse costs
# ~2.5x its steady-state price until then. `prime_parser` learns them from these generated forms
# in the pool's zygote, once per pool, between its fork requests: forks made after that inherit
# them, and the pool swaps the workers forked earlier for such forks between batches.
# Predictions are a cache: what the parser returns never depends on them.
_PRIME_ATOMS = ("x", "n", "k", "a", "b", "y", "2", "3", "12", "0.5", "1,000", "\\pi", "e", "\\infty")
_PRIME_ITEMS = 200


def _prime_forms(count: int) -> list[str]:
    rng = random.Random(20261203)

    def term(depth: int) -> str:
        pick = rng.random()
        if depth <= 0 or pick < 0.25:
            return rng.choice(_PRIME_ATOMS)
        inner = lambda: expr(depth - 1)  # noqa: E731
        forms = (
            lambda: f"\\frac{{{inner()}}}{{{inner()}}}", lambda: f"\\dfrac{{{inner()}}}{{{inner()}}}",
            lambda: f"\\sqrt{{{inner()}}}", lambda: f"{term(depth - 1)}^{{{inner()}}}",
            lambda: f"{term(depth - 1)}^{rng.choice('23n')}", lambda: f"\\left({inner()}\\right)",
            lambda: f"({inner()})", lambda: f"{term(depth - 1)}!", lambda: f"{term(depth - 1)} \\cdot {term(depth - 1)}",
            lambda: f"{term(depth - 1)} {term(depth - 1)}", lambda: f"{term(depth - 1)}*{term(depth - 1)}",
            lambda: f"{term(depth - 1)}^({inner()})", lambda: f"\\{rng.choice(('sin', 'cos', 'tan', 'ln', 'log'))} {term(depth - 1)}",
            lambda: f"{term(depth - 1)}^\\circ", lambda: f"{term(depth - 1)}\\%", lambda: f"\\text{{{rng.choice(('cm', 'odd', 'A'))}}}",
            lambda: f"{term(depth - 1)}_{{{term(depth - 1)}}}", lambda: f"|{inner()}|",
        )
        return rng.choice(forms)()

    def expr(depth: int, top: bool = False) -> str:
        out = ("-" if rng.random() < 0.15 else "") + term(depth)
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            out += rng.choice((" + ", " - ", "/", " + ")) + term(depth)
        if top and rng.random() < 0.15:
            out = rng.choice(("x = ", "y \\le ", "n > ")) + out
        return out

    def item() -> str:
        pick = rng.random()
        if pick < 0.08:
            return f"\\{{{expr(1)}, {expr(1)}\\}}"
        if pick < 0.16:
            return rng.choice("([") + f"{expr(1)}, {expr(1)}" + rng.choice(")]")
        return expr(1 if pick < 0.8 else 2, top=True)

    return [item() for _ in range(count)]


# The parser's cost is learning the token sequences it has not met, so the priming corpus also holds
# expressions as programs print them (sympy's LaTeX and plain printers, the style of generated golds
# and of many models' answers): products of parenthesised factors, symbolic powers, fractions of them.
_PRINTED_SYMBOLS = "x n k a b m r t y"
_PRINTED_ITEMS = 600


def _printed_forms(count: int) -> Iterator[str]:
    """`count` forms, made one at a time (a priming step is short: making them all at once is not)."""
    import sympy  # heavy: the zygote has it already

    rng = random.Random(20261207)
    symbols = sympy.symbols(_PRINTED_SYMBOLS)

    def atom() -> Any:
        pick = rng.random()
        if pick < 0.45:
            return rng.choice(symbols[:4] if rng.random() < 0.7 else symbols)
        if pick < 0.8:
            return sympy.Integer(rng.randint(1, 12))
        return sympy.sqrt(rng.choice((2, 3, 5, 7))) if pick < 0.9 else sympy.pi

    def expr(depth: int) -> Any:
        if depth == 0:
            return atom()
        a, b, pick = expr(depth - 1), expr(depth - 1), rng.random()
        if pick < 0.3:
            return a + rng.choice((1, -1, 2, -3)) * b
        if pick < 0.5:
            return a * b
        if pick < 0.62:
            return a / b
        if pick < 0.75:
            return a ** rng.choice((2, 3, -1, symbols[0], symbols[1], symbols[1] - 1))
        if pick < 0.82:
            return sympy.factorial(rng.choice(symbols[:4]) * rng.randint(1, 2))
        if pick < 0.9:
            return sympy.sqrt(a)
        return (a + rng.randint(1, 5)) * (b - rng.randint(1, 5))

    while count > 0:
        value = expr(rng.choice((1, 2, 2, 3)))
        for form in (sympy.latex(value), str(value).replace("**", "^")):
            if len(form) < 80 and count > 0:
                count -= 1
                yield form


def _priming_forms() -> Iterator[str]:
    printed = _printed_forms(_PRINTED_ITEMS)
    for form in _prime_forms(_PRIME_ITEMS):  # the two kinds alternate
        yield form
        yield from itertools.islice(printed, 1)
    yield from printed


_priming: Iterator[str] | None = None
_prime_left: int | None = None  # forms still to parse; None before the first step


def prime_parser() -> bool:
    """Parse the next priming form (the pool's zygote calls this until it returns False)."""
    global _priming, _prime_left
    if _priming is None:
        _priming, _prime_left = _priming_forms(), _PRIME_ITEMS + _PRINTED_ITEMS
    form = next(_priming, None)
    if form is not None:
        _parse("\\boxed{" + form + "}", ("latex", "expr"))
    _prime_left = 0 if form is None else _prime_left - 1
    return _prime_left > 0


# Plain numerals, as an extracted answer or an `auto` gold holds them (no delimiters). Each form
# is one that math-verify's LaTeX parse (inside the \boxed{} we wrap bare texts in) reads as that
# exact number: an Integer or Rational for the first four (thousands separators only in groups of
# three after a nonzero digit, as latex2sympy reads them: `0,111` is its 0.111), a Float for a
# decimal. Bounded lengths keep the arithmetic cheap.
_NUMERAL = LazyPattern(
    re.compile,
    r"\s*(?P<sign>-)?\s*(?:(?P<int>\d{1,40})|(?P<thousands>[1-9]\d{0,2}(?:,\d{3}){1,13})|(?P<slash>\d{1,40})/(?P<den>\d{1,40})"
    r"|\\[dt]?frac\{(?P<num>\d{1,40})\}\{(?P<fden>\d{1,40})\}|(?P<whole>\d{1,40})\.(?P<frac>\d{1,40}))\s*")


def numeral(text: str) -> tuple[Fraction, bool] | None:
    """(value, exact) of a plain numeral, exact False for a decimal (a float to math-verify)."""
    m = _NUMERAL.fullmatch(text)
    if m is None:
        return None
    g = m.groupdict()
    if g["int"] or g["thousands"]:
        value, exact = Fraction(int((g["int"] or g["thousands"]).replace(",", ""))), True
    elif g["slash"] or g["num"]:
        den = int(g["den"] or g["fden"])
        if den == 0:
            return None
        value, exact = Fraction(int(g["slash"] or g["num"]), den), True
    else:
        value, exact = Fraction(int(g["whole"] + g["frac"]), 10 ** len(g["frac"])), False
    return (-value if g["sign"] else value), exact


def _numeric_verdict(gold: str, answer: str, opts: CheckOptions) -> bool | None:
    """math-verify's verdict for two plain numerals when it is certain without parsing, else None.

    Two exact numbers (Integer/Rational on both sides): every step of math-verify's comparison
    (sympy equality, then the numeric and symbolic checks, and the comparison of the two parsed
    strings, which can only match for the same value) comes down to equality of values. With a
    decimal, math-verify compares floats rounded to `float_rounding` places; only a difference far
    outside that (and far above a double's precision) is decided here, as False.
    """
    g, a = numeral(gold), numeral(answer)
    if g is None or a is None:
        return None
    (gv, g_exact), (av, a_exact) = g, a
    if g_exact and a_exact:
        return gv == av
    gap = abs(gv - av)
    if gap > Fraction(10, 10 ** opts.float_rounding) and gap > Fraction(1, 10 ** 9) * max(abs(gv), abs(av)):
        return False
    return None


def run_check(task: tuple) -> tuple[str, Any]:
    kind, gold, *rest = task
    opts = CheckOptions(*rest[-1])
    numeric_gold = opts.gold_mode == "auto" and numeral(gold) is not None
    if kind == "gold" and numeric_gold:
        return ("ok", None)  # a plain numeral always parses; its pairs may not need the parse at all
    if kind == "verify" and isinstance(rest[0], tuple):
        return _verify_candidates(gold, rest[0], opts)
    if numeric_gold and opts.answer_mode == "answer":
        verdict = _numeric_verdict(gold, rest[0], opts)
        if verdict is not None:
            return ("ok", verdict)
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


def _verify_candidates(gold: str, candidates: tuple[str | Rounded, ...], opts: CheckOptions) -> tuple[str, Any]:
    """Several candidate answers against one gold: ("several", detail) when two of them are
    different values (a text that is not math counts as different) or a `Rounded` one is not the
    first rounded; else one value written several ways, and the gold may match any of them."""
    parsed_gold = _gold(gold, opts)
    if isinstance(parsed_gold, str):
        return ("timeout" if parsed_gold == _GOLD_TIMED_OUT else "unparseable", parsed_gold)
    texts = [c.text if isinstance(c, Rounded) else c for c in candidates]
    parsed = [_answer(text, opts) for text in texts]
    if opts.answer_mode == "any":
        return ("ok", any(p and _verify(parsed_gold, p, opts) for p in parsed))
    first = parsed[0]
    for candidate, text, other in zip(candidates[1:], texts[1:], parsed[1:], strict=True):
        same = first and other and (_rounds_to(first, other, candidate.places) if isinstance(candidate, Rounded)
                                    else _verify(first, other, opts))
        if not same:
            return ("several", f"{texts[0]!r} and {text!r} are different values")
    if not first:
        return ("no_math", "math-verify found no expression in the answer")
    return ("ok", any(_verify(parsed_gold, p, opts) for p in parsed))


def _rounds_to(exact: list[Any], rounded: list[Any], places: int | None) -> bool:
    """Whether `rounded` is `exact` rounded: less than one unit of its last place apart (`places`
    decimals); a side that is not a plain decimal has no last place, so it must be the same value."""
    a, b = _constant(exact), _constant(rounded)
    if a is None or b is None:
        return False
    return abs(a - b) < (10.0 ** -places if places is not None else 1e-9 * max(1.0, abs(a)))


def _constant(parsed: list[Any]) -> complex | None:
    """The value of the first parsed form that is a number without variables."""
    from sympy import Expr  # heavy: math workers only

    for form in parsed:
        if isinstance(form, Expr) and not form.free_symbols:
            try:
                value = complex(form.evalf(30))
            except (TypeError, ValueError, ArithmeticError):
                return None
            return value if cmath.isfinite(value) else None
    return None


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

    For two plain expressions, math-verify's verdict is `simplify(gold - answer)
    == 0` (after cheaper checks that can only say "equal"); that costs up to hundreds of ms when
    they differ, which is what most wrong answers do. If gold - answer is far from 0 at a point,
    it is not identically 0, so that verdict is False. Anything else (constants with floats,
    percentages, relations, sets, matrices, lone symbols, an evaluation that fails) goes to
    math-verify.
    """
    from sympy import Expr, Float, MatrixExpr, Rational, Symbol, UnevaluatedExpr  # heavy: math workers only

    if not (isinstance(gold, Expr) and isinstance(answer, Expr)):
        return False
    if isinstance(gold, (Symbol, MatrixExpr)) or isinstance(answer, (Symbol, MatrixExpr)):
        return False
    symbols = sorted(gold.free_symbols | answer.free_symbols, key=str)
    if len(symbols) > 3 or gold.has(UnevaluatedExpr) or answer.has(UnevaluatedExpr):
        return False
    if not symbols and (gold.has(Float) or answer.has(Float)):
        return False  # float_rounding decides those: math-verify's own numeric check, cheap anyway
    # Constants (`6 \sqrt{5}` against `3 \sqrt{5}`) take the same road: math-verify's numeric
    # check and then `simplify`, which cannot turn a clearly nonzero difference into 0.
    for probe in _PROBES if symbols else _PROBES[:1]:
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
