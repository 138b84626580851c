"""Helpers shared by the text scorers: length units and tokenizers, reasoning text, safe strings."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards.scorer import Sample

_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD: tokenizers (Rust) reject them."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def completion_text(sample: Any) -> str:
    """The assistant text of a sample; "" for anything that is not a `Sample` or has no text."""
    try:
        text = sample.completion_text
    except Exception:  # noqa: BLE001 - malformed messages must not crash a scorer
        return ""
    return text if isinstance(text, str) else ""


def prompt_text(sample: Any) -> str:
    try:
        text = sample.prompt_text
    except Exception:  # noqa: BLE001
        return ""
    return text if isinstance(text, str) else ""


def reference_of(sample: Any) -> dict[str, Any]:
    ref = getattr(sample, "reference", None)
    try:
        return dict(ref) if ref else {}
    except (TypeError, ValueError):
        return {}


# ---------------------------------------------------------------------------------------------
# What a reader sees

# Characters that show nothing: Unicode's default-ignorable code points (zero-width spaces and
# joiners, variation selectors, tags), format and control characters other than whitespace. Those
# that are letters or symbols (the Hangul fillers; the blank glyphs no Unicode property marks, looked
# up by name) take a character's width: a reader sees a blank, so they read as a space.
_BLANKS = r"[\p{Default_Ignorable_Code_Point}&&[\p{L}\p{S}]]\N{BRAILLE PATTERN BLANK}\N{MUSICAL SYMBOL NULL NOTEHEAD}"
_BLANK = regex.compile(rf"(?V1)[{_BLANKS}]")
_HIDDEN = regex.compile(r"(?V1)[[\p{Default_Ignorable_Code_Point}\p{Cf}\p{Cc}]--[\t\n\v\f\r\x1c-\x1f\x85]]+")
_ASCII_HIDDEN = re.compile(r"[\x00-\x08\x0e-\x1b\x7f]+")  # the same rule on ASCII text, without the tables
_LETTER_OR_DIGIT = regex.compile(r"[\p{L}\p{N}]")


def visible_text(text: str) -> str:
    """`text` as a reader sees it: characters that show nothing removed, blank ones as spaces.
    Every text scorer decides what is content through this one function."""
    if text.isascii():
        return _ASCII_HIDDEN.sub("", text)
    return _HIDDEN.sub("", _BLANK.sub(" ", text))


def has_content(text: str) -> bool:
    """Whether `text` shows a letter or a digit: whitespace, invisible letters and blank glyphs do not count."""
    return _LETTER_OR_DIGIT.search(visible_text(text)) is not None


@functools.cache
def _lookalikes() -> dict[int, str]:
    """Unicode's confusables (UTS #39, as shipped by confusable-homoglyphs): each letter mapped to one
    letter of its look-alike class, an ASCII one where the class has one; ASCII maps to itself."""
    from confusable_homoglyphs.utils import load  # 0.3 s to read: loaded on first use

    parent: dict[str, str] = {}

    def root(c: str) -> str:
        while parent.get(c, c) != c:
            c = parent[c]
        return c

    for char, glyphs in load("confusables.json").items():
        for glyph in glyphs:
            if len(char) == 1 and len(glyph["c"]) == 1 and char.isalpha() and glyph["c"].isalpha():
                a, b = root(char), root(glyph["c"])
                if a != b:
                    parent[max(a, b, key=_rank)] = min(a, b, key=_rank)
    return {ord(c): root(c) for c in parent if not c.isascii() and root(c) != c}


def _rank(c: str) -> tuple[bool, bool, int]:
    return not c.isascii(), not (c.isascii() and c.islower()), ord(c)


def fold_text(text: str, lowercase: bool = True) -> str:
    """Visible text as repetition compares it: width and compatibility forms folded (NFKC), look-alike
    letters from other scripts folded to one (Cyrillic `а` and Greek `α` to `a`), case-folded unless
    `lowercase` is False."""
    text = unicodedata.normalize("NFKC", visible_text(text))
    if lowercase:
        text = text.casefold()
    return text if text.isascii() else text.translate(_lookalikes())


# Scripts written without spaces: each character is a word.
UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}\p{Tibetan}"
# In scripts written without spaces, a word is a run of up to this many characters, taken from the start
# of the run: a word of English carries about as much as two or three Chinese characters.
UNSPACED_WORD_CHARS = 3
# A run of letters longer than this is words written without spaces (`checkcheckcheck...`): it is
# taken in pieces as a script without spaces is, so a loop glued without separators still repeats.
MAX_WORD_CHARS = 24
_LETTERS = rf"[[\p{{L}}\p{{M}}\p{{N}}]--[{UNSPACED}]]"
_WORD = regex.compile(rf"(?V1){_LETTERS}{{1,{MAX_WORD_CHARS}}}+(?!{_LETTERS})|{_LETTERS}{{1,{UNSPACED_WORD_CHARS}}}"
                      rf"|[{UNSPACED}]{{1,{UNSPACED_WORD_CHARS}}}")
# Punctuation between two words separates them (`check-check`, `check.check`); elsewhere it is part
# of the word it sits in (`\int_0^1`, `e^{x}`, `x-axis`) and is dropped.
_GLUE = regex.compile(r"(?<=[\p{L}\p{M}]{2})[^\p{L}\p{M}\p{N}\s]+(?=[\p{L}\p{M}]{2})")
_NOT_WORD = regex.compile(r"[^\p{L}\p{M}\p{N}\s]+")


def words_of(text: str, lowercase: bool = True) -> list[str]:
    """The words of `text` folded (`fold_text`): whitespace-separated, punctuation between two words
    separating them too and dropped elsewhere; in a script written without spaces, runs of
    `UNSPACED_WORD_CHARS` characters."""
    folded = _NOT_WORD.sub("", _GLUE.sub(" ", fold_text(text, lowercase)))
    return [w for token in folded.split() for w in _WORD.findall(token)]


# Code as markdown shows it: fenced blocks (an unclosed fence runs to the end) and inline spans.
# Each alternative stops at its first closing delimiter, so the scan stays linear on any input.
CODE_SPANS = regex.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|`[^`\n]*`", regex.DOTALL)


def without_code_tags(text: str) -> str:
    """`text` with the `<` of every tag inside code spans changed to `_`, same length: a tag a reader sees
    as code is not markup."""
    if "`" not in text and "~~~" not in text:
        return text
    return CODE_SPANS.sub(lambda m: m.group().replace("<", "_"), text)


# A run of this many characters (whitespace aside) seen before is repeated text: about twelve words.
REPEAT_CHARS = 64
_SPACE = regex.compile(r"\s+")
# A number of up to this many digits: a counter's `1.`, `2.`, `3.` or a table's values compare as one
# digit, so numbering the copies of a sentence does not make them new; a longer digit run is itself.
_NUMBER = regex.compile(r"(?<!\p{N})\p{N}{1,6}(?!\p{N})")


def content_length(text: str) -> int:
    """The characters a length target counts: visible text with whitespace runs as one space, less
    the share of repeated text. Text is repeated where a run of `REPEAT_CHARS` characters (folded,
    whitespace left out, each number as one digit) was seen before, so a loop of any period, with any
    separator, numbered or not, in any script, adds nothing past its first period and one run."""
    shown = _SPACE.sub(" ", visible_text(text)).strip()
    if len(shown) <= REPEAT_CHARS:
        return len(shown)
    stream = _NUMBER.sub("0", _SPACE.sub("", fold_text(shown)))
    grams = len(stream) - REPEAT_CHARS + 1
    if grams <= 1:
        return len(shown)
    repeated = grams - len({stream[i : i + REPEAT_CHARS] for i in range(grams)})
    return round(len(shown) * (1 - repeated / len(stream))) if repeated else len(shown)


# ---------------------------------------------------------------------------------------------
# Length units


class LengthUnitParams(BaseModel):
    """Mixin: how the length scorers measure a completion."""

    model_config = ConfigDict(extra="forbid")

    unit: Literal["auto", "chars", "tokens"] = Field(
        "auto",
        description="Length unit. `auto`: tokens when `tokenizer` is set, characters otherwise. `tokens`: the "
        "sample's `completion_ids` (what the TRL adapter passes: the exact generated tokens) when present, "
        "else `tokenizer`; with neither the sample is unscorable.",
    )
    tokenizer: str | None = Field(
        None, min_length=1,
        description="Hugging Face tokenizer name or local path (AutoTokenizer, loaded on first use) for "
        "token lengths.",
    )
    padding: Literal["ignore", "count"] = Field(
        "ignore",
        description="`ignore`: the length is that of the content: whitespace runs count as one character, "
        "characters that show nothing as none, and text repeating a run of 64 characters already written "
        "(folded: case, width and look-alike letters aside; whitespace left out; each number as one digit) "
        "as nothing, whatever its period, separator or script; a token length is scaled by the same ratio. "
        "`count`: the raw length.",
    )


@functools.lru_cache(maxsize=8)
def text_tokenizer(name: str) -> Any:
    """AutoTokenizer by name or path, loaded once per process (loading costs ~0.1-1 s)."""
    from transformers import AutoTokenizer  # optional extra `train`, heavy (~2.7 s): only for token lengths

    return AutoTokenizer.from_pretrained(name)


def _ids_length(ids: Any) -> int | None:
    if isinstance(ids, (str, bytes)) or ids is None:
        return None
    try:
        return len(ids)
    except TypeError:
        return None


def token_counts(texts: Sequence[str], tokenizer_name: str) -> list[int]:
    """Token counts of `texts` (no special tokens), batched: one fast-tokenizer call for all."""
    tok = text_tokenizer(tokenizer_name)
    clean = [without_surrogates(t) for t in texts]
    encoded = tok(clean, add_special_tokens=False)["input_ids"] if clean else []
    return [len(ids) for ids in encoded]


def measure_lengths(samples: Sequence[Any], params: LengthUnitParams) -> list[tuple[int | None, dict[str, Any]]]:
    """(length, info) per sample in the configured unit; length None with `info["reason"]` when unmeasurable."""
    unit = params.unit
    if unit == "auto":
        unit = "tokens" if params.tokenizer else "chars"
    texts = [completion_text(s) for s in samples]
    if params.padding == "ignore":
        return _content_lengths(samples, texts, params, unit)
    if unit == "chars":
        return [(len(t), {"length": len(t), "unit": "chars"}) for t in texts]
    out: list[tuple[int | None, dict[str, Any]] | None] = []
    need_tokenizer: list[int] = []
    for i, s in enumerate(samples):
        n = _ids_length(reference_of(s).get("completion_ids"))
        if n is not None:
            out.append((n, {"length": n, "unit": "tokens", "token_source": "completion_ids"}))
        elif params.tokenizer:
            out.append(None)
            need_tokenizer.append(i)
        else:
            out.append((None, {"reason": "unit is tokens but the sample has no completion_ids and no tokenizer "
                                         "is configured", "unit": "tokens"}))
    if need_tokenizer:
        counts = token_counts([texts[i] for i in need_tokenizer], params.tokenizer)
        for i, n in zip(need_tokenizer, counts, strict=True):
            out[i] = (n, {"length": n, "unit": "tokens", "token_source": "tokenizer"})
    return out  # type: ignore[return-value]


def _content_lengths(samples: Sequence[Any], texts: list[str], params: LengthUnitParams,
                     unit: str) -> list[tuple[int | None, dict[str, Any]]]:
    """`measure_lengths` of the content (see `content_length`); the raw length stays in the info."""
    raw = measure_lengths(samples, params.model_copy(update={"padding": "count", "unit": unit}))
    out = []
    for (n, info), text in zip(raw, texts, strict=True):
        if n is None:
            out.append((n, info))
            continue
        content = content_length(text)
        length = content if unit == "chars" else round(n * content / len(text)) if text else n
        out.append((length, {**info, "length": length, **({"raw_length": n} if length != n else {})}))
    return out


# ---------------------------------------------------------------------------------------------
# The reasoning part of a completion


def reasoning_text(text: str, think_tag: str = "think") -> tuple[str, str]:
    """(reasoning, where it came from): the `<think>` block, else the text before a closing tag
    (the prompt opened the block), else the whole completion."""
    open_tag, close_tag = f"<{think_tag}>", f"</{think_tag}>"
    close_at = text.find(close_tag)
    if close_at >= 0:
        open_at = text.rfind(open_tag, 0, close_at)
        if open_at >= 0:
            return text[open_at + len(open_tag) : close_at], "think_block"
        return text[:close_at], "before_close_tag"
    open_at = text.find(open_tag)
    if open_at >= 0:  # unterminated block: the model stopped while still reasoning
        return text[open_at + len(open_tag) :], "unterminated_think_block"
    return text, "completion"
