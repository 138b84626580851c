"""What a final answer says: normalised, read as one expression, judged for hedges and restatements.

The region an answer is read from (a box and its sentence, an `<answer>` block, the sentence after
"The answer is", the `####` line) is found in `grpo_rewards.extract`; this module reads it:

1. `normalise`: LaTeX spacing, thousands separators, units after a value, degree, percent and
   currency marks, math delimiters, `\\left`/`\\right`, boxes and text wrappers are removed first,
   the same way for the gold and the answer, so that nothing below splits `12\\,000` or `5\\,\\text{cm}`.
2. `read`: the answer is the first value of the region (the *head*); what follows it is either an
   alternative (a hedge) or a remark. An alternative is a value joined to the head by an "or" word
   (any language CLDR knows), a hedging adverb, or a symbol that means "or" (`|`, `\\lor`, `;`, a
   line break...); or a value listed beside the head (a comma, "and", any one joining word) that is
   parallel to it: bare, or with the head's own unit. Anything else is a remark ("5, which is less
   than 6", "12 apples, 3 more than Anna's 9"); a value after a negation ("5, not 6") is excluded,
   not offered, so it is a remark too.
3. `restates`: a head whose numbers all come from the question (digits or number words), with
   an operation and nothing computed, is the question restated.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

import regex

from grpo_rewards.connectives import HEDGE_WORDS, OR_WORDS
from grpo_rewards.extract import _brace_pairs
from grpo_rewards.patterns import LazyPattern

MAX_REGION = 4000  # longer regions are cut: no answer is longer, and it bounds the scanning
MAX_CANDIDATES = 20

# -- normalisation ------------------------------------------------------------------------------

_SPACING = LazyPattern(re.compile,
    r"(?<!\\)\\(?:[,;:! >]|q?quad|enspace|thinspace|medspace|thickspace|negthinspace|hspace\*?\s*\{[^{}]*\})|~"
    r"|[\u00a0\u2000-\u200a\u202f\u205f\u3000]")
_THOUSANDS_GAP = LazyPattern(re.compile, r"(?<=\d)(?:,|\{,\})? *\x01[\x01 ]*(?=\d{3}(?!\d))")  # 12\,000, 12,\!000
_BRACED_COMMA = LazyPattern(re.compile, r"(?<=\d)\s*\{\s*,\s*\}\s*(?=\d)")  # 12{,}000
_COMMA_GROUPS = LazyPattern(re.compile, r"(?<![\d.,])([1-9]\d{0,2}(?:,\d{3})+)(?!\d|,\d|\.\d)"
                                         r"|(?<![\d.,])([1-9]\d{0,2}(?:,\d{3})+\.\d+)")
# Groups of three digits after spaces (ISO 80000's thousands separator, `1 000 000`); `5 6` stays two numbers.
_SPACED_GROUPS = LazyPattern(re.compile, r"(?<![\d.,])\d{1,3}(?: \d{3})+(?![\d,]|\.\d| \d)")
_DEGREE = LazyPattern(re.compile, r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![A-Za-z])|\\textdegree(?![A-Za-z])")
_PERCENT = LazyPattern(re.compile, r"\\?%|\\percent(?![A-Za-z])")
_CURRENCY = LazyPattern(re.compile,
                        r"\\\$|\\(?:euro|pounds|yen|textdollar|textsterling|texteuro)(?![A-Za-z])|[€£¥₹₩₽]")
_DELIMITER = LazyPattern(re.compile, r"\$+|\\[()\[\]]")
_SIZING = LazyPattern(re.compile, r"\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])\s*\.?|\\displaystyle|\\textstyle")
_FRAC = LazyPattern(re.compile, r"\\[dt]frac(?![A-Za-z])")
_WRAPPER = LazyPattern(re.compile, r"\\(?:boxed|fbox|text|textbf|textit|textrm|textsf|texttt|mathrm|mathbf|mathit|mbox"
                                   r"|emph|textnormal|mathsf)\s*\{")
_EMPHASIS = LazyPattern(re.compile, r"\*\*|__|`")
_LOGICAL_OR = LazyPattern(re.compile,
                          r"\\(?:lor|vee|cup|mid|vert|lvert|rvert|parallel|quad)(?![A-Za-z])|\|\||\\\\|\\?&|[∨⋁∪∣‖]")


def _or_marks(text: str) -> str:
    """Every way of writing "or" that is not one word (`\\lor`, `||`, `зэргийн аль нэг`) as ` or `."""
    return _ALT_PHRASES.sub(" or ", _LOGICAL_OR.sub(" or ", text))


def _drop_wrappers(text: str) -> str:
    """`\\boxed{x}`, `\\text{x}`, `\\mathrm{x}` -> ` x `, nested braces respected (one pass over
    the brace pairs, so that nested wrappers stay linear)."""
    if not _WRAPPER.search(text):
        return text
    pairs = _brace_pairs(text)
    drop: set[int] = set()
    for m in _WRAPPER.finditer(text):
        close = pairs.get(m.end() - 1)
        drop.update(range(m.start(), m.end()))
        if close is not None:
            drop.add(close)
    return "".join(" " if i in drop else c for i, c in enumerate(text)) if drop else text


def _thousands(text: str) -> str:
    """`12,000` -> `12000` outside brackets (inside them a comma separates: `(2,12)`, `[1,000]` aside)."""
    out, pos, depth, scanned = [], 0, 0, 0
    for m in _COMMA_GROUPS.finditer(text):
        depth += sum((c in _OPEN) - (c in _CLOSE) for c in text[scanned : m.start()])
        scanned = m.start()
        if depth <= 0:
            out.append(text[pos : m.start()] + m.group(0).replace(",", ""))
            pos = m.end()
    return "".join(out) + text[pos:]


# A character without which no step of `normalise` but the whitespace folding can change a text.
_PRESENTATION = LazyPattern(re.compile,
                            r"[\\$~,{%°€£¥₹₩₽`\x01\u00a0\u2000-\u200a\u202f\u205f\u3000]|\*\*|__")


# Full-width punctuation of CJK text is the ASCII mark it stands for (`5；6` is `5; 6`).
_FULL_WIDTH = str.maketrans({"；": ";", "，": ",", "、": ",", "：": ":", "。": ".", "（": "(", "）": ")"})


def normalise(text: str) -> str:
    """The answer text with presentation removed: spacing, thousands separators, degree, percent
    and currency marks, math delimiters, sizing commands, boxes and text wrappers (units in
    `\\text{}` become words, which `read` treats as units). Applied to gold and answer alike."""
    text = text[:MAX_REGION].translate(_FULL_WIDTH)
    if _PRESENTATION.search(text):
        text = _without_presentation(text)
    return _normalise_spacing(text)


def _normalise_spacing(text: str) -> str:
    """Whitespace folded, and digit groups joined across the spaces that separate thousands."""
    text = "\n".join(" ".join(line.split()) for line in text.split("\n") if line.strip())
    return _SPACED_GROUPS.sub(lambda m: m.group(0).replace(" ", ""), text) if " " in text else text


def _without_presentation(text: str) -> str:
    text = _SPACING.sub("\x01", text)
    text = _THOUSANDS_GAP.sub("", text).replace("\x01", " ")
    text = _BRACED_COMMA.sub("", text)
    text = _thousands(text)
    text = _DEGREE.sub(" ", text)
    text = _PERCENT.sub(" ", text)
    text = _CURRENCY.sub(" ", text)
    text = _SIZING.sub("", _DELIMITER.sub(" ", text))
    text = _FRAC.sub(r"\\frac", text)
    return _EMPHASIS.sub(" ", _drop_wrappers(text))


def _percent_as_unit(text: str) -> str:
    """`50%` -> `50 percent`: read as a unit, so "0.5 (50%)" restates the value in another unit."""
    return _PERCENT.sub(" percent ", text) if "%" in text or "\\percent" in text else text


def choice_letter(text: str) -> str | None:
    """`B`, `(B)`, `B)`, `B.`, `\\textbf{B}` -> `B`: a multiple-choice label alone."""
    m = re.fullmatch(r"\s*\(?\s*([A-J])\s*[).:]?\s*", normalise(text))
    return m.group(1) if m else None


# -- reading the answer expression ----------------------------------------------------------------

_ALT_WORDS = frozenset(OR_WORDS) | HEDGE_WORDS
_GLUED_ALT_WORDS = tuple(w for w in _ALT_WORDS if not w.isascii())  # scripts that may write `6或`
# "or" words of several words (Mongolian `зэргийн аль нэг`): read as one "or", as the symbols are.
_ALT_PHRASES = LazyPattern(regex.compile, r"(?<!\w)(?:" + "|".join(regex.escape(w) for w in sorted(
    (w for w in _ALT_WORDS if " " in w), key=len, reverse=True)) + r")(?!\w)", regex.IGNORECASE)
# A value after one of these is excluded, not offered ("5, not 6"; "5 rather than 6").
_NEGATIONS = frozenset({"not", "never", "nor", "rather", "instead", "isn't", "unlike", "except", "excluding",
                        "without", "neither", "discard", "discards", "reject", "rejects", "exclude", "excludes"})
# A value under a condition is the answer for that case ("6 if we count zero", "if zero counts, 6",
# "if n is odd then 6"); a value inside the condition is not offered ("5 apples, when each box
# holds 6"), unless the condition names the answer itself ("5 unless it is 6"). A case stated as a
# clause of its own names the answer too ("if we count zero, it is 6"), another quantity does not
# ("if she had 3 more, she would have 15").
_CONDITIONS = frozenset({"if", "when", "whenever", "once", "unless", "assuming", "provided", "providing", "supposing",
                         "suppose", "si", "se", "wenn", "falls", "если", "如果", "若", "もし", "만약"})
# A reason's values are its working ("9, since 108 = 11 \cdot 9 + 9"), read as a condition's are.
_REASONS = frozenset({"since", "because", "puisque", "weil", "porque", "因为"})
_CONSEQUENT = frozenset({"then", "alors", "dann", "entonces", "allora", "então", "то", "那么", "则"})
# Multi-word conditions, read as the one word they mean ("6 in case zero counts", "in which case 6").
_CONDITION_PHRASES = LazyPattern(regex.compile,
    r"\b(?:(?P<then>in which case|in that case|in this case)|in case|in the case that|in the event that|as long as"
    r"|so long as|on condition that|given that|granted that)\b", regex.IGNORECASE)
# Words that open a case as a condition does ("6 with zero", "counting zero gives 6", "for n = 3"),
# unless a distributive word follows: "6 for each child" is another quantity, not another case.
_CASES = frozenset({"with", "without", "for", "at", "counting", "including", "excluding", "considering", "ignoring",
                    "allowing", "treating", "taking", "under", "avec", "sans", "pour", "mit", "ohne", "für", "con",
                    "para", "com", "sem", "с", "без", "для"})
_DISTRIBUTIVE = frozenset({"each", "every", "per", "a", "an", "one", "all", "both", "any", "chaque", "jede", "jeden",
                           "cada", "каждый", "каждого"})
_SUBJECTS = frozenset({"it", "answer", "result", "it's", "that's", "answer's"})
_COPULAS = frozenset({"is", "be", "equals", "was", "becomes", "it's", "that's", "answer's"})
_OTHER_CASE = frozenset({"otherwise", "else", "sinon", "sonst", "altrimenti", "иначе", "否则"})  # "... and 6 otherwise"
# A value whose clause only says it is acceptable ("6 is also possible", "6 also works") is offered.
_OFFERS = frozenset({"is", "are", "also", "too", "as", "well", "possible", "works", "work", "valid", "correct", "right",
                     "acceptable", "would", "could", "might", "be", "an", "answer", "option", "possibility", "fine",
                     "true", "holds", "likewise", "equally", "plausible"})
_YIELDS = frozenset({"gives", "give", "yields", "yield", "makes", "make"})  # "counting zero gives 6" names the case's answer
# A value after one of these alone is the head rounded, to agree with it (Rounded), not an alternative.
_ABOUT = frozenset({"approximately", "approx", "about", "around", "roughly", "nearly", "almost", "circa", "ca",
                    "environ", "etwa", "ungefähr", "aproximadamente", "около", "примерно", "约", "大约"})
_NOT_UNITS = _ALT_WORDS | _NEGATIONS | _CONDITIONS | _REASONS | _CONSEQUENT | _ABOUT | _CASES  # "5 if ...": not 5 ifs
# Function names written without a backslash are math, not words.
_FUNCTIONS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "arcsin", "arccos",
                        "arctan", "sinh", "cosh", "tanh", "max", "min", "gcd", "lcm", "mod", "det", "lim", "pi",
                        "inf", "infty", "oo"})
# A word in any script, its combining marks included (Tamil அல்லது): the `regex` module's classes.
_WORD = LazyPattern(regex.compile, r"(?:(?<![\\\w\p{M}])|(?<=\d))\p{L}[\p{L}\p{M}]*(?:['’.-]\p{L}[\p{L}\p{M}]*)*\.?")
_NUMBER = LazyPattern(re.compile, r"(?<![\w.])-?\d+(?:\.\d+)?|(?<![\w.])-?\.\d+")
_MIXED_NUMBER = LazyPattern(re.compile, r"\s*(-?)(\d+) +(\d+)\s*/\s*(\d+)\s*")
# A modulus after the value names the ring, not a second value: `9 \pmod{11}`, `9 (mod 11)`.
_MODULUS = LazyPattern(re.compile, r"\s*(?:\\pmod\s*\{?\s*\d+\s*\}?|\(\s*\\?(?:mod|bmod)\s*\d+\s*\))")
_PLUS_MINUS = LazyPattern(re.compile, r"\\(?:pm|mp)(?![A-Za-z])|[±∓]")
_SAME_LHS = LazyPattern(re.compile, r"\s*([A-Za-z](?:_\{?\w+\}?)?)\s*=(?!=)\s*(.+)", re.DOTALL)
_OPEN, _CLOSE = "([{", ")]}"


class Rounded(NamedTuple):
    """A value the answer gives as another one rounded (`\\frac{70}{9} \\approx 7.78`): it agrees
    with the exact value when they differ by less than one unit of its last written place, `places`
    decimals; `places` None (not a plain decimal: `\\approx \\frac{22}{7}`) asks for the same value."""

    text: str
    places: int | None


# Relations inside one answer. Exact ones say their sides are one value; after an approximate one a
# side is the value before it, rounded. `<=`, `!=` and `\\neq` are not relations of this kind.
_RELATION = LazyPattern(re.compile,
    r"(?P<exact>(?<![<>!=:])==?(?!=)|:=|\\(?:to|rightarrow|Rightarrow|implies|longrightarrow|Longrightarrow"
    r"|coloneqq)(?![A-Za-z])|[→⇒⟹⟶])"
    r"|(?P<approx>\\(?:approx|approxeq|thickapprox|simeq|sim|thicksim|cong|doteq|fallingdotseq|risingdotseq)"
    r"(?![A-Za-z])|[≈≃∼≅≐≒≊])")
_COMMAND = LazyPattern(re.compile, r"\\[A-Za-z]+")


def _places(value: str) -> int | None:
    """Decimals written in a plain number (`7.78` -> 2, `8` -> 0), None for anything else."""
    if not _PLAIN_NUMBER.fullmatch(value):
        return None
    return len(value.strip().partition(".")[2])


def relation_sides(value: str) -> list[str | Rounded]:
    """What a chain of relations at the top level of `value` answers: its last exact side (the
    sides before it are working, `x = 5+5+1 = 7 = 11` is 11, as math-verify reads it), then each
    side after an approximate relation as `Rounded` (`2\\sqrt{2} \\approx 2.83`). Only closed
    sides count (numbers and commands, no variable); [] unless two are: `x = 5` is one value."""
    if not _RELATION.search(value):
        return []
    cuts = []
    pairs = _bracket_pairs(value)
    inside = sorted((open_, close) for open_, close in pairs.items())
    for m in _RELATION.finditer(value):
        if any(open_ < m.start() < close for open_, close in inside):
            continue  # `\\lim_{x \\to 0}`: inside a bracket, part of one side
        cuts.append(m)
    pieces, start, approx = [], 0, False
    for m in cuts:
        pieces.append((value[start : m.start()].strip(), approx))
        approx = approx or m.group("approx") is not None
        start = m.end()
    pieces.append((value[start:].strip(), approx))
    closed = [(text, approx) for text, approx in pieces if text and _closed(text)]
    exact = [text for text, approx in closed if not approx]
    if len(closed) < 2 or not exact:
        return []
    return [exact[-1], *(Rounded(text, _places(text)) for text, approx in closed if approx)]


def _closed(side: str) -> bool:
    """A side that names a number: digits or commands (`\\pi`, `\\sqrt`), no variable."""
    bare = _COMMAND.sub(" ", side)
    return bool(re.search(r"\d", side) or "\\pi" in side) and not re.search(r"[^\W\d_]", bare)


@dataclass
class Reading:
    """The head value of an answer region and the alternatives offered beside it; `text` when the
    region holds words and no value (`odd`, `no solution`)."""

    head: str | None
    alternatives: list[str] = field(default_factory=list)
    unit: str = ""
    text: bool = False
    rounded: list[Rounded] = field(default_factory=list)  # "approximately 7.78" after the head

    @property
    def sides(self) -> list[str | Rounded]:
        """The head as one value written several ways: what its chain of relations answers
        (`relation_sides`), then the values given in words as its rounding (`\\frac{70}{9},
        approximately 7.78`); [] for a head written once."""
        chain = relation_sides(self.head) if self.head and not self.text else []
        if not chain:
            chain = [self.head] if self.head and self.rounded else []
        return [*chain, *self.rounded]

    @property
    def candidates(self) -> list[str]:
        values = [self.head, *self.alternatives] if self.head else list(self.alternatives)
        expanded = []
        for value in values:
            if _PLUS_MINUS.search(value):
                expanded += [_PLUS_MINUS.sub("+", value, count=1), _PLUS_MINUS.sub("-", value, count=1)]
            else:
                expanded.append(value)
        sides = [_SAME_LHS.fullmatch(v) for v in expanded]
        if len(expanded) > 1 and all(sides) and len({m.group(1) for m in sides}) == 1:
            expanded = [m.group(2).strip() for m in sides]  # `x = 5 or x = 6`: values of one unknown
        return list(dict.fromkeys(" ".join(v.split()) for v in expanded))[:MAX_CANDIDATES]


def _is_word(word: str) -> bool:
    """A prose word: not a function name, not a one-letter variable (`x`); `或` is a word."""
    bare = word.rstrip(".")
    if bare.lower() in _FUNCTIONS:
        return False
    return len(bare) > 1 or bare.lower() in _ALT_WORDS or ord(bare) >= 0x2E80


def _split_value(text: str, numeric_gold: bool) -> tuple[str, str, str]:
    """(leading words, value, the rest) of one clause: the value is the first run of math
    (numbers, operators, LaTeX, one-letter variables, brackets holding no words); against a
    numeric gold, letters right after a number are its unit (`5 m`)."""
    words_before, pos = [], 0
    while True:
        pos += len(text[pos:]) - len(text[pos:].lstrip())
        m = _WORD.match(text, pos)
        if not m or not _is_word(m.group(0)):
            break
        words_before.append(m.group(0))
        pos = m.end()
    rest = text[pos:]
    lone = re.match(r"\s*([A-Za-z])\s+(?=[^\W\d_]{2})", rest)
    if words_before and lone and lone.group(1) in "aAI":  # "form a regular hexagon": prose
        lead, value, trail = _split_value(rest[lone.end() :], numeric_gold)
        return " ".join([*words_before, lone.group(1), lead]).strip(), value, trail
    end = len(rest)
    for m in _WORD.finditer(rest):
        if _is_word(m.group(0)) or (numeric_gold and _PLAIN_NUMBER.fullmatch(rest[: m.start()])):
            end = m.start()
            break
    for gap in _NUMBER_GAP.finditer(rest, 0, end):  # `5 6`: two numbers side by side are two values
        mixed = re.search(r"(?:^|[^/\d.])\d+$", rest[: gap.start()]) and re.match(r"\d+\s*/\s*\d", rest[gap.end() :])
        if not mixed:  # `3 1/2` is one number
            end = gap.start()
            break
    return " ".join(words_before), rest[:end].strip().lstrip(":=").rstrip(" .:=").strip(), rest[end:].strip()


_PLAIN_NUMBER = LazyPattern(re.compile, r"\s*-?\s*(?:\d+(?:\.\d+)?|\.\d+)\s*")
_NUMBER_GAP = LazyPattern(re.compile, r"(?<=\d)\s+(?=-?\d)")


def _top_clauses(text: str) -> list[tuple[str, str]]:
    """(separator, clause) pairs: `text` cut at commas, semicolons, line breaks and brackets,
    except inside a bracket pair that holds only math (an interval, a group: part of a value)."""
    out, start, sep, i = [], 0, "", 0
    pairs = _bracket_pairs(text)
    starts = [m.start() for m in _WORD.finditer(text) if _is_word(m.group(0))]
    while i < len(text):
        c = text[i]
        if c in _OPEN:
            close = pairs.get(i)
            k = bisect.bisect_right(starts, i)
            if close is not None and not (k < len(starts) and starts[k] < close) and not _restates(text, i, close):
                i = close + 1  # math inside (an interval, a group): part of the value
                continue
        if c in ",;\n()[]—":  # an em dash sets off a remark; it is never a minus
            out.append((sep, text[start:i]))
            sep, start = c, i + 1
        i += 1
    out.append((sep, text[start:]))
    return [(s, c) for s, c in out if c.strip()]


def _restates(text: str, open_at: int, close: int) -> bool:
    """`8 (2^3)`, `1/2 (0.5)`: a bracket of numbers after a whole value and a space (or first in
    what follows one) writes that value again, a clause of its own; with a variable inside
    (`2 (x+1)`), a comma (`(1, 5]`) or no space it is part of the value."""
    inside = text[open_at + 1 : close]
    return (text[open_at] + text[close] == "()" and "," not in inside
            and (open_at == 0 or open_at >= 2 and text[open_at - 1] == " " and text[open_at - 2] in "0123456789}")
            and not re.search(r"[^\W\d_]", _COMMAND.sub("", inside)))


def _bracket_pairs(text: str) -> dict[int, int]:
    """Index of each opening bracket -> index of the bracket that closes it, in one pass."""
    pairs, stack = {}, []
    for i, c in enumerate(text):
        if c in _OPEN:
            stack.append(i)
        elif c in _CLOSE and stack:
            pairs[stack.pop()] = i
    return pairs


def _first_words(text: str, count: int = 1) -> list[str]:
    """`_words(text)[:count]`, without reading the rest of the text."""
    out = []
    for m in _WORD.finditer(text):
        if len(out) == count:
            break
        if _is_word(m.group(0)):
            out.append(m.group(0).rstrip(".").lower())
    return out


def _words(text: str) -> list[str]:
    return [w.group(0).rstrip(".").lower() for w in _WORD.finditer(text) if _is_word(w.group(0))]


def _slashes_as_or(text: str, letter_gold: bool) -> str:
    """A slash between two words (`yes/no`), two equations (`x=5/x=6`) or, against a letter gold,
    two letters (`A/B`) joins alternatives; between numbers or variables it divides."""
    text = regex.sub(r"(?<=\p{L}{2})\s*/\s*(?=\p{L}{2})", " or ", text)  # letters: `kg/m³` is a unit
    text = re.sub(r"(?<=\S)\s*/\s*(?=[A-Za-z]\w*\s*=)", " or ", text) if "=" in text else text
    return re.sub(r"\b([A-J])\s*/\s*(?=[A-J]\b)", r"\1 or ", text) if letter_gold else text


_SYMBOL = LazyPattern(re.compile, r"\s*[A-Za-z](?:_\{?\w+\}?)?\s*")  # `n`, `a_1`: a name, not a value
_NAMED_VALUE = LazyPattern(re.compile, r"\s*(?:is|equals|was|are|must be)\s+(?=\S)", re.IGNORECASE)
# What a unit word carries after it: a power (cm^2, m^{3}, m³) or a divisor (km/h, kg/m^3, L/min).
_UNIT_POWER = LazyPattern(re.compile, r"^(?:\s*\^\s*\{?\s*[23]\s*\}?|[²³])?"
                                       r"(?:\s*/\s*[^\W\d_]+(?:\s*\^\s*\{?\s*[23]\s*\}?|[²³])?)?")
_DECIMAL_COMMA = LazyPattern(re.compile, r"\s*-?\d+,\d+\s*")  # `1000,99` alone: one number, as math-verify reads it


def read(region: str, numeric_gold: bool = False, letter_gold: bool = False, before: str = "",
         after: str = "") -> Reading:
    """The head value of `region` (normalised first) and the alternatives offered beside it.

    `before`: the text before the region on its line (a box's sentence), read backwards for an
    alternative that precedes the answer (`6 or \\boxed{5}`); `after`: the rest of its sentence,
    where only a value joined by a connective (`\\boxed{5} or 6`) is an alternative."""
    beside = _preceding(before, numeric_gold) + _following(after, numeric_gold)
    if "\\begin{" in region:  # a matrix or an environment: one value, read by math-verify as written
        return _reading(region.strip(), beside, text=True)
    region = _MODULUS.sub(" ", normalise(_percent_as_unit(region)))
    if numeric_gold and not re.search(r"\d", region):  # "The answer is five."
        region = _number_words(region)
    if _DECIMAL_COMMA.fullmatch(region):  # one number
        return _reading(region.strip(), beside)
    text = _slashes_as_or(_or_marks(region), letter_gold)
    if _bar_is_or(text):
        text = text.replace("|", " or ")
    letter = re.match(r"\s*\(?([A-J])(?:\)|\.(?=\s)|:|\s*$)", text) if letter_gold else None
    if letter:  # "B) 5": the label is the answer, the choice's own text a remark
        head, unit = letter.group(1), ""
        rest = re.sub(r"^[^,;\n]*", "", text[letter.end() :])
    else:
        clauses = _top_clauses(text)
        for k, (_, clause) in enumerate(clauses):
            _, head, trail = _split_value(clause, numeric_gold)
            if head:
                break
        else:
            reading = _text_reading(clauses)
            return _reading(reading.head, [*reading.alternatives, *beside], text=reading.text)
        named = _NAMED_VALUE.match(trail) if _SYMBOL.fullmatch(head) else None
        if named:  # "the largest $n$ is 34" says n = 34
            _, value, rest_of_clause = _split_value(trail[named.end() :], numeric_gold)
            if value:
                head, trail = value, rest_of_clause
        unit = _unit_after(trail, numeric_gold)
        if unit:
            trail = _UNIT_POWER.sub("", trail[_WORD.match(trail).end() :], count=1)
        rest = trail + "".join(s + c for s, c in clauses[k + 1 :])
    mixed = _MIXED_NUMBER.fullmatch(head)
    if mixed:  # `3 1/2` is 7/2; math-verify would read a product
        sign, whole, num, den = mixed.groups()
        value = Fraction(int(whole)) + Fraction(int(num), int(den)) if int(den) else None
        head = f"{sign}{value.numerator}/{value.denominator}" if value is not None else head
    return _reading(head, _alternatives(rest, unit, numeric_gold) + beside, unit)


def _reading(head: str | None, found: list[str | Rounded], unit: str = "", text: bool = False) -> Reading:
    return Reading(head, [v for v in found if isinstance(v, str)], unit, text,
                   [v for v in found if isinstance(v, Rounded)])


def _text_reading(clauses: list[tuple[str, str]]) -> Reading:
    """A region without a value holds a text answer (`odd`, `no solution`): its first clause,
    alternatives split at "or" words."""
    if not clauses:
        return Reading(None)
    parts, current = [], []
    for token in clauses[0][1].split():
        if token.lower() in _ALT_WORDS:
            parts.append(" ".join(current))
            current = []
        else:
            current.append(token)
    parts = [p for p in [*parts, " ".join(current)] if p.strip(" .")] or [clauses[0][1]]  # `o` alone is a value
    more = [c.strip() for _, c in clauses[1:2] if c.strip() and len(c.split()) <= 2]  # `odd, even`
    if not parts:
        return Reading(None)
    return Reading(parts[0].strip(" ."), [p.strip(" .") for p in parts[1:]] + more, text=True)


def _bar_is_or(text: str) -> bool:
    """`5|6` is two answers; `|x| + 1` (absolute values leave an empty side) is one."""
    pieces = text.split("|")
    return len(pieces) > 1 and all(p.strip() for p in pieces)


def _unit_after(trail: str, numeric_gold: bool) -> str:
    """The unit word right after a value (`180 minutes` -> `minutes`), as `read` takes the head's."""
    m = _WORD.match(trail)
    word = m.group(0).rstrip(".").lower() if m else ""
    return word if word and (numeric_gold or _is_word(word)) and word not in _NOT_UNITS else ""


def _offered(words: list[str]) -> bool:
    """Whether the words after a value, up to any case they name, only say it is acceptable ("is
    also possible", "also works for odd n")."""
    cut = next((k for k in range(len(words)) if _opens_case(words, k)), len(words))
    return bool(words[:cut]) and set(words[:cut]) <= _OFFERS


def _names_the_answer(words: list[str]) -> bool:
    """Words that end in the answer as subject and a copula ("it is", "it would be", "the answer
    is"), or in a verb that gives the case's value ("counting zero gives")."""
    return (any(w in _SUBJECTS for w in words[-3:]) and any(w in _COPULAS for w in words[-2:])
            or bool(words) and words[-1] in _YIELDS)


def _opens_case(words: list[str], k: int) -> bool:
    """Whether `words[k]` opens a case: a condition or reason word, or a case word ("with",
    "counting") that no distributive word follows ("for each child" names another quantity)."""
    if words[k] in _CONDITIONS or words[k] in _REASONS:
        return True
    return words[k] in _CASES and (k + 1 == len(words) or words[k + 1] not in _DISTRIBUTIVE)


def _alternatives(rest: str, unit: str, numeric_gold: bool) -> list[str | Rounded]:
    """The values `rest` (what follows the head and its unit) offers beside it, up to the first
    remark: after an "or" word or hedging adverb any value; after a comma, "and" or any one word
    a value that is parallel to the head (bare, or with the head's unit); a value under a condition
    or a case (`_opens_case`); after "about" and its kin, or a decimal alone in brackets, the head
    rounded (`Rounded`). A negation ends it."""
    found: list[str | Rounded] = []
    pending = False  # a condition that ended its clause without a value: the next value is its case
    rest = _CONDITION_PHRASES.sub(lambda m: "then" if m.group("then") else "if", rest)
    for sep, clause in _top_clauses(rest):
        chunk, antecedent, consequent, pending = clause, False, pending, False
        if sep == "(" and _places(clause.strip()) and unit != "percent":  # `\frac{1}{3} (0.333)`: the head rounded
            found.append(Rounded(clause.strip(), _places(clause.strip())))
            continue
        while chunk.strip():
            lead, value, trail = _split_value(chunk, numeric_gold)
            words = _words(lead)
            case_words = words  # the words of the case itself: after its "then"
            for k, w in enumerate(words):
                if _opens_case(words, k):
                    antecedent, consequent = True, False
                elif w in _CONSEQUENT and antecedent:
                    antecedent, consequent, case_words = False, True, words[k + 1 :]
            if not value:  # a remark without a value ("in general") ends its clause, not the reading
                pending = antecedent or consequent
                break
            after = _first_words(trail, 2)
            own_unit = bool(unit) and (_WORD.match(trail) or [""])[0].rstrip(".").lower() == unit
            rate = own_unit and len(after) > 1 and after[1] in _DISTRIBUTIVE  # "2 hours per day": another quantity
            bare = not after or (own_unit and not rate) or after[0] in _ALT_WORDS or _offered(_words(trail))
            under_condition = bool(after) and (_opens_case(after, 0) or after[0] in _OTHER_CASE)
            if consequent and not words and _SAME_LHS.fullmatch(value):  # "(with x=2, y=3)": the case goes on
                antecedent, consequent = True, False
            if antecedent and not under_condition:
                if _names_the_answer(words):
                    found.append(value)
            elif any(w in _NEGATIONS and (w not in _CASES or k == len(words) - 1) for k, w in enumerate(words)):
                return found  # "5, excluding 6"; but "5 without zero and 6 otherwise" names a case
            elif words and set(words) <= _ABOUT and (bare or under_condition):
                found.append(Rounded(value, _places(value)))
            elif ((len(words) <= 1 and bare) or under_condition or any(w in _ALT_WORDS for w in words)
                  or (consequent and bare and (len(case_words) <= 1 or _names_the_answer(case_words)))):
                other_unit = _unit_after(trail, numeric_gold)
                if other_unit == "percent" and unit != "percent":
                    found.append(f"{value}/100")  # "0.25, or 25%": the same value, as a percentage
                elif unit == "percent" and not other_unit:
                    found.append(f"100*({value})")  # "20% (1/5)": the same value, as a fraction
                elif not (unit and other_unit and other_unit != unit):  # "3 hours, or 180 minutes" restates it
                    found.append(value)
            else:
                return found
            if len(found) >= MAX_CANDIDATES:
                return found
            chunk = trail[_WORD.match(trail).end() :] if own_unit else trail
        else:  # "for odd n, it is 6": a clause whose values all stood inside its condition leaves it open
            pending = antecedent
    return found


def _following(after: str, numeric_gold: bool) -> list[str | Rounded]:
    """Alternatives in the rest of a box's sentence: only after a connective or in brackets
    (`\\boxed{5} or 6`, `\\boxed{5}, 6`, `\\boxed{5} (6)`); anything else there (`\\pmod{11}`, `cm`,
    `is our answer`) is a remark."""
    text = _or_marks(normalise(_percent_as_unit(after))).strip()
    next_sentence = text[:1] in ".!"  # "\\boxed{5}. Or 6.": a sentence that opens with an alternative
    text = text.lstrip(".! ") if next_sentence else text
    first = _WORD.match(text)
    joins = _ALT_WORDS | {"but", "though", "although"} | (set() if next_sentence else {"and"})
    if (text[:1] in ",;|/(" and not next_sentence) or (first and first.group(0).rstrip(".").lower() in joins):
        return _alternatives(text.lstrip(",;|/ "), "", numeric_gold)  # "(6)": a bracket is a clause of its own
    return []


def _preceding(before: str, numeric_gold: bool) -> list[str]:
    """A value that the words right before the answer offer as its alternative (`6 or \\boxed{5}`)."""
    text = _or_marks(normalise(before.rsplit("\n", 1)[-1])).rstrip()
    lowered = text.lower()
    tail = lowered.split()[-3:]
    joins = [" ".join(tail[k:]) for k in range(len(tail)) if " ".join(tail[k:]) in _ALT_WORDS]
    joins += [w for w in _GLUED_ALT_WORDS if lowered.endswith(w)] + [c for c in ",;/|" if lowered.endswith(c)]
    if not joins:
        return []
    rest = text[: -len(max(joins, key=len))].rstrip()
    m = re.search(r"(\S+)$", rest)
    if not m:
        return []
    _, value, _ = _split_value(m.group(1), numeric_gold)
    return [value] if value and _NUMBER.search(value) else []


# -- restating the question -----------------------------------------------------------------------

_IDENTITY = LazyPattern(re.compile,
    r"(?:\\times|\\cdot|\*|×|·|\\div|/)\s*1(?![\d.])|(?<![\d.])1\s*(?:\\times|\\cdot|\*|×|·)"
    r"|[+-]\s*0(?![\d.])|(?<![\d.^])0\s*\+|\^\s*1(?![\d.])|\\frac\s*(\S+?)\s+1(?![\d.])")
_COMPUTED_VALUE = LazyPattern(re.compile, r"\s*-?\s*(?:\d+(?:\.\d+)?|\.\d+)\s*")


def _numbers(text: str) -> list[Fraction]:
    return [Fraction(n) for n in _NUMBER.findall(text.replace("−", "-"))]


_NUMBER_LANGUAGES = ("en", "fr", "es", "de", "it", "pt", "nl")  # what text2num reads


def _number_words(text: str) -> str:
    """`five apples` -> `5 apples`: a value spelled in words, read in the first language (English
    first) that finds one leading the text; `six` is a number in English before it is one in French."""
    from text_to_num import alpha2digit  # a Rust extension; loaded on the first answer spelled in words

    for lang in _NUMBER_LANGUAGES:
        try:
            converted = alpha2digit(text, lang, threshold=0)
        except Exception:  # noqa: BLE001 - a text text2num cannot read holds no number words for it
            continue
        if re.match(r"\s*-?\d", converted):  # the value leads; "the one with ..." names no number
            return converted
    return text


def question_numbers(prompt: str) -> set[Fraction]:
    """The numbers a question holds, written in digits or in words (English, French, Spanish,
    German, Italian, Portuguese, Dutch: text2num)."""
    from text_to_num import alpha2digit  # a Rust extension; loaded on the first restatement check

    text = normalise(prompt)
    found = {abs(n) for n in _numbers(text)}
    for lang in _NUMBER_LANGUAGES:
        try:
            found |= {abs(n) for n in _numbers(alpha2digit(text, lang, threshold=0))}
        except Exception:  # noqa: BLE001 - a text text2num cannot read holds no number words for it
            continue
    return found


def restates(head: str, prompt_numbers: set[Fraction]) -> bool:
    """True when `head` is an operation on the question's own numbers with nothing computed: its
    numbers (identity factors `\\times 1`, `+0`, `^1` dropped; braces and `\\left`/`\\right`
    looked through) all occur in the question, and it is not a single number or a fraction in
    lowest terms (`\\frac{3}{4}` is a value). An operation that identities reduce to one of the
    question's numbers (`0+2`, `2\\times1`, `2^1`) hands that number back undone: a restatement."""
    text = normalise(head)
    text = text.rsplit("=", 1)[-1]  # `x = 17 \times 23`: the value side
    text = re.sub(r"[{}]", " ", text)
    if _COMPUTED_VALUE.fullmatch(text):
        return False  # a value as written
    for _ in range(4):
        text = _IDENTITY.sub(lambda m: " " + (m.group(1) or "") + " ", text)
    used = _numbers(text)
    if not used:
        return False
    frac = re.fullmatch(r"\s*-?\s*(?:\\frac\s*(\d+)\s+(\d+)|(\d+)\s*/\s*(\d+))\s*", text)
    if frac:
        num, den = (int(g) for g in (frac.group(1) or frac.group(3), frac.group(2) or frac.group(4)))
        if den > 1 and Fraction(num, den).denominator == den:
            return False  # in lowest terms: a value, not a division left undone
    return all(abs(n) in prompt_numbers for n in used)


# -- what the gold names ------------------------------------------------------------------------

_INEQUALITY = LazyPattern(re.compile, r"[<>≤≥]|\\(?:[lg]eq?|[lg]t|leqslant|geqslant|neq?)(?![A-Za-z])")


def is_bracketed_list(text: str) -> bool:
    """True when the text holds a comma inside brackets: a set, tuple, interval or point."""
    text = normalise(text)
    return "," in text and any(c in text for c in "([{")


def several_values(gold: str) -> bool:
    """Whether a gold names more than one value: several candidates when read as an answer, a
    `\\pm`, a set, tuple, interval, inequality or matrix."""
    if _INEQUALITY.search(gold) or "\\begin" in gold or is_bracketed_list(gold):
        return True
    reading = read(gold)
    return len(reading.candidates) > 1
