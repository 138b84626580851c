"""The `remote` scorer: a grpo-rewards server (or any server with OpenRLHF's shape) as one scorer.

A reward call over the network must never block or poison training: every request has a
timeout, failed requests are retried with exponential backoff, at most `max_concurrency` run at
once, and after `breaker_failures` failed requests in a row a circuit breaker answers at once
(no network) until `breaker_reset_s` has passed and one probe request succeeds. A sample whose
request failed gets None with the reason, never 0.

Plain `urllib` rather than an HTTP library: this is a built-in scorer, and the core install has
no HTTP client dependency to give it.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards.errors import UserError
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.scorer import ReferenceFields, Sample, Score, Scorer

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class RemoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", description="Endpoint: a grpo-rewards server's `/score` (api `native`) "
                     "or an OpenRLHF-style reward endpoint such as `/openrlhf` (api `openrlhf`).")
    api: Literal["native", "openrlhf"] = Field(
        "native", description="`native`: grpo-rewards `/score` (samples in, totals and per-scorer values out); "
        "`openrlhf`: `{query, prompts, labels}` in, `rewards` out.")
    value: str = Field("total", min_length=1, description="native api: the remote `total`, or the alias of one "
                       "scorer of the remote spec.")
    answer_field: str = Field("answer", min_length=1, description="openrlhf api: reference field sent as the label.")
    token_env: str | None = Field(None, min_length=1, description="Environment variable holding the bearer token "
                                  "(read when the scorer is built; the token never appears in a spec).")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="Timeout of one HTTP request (connect and read).")
    retries: int = Field(2, ge=0, le=10, description="Retries of a request that failed (no answer, timeout, "
                         "408/429/5xx); other 4xx answers are not retried.")
    backoff_s: float = Field(0.5, ge=0, le=60, description="Wait before the first retry; doubled each retry "
                             "(a 503's Retry-After is honoured up to 4x this).")
    batch_size: int = Field(64, ge=1, le=4096, description="Samples per request.")
    max_concurrency: int = Field(4, ge=1, le=64, description="Requests in flight at once, per scorer.")
    breaker_failures: int = Field(5, ge=1, le=1000, description="Failed requests in a row (after their retries) "
                                  "that open the circuit: further calls get None at once, without the network.")
    breaker_reset_s: float = Field(10.0, gt=0, le=3600, description="How long the circuit stays open before one "
                                   "probe request is let through; its success closes the circuit.")


class RemoteFailure(Exception):
    """One request failed; `retry` says whether trying again may help."""

    def __init__(self, reason: str, retry: bool, wait_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry = retry
        self.wait_s = wait_s


class CircuitBreaker:
    """Closed (calls go through) -> open after N failures in a row -> one probe after `reset_s`."""

    def __init__(self, failures: int, reset_s: float) -> None:
        self.threshold, self.reset_s = failures, reset_s
        self.failures = 0
        self.opened_at: float | None = None
        self._probing = False
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            if self.opened_at is None:
                return True
            if self._probing or time.monotonic() - self.opened_at < self.reset_s:
                return False
            self._probing = True  # half-open: this one call decides
            return True

    def record(self, ok: bool) -> None:
        with self._lock:
            self._probing = False
            if ok:
                self.failures, self.opened_at = 0, None
                return
            self.failures += 1
            if self.failures >= self.threshold:
                self.opened_at = time.monotonic()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


class Remote(Scorer):
    """A remote reward server's value: a grpo-rewards server or any OpenRLHF-style reward endpoint."""

    name = "remote"
    Params = RemoteParams
    reads = ReferenceFields(param="answer_field", when=lambda params: params.api == "openrlhf")
    value_range = (-math.inf, math.inf)  # whatever the remote spec's totals span

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        env = self.params.token_env
        self.token = os.environ.get(env) if env else None
        if env and not self.token:
            raise UserError(f"remote scorer: token_env: environment variable {env!r} is not set")
        self._start()

    def _start(self) -> None:
        self.breaker = CircuitBreaker(self.params.breaker_failures, self.params.breaker_reset_s)
        self._pool = ThreadPoolExecutor(max_workers=self.params.max_concurrency, thread_name_prefix="grpo-remote")

    def __getstate__(self) -> dict[str, Any]:  # threads and locks do not pickle: a copy starts its own
        return {"params": self.params, "token": self.token}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.params, self.token = state["params"], state["token"]
        self._start()

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        size = self.params.batch_size
        chunks = [list(samples[i:i + size]) for i in range(0, len(samples), size)]
        return [score for chunk_scores in self._pool.map(self._score_chunk, chunks) for score in chunk_scores]

    def _score_chunk(self, chunk: list[Sample]) -> list[Score]:
        if not self.breaker.allow():
            return [Score.unscorable("remote circuit open", url=self.params.url,
                                     error=f"{self.breaker.failures} failed requests in a row; "
                                           f"retrying after {self.params.breaker_reset_s:g} s") for _ in chunk]
        try:
            reply = self._post_with_retries(self._payload(chunk))
            scores = self._parse(reply, len(chunk))
        except RemoteFailure as failure:
            self.breaker.record(False)
            return [Score.unscorable("remote call failed", url=self.params.url, error=str(failure)) for _ in chunk]
        self.breaker.record(True)
        return scores

    def _payload(self, chunk: list[Sample]) -> dict[str, Any]:
        if self.params.api == "native":
            return {"samples": [{"prompt": s.prompt, "completion": s.completion, **s.reference} for s in chunk],
                    "info": True}
        return {"query": [s.prompt_text + s.completion_text for s in chunk],
                "prompts": [s.prompt_text for s in chunk],
                "labels": [s.reference.get(self.params.answer_field) for s in chunk]}

    def _post_with_retries(self, payload: dict[str, Any]) -> Any:
        data = json.dumps(payload, default=repr).encode()
        wait = self.params.backoff_s
        for attempt in range(self.params.retries + 1):
            try:
                return self._post(data)
            except RemoteFailure as failure:
                if not failure.retry or attempt == self.params.retries:
                    raise RemoteFailure(f"{failure} (attempt {attempt + 1} of {self.params.retries + 1})",
                                        False) from None
                time.sleep(min(failure.wait_s, 4 * self.params.backoff_s) if failure.wait_s is not None else wait)
                wait *= 2
        raise AssertionError("unreachable")

    def _post(self, data: bytes) -> Any:
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.params.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.params.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read()[:300].decode("utf-8", "replace")
            retry_after = err.headers.get("retry-after", "")
            wait = float(retry_after) if retry_after.isdigit() else None
            raise RemoteFailure(f"HTTP {err.code}: {detail}", err.code in RETRYABLE_STATUS, wait) from None
        except TimeoutError:
            raise RemoteFailure(f"no answer within {self.params.timeout_s:g} s", True) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError):
                raise RemoteFailure(f"no answer within {self.params.timeout_s:g} s", True) from None
            raise RemoteFailure(f"server unreachable: {reason}", True) from None
        try:
            return json.loads(body)
        except ValueError:
            raise RemoteFailure(f"answer is not JSON: {body[:200]!r}", False) from None

    def _parse(self, reply: Any, n: int) -> list[Score]:
        if self.params.api == "native":
            results = reply.get("results") if isinstance(reply, dict) else None
            if not isinstance(results, list) or len(results) != n:
                raise RemoteFailure(f"expected 'results' with {n} entries, got {str(reply)[:200]}", False)
            return [self._native_score(r) for r in results]
        rewards = reply.get("rewards") if isinstance(reply, dict) else None
        if not isinstance(rewards, list) or len(rewards) != n:
            raise RemoteFailure(f"expected 'rewards' with {n} entries, got {str(reply)[:200]}", False)
        return [Score(v) if (v := _number(r)) is not None
                else Score.unscorable("remote gave no number", remote_value=repr(r)) for r in rewards]

    def _native_score(self, result: dict[str, Any]) -> Score:
        key = self.params.value
        raw = result.get("total") if key == "total" else (result.get("scores") or {}).get(key, "missing")
        if raw == "missing":
            return Score.unscorable("remote spec has no such scorer", value=key,
                                    remote_scorers=sorted(result.get("scores") or {}))
        info = {"remote": result.get("info", {})}
        value = _number(raw)
        return Score(value, info) if value is not None else Score(None, {"reason": "remote value is None", **info})

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


@hookimpl
def grpo_rewards_scorers():
    return [Remote]
