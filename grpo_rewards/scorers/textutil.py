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
_INVISIBLE = regex.compile(r"\p{Cf}+")  # zero-width spaces and joiners: no visible text, no length
_NOT_WORD = regex.compile(r"[^\p{L}\p{N}]+")
# A character repeated past this many times in a row is padding (`=====`, 5,000 `x`).
MAX_RUN = 32
_LONG_RUN = re.compile(r"(.)\1{%d,}" % MAX_RUN, re.DOTALL)
# A run of this many words seen before, in the same order, is repeated text.
REPEAT_NGRAM = 8


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


def fold_word(word: str, lowercase: bool = True) -> str:
    """A word as a repetition check compares it: width-folded (NFKC), without punctuation or
    invisible characters, and case-folded unless `lowercase` is False."""
    word = _NOT_WORD.sub("", unicodedata.normalize("NFKC", word))
    return word.casefold() if lowercase else word


def invisible_free(text: str) -> str:
    return _INVISIBLE.sub("", text)


def content_text(text: str) -> str:
    """The text a length target counts: invisible characters dropped, whitespace runs as one
    space, a run of one character cut to `MAX_RUN`, and a word that completes a run of
    `REPEAT_NGRAM` words already seen (case and punctuation aside) left out, so that padding with
    whitespace or with repeated text adds nothing."""
    words = invisible_free(text).split()
    kept, seen, window = [], set(), []
    for word in words:
        window.append(fold_word(word))
        if len(window) > REPEAT_NGRAM:
            window.pop(0)
        gram = tuple(window)
        if len(gram) == REPEAT_NGRAM and gram in seen:
            continue
        seen.add(gram)
        kept.append(word)
    return _LONG_RUN.sub(lambda m: m.group(1) * MAX_RUN, " ".join(kept))


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
        description="`ignore`: the length is that of the content: whitespace runs count as one character, a "
        "character repeated past 32 in a row as 32, invisible characters as none, and text repeating a run "
        "of 8 words already written (case and punctuation aside) as nothing; a token length is scaled by the "
        "same ratio. `count`: the raw length.",
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
    """`measure_lengths` of the content (see `content_text`); the raw length stays in the info."""
    raw = measure_lengths(samples, params.model_copy(update={"padding": "count", "unit": unit}))
    out = []
    for (n, info), text in zip(raw, texts, strict=True):
        if n is None:
            out.append((n, info))
            continue
        content = len(content_text(text))
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
