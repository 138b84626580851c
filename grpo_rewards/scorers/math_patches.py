"""Exact shortcuts inside math-verify's LaTeX parser (latex2sympy2_extended), installed in the
`math_accuracy` worker processes only (by `math_check._mv`), never in the caller's process.

Each shortcut returns, for the inputs it takes, the value the original computes (the same call
with the same arguments, or a value shown equal to it in tests/test_math_patches.py), and hands
every other input to the original, so no verdict can change.

- Numbers: latex2sympy turns each number token into `sympy.Number(text)`, which parses the
  string as Python source (`sympify` -> `parse_expr`: tokenize, transform, compile, eval), about
  0.8 ms a number, a sixth of a worker's parsing time. For a plain digit string sympy's
  transformation produces `Integer(<the digits>)`, for `digits.digits` `Float('<the text>')`;
  those are called directly here.
- Full-context predictions: where its cached (SLL) predictions conflict, ANTLR falls back to a
  full-context (LL) prediction, which it never caches: a closure over the whole grammar, ~1 ms,
  several per parse, a fifth of a worker's time. Its result is a function of the grammar (the
  ATN), the decision, the invoking states of the rule contexts on the parser's stack, the
  parser's current precedence (the only state its predicates read: every predicate of this
  grammar is `precpred`) and the types of the tokens from the decision's start to the one where
  it resolves; the prediction reads them one at a time and stops at the first token that
  decides. So results are kept in a trie keyed by exactly that, walked token by token; a miss
  (or an error, or a result whose stopping point cannot be seen) runs ANTLR's own code. Walking
  the trie may lex a few tokens earlier than the parser would: the grammar's start rule ends in
  EOF, so a parse that succeeds lexes the whole input anyway, and a lexing error fails the parse
  either way. The trie is filled while the zygote primes the parser, so every worker inherits it.
"""

from __future__ import annotations

import re
from typing import Any

from grpo_rewards.patterns import LazyPattern

# Longer ones meet Python's int-from-string limit: the original decides.
_INTEGER = LazyPattern(re.compile, r"[0-9]{1,1000}")
_DECIMAL = LazyPattern(re.compile, r"[0-9]{1,1000}\.[0-9]{1,1000}")

_originals: dict[str, Any] = {}


def install() -> None:
    """Install the shortcuts (idempotent)."""
    if _originals:
        return
    # math-verify's parser stack is heavy: loaded by the math workers when they install the patches.
    from antlr4.atn.ParserATNSimulator import ParserATNSimulator
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    _originals["parse_number"] = _Latex2Sympy.parse_number
    _Latex2Sympy.parse_number = _parse_number
    _originals["computeStartState"] = ParserATNSimulator.computeStartState
    _originals["execATNWithFullContext"] = ParserATNSimulator.execATNWithFullContext
    ParserATNSimulator.computeStartState = _compute_start_state
    ParserATNSimulator.execATNWithFullContext = _exec_full_context


def installed() -> bool:
    return bool(_originals)


def _parse_number(self: Any, text: str) -> Any:
    from sympy import Float, Integer  # heavy (~1.3 s): only the math workers import it

    plain = text.replace(",", "")  # as the original does first
    if _INTEGER.fullmatch(plain):
        return Integer(int(plain))  # the original strips leading zeros, then sympify makes Integer(digits)
    if _DECIMAL.fullmatch(plain):
        return Float(plain)  # sympify's auto_number: Float('<the literal>')
    return _originals["parse_number"](self, text)


# -- full-context predictions --------------------------------------------------------------------

_ALT = "alt"  # a trie node's result (token types are ints: no clash)
_LL_MEMO_MAX = 100_000  # stored results; past it the trie starts afresh
_ll_memo: dict[tuple, dict] = {}
_ll_stats = {"stored": 0, "hits": 0}
_MEMO_HIT = object()  # computeStartState's answer when the prediction is already known


def _ll_key(sim: Any, decision: int, ctx: Any) -> tuple:
    invoking = []
    while ctx is not None:
        invoking.append(ctx.invokingState)
        ctx = ctx.parentCtx
    return (sim.atn, decision, tuple(invoking), sim.parser._precedenceStack[-1])


def _token_type(stream: Any, i: int) -> int | None:
    return stream.get(i).type if stream.sync(i) else None


def _ll_lookup(sim: Any, ctx: Any) -> int | None:
    node = _ll_memo.get(_ll_key(sim, sim._dfa.decision, ctx))
    i = sim._startIndex
    while node is not None and _ALT not in node:
        node = node.get(_token_type(sim._input, i))
        i += 1
    return None if node is None else node[_ALT]


def _ll_store(key: tuple, stream: Any, start: int, stop: int, alt: int) -> None:
    if _ll_stats["stored"] >= _LL_MEMO_MAX:
        _ll_memo.clear()
        _ll_stats["stored"] = 0
    node = _ll_memo.setdefault(key, {})
    for i in range(start, stop + 1):
        node = node.setdefault(stream.get(i).type, {})
    node[_ALT] = alt
    _ll_stats["stored"] += 1


def _compute_start_state(self: Any, p: Any, ctx: Any, fullCtx: bool) -> Any:
    # ANTLR calls this with fullCtx only right before execATNWithFullContext, for the same prediction.
    if fullCtx:
        alt = _ll_lookup(self, ctx)
        if alt is not None:
            self._grpo_memo_alt = alt
            _ll_stats["hits"] += 1
            return _MEMO_HIT
    return _originals["computeStartState"](self, p, ctx, fullCtx)


def _exec_full_context(self: Any, dfa: Any, D: Any, s0: Any, input: Any, startIndex: int, outerContext: Any) -> int:
    if s0 is _MEMO_HIT:
        return self._grpo_memo_alt
    alt = _originals["execATNWithFullContext"](self, dfa, D, s0, input, startIndex, outerContext)
    # Resolved at the token the stream stands on; an error-recovery answer seeks back to the
    # start instead, and its stopping point is not visible: not stored.
    if input.index > startIndex:
        _ll_store(_ll_key(self, dfa.decision, outerContext), input, startIndex, input.index, alt)
    return alt
