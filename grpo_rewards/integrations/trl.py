"""A `CompositeReward` as TRL `GRPOTrainer` reward functions.

TRL calls each reward function on its own (`reward_func(prompts=, completions=,
completion_ids=, **dataset_columns, trainer_state=, log_extra=, log_metric=)`) and logs
`rewards/<func.__name__>/mean`. We give TRL one function per scorer, so every scorer shows up
in its logs, and weight them with `reward_weights` exactly as our own total does (TRL's
`nansum` of weighted rewards equals our sum over the scorers that returned a value).

Scorers may read the results of earlier scorers (a length reward conditioned on correctness),
so the functions of one composite share a batch cache: the first one TRL calls on a batch
scores the whole composite once, and the others read their column from it.

Each function returns its member's value after the member's None policy and gate (a dropped
sample is None in every column, so TRL gives it advantage 0); the aggregation is TRL's own, so a
spec with `aggregate: normalize_then_sum` needs `GRPOConfig(multi_objective_aggregation=
"normalize_then_sum")` (`trl_config_kwargs` gives both settings). TRL passes the whole batch,
in which a prompt's G completions are consecutive rows; group scorers see them as one group.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

from cachetools import LRUCache

from grpo_rewards.advantages import AGGREGATIONS
from grpo_rewards.cache import canonical
from grpo_rewards.columns import columns_of
from grpo_rewards.compose import CompositeReward, register_adapter
from grpo_rewards.scorer import RewardBatch, Sample


# Keyword arguments TRL passes that are trainer machinery, not dataset columns.
TRAINER_KWARGS = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})


def samples_from_trl(prompts: Sequence[Any] | None, completions: Sequence[Any],
                     completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[Sample]:
    """TRL's keyword call as `Sample`s: dataset columns become each sample's `reference`.

    A column is a keyword whose value is a list with one entry per completion; anything else
    (the trainer state, logging callbacks, scalars) is not a dataset field and is left out.
    """
    n = len(completions)
    if prompts is None:
        prompts = [""] * n
    if len(prompts) != n:
        raise ValueError(f"got {len(prompts)} prompts for {n} completions")
    columns = {k: v for k, v in kwargs.items()
               if k not in TRAINER_KWARGS and isinstance(v, (list, tuple)) and len(v) == n}
    if completion_ids is not None and len(completion_ids) == n:
        columns.setdefault("completion_ids", completion_ids)
    return [Sample(prompts[i], completions[i], {k: v[i] for k, v in columns.items()}) for i in range(n)]


def _batch_key(samples: Sequence[Sample]) -> str:
    """A digest of the batch content: equal batches (same prompts, completions, references) share it."""
    digest = hashlib.blake2b(digest_size=16)
    for s in samples:
        digest.update(canonical([s.prompt, s.completion, dict(s.reference)]))
        digest.update(b"\x00")
    return digest.hexdigest()


class _Pending:
    """A batch being scored by one thread; the others wait on it instead of scoring it again."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.batch: RewardBatch | None = None
        self.error: BaseException | None = None


class BatchCache:
    """The latest scored batches of one composite, keyed by content; safe to use from threads."""

    def __init__(self, composite: CompositeReward, keep: int = 2, group_size: int | None = None) -> None:
        self.composite = composite
        self.keep = keep
        self.group_size = group_size  # None: the rows sharing a prompt are a group
        self._lock = threading.Lock()
        self._entries: LRUCache[str, _Pending] = LRUCache(maxsize=keep)
        self.scored_batches = 0  # how many times the composite actually ran (tests, diagnostics)

    def get(self, samples: list[Sample]) -> RewardBatch:
        key = _batch_key(samples)
        with self._lock:
            entry = self._entries.get(key)  # a hit counts as a use: the entry is kept longer
            owner = entry is None or entry.error is not None  # a failed batch is retried
            if owner:
                entry = self._entries[key] = _Pending()
        assert entry is not None
        if owner:
            try:
                # TRL passes every dataset column: one the spec reads that is absent is a misconfiguration.
                self.composite.check_columns(columns_of(s.reference for s in samples), "the TRL dataset")
                entry.batch = self.composite.score(samples, self.group_size)
                with self._lock:
                    self.scored_batches += 1
            except BaseException as exc:
                entry.error = exc
                raise
            finally:
                entry.done.set()
        else:
            entry.done.wait()
            if entry.error is not None:
                raise entry.error
        assert entry.batch is not None
        return entry.batch

    def __getstate__(self) -> dict[str, Any]:  # locks and events do not pickle; the cache is empty after
        return {"composite": self.composite, "keep": self.keep, "group_size": self.group_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["composite"], state["keep"], state.get("group_size"))  # type: ignore[misc]


class TrlRewardFunction:
    """One scorer's column of the composite, called the way TRL calls a reward function.

    `__name__` is the scorer's alias: TRL names its metrics after it.
    """

    def __init__(self, alias: str, cache: BatchCache) -> None:
        self.__name__ = self.__qualname__ = alias
        self.alias = alias
        self.cache = cache

    def __call__(self, prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """TRL's reward-function call: `prompts`, `completions` and the dataset columns (plus
        `completion_ids` and trainer machinery) as keywords; one value (or None) per completion."""
        samples = samples_from_trl(prompts, list(completions), **kwargs)
        if not samples:
            return []
        batch = self.cache.get(samples)
        return list(batch.gated[self.alias])

    def __repr__(self) -> str:
        return f"<TRL reward function {self.alias!r}>"


def trl_reward_functions(composite: CompositeReward,
                         group_size: int | None = None) -> tuple[list[TrlRewardFunction], list[float]]:
    """`(reward_funcs, reward_weights)` for `GRPOTrainer(reward_funcs=...)` and `GRPOConfig(reward_weights=...)`.

    `group_size` (TRL's `num_generations`) cuts each batch into consecutive groups; by default the
    rows sharing a prompt are a group."""
    cache = BatchCache(composite, group_size=group_size)
    return [TrlRewardFunction(alias, cache) for alias in composite.aliases], list(composite.weights)


def trl_config_kwargs(composite: CompositeReward) -> dict[str, Any]:
    """The `GRPOConfig` settings that make TRL combine the functions as the spec says."""
    aggregation = AGGREGATIONS[composite.spec.aggregate].trl_name
    return {"reward_weights": list(composite.weights), "multi_objective_aggregation": aggregation}


register_adapter("trl", trl_reward_functions)
