"""Answer and code extraction shared by the scorers.

Hand-written scanning rather than one regex where braces nest (`\\boxed{\\frac{1}{2}}`): a
regex cannot match balanced braces, and a greedy one swallows the rest of the text.
Every function takes any string and returns None (or []) when there is nothing to extract.
"""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")


def _balanced(text: str, start: int) -> str | None:
    """The content of the `{...}` group opening at `text[start]`, or None if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        escaped = i > 0 and text[i - 1] == "\\"  # \{ and \} are literal braces
        if c == "{" and not escaped:
            depth += 1
        elif c == "}" and not escaped:
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of each `{` -> index of its matching `}`, in one pass (escaped `\\{`, `\\}` skipped).
    One pass rather than a scan per box: `\\boxed{` repeated without closing braces would make
    that quadratic."""
    pairs, stack = {}, []
    for i, c in enumerate(text):
        if c in "{}" and not (i > 0 and text[i - 1] == "\\"):
            if c == "{":
                stack.append(i)
            elif stack:
                pairs[stack.pop()] = i
    return pairs


def _boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every `\\boxed{...}` / `\\fbox{...}` and brace-less `\\boxed 5`."""
    found = []
    pairs: dict[int, int] | None = None
    for m in _BOXED.finditer(text):
        end = m.end()
        if end < len(text) and text[end] == "{":
            pairs = _brace_pairs(text) if pairs is None else pairs
            if end in pairs:
                found.append((m.start(), pairs[end] + 1, text[end + 1 : pairs[end]]))
        elif m.group(0).endswith((" ", "\t")) or (end < len(text) and text[end].isalnum()):
            token = re.match(r"[^\s$]+", text[end:])
            if token:
                found.append((m.start(), end + token.end(), token.group(0)))
    return found


def boxed_all(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}` (and the brace-less `\\boxed 5`), in order."""
    return [content for _, _, content in _boxed_spans(text)]


def final_boxed(text: str, max_gap: int = 40, max_parts: int = 50) -> str | None:
    """The last boxed answer; several boxes in a row on one line (`\\boxed{1} and \\boxed{2}`) are
    one answer with several parts, joined with ", " as math-verify joins them."""
    spans = [s for s in _boxed_spans(text) if s[2].strip()]
    if not spans:
        return None
    group = [spans[-1]]  # built backwards from the last box
    for span in reversed(spans[:-1]):
        gap = text[span[1] : group[-1][0]]
        if "\n" in gap or len(gap) > max_gap or len(group) >= max_parts:
            break
        group.append(span)
    return ", ".join(content.strip() for _, _, content in reversed(group))


def last_boxed(text: str) -> str | None:
    found = boxed_all(text)
    return found[-1] if found else None


def tag_block(text: str, tag: str, last: bool = True) -> str | None:
    """The content of the last (or first) `<tag>...</tag>` block."""
    close = f"</{tag}>"
    # No block ends after the last closing tag; cutting there keeps opening tags with no closing
    # tag after them from each scanning to the end of the text (quadratic).
    text = text[: text.rfind(close) + len(close)] if close in text else ""
    blocks = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, flags=re.DOTALL)
    if not blocks:
        return None
    return blocks[-1] if last else blocks[0]


def after_think(text: str, close_tag: str = "</think>") -> str | None:
    """The text after the last closing think tag, or None when the tag is absent."""
    idx = text.rfind(close_tag)
    return None if idx < 0 else text[idx + len(close_tag) :]


_FENCE_OPEN = re.compile(r"(`{3,}|~{3,})[ \t]*([\w+#.-]*)")


def fenced_code(text: str) -> list[tuple[str, str]]:
    """`(language tag, lower-cased; body)` of every fenced code block, in order.

    Line by line rather than one regex: a backreferencing regex backtracks quadratically on a long
    run of backticks, and this must stay linear on any input. A closing fence is a line of the
    opening's character, at least as long (CommonMark); an unterminated last block counts, since
    models often stop mid-block.
    """
    blocks: list[tuple[str, str]] = []
    fence, lang, body = None, "", []
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None:
            m = _FENCE_OPEN.match(stripped)
            if m:
                fence, lang, body = m.group(1), m.group(2).lower(), []
            continue
        if stripped.startswith(fence) and stripped == fence[0] * len(stripped):
            blocks.append((lang, "\n".join(body)))
            fence = None
        else:
            body.append(line)
    if fence is not None:
        blocks.append((lang, "\n".join(body)))
    return blocks


def fenced_blocks(text: str, language: str | None = None, aliases: tuple[str, ...] = ()) -> list[str]:
    """Bodies of fenced code blocks; with `language`, only those tagged with it or an alias
    (case-insensitive)."""
    wanted = {x.lower() for x in (language, *aliases) if x}
    return [body for lang, body in fenced_code(text) if not wanted or lang in wanted]


_NUMBER = re.compile(r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?![\w])|(?<![\w.])[-−]?\.\d+")


def last_number(text: str) -> str | None:
    """The last number in the text (`1,234`, `-3.5`, `2/3`, `.5`), thousands separators removed."""
    found = numbers(text)
    return found[-1] if found else None


def numbers(text: str) -> list[str]:
    """Every number in the text, in order, thousands separators removed (`1,234` -> `1234`)."""
    return [n.replace(",", "").replace("−", "-") for n in _NUMBER.findall(text)]


def strip_emphasis(text: str) -> str:
    """`**73**` -> `73`, `_x_` -> `x`: markdown emphasis around an answer."""
    text = text.strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "*_`":
        text = text[1:-1].strip()
    return text


# ---------------------------------------------------------------------------------------------
# Final-answer extraction for math completions (used by `math_accuracy`)

_MATH_DELIMS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
# Longest text after an answer phrase that is searched for the answer: no answer is longer, and it
# bounds the regex work on a pathological completion.
MAX_ANSWER_SCAN = 4000


def strip_math_delimiters(text: str) -> str:
    """`$x$`, `$$x$$`, `\\(x\\)`, `\\[x\\]` -> `x`; anything else is returned stripped."""
    text = text.strip()
    for left, right in _MATH_DELIMS:
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


_INLINE_MATH = re.compile(
    r"\$\$([^$]+)\$\$|(?<!\\)\$((?:\\\$|[^$])+)\$|\\\(((?:(?!\\\)).)+)\\\)|\\\[((?:(?!\\\]).)+)\\\]", re.DOTALL
)
_SENTENCE_END = re.compile(r"\.(?=\s|$)|;|\n")
# A word (3+ letters) not part of a LaTeX command: "18 dollars" has one, "\frac{1}{2}" has none.
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_LEADING_NUMBER = re.compile(r"\s*\\?\$?\s*([-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?)(?![\d/])")


def clean_answer(text: str) -> str | None:
    """The answer inside a phrase's remainder: math delimiters, emphasis, a trailing period and
    trailing prose ("18 dollars" -> "18") removed. None when nothing is left."""
    text = strip_emphasis(text.strip()[:MAX_ANSWER_SCAN])
    math = _INLINE_MATH.search(text)
    if math:
        text = next(g for g in math.groups() if g is not None)
    else:
        end = _SENTENCE_END.search(text)
        text = text[: end.start()] if end else text
        if _PROSE_WORD.search(text):
            number = _LEADING_NUMBER.match(text)
            if number:
                text = number.group(1)
    text = strip_emphasis(strip_math_delimiters(text)).rstrip(".").strip()
    return text or None


_ANSWER_PHRASE = re.compile(
    r"\banswer\b[*_\s]*(?:is\b|:|=)[*_ \t:]*|\bfinal\s+answer\b[*_ \t:]*(?=\n)|\banswer[ \t]+(?=\$|\\\(|\\\[)",
    re.IGNORECASE,
)


def answer_phrase(text: str) -> str | None:
    """The answer after the last "final answer is", "The answer is", "Answer:" (any case, with or
    without markdown emphasis); the next line when the phrase ends its line."""
    rest = _after_phrase(text)
    if rest is None:
        return None
    math = _INLINE_MATH.match(rest)
    if math:  # a display block may span lines
        return clean_answer(math.group(0))
    lines = [line for line in rest.split("\n") if line.strip()]
    return clean_answer(lines[0]) if lines else None


def _after_phrase(text: str) -> str | None:
    matches = list(_ANSWER_PHRASE.finditer(text))
    if not matches:
        return None
    return strip_emphasis(text[matches[-1].end() :].lstrip()[:MAX_ANSWER_SCAN])


# A sentence end that closes an answer, unless the next sentence goes on hedging (`5. Or 6.`).
_CLAUSE_END = re.compile(r"\.(?=\s)(?!\s*(?:or|and|maybe|perhaps|possibly|otherwise|else)\b)", re.IGNORECASE)


def phrase_region(text: str) -> str | None:
    """What follows the last answer phrase, uncleaned: its math block (which may span lines) or
    line, with the rest of that sentence (`$5$ or $6$.`)."""
    rest = _after_phrase(text)
    if rest is None:
        return None
    math = _INLINE_MATH.match(rest)
    head, tail = (math.group(0), rest[math.end() :]) if math else ("", rest.lstrip("\n"))
    tail = tail.split("\n", 1)[0]
    end = _CLAUSE_END.search(tail)
    region = head + (tail[: end.start()] if end else tail)
    return region if region.strip() else None


_GSM8K = re.compile(r"####[ \t]*([^\n]*)")


def gsm8k_answer(text: str) -> str | None:
    """The answer after GSM8K's last `#### ` marker, thousands separators removed."""
    region = gsm8k_region(text)
    if region is None:
        return None
    answer = clean_answer(region)
    return answer.replace(",", "") if answer and re.fullmatch(r"[-−\d,.\s]+", answer) else answer


def gsm8k_region(text: str) -> str | None:
    """The line after GSM8K's last `####` marker, uncleaned."""
    found = _GSM8K.findall(text)
    return found[-1] if found else None


def bare_answer(text: str, max_chars: int = 60) -> str | None:
    """The whole text, when it is nothing but a short answer (`42`, `$\\frac{1}{2}$`, `**x = 3**`)."""
    if len(text) > MAX_ANSWER_SCAN:
        return None
    text = strip_emphasis(text).rstrip(".").strip()
    math = _INLINE_MATH.fullmatch(text)
    if math:  # one math region and nothing else: its content, prose-like or not (`$\\text{Even}$`)
        inner = next(g for g in math.groups() if g is not None).strip()
        return inner or None
    text = strip_emphasis(text)
    if not text or len(text) > max_chars or "\n" in text or _PROSE_WORD.search(text):
        return None
    return text


# ---------------------------------------------------------------------------------------------
# The candidate values an answer region holds (the hedge check of `math_accuracy`)

_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
# What separates alternatives in one answer: `5; 6`, `5 or 6`, `5 \lor 6`, `5 \\ 6`, `5. Or 6`, `5 或 6`.
_SEPARATOR = re.compile(
    r";|\n|\\\\|\.(?=\s|$)|\|\||\\?&|或|\\(?:lor|vee|cup|mid|vert|quad|qquad)(?![A-Za-z])|\\hspace\*?\{[^{}]*\}"
    r"|(?<![\\A-Za-z'])(?:or|and|else|otherwise)(?![A-Za-z'])",
    re.IGNORECASE,
)
# A comma inside a number: thousands (`1,000`, `1{,}000`, `12,\!000`).
_NUMBER_COMMA = re.compile(r"(?<=\d)(?:\s*\{\s*,\s*\}\s*|,(?:\\[!,;: ])?\s*(?=\d{3}(?!\d))|,\\!\s*(?=\d))")
_DECIMAL_COMMA = re.compile(r"\s*-?\d+,\d+\s*")  # `1000,99` alone: one number, as math-verify reads it
# Math delimiters and a `\$` currency sign: noise between candidates (`\[ 9 \]` is one answer).
_DELIMITER = re.compile(r"\\[\[\]()$]|\$")
_INEQUALITY = re.compile(r"[<>≤≥]|\\(?:[lg]eq?|[lg]t|leqslant|geqslant)(?![A-Za-z])")
_PLUS_MINUS = re.compile(r"\\pm(?![A-Za-z])|\\mp(?![A-Za-z])|[±∓]")
_SAME_LHS = re.compile(r"\s*([A-Za-z](?:_\{?\w+\}?)?)\s*=(?!=)\s*(.+)", re.DOTALL)
_BRACKETS = (("\\{", "\\}"), ("(", ")"), ("[", "]"), ("{", "}"))
MAX_CANDIDATES = 20


def _top_level_split(text: str) -> list[str]:
    """`text` split at commas outside brackets, thousands separators (`1,000`, `1{,}000`) kept."""
    text = _NUMBER_COMMA.sub("\0", text)
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.replace("\0", ",") for p in parts]


def _split_bars(part: str) -> list[str]:
    """`5|6` is two answers; `|x| + 1` (absolute values leave an empty side) is one."""
    pieces = part.split("|")
    return pieces if len(pieces) > 1 and all(p.strip() for p in pieces) else [part]


def _trim(part: str) -> str:
    """A part without delimiters, emphasis, end punctuation and the unmatched half of a bracket
    left by the split (`5 (or 6)` -> `5 (` and `6)`)."""
    part = strip_math_delimiters(strip_emphasis(part)).strip(" \t.,:$")
    for left, right in _BRACKETS:
        while part.startswith(right) or (part.startswith(left) and part.count(left) > part.count(right)):
            part = part[len(left) :].strip()
        while part.endswith(left) or (part.endswith(right) and part.count(right) > part.count(left)):
            part = part[: -len(right)].strip()
    return part.strip(" \t.,:$")


def _part_values(part: str) -> list[str]:
    """The values a part names: itself when it is math; in prose (`maybe 6`, `18 dollars`), its
    leading and its last number, so a hedge in words counts and a unit or a remark does not."""
    part = _trim(part)
    if not re.search(r"[\w\\]", part):  # `<`, `--`: nothing that could be a value
        return []
    if not _PROSE_WORD.search(part):
        return [part]
    leading = _LEADING_NUMBER.match(part)
    values = ([leading.group(1).replace(",", "")] if leading else []) + numbers(part)[-1:]
    return list(dict.fromkeys(values))


def answer_candidates(region: str) -> list[str]:
    """The distinct candidate answers written in one answer region, as texts (at most
    `MAX_CANDIDATES`): `5 (or 6)`, `5; 6`, `5 and 6`, `5|6`, `5, 6`, `x = 5 or x = 6` give two,
    `5 \\pm 1` gives `5 + 1` and `5 - 1`; `18 dollars`, `1,000`, `(1, 2)` give one. Whether two
    texts are the same value (`1/2 or 0.5`) is for the caller to decide."""
    region = _DELIMITER.sub(" ", _TEXT_WRAPPER.sub(r" \1 ", region[:MAX_ANSWER_SCAN]))
    if _DECIMAL_COMMA.fullmatch(region):
        return [region.strip()]
    values: list[str] = []
    for clause in _SEPARATOR.split(region):
        for part in _top_level_split(clause):
            for piece in _split_bars(part):
                values += _part_values(piece)
    expanded = []
    for value in values:
        if _PLUS_MINUS.search(value):
            expanded += [_PLUS_MINUS.sub("+", value, count=1), _PLUS_MINUS.sub("-", value, count=1)]
        else:
            expanded.append(value)
    sides = [_SAME_LHS.fullmatch(v) for v in expanded]
    if len(expanded) > 1 and all(sides) and len({m.group(1) for m in sides}) == 1:
        expanded = [m.group(2).strip() for m in sides]  # `x = 5 or x = 6`: the values of one unknown
    return list(dict.fromkeys(" ".join(v.split()) for v in expanded))[:MAX_CANDIDATES]


def is_bracketed_list(text: str) -> bool:
    """True when the text holds a comma inside brackets: a set, tuple, interval or point."""
    text = _NUMBER_COMMA.sub("", text)
    return "," in text and any(c in text for c in "([{")


def several_values(gold: str) -> bool:
    """Whether a gold answer names more than one value: several candidates (its boxes read as
    one answer, as math-verify reads them), a `\\pm`, a set, tuple or interval, or an inequality."""
    gold = final_boxed(gold) or gold
    return len(answer_candidates(gold)) > 1 or is_bracketed_list(gold) or _INEQUALITY.search(gold) is not None
