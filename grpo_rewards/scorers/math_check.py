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

import logging
import re
from collections import OrderedDict
from typing import Any, NamedTuple

from grpo_rewards.workers import SoftTimeout

_GOLD_CACHE_SIZE = 1024
# Math delimiters or a box: math-verify finds the expression itself. `\$` is a dollar sign.
_DELIMITED = re.compile(r"(?<!\\)\$|\\boxed|\\\(|\\\[")
_ANSWER_CACHE_SIZE = 4096


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
    delimited = _DELIMITED.search(text) is not None
    # A bare answer ("\frac12", "(1,2]") is not found by math-verify's latex search without
    # delimiters; inside \boxed{} it is, and boxed normalisation applies.
    candidates = [text] if delimited else ["\\boxed{" + text + "}", text]
    for candidate in candidates:
        parsed = _parse(candidate, opts.match_types)
        if any(_is_math(p) for p in parsed):
            return parsed
    return []


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


def warm_up() -> None:
    """Import math-verify, sympy and the LaTeX parser once per worker, before any task's clock runs."""
    opts = CheckOptions(("latex", "expr"), 6, 15, True, False, "answer", "auto")
    _mv().verify(_parse_answer("\\frac{1}{2}", opts, True), _parse_answer("0.5", opts, False), timeout_seconds=None)


def run_task(task: tuple) -> tuple[str, Any]:
    kind, gold, *rest = task
    opts = CheckOptions(*rest[-1])
    parsed_gold = _gold(gold, opts)
    if isinstance(parsed_gold, str):
        return ("timeout" if parsed_gold == _GOLD_TIMED_OUT else "unparseable", parsed_gold)
    if kind == "gold":
        return ("ok", None)
    parsed_answer = _answer(rest[0], opts)
    if not parsed_answer:
        return ("no_math", "math-verify found no expression in the answer")
    verdict = _mv().verify(
        parsed_gold, parsed_answer, float_rounding=opts.float_rounding, numeric_precision=opts.numeric_precision,
        strict=opts.strict, allow_set_relation_comp=opts.allow_set_relation_comp, timeout_seconds=None,
    )
    return ("ok", bool(verdict))
