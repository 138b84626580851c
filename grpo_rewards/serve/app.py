"""The reward server's HTTP API (FastAPI): `/score`, the OpenRLHF endpoint, `/health`, `/spec`.

FastAPI because the request bodies are pydantic models, as the spec is: a missing or mistyped
field is refused with its path (`samples[3].completion`) without hand-written checks, and
uvicorn under it finishes in-flight requests on SIGTERM.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards.columns import MissingFieldError, columns_of
from grpo_rewards.compose import CompositeReward
from grpo_rewards.errors import format_loc
from grpo_rewards.scorer import RewardBatch, Sample
from grpo_rewards.serve.batcher import Batcher, QueueFull
from grpo_rewards.serve.guard import Guard

log = logging.getLogger(__name__)

Text = str | list[dict[str, Any]]
# End-of-sequence markers OpenRLHF leaves in `query` (it decodes with skip_special_tokens=False).
EOS_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")


class SampleIn(BaseModel):
    """One sample: `completion`, optional `prompt`, and reference fields (flat or under `reference`)."""

    model_config = ConfigDict(extra="allow")
    completion: Text
    prompt: Text = ""


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    samples: list[SampleIn] = Field(min_length=1)
    info: bool = Field(False, description="Include each scorer's info (the reasons) per sample.")


class OpenRLHFRequest(BaseModel):
    """What OpenRLHF's remote reward client posts: prompt+response text, prompts, labels."""

    query: list[str] = Field(min_length=1)
    prompts: list[str] | None = None
    labels: list[Any] | None = None


@dataclass
class ServerSettings:
    max_batch: int = 256
    max_queue: int = 4096
    max_body_bytes: int = 8 * 1024 * 1024
    token: str | None = None
    none_score: float = math.nan  # what the OpenRLHF endpoint sends for a sample nothing could score
    retry_after_s: int = 1


def openrlhf_samples(body: OpenRLHFRequest, answer_field: str = "answer") -> list[Sample]:
    """`query` is prompt + response as one decoded string: the completion is what follows the prompt."""
    n = len(body.query)
    for name in ("prompts", "labels"):
        value = getattr(body, name)
        if value is not None and len(value) != n:
            raise ValueError(f"{name}: has {len(value)} entries for {n} queries")
    samples = []
    for i, query in enumerate(body.query):
        prompt = body.prompts[i] if body.prompts is not None else ""
        completion = query[len(prompt):] if prompt and query.startswith(prompt) else query
        for marker in EOS_MARKERS:
            completion = completion.removesuffix(marker)
        label = body.labels[i] if body.labels is not None else None
        # OpenRLHF sends "" for every label when its --label_key is unset: an empty label is no label.
        empty = label is None or label == ""
        reference = dict(label) if isinstance(label, dict) else ({} if empty else {answer_field: label})
        samples.append(Sample(prompt, completion, reference))
    return samples


def _or_default(value: float | None, fallback: float) -> float:
    return fallback if value is None else value


def openrlhf_response(batch: RewardBatch, none_score: float) -> dict[str, Any]:
    """OpenRLHF reads `rewards` (trained on), `scores` (dynamic filtering) and `extra_logs` (logged)."""
    rewards = [_or_default(t, none_score) for t in batch.totals]
    extra = {alias: [_or_default(v, math.nan) for v in values] for alias, values in batch.values.items()}
    extra["scored"] = [0.0 if t is None else 1.0 for t in batch.totals]
    return {"rewards": rewards, "scores": rewards, "extra_logs": extra}


def json_response(content: Any) -> Response:
    """JSON written as `grpo-rewards score` writes it (`default=repr` for odd info values).

    Not FastAPI's encoder: it turns NaN into null, and OpenRLHF's `torch.tensor([None])` fails where
    `NaN` (which Python's json reads back as a float) trains as the caller chose.
    """
    return Response(json.dumps(content, default=repr), media_type="application/json")


def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    # Paths without FastAPI's leading "body": `samples[3].completion: Field required`.
    problems = []
    for err in exc.errors():
        loc = [p for p in err.get("loc", ()) if p != "body"]
        problems.append(f"{format_loc(loc) or '<body>'}: {err.get('msg', 'invalid')}")
    return JSONResponse({"error": "; ".join(problems), "problems": problems}, status_code=422)


def create_app(reward: CompositeReward, settings: ServerSettings | None = None) -> FastAPI:
    """The ASGI app serving `reward`; the composite is closed when the app shuts down."""
    settings = settings or ServerSettings()
    batcher = Batcher(reward, settings.max_batch, settings.max_queue)
    counts = {"accepted": 0, "answered": 0}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reward.open()  # its workers boot now, not during the first request
        batcher.start()
        yield
        # uvicorn runs this after every in-flight request has been answered.
        await batcher.stop()
        reward.close()
        log.warning("reward server stopped: %d requests accepted, %d answered",
                    counts["accepted"], counts["answered"])

    app = FastAPI(title="grpo-rewards", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_middleware(Guard, max_body_bytes=settings.max_body_bytes, token=settings.token)
    app.state.counts = counts
    app.state.batcher = batcher

    async def scored(samples: list[Sample], where: str) -> RewardBatch | JSONResponse:
        try:
            reward.check_columns(columns_of(s.reference for s in samples), where)
        except MissingFieldError as exc:
            return JSONResponse({"error": str(exc), "missing": [f for m in exc.missing for f in m.fields]},
                                status_code=422)
        counts["accepted"] += 1
        try:
            return await batcher.score(samples)
        except QueueFull as exc:
            return JSONResponse({"error": f"server busy: {exc}"}, status_code=503,
                                headers={"Retry-After": str(settings.retry_after_s)})
        except Exception as exc:  # noqa: BLE001 - a scorer with on_error: raise; the message goes back
            return JSONResponse({"error": f"scoring failed: {type(exc).__name__}: {exc}"}, status_code=500)
        finally:
            counts["answered"] += 1

    @app.post("/score")
    async def score(body: ScoreRequest) -> Any:
        samples = [Sample.from_record(s.model_dump()) for s in body.samples]
        batch = await scored(samples, "the request's samples")
        if isinstance(batch, JSONResponse):
            return batch
        return json_response({"aliases": reward.aliases, "weights": reward.weights,
                              "results": [batch.record(i, with_info=body.info) for i in range(len(batch))]})

    async def openrlhf(body: OpenRLHFRequest) -> Any:
        try:
            samples = openrlhf_samples(body, reward.gold_field)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        batch = await scored(samples, "the request's labels (OpenRLHF's --label_key)")
        if isinstance(batch, JSONResponse):
            return batch
        return json_response(openrlhf_response(batch, settings.none_score))

    # `/get_reward` is the path OpenRLHF's own reward-model server uses; `/openrlhf` says what it is.
    app.post("/openrlhf")(openrlhf)
    app.post("/get_reward")(openrlhf)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "queued_samples": batcher.pending, "batches": batcher.batches,
                "requests": dict(counts), "errors": dict(reward.error_counts)}

    @app.get("/spec")
    async def spec() -> dict[str, Any]:
        return reward.spec.model_dump(mode="json")

    return app
