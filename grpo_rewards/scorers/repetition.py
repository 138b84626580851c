"""N-gram repetition penalty (Appendix C.2 of "Demystifying Long Chain-of-Thought Reasoning").

value = (1 - unique n-grams / total n-grams) * max_penalty, the formula of TRL's
`get_repetition_penalty_reward`; over token ids (TRL) or whitespace words (open-r1's first version).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from grpo_rewards.scorer import ParamsModel, Sample, Score, Scorer
from grpo_rewards.scorers.textbatch import distinct_ngrams
from grpo_rewards.scorers.textutil import (
    completion_text, reference_of, text_tokenizer, word_hashes, without_surrogates,
)


class RepetitionParams(ParamsModel):
    ngram_size: int = Field(3, ge=1, le=100, description="Size of the n-grams (TRL default 3).")
    max_penalty: float = Field(-1.0, ge=-10, le=0, description="Value of a completely repetitive completion.")
    unit: Literal["auto", "words", "tokens"] = Field(
        "auto",
        description="What an n-gram is made of. `auto`: tokens when `tokenizer` is set or the sample carries "
        "`completion_ids` (as under TRL, whose function sees token ids), whitespace words otherwise. "
        "`tokens` without either: unscorable.",
    )
    tokenizer: str | None = Field(None, min_length=1,
                                  description="Tokenizer name or local path for token n-grams.")
    lowercase: bool = Field(True, description="Lower-case words before comparing (`words` unit).")
    fold: bool = Field(
        True, description="`words` unit: compare words as a reader sees them: invisible characters dropped, "
        "width forms and look-alike letters of other scripts folded (`chеck` with a Cyrillic `е` is `check`), "
        "split at anything that is not a letter or digit (spaces, hyphens, punctuation), and each character "
        "of a script written without spaces (Chinese, Japanese, Thai) a word of its own.")


def repeated_fraction(items: Sequence[Hashable], n: int) -> tuple[float, int]:
    """(1 - unique/total n-grams, total n-grams); (0, 0) when there are fewer than n items."""
    if len(items) < n:
        return 0.0, 0
    total = len(items) - n + 1
    unique = len(set(zip(*[items[i:] for i in range(n)], strict=False)))  # a set straight from zip: no list
    return 1 - unique / total, total


class Repetition(Scorer):
    """N-gram repetition penalty: 0 for no repeated n-gram, down to max_penalty for pure repetition."""

    name = "repetition"
    Params = RepetitionParams
    value_range = (-10.0, 0.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.value_range = (self.params.max_penalty, 0.0)

    def _items(self, samples: Sequence[Sample]) -> list[tuple[Sequence[Hashable] | None, str]]:
        p = self.params
        texts = [completion_text(s) for s in samples]
        out: list[tuple[Sequence[Hashable] | None, str]] = []
        for s in samples:
            ids = reference_of(s).get("completion_ids")
            if hasattr(ids, "tolist"):  # a tensor or array: its elements must hash by value
                ids = ids.tolist()
            if p.unit != "words" and isinstance(ids, (list, tuple)):
                out.append((ids, "completion_ids"))
            elif p.unit == "words" or (p.unit == "auto" and not p.tokenizer):
                out.append(((), "words"))
            else:
                out.append((None, "tokenizer"))
        by_words = [i for i, (_, source) in enumerate(out) if source == "words"]
        hashes = word_hashes([texts[i] for i in by_words], p.lowercase, p.fold)
        for i, count in zip(by_words, distinct_ngrams(hashes, p.ngram_size), strict=True):
            out[i] = (count, "words")
        pending = [i for i, (items, _) in enumerate(out) if items is None]
        if pending and p.tokenizer:
            tok = text_tokenizer(p.tokenizer)
            encoded = tok([without_surrogates(texts[i]) for i in pending], add_special_tokens=False)["input_ids"]
            for i, ids in zip(pending, encoded, strict=True):
                out[i] = (ids, "tokenizer")
        return out

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        p = self.params
        scores = []
        for items, source in self._items(samples):
            if items is None:
                scores.append(Score.unscorable("unit is tokens but the sample has no completion_ids and no "
                                               "tokenizer is configured"))
                continue
            if source == "words":  # (n-grams, distinct n-grams), counted for the batch at once
                total, distinct = items
                fraction = 1 - distinct / total if total else 0.0
            else:
                try:
                    fraction, total = repeated_fraction(items, p.ngram_size)
                except TypeError:  # unhashable ids
                    scores.append(Score.unscorable("completion_ids are not a list of token ids"))
                    continue
            value = fraction * p.max_penalty if fraction else 0.0
            scores.append(Score(value, {"repeated_fraction": fraction, "ngrams": total, "unit": source,
                                        "ngram_size": p.ngram_size}))
        return scores
