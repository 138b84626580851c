"""Built-in group scorers: each sample's value depends on the other completions of its prompt.

`group_duplicates` penalises completions that repeat another in their group (what a collapsing
policy produces); `majority_answer` rewards agreeing with the group's most common final answer
(label-free self-consistency, as in test-time RL). Registered by this module's plugin hook.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from grpo_rewards.answer import normalise
from grpo_rewards.group import GroupScorer
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.patterns import LazyPattern
from grpo_rewards.scorer import ParamsModel, Sample, Score
from grpo_rewards.scorers.math import Extract, MathAccuracy
from grpo_rewards.scorers.textutil import completion_text

_SPACE = LazyPattern(re.compile, r"\s+")


def duplicate_counts(texts: Sequence[str], normalize_whitespace: bool = True) -> list[int]:
    """For each text, how many other texts of the list are the same (after collapsing whitespace)."""
    keys = [_SPACE.sub(" ", t).strip() if normalize_whitespace else t for t in texts]
    counts = Counter(keys)
    return [counts[k] - 1 for k in keys]


class GroupDuplicatesParams(ParamsModel):
    normalize_whitespace: bool = Field(
        True, description="Compare completions with runs of whitespace collapsed to one space and the ends "
        "stripped; false compares them exactly.")


class GroupDuplicates(GroupScorer):
    """Penalty for a completion that repeats others of its group: minus the share of the others it equals."""

    name = "group_duplicates"
    Params = GroupDuplicatesParams
    value_range = (-1.0, 0.0)

    def score_groups(self, groups: Sequence[Sequence[Sample]],
                     results: Sequence[Mapping[str, Sequence[Score]]] | None = None) -> list[list[Score]]:
        out = []
        for group in groups:
            others = len(group) - 1
            counts = duplicate_counts([completion_text(s) for s in group], self.params.normalize_whitespace)
            # A group of one repeats nothing: 0, not None (there is no other completion to equal).
            out.append([Score(-c / others if others else 0.0, {"same_as": c, "others": others}) for c in counts])
        return out


class MajorityAnswerParams(ParamsModel):
    extract: list[Extract] = Field(
        ["boxed", "answer_tag", "phrase", "gsm8k", "bare"], min_length=1,
        description="Where to find each completion's final answer, tried in order (as in `math_accuracy`).")
    answer_tag: str = Field("answer", min_length=1, pattern=r"^[\w-]+$",
                            description="Tag name used by the `answer_tag` extraction.")
    min_answers: int = Field(
        2, ge=1, description="Fewest completions of a group with an answer for a majority to mean anything; "
        "below it the whole group scores None.")


def answer_key(answer: str) -> str:
    """Answers are compared as text, normalised as `math_accuracy` normalises them (delimiters,
    spacing, thousands separators, units and marks removed: `$12{,}000$` is `12000`) and without
    whitespace (`x = 2` is `x=2`)."""
    return _SPACE.sub("", normalise(answer))


class MajorityAnswer(GroupScorer):
    """1 if the final answer is the most common one of its group (ties: each tied answer), else 0; no gold needed."""

    name = "majority_answer"
    Params = MajorityAnswerParams
    value_range = (0.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        # math_accuracy's extraction, reused; it starts no worker until asked to verify.
        self._extractor = MathAccuracy(extract=self.params.extract, answer_tag=self.params.answer_tag)

    def score_groups(self, groups: Sequence[Sequence[Sample]],
                     results: Sequence[Mapping[str, Sequence[Score]]] | None = None) -> list[list[Score]]:
        return [self._score_group(group) for group in groups]

    def _score_group(self, group: Sequence[Sample]) -> list[Score]:
        answers = [self._extractor.extract_answer(completion_text(s))[0] for s in group]
        keys = [None if a is None else answer_key(a) for a in answers]
        counts = Counter(k for k in keys if k is not None)
        answered = sum(counts.values())
        if answered < self.params.min_answers:
            return [Score.unscorable(f"{answered} of {len(group)} completions have an answer; "
                                     f"a majority needs {self.params.min_answers}") for _ in group]
        top = max(counts.values())
        majority = sorted(k for k, c in counts.items() if c == top)
        info = {"majority": majority, "votes": top, "answered": answered}
        return [Score(float(k in majority), {**info, "answer": k}) if k is not None
                else Score(0.0, {**info, "reason": "no answer found"}) for k in keys]


@hookimpl
def grpo_rewards_scorers():
    return [GroupDuplicates, MajorityAnswer]
