"""`math_accuracy`: is the completion's final answer mathematically equal to the gold answer?

The answer is extracted here (cheap string scanning, see `Extract`), then parsed and compared
with math-verify (sympy underneath) in worker processes with a hard per-sample limit, because
math-verify's own SIGALRM timeouts fail off the main thread and `parse` can hang past them.
Per batch, each distinct gold is parsed once per worker chunk and each distinct
(gold, answer) pair is verified once; verdicts are kept in a bounded LRU cache across batches.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal, NamedTuple

from cachetools import LRUCache, cached

from pydantic import Field

from grpo_rewards import answer, extract
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.procpool import TaskResult, WorkerPool
from grpo_rewards.scorer import ParamsModel, ReferenceFields, Sample, Score, Scorer
from grpo_rewards.scorers.math_check import CheckOptions, numeral

Extract = Literal["boxed", "answer_tag", "phrase", "gsm8k", "bare", "last_number", "whole"]
# Answers sent to a worker in one message with their gold (see `_chunks`).
MIN_CHUNK, MAX_CHUNK = 3, 64
# (gold, answer, answer mode); the answer is a tuple of candidate texts when its region names
# several and the gold one: the worker then decides whether they are one value (`1/2 or 0.5`).
Key = tuple[str, str | tuple[str, ...], str]
Verdict = tuple[float | None, dict[str, Any]]
# Verdicts about the machine rather than the sample: not cached, tried again next batch.
_RETRY_REASONS = ("worker unavailable", "worker died")


class MathAccuracyParams(ParamsModel):
    answer_field: str = Field(
        "answer", min_length=1,
        description="Field of the sample's reference that holds the gold answer (with or without `$...$` / "
        "`\\boxed{}`; a GSM8K `#### N` gold is read after the marker).")
    extract: list[Extract] = Field(
        ["boxed", "answer_tag", "phrase", "gsm8k", "bare"], min_length=1,
        description="Where to find the answer inside the final-answer region (after the last `</think>`; the last "
        "`<answer>` block when `answer_tag` is listed and there is one), tried in order: `boxed` (last `\\boxed{}` "
        "and its sentence; several boxes in a row on one line are one answer), `answer_tag`, `phrase` (after "
        "\"final answer is\" / \"The answer is\" / \"Answer:\"), `gsm8k` (after the last `####`), `bare` (the "
        "whole completion is a short answer), `last_number`, `whole` (let math-verify search the whole text, as "
        "open-r1 does).")
    answer_tag: str = Field("answer", min_length=1, pattern=r"^[\w-]+$",
                            description="Tag name used by the `answer_tag` extraction.")
    after_think_only: bool = Field(
        False, description="Look for the answer only after the last `</think>`; a completion without it scores 0.")
    match_types: list[Literal["latex", "expr"]] = Field(
        ["latex", "expr"], min_length=1,
        description="math-verify extraction targets for parsing: LaTeX and/or plain expressions.")
    float_rounding: int = Field(
        6, ge=0, le=20, description="Numeric tolerance: decimal places floats are rounded to before comparing.")
    numeric_precision: int = Field(
        15, ge=1, le=100, description="Significant digits of sympy's numeric evaluation in comparisons.")
    strict: bool = Field(
        True, description="math-verify strict mode: variable names matter and sets do not equal tuples.")
    allow_set_relation_comp: bool = Field(
        False, description="Let a gold relation (`1 < x < 2`) equal a set/interval answer (`(1, 2)`) and vice versa.")
    gold_mode: Literal["auto", "raw"] = Field(
        "auto", description="`auto`: a gold without math delimiters is read as `\\boxed{gold}`; `raw`: the gold "
        "is parsed as math-verify's `parse` reads it.")
    timeout_s: float = Field(
        5.0, gt=0, le=300, description="Hard wall-clock limit per sample (parse and verify); past it the sample "
        "scores None with reason `timeout`.")
    workers: int | None = Field(None, ge=1, le=64, description="Worker processes; default min(2, CPU count).")
    memory_mb: int = Field(
        1024, ge=256, le=1 << 20, description="Address-space cap of each worker process (RLIMIT_AS), in MiB.")
    allow_several_values: bool = Field(
        False, description="Score an answer that offers several different values (`5 or 6`, `5; 6`, `5, maybe 6`, "
        "`5 \\pm 1`, `\\{5, 6\\}`, several boxes) as math-verify does, by its best match. By default such an "
        "answer scores 0 unless the gold itself names several values or is a set, tuple or interval; a remark "
        "after the answer (`5, which is less than 6`) is not a second value.")
    allow_restated_question: bool = Field(
        False, description="Accept an answer that is an operation on the question's own numbers, in digits or words, "
        "with nothing computed (`17 \\times 23`, `{17}\\times{23} \\times 1` for \"Compute seventeen times "
        "twenty-three\"). By default, against a plain-number gold, it scores 0.")
    cache_size: int = Field(
        100_000, ge=0, le=10_000_000, description="Verdicts kept in the LRU cache across batches. 0 turns off "
        "every reuse: each sample is verified, repeats of a (gold, answer) pair within a batch too.")


def _gold_text(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    text = value if isinstance(value, str) else str(value)
    if "####" in text:  # a GSM8K solution: the answer follows the last marker
        text = extract.gsm8k_region(text) or ""
    text = text.strip()
    return text or None


class Region(NamedTuple):
    """Where an answer was read: the region itself; for a box the text before it on its line; for
    a box or an answer block the rest of its sentence (where a hedge beside it would stand)."""

    text: str
    before: str = ""
    after: str = ""


class MathAccuracy(Scorer):
    """1 if the final answer equals the gold answer (math-verify), 0 if not, None if the gold is unusable."""

    name = "math_accuracy"
    Params = MathAccuracyParams
    reads = ReferenceFields(param="answer_field")
    value_range = (0.0, 1.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._cache: OrderedDict[Key, Verdict] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._pool: WorkerPool | None = None
        self._pool_lock = threading.Lock()

    # -- extraction ---------------------------------------------------------------------------

    def extract_answer(self, text: str, gold: str | None = None) -> tuple[str | None, str | None, str | None]:
        """(answer, method, reason_if_none) for one completion's text: the head value of its
        final-answer region (see `grpo_rewards.answer`), read for `gold` when given."""
        region, method, reason = self._region(text)
        if region is None:
            return None, None, reason
        if method in ("last_number", "whole"):
            return region.text, method, None
        kind = _GoldKind.of(gold)
        reading = answer.read(region.text, kind.numeric, kind.letter, region.before, region.after)
        return reading.head, method, None if reading.head else "no value in the answer region"

    def _region(self, text: str) -> tuple[Region | None, str | None, str | None]:
        """(region, method, reason_if_none): the final-answer region (`extract.final_region`), then
        within it the first anchor of `extract` that is present."""
        tag = self.params.answer_tag if "answer_tag" in self.params.extract else None
        final, reason = extract.final_region(text, tag, self.params.after_think_only)
        if final is None:
            return None, None, reason
        if tag is not None and final is not text and extract.tag_block(text, tag) is not None:
            return Region(final, "", extract.after_tag(text, tag)), "answer_tag", None
        for method in self.params.extract:
            region = self._region_of(method, final)
            if region is not None and region.text.strip():
                return region, method, None
        return None, None, "no answer found (tried " + ", ".join(self.params.extract) + ")"

    @staticmethod
    def _region_of(method: str, text: str) -> Region | None:
        if method == "boxed":
            box = extract.box_region(text)
            return Region(*box) if box else None
        if method == "phrase":
            found = extract.phrase_region(text)
        elif method == "gsm8k":
            found = extract.gsm8k_region(text)
        elif method == "bare":
            found = extract.bare_region(text)
        elif method == "last_number":
            found = extract.last_number(text)  # one number by construction
        elif method == "whole":
            found = text  # math-verify's own search, no region
        else:  # answer_tag: the block, found by final_region
            found = None
        return Region(found) if found else None

    # -- scoring ------------------------------------------------------------------------------

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        out: list[Score | None] = [None] * len(samples)
        wanted: dict[Key, list[int]] = {}  # (gold, answer, mode) -> indices of the samples asking
        infos: list[dict[str, Any]] = [{} for _ in samples]
        for i, sample in enumerate(samples):
            out[i] = self._prepare(sample, infos[i], wanted, i)
        if self.params.cache_size > 0:
            verdicts = self._lookup(list(wanted))
            verdicts.update(self._resolve([k for k in wanted if k not in verdicts]))
        else:  # no reuse at all: every occurrence is verified (its verdict is the same as the first's)
            verdicts = self._resolve([k for k, indices in wanted.items() for _ in indices])
        for key, indices in wanted.items():
            value, info = verdicts[key]
            for i in indices:
                out[i] = Score(value, {**infos[i], **info})
        return [s if s is not None else Score.unscorable("internal: sample not scored") for s in out]

    def _prepare(self, sample: Sample, info: dict[str, Any], wanted: dict[Key, list[int]], i: int) -> Score | None:
        """A final Score when no verification is needed; otherwise registers the pair in `wanted`."""
        reference = sample.reference if isinstance(sample.reference, Mapping) else {}
        raw_gold = _gold_text(reference.get(self.params.answer_field))
        if raw_gold is None:
            return Score.unscorable(f"no gold answer in reference.{self.params.answer_field}")
        gold = raw_gold if self.params.gold_mode == "raw" else _gold_kind(raw_gold).value
        region, method, reason = self._region(_safe_text(sample))
        if region is None:
            return Score(0.0, {"reason": reason, "gold": gold})
        if method in ("last_number", "whole"):
            return self._want(gold, region.text, method, info, wanted, i)
        kind = _GoldKind.of(raw_gold)
        reading = answer.read(region.text, kind.numeric, kind.letter, region.before, region.after)
        if reading.head is None:
            return Score(0.0, {"reason": "no answer found (no value in the region read by " + method + ")",
                               "gold": gold})
        info.update(extracted=reading.head[:500], method=method, gold=gold)
        if (kind.numeric and not self.params.allow_restated_question
                and answer.restates(reading.head, _prompt_numbers(_safe_prompt(sample)))):
            return Score(0.0, {**info, "reason": "the answer restates the question's numbers"})
        if kind.several:  # math-verify reads the whole region
            return self._want(gold, answer.normalise(region.text).rstrip(" ."), method, info, wanted, i)
        if self.params.allow_several_values and len(reading.candidates) > 1:  # math-verify's any-match
            return self._want(gold, tuple(reading.candidates), "any", info, wanted, i)
        checked, problem = _single_value_check(reading)
        if reading.text and not problem:
            checked = region.text.strip().rstrip(" .")  # a text answer as written (`\text{odd}`)
        if problem:
            return Score(0.0, {**info, "reason": problem, "candidates": reading.candidates})
        return self._want(gold, checked, method, info, wanted, i)

    @staticmethod
    def _want(gold: str, checked: str | tuple[str, ...], method: str, info: dict[str, Any],
              wanted: dict[Key, list[int]], i: int) -> None:
        info.setdefault("extracted", checked[:500] if isinstance(checked, str) else checked[0][:500])
        info.setdefault("method", method)
        info.setdefault("gold", gold)
        mode = method if method in ("whole", "any") else "answer"
        wanted.setdefault((gold, checked, mode), []).append(i)
        return None

    # -- the verdict cache, shared by every thread that calls `score` --------------------------

    def _lookup(self, keys: list[Key]) -> dict[Key, Verdict]:
        with self._cache_lock:
            found = {k: self._cache[k] for k in keys if k in self._cache}
            for k in found:
                self._cache.move_to_end(k)
        return found

    def _store(self, verdicts: dict[Key, Verdict]) -> None:
        if self.params.cache_size <= 0:
            return
        with self._cache_lock:
            for key, verdict in verdicts.items():
                if verdict[1].get("reason") not in _RETRY_REASONS:
                    self._cache[key] = verdict
                    self._cache.move_to_end(key)
            while len(self._cache) > self.params.cache_size:
                self._cache.popitem(last=False)

    # -- dispatch to the workers --------------------------------------------------------------

    def _ensure_pool(self) -> WorkerPool:
        with self._pool_lock:
            if self._pool is None:
                size = self.params.workers or max(1, min(2, os.cpu_count() or 1))
                self._pool = _acquire_pool(size, self.params.memory_mb)
            return self._pool

    def open(self) -> None:
        self._ensure_pool().start()

    def _resolve(self, keys: list[Key]) -> dict[Key, Verdict]:
        verdicts: dict[Key, Verdict] = {}
        while keys:
            chunks = self._chunks(keys)
            try:
                results = self._ensure_pool().map([tasks for tasks, _ in chunks], self.params.timeout_s)
            except Exception as exc:  # noqa: BLE001 - e.g. no process can be started: None, never a crash
                detail = f"{type(exc).__name__}: {exc}"
                verdicts.update({k: (None, {"reason": "worker unavailable", "detail": detail}) for k in keys})
                break
            keys = []  # pairs left unrun behind a killed worker go round again
            for (_, chunk_keys), chunk_results in zip(chunks, results, strict=True):
                keys += _record(chunk_keys, chunk_results, verdicts)
        self._store(verdicts)
        return verdicts

    def _chunks(self, keys: list[Key]) -> list[tuple[list[tuple], list[Key]]]:
        """One gold's pairs together, each chunk led by a gold task so that a gold that hangs
        costs one limit, not one per answer. A gold's pairs stay in one chunk unless the batch has
        fewer than two chunks' worth per worker: a gold split over two workers is parsed, and its
        answers' forms learnt by the parser, in both. Small batches are split so that the workers
        finish together (a chunk can cost 100x another)."""
        by_gold: dict[str, list[Key]] = {}
        for key in keys:
            by_gold.setdefault(key[0], []).append(key)
        per_chunk = min(MAX_CHUNK, max(MIN_CHUNK, len(keys) // (2 * self._ensure_pool().size)))
        chunks = []
        for gold, group in by_gold.items():
            for start in range(0, len(group), per_chunk):
                part = group[start : start + per_chunk]
                tasks = [("gold", gold, self._options("answer"))]
                tasks += [("verify", gold, answer, self._options(mode)) for _, answer, mode in part]
                chunks.append((tasks, part))
        return chunks

    def _options(self, answer_mode: str) -> tuple:
        p = self.params
        return tuple(CheckOptions(tuple(p.match_types), p.float_rounding, p.numeric_precision, p.strict,
                                  p.allow_set_relation_comp, answer_mode, p.gold_mode))

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                _release_pool(self._pool)
                self._pool = None


# Scorers with the same worker count and memory cap share one pool (every task carries its own
# options), so several math_accuracy entries in a spec, or many scorers in a test run, do not each
# start interpreters. Reference-counted: the last scorer to close stops it.
_pools: dict[tuple[int, int], list[Any]] = {}  # (size, memory_mb) -> [pool, users]
_pools_lock = threading.Lock()


def _acquire_pool(size: int, memory_mb: int) -> WorkerPool:
    with _pools_lock:
        entry = _pools.get((size, memory_mb))
        if entry is None:
            pool = WorkerPool("grpo_rewards.scorers.math_check:run_check", size, memory_mb,
                              init="grpo_rewards.scorers.math_check:warm_up",
                              prime="grpo_rewards.scorers.math_check:prime_parser")
            entry = _pools[(size, memory_mb)] = [pool, 0]
        entry[1] += 1
        return entry[0]


def _release_pool(pool: WorkerPool) -> None:
    with _pools_lock:
        for key, entry in list(_pools.items()):
            if entry[0] is pool:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _pools[key]
                    pool.close()


def _record(keys: list[Key], results: list[TaskResult], verdicts: dict[Key, Verdict]) -> list[Key]:
    """Turn one chunk's results (gold task first) into verdicts; returns the keys to resubmit."""
    gold = results[0]
    gold_failed = gold.status != "ok" or gold.value[0] != "ok"
    resubmit = []
    for key, result in zip(keys, results[1:], strict=True):
        if gold_failed:
            verdicts[key] = _verdict(gold, "gold: ")
        elif result.status == "not_run":
            resubmit.append(key)
        else:
            verdicts[key] = _verdict(result, "")
    return resubmit


def _verdict(result: TaskResult, prefix: str) -> Verdict:
    """A pool result as (value, info)."""
    if result.status == "ok":
        kind, payload = result.value
        if kind == "ok":
            return (1.0 if payload else 0.0), {}
        if kind == "several":
            return 0.0, {"reason": "several different answers", "detail": payload}
        if kind == "no_math":
            return 0.0, {"reason": "answer is not math", "detail": payload}
        if kind == "unparseable":
            return None, {"reason": "unparseable gold", "detail": payload}
        return None, {"reason": "timeout", "detail": "parsing the gold answer timed out"}
    if result.status == "timeout":
        return None, {"reason": "timeout", "detail": prefix + result.detail}
    if result.status == "error":
        return None, {"reason": "verification error", "detail": prefix + result.detail}
    return None, {"reason": "worker unavailable" if result.status == "unavailable" else "worker died",
                  "detail": prefix + result.detail}


class _GoldKind(NamedTuple):
    """What the gold is, as far as reading an answer for it goes."""

    numeric: bool  # a plain number: letters after an answer's number are its unit
    letter: bool  # a choice label (`B`): "B) 5" reads as `B`
    several: bool  # several values, a set, tuple, interval, inequality or matrix: no hedge check
    value: str  # what is verified: a number's normalised value (`\\$1{,}000` -> 1000), else the gold

    @classmethod
    def of(cls, gold: str | None) -> _GoldKind:
        return cls(False, False, False, "") if gold is None else _gold_kind(gold)


@cached(LRUCache(maxsize=4096))
def _gold_kind(gold: str) -> _GoldKind:
    """A gold is read as an answer is (its last box, or all of it): a single number with a unit,
    percent, degree or currency mark is that number."""
    inner = extract.final_boxed(gold) or gold
    if answer.several_values(inner):
        return _GoldKind(False, False, True, gold)
    reading = answer.read(inner, numeric_gold=True)
    if reading.head and not reading.alternatives and numeral(reading.head) is not None:
        return _GoldKind(True, False, False, reading.head)
    return _GoldKind(False, answer.choice_letter(inner) is not None, False, gold)


@cached(LRUCache(maxsize=4096))
def _prompt_numbers(prompt: str) -> frozenset:
    return frozenset(answer.question_numbers(prompt))


def _single_value_check(reading: answer.Reading) -> tuple[str | tuple[str, ...], str | None]:
    """For a single-valued gold: (what to verify, the reason it scores 0). Plain numbers are
    compared here; other candidates go to the worker as a tuple, which compares them there."""
    candidates, sides = reading.candidates, reading.sides
    if answer.is_bracketed_list(reading.head or ""):
        return reading.head or "", "the answer is a set, tuple or interval; the gold is one value"
    rounded = tuple(side for side in sides if isinstance(side, answer.Rounded))
    if _two_roundings(rounded):  # `5.4 \approx 5 \approx 6`: floor and ceiling, two values
        return reading.head or "", "several different answers"
    if sides:  # the head written several ways: each way is a candidate that must agree
        candidates = [*(side for side in sides if isinstance(side, str)), *candidates[1:]]
    if len(candidates) < 2 and not rounded:
        return reading.head or "", None
    values = [numeral(c) for c in candidates]
    if not rounded and all(v is not None and v[1] for v in values):  # exact numbers: certain here
        if len({v[0] for v in values}) > 1:
            return reading.head or "", "several different answers"
        return reading.head or "", None
    return (*candidates, *rounded), None


def _two_roundings(rounded: tuple[answer.Rounded, ...]) -> bool:
    """Whether two roundings to the same place name different values: each may lie within one
    unit of the exact head (5 and 6 of 5.4), but one text rounds a value one way."""
    seen: dict[int | None, Fraction] = {}
    for side in rounded:
        value = numeral(side.text)
        if value is not None and seen.setdefault(side.places, value[0]) != value[0]:
            return True
    return False


def _safe_prompt(sample: Sample) -> str:
    try:
        return sample.prompt_text
    except Exception:  # noqa: BLE001 - a malformed prompt has no numbers to restate
        return ""


def _safe_text(sample: Sample) -> str:
    try:
        return sample.completion_text
    except Exception:  # noqa: BLE001 - a malformed completion is "no answer", never a crash
        return ""


@hookimpl
def grpo_rewards_scorers():
    return [MathAccuracy]
