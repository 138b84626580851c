"""Answer and code extraction shared by the scorers.

Hand-written scanning rather than one regex where braces nest (`\\boxed{\\frac{1}{2}}`): a
regex cannot match balanced braces, and a greedy one swallows the rest of the text.
Every function takes any string and returns None (or []) when there is nothing to extract.
"""

from __future__ import annotations

import re

from grpo_rewards.connectives import HEDGE_WORDS, NOT_CONNECTIVES, OR_WORDS
from grpo_rewards.patterns import LazyPattern

_BOXED = LazyPattern(re.compile, r"\\(?:boxed|fbox)\s*")


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


def after_tag(text: str, tag: str) -> str:
    """The rest of the sentence after the last `</tag>` (where a hedge beside the block would stand)."""
    close = f"</{tag}>"
    at = text.rfind(close)
    return "" if at < 0 else _sentence(text[at + len(close) : at + len(close) + MAX_ANSWER_SCAN])


def after_think(text: str, close_tag: str = "</think>") -> str | None:
    """The text after the last closing think tag, or None when the tag is absent."""
    idx = text.rfind(close_tag)
    return None if idx < 0 else text[idx + len(close_tag) :]


_FENCE_OPEN = LazyPattern(re.compile, r"(`{3,}|~{3,})[ \t]*([\w+#.-]*)")


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


_NUMBER = LazyPattern(re.compile, r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?![\w])"
                                   r"|(?<![\w.])[-−]?\.\d+")


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
# Answer regions of math completions (read by `grpo_rewards.answer`, used by `math_accuracy`)

_MATH_DELIMS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
# Longest text after an anchor that is searched for the answer: no answer is longer, and it bounds
# the scanning of a pathological completion.
MAX_ANSWER_SCAN = 4000


def strip_math_delimiters(text: str) -> str:
    """`$x$`, `$$x$$`, `\\(x\\)`, `\\[x\\]` -> `x`; anything else is returned stripped."""
    text = text.strip()
    for left, right in _MATH_DELIMS:
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


_INLINE_MATH = LazyPattern(re.compile,
    r"\$\$([^$]+)\$\$|(?<!\\)\$((?:\\\$|[^$])+)\$|\\\(((?:(?!\\\)).)+)\\\)|\\\[((?:(?!\\\]).)+)\\\]", re.DOTALL
)
_PROSE_WORD = LazyPattern(re.compile, r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_ANSWER_PHRASE = LazyPattern(re.compile,
    r"\banswer\b[*_\s]*(?:is\b|:|=)[*_ \t:]*|\bfinal\s+answer\b[*_ \t:]*(?=\n)|\banswer[ \t]+(?=\$|\\\(|\\\[)",
    re.IGNORECASE,
)
# The same phrase in other languages ("La respuesta es", "Die Antwort lautet", "Ответ:", "答案是", "答え：").
# A pattern of its own, searched only when one of its words occurs: joined to the English one, the
# alternation loses the engine's literal-prefix scan and slows every search (docs/benchmarks.md).
_OTHER_PHRASE = LazyPattern(re.compile,
    r"\b(?:respuesta|resposta|réponse|risposta|antwort|ответ|cevap|jawaban(?:nya)?)(?:\s+finale?)?[*_\s]*"
    r"(?:es\b|é|est\b|è|ist\b|lautet\b|adalah\b|—|:|：)[*_ \t:：]*"
    r"|(?:答案|答え|정답|答|답)\s*(?:是|为|為|は|은|:|：)[*_ \t:：]*",
    re.IGNORECASE,
)
_OTHER_PHRASE_WORDS = ("respuesta", "resposta", "réponse", "risposta", "antwort", "ответ", "cevap", "jawaban", "答", "답")
# A full stop ends the answer's sentence unless the next sentence opens with an alternative ("5. Or
# 6.", "5. Alternatively, 6.", "5. But if zero counts, 6."): that sentence still offers a value.
_CLAUSE_END = LazyPattern(re.compile, r"(?:\.(?=\s)|。)(?!\s*(?:" + "|".join(sorted(
    (re.escape(w) for w in {*OR_WORDS, *HEDGE_WORDS, "and", "but", "though", "although"} - NOT_CONNECTIVES),
    key=len, reverse=True)) + r")(?!\w))", re.IGNORECASE)


def _after_phrase(text: str) -> str | None:
    ends = [m.end() for m in _ANSWER_PHRASE.finditer(text)]
    lowered = text.lower()
    if any(w in lowered for w in _OTHER_PHRASE_WORDS):
        ends += [m.end() for m in _OTHER_PHRASE.finditer(text)]
    if not ends:
        return None
    return strip_emphasis(text[max(ends) :].lstrip()[:MAX_ANSWER_SCAN])


def _sentence(tail: str) -> str:
    """`tail` up to the end of its line and sentence."""
    tail = tail.split("\n", 1)[0]
    end = _CLAUSE_END.search(tail)
    return tail[: end.start()] if end else tail


def phrase_region(text: str) -> str | None:
    """What follows the last answer phrase ("The answer is", "Answer:", "**Final Answer**"): its
    math block (which may span lines) or its line, up to the end of the sentence."""
    rest = _after_phrase(text)
    if rest is None:
        return None
    math = _INLINE_MATH.match(rest)
    head, tail = (math.group(0), rest[math.end() :]) if math else ("", rest.lstrip("\n"))
    region = head + _sentence(tail)
    return region if region.strip() else None


def box_region(text: str, max_gap: int = 40, max_parts: int = 50) -> tuple[str, str, str] | None:
    """(content, text before on its line, rest of its sentence) of the last boxed answer; several
    boxes in a row on one line (`\\boxed{1} and \\boxed{2}`) are one answer, joined with ", "
    as math-verify joins them."""
    spans = [s for s in _boxed_spans(text) if s[2].strip()]
    if not spans:
        return None
    group = [spans[-1]]  # built backwards from the last box
    for span in reversed(spans[:-1]):
        gap = text[span[1] : group[-1][0]]
        if "\n" in gap or len(gap) > max_gap or len(group) >= max_parts:
            break
        group.append(span)
    content = ", ".join(c.strip() for _, _, c in reversed(group))
    line_start = text.rfind("\n", 0, group[-1][0]) + 1
    before = text[max(line_start, group[-1][0] - MAX_ANSWER_SCAN) : group[-1][0]]
    return content, before, _sentence(text[group[0][1] : group[0][1] + MAX_ANSWER_SCAN])


def final_boxed(text: str) -> str | None:
    """The content of the last boxed answer (see `box_region`)."""
    region = box_region(text)
    return region[0] if region else None


def gsm8k_region(text: str) -> str | None:
    """The text after GSM8K's last `####` marker, to the end of its line."""
    idx = text.rfind("####")
    return None if idx < 0 else text[idx + 4 :].split("\n", 1)[0][:MAX_ANSWER_SCAN]


def bare_region(text: str, max_chars: int = 60) -> str | None:
    """The whole text, when it is nothing but a short answer on one line (`42`, `$\\frac{1}{2}$`,
    `**x = 3**`, `12 apples`): one math region, or a value with at most one word after it."""
    text = strip_emphasis(text)
    if not text or len(text) > MAX_ANSWER_SCAN or "\n" in text.strip():
        return None
    if _INLINE_MATH.fullmatch(text.rstrip(".").strip()):
        return text
    words = _PROSE_WORD.findall(text)
    if len(text) > max_chars or len(words) > 1 or (words and not re.match(r"\W*\d", text)):
        return None
    return text


def final_region(text: str, tag: str | None, require_think: bool = False) -> tuple[str | None, str | None]:
    """(the final-answer region, None) or (None, why there is none): the text after the reasoning
    ends (the last `</think>`), and within it the last `<tag>` block when there is one. A box,
    phrase or block inside the reasoning is never read."""
    after = after_think(text)
    if after is not None:
        text = after
    elif require_think:
        return None, "no </think> in the completion"
    elif "<think>" in text:
        return None, "the reasoning never ended (<think> without </think>)"
    if tag is not None:
        block = tag_block(text, tag)
        if block is not None:
            return block, None
    return text, None
