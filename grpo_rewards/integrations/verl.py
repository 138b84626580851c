"""A `CompositeReward` as verl custom reward functions.

verl calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`
once per sample (its `naive` reward manager, from a thread pool) or
`compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)` once
per batch (its `batch` manager), and reads a float or a dict whose `score` is the reward; the
other keys of the dict are logged. `CompositeReward.as_verl()` gives this adapter; verl's
`custom_reward_function` loads the ready functions of `integrations.verl_functions`.

verl has no None: a sample no scorer could score gets `none_score` (NaN unless set) with
`scored: 0`, so it is never a silent 0.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_rewards.columns import columns_of
from grpo_rewards.compose import CompositeReward, register_adapter
from grpo_rewards.scorer import Sample

RESERVED = frozenset({"score", "scored"})


def verl_sample(solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None,
                data_source: Any, answer_field: str) -> Sample:
    """A verl sample as ours: the ground truth is the gold answer (or, as a mapping, the reference fields)."""
    extra = dict(extra_info or {})
    reference = {**extra, "data_source": data_source}
    if isinstance(ground_truth, Mapping):
        reference.update(ground_truth)
    else:
        reference[answer_field] = ground_truth
    prompt = extra.get("prompt", extra.get("question", ""))
    return Sample(prompt if isinstance(prompt, (str, list)) else "", solution_str, reference)


class VerlReward:
    """`compute_score` (call it directly) and `batch` for verl's naive and batch reward managers."""

    def __init__(self, composite: CompositeReward, none_score: float = math.nan, answer_field: str | None = None) -> None:
        self.composite = composite
        self.none_score = none_score
        # A ground truth that is a bare value fills this field: by default, the one the spec reads its gold from.
        self.answer_field = answer_field or composite.gold_field
        self.keys = [a if a not in RESERVED else f"scorer_{a}" for a in composite.aliases]
        self._lock = threading.Lock()  # verl's naive manager calls from a thread pool; a composite is one caller's

    def _results(self, samples: list[Sample]) -> list[dict[str, float]]:
        self.composite.check_columns(columns_of(s.reference for s in samples),
                                     f"verl's ground_truth (a value is read as {self.answer_field!r}) and extra_info")
        with self._lock:
            batch = self.composite.score(samples)
        out = []
        for i, total in enumerate(batch.totals):
            result = {"score": self.none_score if total is None else total, "scored": float(total is not None)}
            for key, alias in zip(self.keys, self.composite.aliases, strict=True):
                value = batch.scores[alias][i].value
                result[key] = math.nan if value is None else value
            out.append(result)
        return out

    def __call__(self, data_source: Any, solution_str: str, ground_truth: Any,
                 extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, float]:
        sample = verl_sample(solution_str, ground_truth, extra_info, data_source, self.answer_field)
        return self._results([sample])[0]

    def batch(self, data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
              extra_infos: Sequence[Mapping[str, Any] | None] | None = None, **kwargs: Any) -> list[dict[str, float]]:
        n = len(solution_strs)
        if not (len(data_sources) == len(ground_truths) == n) or (extra_infos is not None and len(extra_infos) != n):
            raise ValueError(f"verl batch: {n} solution_strs, {len(data_sources)} data_sources, "
                             f"{len(ground_truths)} ground_truths, "
                             f"{'no' if extra_infos is None else len(extra_infos)} extra_infos")
        infos = extra_infos if extra_infos is not None else [None] * n
        return self._results([verl_sample(solution_strs[i], ground_truths[i], infos[i], data_sources[i],
                                          self.answer_field) for i in range(n)])


register_adapter("verl", VerlReward)
