"""The `keywords` scorer: required keywords earn credit, forbidden ones cost it.

value = max(0, coverage - forbidden_penalty * forbidden_found), where coverage is the share of
required keywords found (1 when none are required; with `partial_credit: false`, 1 only when all
are found, else 0). The value always lies in [0, 1].
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grpo_rewards import Sample, Score, Scorer
from grpo_rewards.extract import after_think, tag_block

Keyword = Annotated[str, Field(min_length=1)]


class KeywordsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    required: list[Keyword] = Field(
        default_factory=list, description="Keywords (or regexes) the completion should contain; each earns an equal share.")
    forbidden: list[Keyword] = Field(
        default_factory=list, description="Keywords (or regexes) the completion must not contain.")
    required_field: str | None = Field(
        None, min_length=1,
        description="Reference field with more required keywords per sample (a string or a list of strings); "
        "a sample without it is unscorable (None).")
    regex: bool = Field(False, description="Treat keywords as Python regular expressions.")
    case_sensitive: bool = Field(False, description="Match case exactly.")
    word_boundary: bool = Field(
        True, description="Match whole words only: no letter, digit or underscore right before or after "
        "(works for keywords like `C++`, unlike `\\b`). Applies to plain keywords and regexes.")
    partial_credit: bool = Field(
        True, description="Score the share of required keywords found; false: 1 only when all are found, else 0.")
    min_count: int = Field(1, ge=1, le=10_000, description="Occurrences a required keyword needs to count as found.")
    forbidden_penalty: float = Field(
        1.0, ge=0.0, le=1.0, description="Subtracted for each forbidden keyword found (the value stays >= 0).")
    scope: Literal["completion", "after_think", "answer"] = Field(
        "completion", description="Where to look: the whole completion, the text after `</think>`, "
        "or the last `<answer>...</answer>` block (missing: searched as empty text).")

    @model_validator(mode="after")
    def _check(self) -> KeywordsParams:
        if not (self.required or self.forbidden or self.required_field):
            raise ValueError("give at least one of 'required', 'forbidden' or 'required_field'")
        if self.regex:
            for field in ("required", "forbidden"):
                for i, pattern in enumerate(getattr(self, field)):
                    try:
                        re.compile(pattern)
                    except re.error as exc:
                        raise ValueError(f"{field}[{i}] is not a valid regex ({exc}): {pattern!r}") from None
        return self


class KeywordsScorer(Scorer):
    """Partial credit for required keywords or regexes found, a penalty per forbidden one."""

    name = "keywords"
    Params = KeywordsParams
    value_range = (0.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._compile = lru_cache(maxsize=4096)(self._compile_uncached)

    def _compile_uncached(self, keyword: str) -> re.Pattern[str] | None:
        p = self.params
        body = keyword if p.regex else re.escape(keyword)
        if p.word_boundary:
            body = rf"(?<!\w)(?:{body})(?!\w)"
        try:
            return re.compile(body, 0 if p.case_sensitive else re.IGNORECASE)
        except re.error:  # only per-sample keywords get here; the static ones were checked at load
            return None

    def _region(self, text: str) -> tuple[str, str | None]:
        scope = self.params.scope
        if scope == "after_think":
            region = after_think(text)
            return (region, None) if region is not None else ("", "no </think> tag")
        if scope == "answer":
            region = tag_block(text, "answer")
            return (region, None) if region is not None else ("", "no <answer> block")
        return text, None

    def _sample_required(self, reference: Mapping[str, Any]) -> list[str] | str:
        """The required keywords of one sample, or the reason it cannot be scored."""
        required = list(self.params.required)
        field = self.params.required_field
        if field is None:
            return required
        extra = reference.get(field)
        if isinstance(extra, str):
            extra = [extra]
        if not isinstance(extra, Sequence) or not all(isinstance(k, str) for k in extra):
            return f"reference field {field!r} is missing or not a string or list of strings"
        return required + [k for k in extra if k]

    def _score_one(self, sample: Sample) -> Score:
        required = self._sample_required(sample.reference)
        if isinstance(required, str):
            return Score.unscorable(required)
        if not required and not self.params.forbidden:
            return Score.unscorable(f"no keywords for this sample in {self.params.required_field!r}")
        text, note = self._region(sample.completion_text)
        found, missing, bad = [], [], []
        for keyword in required:
            pattern = self._compile(keyword)
            if pattern is None:
                return Score.unscorable("invalid regex in the reference", keyword=keyword)
            count = sum(1 for _ in zip(range(self.params.min_count), pattern.finditer(text), strict=False))
            (found if count >= self.params.min_count else missing).append(keyword)
        for keyword in self.params.forbidden:
            pattern = self._compile(keyword)
            if pattern is not None and pattern.search(text):
                bad.append(keyword)
        if not required:
            coverage = 1.0
        elif self.params.partial_credit:
            coverage = len(found) / len(required)
        else:
            coverage = 1.0 if not missing else 0.0
        value = max(0.0, coverage - self.params.forbidden_penalty * len(bad))
        info: dict[str, Any] = {"found": found, "missing": missing, "forbidden_found": bad}
        if note:
            info["note"] = note
        return Score(value, info)

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        return [self._score_one(s) for s in samples]
