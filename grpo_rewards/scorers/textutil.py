"""Helpers shared by the text scorers: length units and tokenizers, reasoning text, safe strings."""

from __future__ import annotations

import functools
import re
import struct
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

import regex
from pydantic import Field

from grpo_rewards.patterns import LazyPattern
from grpo_rewards.scorer import ParamsModel, Sample
from grpo_rewards.scorers.textbatch import (
    UNIT_SEP, TokenAnalysis, char_table, containing, repeated_runs,
)

_SURROGATE = LazyPattern(re.compile, "[\ud800-\udfff]")


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
# joiners, variation selectors, tags, the Hangul fillers), format characters and controls other than
# whitespace. Those that take a character's width, the Hangul fillers (letters) and two blank glyphs
# that no Unicode property marks (named here), read as a space. One property per pattern: the
# `regex` module checks a single property much faster than a union of them.
_DEFAULT_IGNORABLE = LazyPattern(regex.compile, r"\p{Default_Ignorable_Code_Point}+")
_FORMAT = LazyPattern(regex.compile, r"\p{Cf}+")
_CONTROL = LazyPattern(regex.compile, r"(?:(?!\s)\p{Cc})+")
_LETTER = LazyPattern(regex.compile, r"\p{L}")
BLANK_GLYPHS = ("\N{BRAILLE PATTERN BLANK}", "\N{MUSICAL SYMBOL NULL NOTEHEAD}")
# A letter or digit that `visible_text` keeps: the only hidden letters are default-ignorable ones.
_VISIBLE_LETTER_OR_DIGIT = LazyPattern(regex.compile, r"\p{N}|(?!\p{Default_Ignorable_Code_Point})\p{L}")


def visible_text(text: str) -> str:
    """`text` as a reader sees it: characters that show nothing removed, blank ones as spaces.
    Every text scorer decides what is content through this one function (`has_content` applies
    the same rule without building the string)."""
    text = _CONTROL.sub("", text)
    if text.isascii():
        return text
    text = _FORMAT.sub("", _DEFAULT_IGNORABLE.sub(_blank_or_nothing, text))
    for glyph in BLANK_GLYPHS:
        if glyph in text:
            text = text.replace(glyph, " ")
    return text


# Every character `visible_text` removes or blanks, for a quick test of a whole batch.
_HIDDEN = r"[\p{Default_Ignorable_Code_Point}\p{Cf}" + "".join(BLANK_GLYPHS) + r"]|(?!\s)\p{Cc}"


def visible_texts(texts: Sequence[str]) -> list[str]:
    """`visible_text` of each text; one numpy pass finds the texts with nothing hidden, kept as they are."""
    hidden = containing(texts, char_table(_HIDDEN))
    return [visible_text(text) if any_hidden else text for text, any_hidden in zip(texts, hidden, strict=True)]


def _blank_or_nothing(hidden: regex.Match) -> str:
    return " " if _LETTER.search(hidden.group()) else ""


def has_content(text: str) -> bool:
    """Whether `text` shows a letter or a digit: whitespace, invisible letters and blank glyphs do not count."""
    return _VISIBLE_LETTER_OR_DIGIT.search(text) is not None


@functools.cache
def _lookalikes() -> dict[int, str]:
    """Unicode's confusables (UTS #39, as shipped by confusable-homoglyphs): each letter of another
    script that looks like an ASCII letter, mapped to it."""
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
    return {ord(c): root(c) for c in parent if not c.isascii() and root(c).isascii()}


def _rank(c: str) -> tuple[bool, bool, int]:
    return not c.isascii(), not (c.isascii() and c.islower()), ord(c)


def fold_text(text: str, lowercase: bool = True) -> str:
    """Visible text as repetition compares it: width and compatibility forms folded (NFKC), letters of
    other scripts that look like ASCII letters folded to them (Cyrillic `а` and Greek `α` to `a`),
    case-folded unless `lowercase` is False."""
    return _fold(visible_text(text), lowercase)


def _fold(visible: str, lowercase: bool = True) -> str:
    if visible.isascii():
        return visible.lower() if lowercase else visible
    text = unicodedata.normalize("NFKC", visible)
    return (text.casefold() if lowercase else text).translate(_lookalikes())


# Scripts written without spaces: a word is a run of up to `UNSPACED_WORD_CHARS` of their characters,
# from the start of the run: a word of English carries about as much as two or three Chinese characters.
UNSPACED_SCRIPTS = ("Han", "Hiragana", "Katakana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan")
UNSPACED = "|".join(rf"\p{{{script}}}" for script in UNSPACED_SCRIPTS)
UNSPACED_WORD_CHARS = 3
# A run of letters longer than this is words written without spaces (`checkcheckcheck...`): it is
# taken in pieces as a script without spaces is, so a loop glued without separators still repeats.
MAX_WORD_CHARS = 24
_UNSPACED_RUN = LazyPattern(regex.compile, rf"(?:{UNSPACED})+")
_PIECES = rf"(?:{UNSPACED}){{1,{UNSPACED_WORD_CHARS}}}|\w{{1,{MAX_WORD_CHARS}}}+(?!\w)|\w{{1,{UNSPACED_WORD_CHARS}}}"
_WORD = LazyPattern(regex.compile, _PIECES)
# Punctuation between two words separates them (`check-check`, `check.check`); elsewhere it is part
# of the word it sits in (`\int_0^1`, `e^{x}`, `x-axis`) and is dropped.
_GLUE = LazyPattern(regex.compile, r"(?<=[^\W\d_]{2})[\W_]+(?=[^\W\d_]{2})")
_NOT_WORD = LazyPattern(regex.compile, r"[\W_]+")


def word_hashes(texts: Sequence[str], lowercase: bool = True, fold: bool = True) -> list[bytes]:
    """The words of each text as their 64-bit hashes, 8 bytes a word, in order (for `distinct_ngrams`).
    With `fold`, the words of `fold_text`: whitespace-separated, punctuation between two words
    separating them too and dropped elsewhere; in a script written without spaces, and in a run longer
    than any word, pieces of `UNSPACED_WORD_CHARS` characters. Without it, the whitespace-separated tokens."""
    if fold:
        token_lists = [text.split() for text in visible_texts(texts)]
    else:
        token_lists = [(text.lower() if lowercase else text).split() for text in texts]
    table = (_TOKEN_WORDS[lowercase] if fold else _TOKEN_AS_WORD).table()
    return [b"".join(map(table.__getitem__, tokens)) for tokens in token_lists]


def _token_words(token: str, lowercase: bool) -> tuple[str, ...]:
    folded = _fold(token, lowercase)
    if folded.isalnum() and folded.isascii() and len(folded) <= MAX_WORD_CHARS:
        return (folded,)
    words = " ".join(_NOT_WORD.sub("", part) for part in _GLUE.sub(" ", folded).split())
    if not words.isascii():
        words = _UNSPACED_RUN.sub(r" \g<0> ", words)
    return tuple(_WORD.findall(words))


def _token_word_hashes(token: str, lowercase: bool) -> bytes:
    words = _token_words(token, lowercase)
    return _pack_one(hash(words[0])) if len(words) == 1 else struct.pack(f"<{len(words)}q", *map(hash, words))


_pack_one = struct.Struct("<q").pack


# Folded words of a token, as hashes, by `lowercase`; and a token as a word of its own (no folding).
_TOKEN_WORDS = {case: TokenAnalysis(functools.partial(_token_word_hashes, lowercase=case)) for case in (True, False)}
_TOKEN_AS_WORD = TokenAnalysis(lambda token: _pack_one(hash(token)))


# Code as markdown shows it: fenced blocks (an unclosed fence runs to the end) and inline spans.
# Each alternative stops at its first closing delimiter, so the scan stays linear on any input.
CODE_SPANS = LazyPattern(regex.compile, r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|`[^`\n]*`", regex.DOTALL)


def without_code_tags(text: str) -> str:
    """`text` with the `<` of every tag inside code spans changed to `_`, same length: a tag a reader sees
    as code is not markup."""
    if "`" not in text and "~~~" not in text:
        return text
    return CODE_SPANS.sub(lambda m: m.group().replace("<", "_"), text)


# A run of this many characters (whitespace aside) seen before is repeated text: about twelve words.
REPEAT_CHARS = 64
# A number of up to this many digits: a counter's `1.`, `2.`, `3.` or a table's values compare as one
# digit, so numbering the copies of a sentence does not make them new; a longer digit run is itself.
_NUMBER = LazyPattern(regex.compile, r"(?<!\d)\d{1,6}(?!\d)")
# Where a repeat is compared from: each word (or piece of one) and each other character.
_UNIT = LazyPattern(regex.compile, _PIECES + r"|\S")


def content_lengths(texts: Sequence[str]) -> list[int]:
    """The characters a length target counts, per text: visible text with whitespace runs as one space,
    less the share of it that repeats. A unit (a word, a piece of one, any other character) repeats
    when the `REPEAT_CHARS` characters from it (folded, whitespace left out, each number as one digit)
    were seen before in the same text: a loop of any period, with any separator, numbered or not, in any
    script, adds nothing past its first copy and one run. Units, not every character, start a run: the
    same text starts its runs at the same places wherever it sits, and there are fewer to compare."""
    token_lists = [text.split() for text in visible_texts(texts)]
    shown = [max(sum(map(len, tokens)) + len(tokens) - 1, 0) for tokens in token_lists]
    long = [i for i, n in enumerate(shown) if n > REPEAT_CHARS]
    long_tokens = [token_lists[i] for i in long]
    runs = repeated_runs(long_tokens, _TOKEN_UNITS.table(), REPEAT_CHARS)
    for i, (units, repeated) in zip(long, runs, strict=True):
        if repeated:
            shown[i] = round(shown[i] * (1 - repeated / units))
    return shown


def _token_units(token: str) -> tuple[str, ...]:
    folded = _fold(token)
    if folded.isascii() and len(folded) <= MAX_WORD_CHARS:
        if folded.isalpha():
            return (folded,)
        if folded.isdigit():
            return ("0",) if len(folded) <= 6 else (folded,)
    folded = _NUMBER.sub("0", folded)
    if not folded.isascii():
        folded = _UNSPACED_RUN.sub(r" \g<0> ", folded)
    return tuple(_UNIT.findall(folded))


_TOKEN_UNITS = TokenAnalysis(lambda token: UNIT_SEP.join(_token_units(token)))


# ---------------------------------------------------------------------------------------------
# Length units


class LengthUnitParams(ParamsModel):
    """Mixin: how the length scorers measure a completion."""

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
    """`measure_lengths` of the content (see `content_lengths`); the raw length stays in the info."""
    raw = measure_lengths(samples, params.model_copy(update={"padding": "count", "unit": unit}))
    contents = iter(content_lengths([text for (n, _), text in zip(raw, texts, strict=True) if n is not None]))
    out = []
    for (n, info), text in zip(raw, texts, strict=True):
        if n is None:
            out.append((n, info))
            continue
        content = next(contents)
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
