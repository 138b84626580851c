"""Coalesce concurrent requests into scorer batches, behind a bounded queue.

One asyncio task takes every request waiting in the queue (up to `max_batch` samples), scores
them together in one scoring thread, and hands each request its own slice. Scorers are batch in,
batch out (a gold answer is parsed once per group, a sandbox pool is kept busy), so sixteen
requests of eight samples cost about one call of 128, not sixteen calls of eight.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from grpo_rewards.compose import CompositeReward
from grpo_rewards.scorer import RewardBatch, Sample

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """More samples are waiting than the server accepts; the client should retry later."""


@dataclass
class _Request:
    samples: list[Sample]
    future: asyncio.Future[RewardBatch] = field(repr=False)


def slice_batch(batch: RewardBatch, start: int, stop: int) -> RewardBatch:
    """Samples `start:stop` of a batch, with the error count of exactly those samples."""
    scores = {alias: column[start:stop] for alias, column in batch.scores.items()}
    errors = {alias: sum(1 for s in column if "error" in s.info and s.info.get("reason") == "scorer error")
              for alias, column in scores.items()}
    return RewardBatch(batch.totals[start:stop], scores, errors)


class Batcher:
    """Scores requests with one composite; requests that wait together are scored together."""

    def __init__(self, reward: CompositeReward, max_batch: int = 256, max_queue: int = 4096) -> None:
        self.reward = reward
        self.max_batch = max_batch
        self.max_queue = max_queue  # samples waiting or being scored
        self.pending = 0
        self.batches = 0  # scorer calls made (diagnostics, /health)
        self._queue: asyncio.Queue[_Request] = asyncio.Queue()
        # One thread: a composite (its worker pools, its error counts) is used by one caller at a time.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpo-score")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="grpo-batcher")

    async def score(self, samples: list[Sample]) -> RewardBatch:
        """Queue `samples` and wait for their scores; `QueueFull` when the queue has no room."""
        if self.pending + len(samples) > self.max_queue and self.pending > 0:
            raise QueueFull(f"{self.pending} samples are waiting (limit {self.max_queue})")
        self.pending += len(samples)
        request = _Request(samples, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(request)
        try:
            # shield: a client that disconnects does not cancel a batch other requests share.
            return await asyncio.shield(request.future)
        finally:
            self.pending -= len(samples)

    def _take(self, first: _Request) -> list[_Request]:
        taken, size = [first], len(first.samples)
        while not self._queue.empty():
            nxt = self._queue._queue[0]  # type: ignore[attr-defined]  # peek: stop before overfilling
            if size + len(nxt.samples) > self.max_batch:
                break
            taken.append(self._queue.get_nowait())
            size += len(nxt.samples)
        return taken

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            requests = self._take(await self._queue.get())
            samples = [s for r in requests for s in r.samples]
            try:
                batch = await loop.run_in_executor(self._thread, self.reward.score, samples)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - `on_error: raise` (or a BaseException from a
                # scorer, such as a stray TimeoutException): isolate the request, keep the loop alive
                if len(requests) > 1:
                    log.warning("a batch of %d requests raised (%s); scoring each alone", len(requests), exc)
                await self._score_alone(requests)
                continue
            self.batches += 1
            if len(requests) > 1 and any(count == len(samples) for count in batch.errors.values()):
                # A scorer raised on the shared batch (all its samples None): score each request
                # alone, so a neighbour's bad sample never turns another request's values into None.
                await self._score_alone(requests)
                continue
            start = 0
            for r in requests:
                if not r.future.done():
                    r.future.set_result(slice_batch(batch, start, start + len(r.samples)))
                start += len(r.samples)

    async def _score_alone(self, requests: list[_Request]) -> None:
        loop = asyncio.get_running_loop()
        for r in requests:
            try:
                result = await loop.run_in_executor(self._thread, self.reward.score, r.samples)
                self.batches += 1
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - reported to that request's client only
                if not r.future.done():
                    r.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
                continue
            if not r.future.done():
                r.future.set_result(result)

    async def stop(self) -> None:
        """Called after the server has answered every request: end the loop, release the thread."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._thread.shutdown(wait=True)
