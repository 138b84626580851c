"""The `remote` scorer: a grpo-rewards server (or any server with OpenRLHF's shape) as one scorer,
and the call machinery it shares with `llm_judge`.

A reward call over the network must never block or poison training. `Caller` gives every request
a timeout, retries failed requests with exponential backoff, runs at most `max_concurrency` at
once and starts at most `max_rps` a second, and after `breaker_failures` failed requests in a row
a circuit breaker answers at once (no network) until `breaker_reset_s` has passed and one probe
request succeeds. A sample whose request failed gets None with the reason, never 0.

Plain `urllib` rather than an HTTP library: these are built-in scorers, and the core install has
no HTTP client dependency to give them.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field

from grpo_rewards.errors import UserError
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.scorer import ParamsModel, ReferenceFields, Sample, Score, Scorer

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
T = TypeVar("T")
R = TypeVar("R")


class CallPolicy(ParamsModel):
    """How a scorer calls a server: the Params fields every network scorer shares."""

    timeout_s: float = Field(30.0, gt=0, le=3600, description="Timeout of one HTTP request (connect and read).")
    retries: int = Field(2, ge=0, le=10, description="Retries of a request that failed (no answer, timeout, "
                         "408/429/5xx); other 4xx answers are not retried.")
    backoff_s: float = Field(0.5, ge=0, le=60, description="Wait before the first retry; doubled each retry "
                             "(a 429's or 503's Retry-After is honoured up to 4x this).")
    max_concurrency: int = Field(4, ge=1, le=64, description="Requests in flight at once, per scorer.")
    max_rps: float | None = Field(None, gt=0, le=10000, description="Requests started per second at most, "
                                  "retries included, per scorer (spaced evenly); null: no limit.")
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


class CircuitOpen(RemoteFailure):
    """The breaker refused the call: recent requests failed, the network was not tried."""


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


class RateLimiter:
    """Request starts spaced at least 1/rps apart. Hand-written: a dozen lines of stdlib, where a
    limiter package would be a new core dependency for two built-in scorers."""

    def __init__(self, rps: float | None) -> None:
        self.interval = 1.0 / rps if rps else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:  # reserve a start time, then sleep outside the lock
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            time.sleep(start - now)


def token_from_env(env: str | None, who: str) -> str | None:
    """The secret in environment variable `env` (None: no secret); unset is the user's mistake."""
    if not env:
        return None
    token = os.environ.get(env)
    if not token:
        raise UserError(f"{who}: environment variable {env!r} is not set")
    return token


class Caller:
    """POSTs JSON under a `CallPolicy`: timeout, retries with backoff, concurrency, rate, breaker.

    Pickles as its policy and token: threads and locks do not, and a copy starts its own."""

    def __init__(self, policy: CallPolicy, token: str | None = None, name: str = "grpo-remote") -> None:
        self.policy, self.token, self.name = policy, token, name
        self._start()

    def _start(self) -> None:
        self.breaker = CircuitBreaker(self.policy.breaker_failures, self.policy.breaker_reset_s)
        self.limiter = RateLimiter(self.policy.max_rps)
        self._pool = ThreadPoolExecutor(max_workers=self.policy.max_concurrency, thread_name_prefix=self.name)

    def __getstate__(self) -> dict[str, Any]:
        return {"policy": self.policy, "token": self.token, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.policy, self.token, self.name = state["policy"], state["token"], state["name"]
        self._start()

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`fn` over `items` on the pool (at most `max_concurrency` at once), results in order."""
        return list(self._pool.map(fn, items))

    def call(self, url: str, payload: Any, parse: Callable[[Any], R]) -> R:
        """`parse` of the JSON answer to `payload`, through the breaker; raises `RemoteFailure`
        (`CircuitOpen` when the breaker refused) once retries are spent or `parse` rejects the answer."""
        if not self.breaker.allow():
            raise CircuitOpen(f"{self.breaker.failures} failed requests in a row; retrying after "
                              f"{self.policy.breaker_reset_s:g} s", False)
        try:
            result = parse(self._post_with_retries(url, json.dumps(payload, default=repr).encode()))
        except RemoteFailure:
            self.breaker.record(False)
            raise
        self.breaker.record(True)
        return result

    def _post_with_retries(self, url: str, data: bytes) -> Any:
        policy = self.policy
        wait = policy.backoff_s
        for attempt in range(policy.retries + 1):
            try:
                return self._post(url, data)
            except RemoteFailure as failure:
                if not failure.retry or attempt == policy.retries:
                    raise RemoteFailure(f"{failure} (attempt {attempt + 1} of {policy.retries + 1})", False) from None
                time.sleep(min(failure.wait_s, 4 * policy.backoff_s) if failure.wait_s is not None else wait)
                wait *= 2
        raise AssertionError("unreachable")

    def _post(self, url: str, data: bytes) -> Any:
        # urllib.request (with http.client and ssl) costs ~9 ms of every command's start otherwise.
        import urllib.error
        import urllib.request

        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        timeout = self.policy.timeout_s
        self.limiter.wait()
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read()[:300].decode("utf-8", "replace")
            retry_after = err.headers.get("retry-after", "")
            wait = float(retry_after) if retry_after.isdigit() else None
            raise RemoteFailure(f"HTTP {err.code}: {detail}", err.code in RETRYABLE_STATUS, wait) from None
        except TimeoutError:
            raise RemoteFailure(f"no answer within {timeout:g} s", True) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError):
                raise RemoteFailure(f"no answer within {timeout:g} s", True) from None
            raise RemoteFailure(f"server unreachable: {reason}", True) from None
        try:
            return json.loads(body)
        except ValueError:
            raise RemoteFailure(f"answer is not JSON: {body[:200]!r}", False) from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class RemoteParams(CallPolicy):
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
    batch_size: int = Field(64, ge=1, le=4096, description="Samples per request.")


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
        self.caller = Caller(self.params, token_from_env(self.params.token_env, "remote scorer: token_env"))

    def __getstate__(self) -> dict[str, Any]:  # the registry stays behind; the caller pickles as its policy
        return {"params": self.params, "caller": self.caller, "registry": None}

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        size = self.params.batch_size
        chunks = [list(samples[i:i + size]) for i in range(0, len(samples), size)]
        return [score for chunk_scores in self.caller.map(self._score_chunk, chunks) for score in chunk_scores]

    def _score_chunk(self, chunk: list[Sample]) -> list[Score]:
        try:
            return self.caller.call(self.params.url, self._payload(chunk), lambda reply: self._parse(reply, len(chunk)))
        except CircuitOpen as failure:
            return [Score.unscorable("remote circuit open", url=self.params.url, error=str(failure)) for _ in chunk]
        except RemoteFailure as failure:
            return [Score.unscorable("remote call failed", url=self.params.url, error=str(failure)) for _ in chunk]

    def _payload(self, chunk: list[Sample]) -> dict[str, Any]:
        if self.params.api == "native":
            return {"samples": [{"prompt": s.prompt, "completion": s.completion, **s.reference} for s in chunk],
                    "info": True}
        return {"query": [s.prompt_text + s.completion_text for s in chunk],
                "prompts": [s.prompt_text for s in chunk],
                "labels": [s.reference.get(self.params.answer_field) for s in chunk]}

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
        self.caller.close()


@hookimpl
def grpo_rewards_scorers():
    return [Remote]
