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
"""

from __future__ import annotations

import re
from typing import Any

_INTEGER = re.compile(r"[0-9]{1,1000}")  # longer ones meet Python's int-from-string limit: the original decides
_DECIMAL = re.compile(r"[0-9]{1,1000}\.[0-9]{1,1000}")

_originals: dict[str, Any] = {}


def install() -> None:
    """Install the shortcuts (idempotent)."""
    if _originals:
        return
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    _originals["parse_number"] = _Latex2Sympy.parse_number
    _Latex2Sympy.parse_number = _parse_number


def installed() -> bool:
    return bool(_originals)


def _parse_number(self: Any, text: str) -> Any:
    from sympy import Float, Integer

    plain = text.replace(",", "")  # as the original does first
    if _INTEGER.fullmatch(plain):
        return Integer(int(plain))  # the original strips leading zeros, then sympify makes Integer(digits)
    if _DECIMAL.fullmatch(plain):
        return Float(plain)  # sympify's auto_number: Float('<the literal>')
    return _originals["parse_number"](self, text)
