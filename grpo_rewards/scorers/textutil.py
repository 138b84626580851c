"""Helpers shared by the text scorers: length units and tokenizers, reasoning text, safe strings."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, Literal

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


@functools.lru_cache(maxsize=8)
def load_tokenizer(name: str) -> Any:
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
    tok = load_tokenizer(tokenizer_name)
    clean = [without_surrogates(t) for t in texts]
    encoded = tok(clean, add_special_tokens=False)["input_ids"] if clean else []
    return [len(ids) for ids in encoded]


def measure_lengths(samples: Sequence[Any], params: LengthUnitParams) -> list[tuple[int | None, dict[str, Any]]]:
    """(length, info) per sample in the configured unit; length None with `info["reason"]` when unmeasurable."""
    unit = params.unit
    if unit == "auto":
        unit = "tokens" if params.tokenizer else "chars"
    texts = [completion_text(s) for s in samples]
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
