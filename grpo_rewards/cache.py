"""The score cache: an identical (scorer, params, prompt, completion, reference) is scored once.

Shared by every member of a composite, across batches, bounded (least recently used out first).
Within a batch, duplicates are scored once too. Only scorers that declare themselves
`deterministic` are cached, and only values: a None may be a passing failure (a worker that
died, a timeout) and is asked again next time. The prompt is part of the key because some scorers
read it (`think_format` looks at whether the prompt opened the think block); so are the values
of the members a scorer reads (`dependencies`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from cachetools import LRUCache

from grpo_rewards.scorer import Sample, Score, Scorer


def _jsonable(value: Any) -> Any:
    # Dataset columns may hold arrays or tensors: their full contents, not numpy's abbreviated
    # repr ("[0, 1, ..., 9]"), so two different large arrays never share a key.
    if hasattr(value, "tolist"):
        return value.tolist()
    return repr(value)


def canonical(item: Any) -> bytes:
    """`item` as bytes that are equal exactly when the contents are equal (sorted keys, full arrays)."""
    try:
        text = json.dumps(item, sort_keys=True, default=_jsonable)
    except (TypeError, ValueError):  # e.g. dict keys of mixed types cannot be sorted
        text = repr(item)
    return text.encode("utf-8", "surrogatepass")


class ScoreCache:
    """A bounded LRU of `Score`s by content; safe to share between threads."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: LRUCache[bytes, Score] = LRUCache(maxsize=max(max_entries, 1))
        self._lock = threading.Lock()
        self.hits = 0      # samples served without calling the scorer (cache or a duplicate in the batch)
        self.lookups = 0   # samples of cacheable scorers asked for

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.lookups if self.lookups else None

    def __len__(self) -> int:
        return len(self._entries)

    def uses(self, scorer: Scorer) -> bool:
        return self.max_entries > 0 and scorer.deterministic

    def score(self, scorer: Scorer, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]],
              dependencies: Sequence[str] = ()) -> tuple[list[Score], int]:
        """`scorer.score(samples, results)`, with cached and repeated samples scored once; (scores, hits)."""
        if not self.uses(scorer):
            return list(scorer.score(samples, results)), 0
        identity = [scorer.name, scorer.params.model_dump(mode="json")]
        keys = [self._key(identity, sample, [results[d][i].value for d in dependencies])
                for i, sample in enumerate(samples)]
        out: list[Score | None] = [None] * len(samples)
        with self._lock:
            for i, key in enumerate(keys):
                cached = self._entries.get(key)  # a hit counts as a use
                if cached is not None:
                    out[i] = _copy(cached)
        first: dict[bytes, int] = {}  # each key still to score -> the first sample that has it
        for i, key in enumerate(keys):
            if out[i] is None:
                first.setdefault(key, i)
        todo = list(first.values())
        scored = list(scorer.score([samples[i] for i in todo],
                                   {a: [col[i] for i in todo] for a, col in results.items()})) if todo else []
        if len(scored) != len(todo):
            raise RuntimeError(f"returned {len(scored)} scores for {len(todo)} samples")
        fresh = {keys[i]: s if isinstance(s, Score) else Score(s) for i, s in zip(todo, scored)}
        for i, key in enumerate(keys):
            if out[i] is None:
                out[i] = fresh[key] if i == first[key] else _copy(fresh[key])
        hits = len(samples) - len(todo)
        self._store(fresh)
        with self._lock:
            self.hits += hits
            self.lookups += len(samples)
        return [s for s in out if s is not None], hits

    def __getstate__(self) -> dict[str, Any]:  # a lock does not pickle; the copy starts empty
        return {"max_entries": self.max_entries}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_entries"])  # type: ignore[misc]

    @staticmethod
    def _key(identity: list[Any], sample: Sample, dependency_values: list[float | None]) -> bytes:
        item = [identity, sample.prompt, sample.completion, dict(sample.reference), dependency_values]
        return hashlib.blake2b(canonical(item), digest_size=16).digest()

    def _store(self, fresh: Mapping[bytes, Score]) -> None:
        with self._lock:
            for key, score in fresh.items():
                if score.value is not None:
                    self._entries[key] = _copy(score)


def _copy(score: Score) -> Score:
    # Callers may add to `info`; the cached Score must not change with them.
    return Score(score.value, dict(score.info))
