"""The scorer contract: `Sample` in, `Score` out, a `Scorer` class per reward family.

A scorer is a class with a registry `name`, a pydantic `Params` model and a batch
`score(samples, results)` method. `Params` is the single source of truth for a scorer's
options: it validates specs, generates the JSON schema and the docs tables.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

Message = Mapping[str, Any]
Text = str | Sequence[Message]


def message_text(value: Any, role: str | None = "assistant") -> str:
    """The text of a completion or prompt given as a string or as chat messages.

    For a list of messages, the contents of the messages with `role` are joined (all
    messages when `role` is None). Content given as a list of typed parts (the multimodal
    chat format) contributes its text parts. Anything else becomes "" rather than raising,
    because a scorer must never crash on odd input.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, Sequence):
        return str(value)
    parts: list[str] = []
    for message in value:
        if not isinstance(message, Mapping):
            continue
        if role is not None and message.get("role", "assistant") != role:
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, Sequence):
            parts.extend(
                p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"
            )
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Sample:
    """One completion to score.

    `prompt` and `completion` are strings or chat messages; `reference` holds the dataset
    fields that scorers may need (`answer`, `tests`, a JSON schema, ...).
    """

    prompt: Text = ""
    completion: Text = ""
    reference: Mapping[str, Any] = field(default_factory=dict)

    @property
    def completion_text(self) -> str:
        """The assistant text of the completion."""
        return message_text(self.completion, role="assistant")

    @property
    def prompt_text(self) -> str:
        """The whole prompt as text (every message's content, in order)."""
        return message_text(self.prompt, role=None)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Sample:
        """A sample from a flat record `{prompt, completion, **reference_fields}`."""
        reference = {k: v for k, v in record.items() if k not in ("prompt", "completion")}
        if isinstance(record.get("reference"), Mapping):
            reference = {**reference, **record["reference"]}
            reference.pop("reference", None)
        return cls(record.get("prompt", ""), record.get("completion", ""), reference)


@dataclass(slots=True)
class Score:
    """A scorer's verdict on one sample.

    `value is None` means "cannot be scored here" (not applicable, unparseable gold,
    infrastructure failure); it is never a silent 0. `info` says why, for `explain`.
    """

    value: float | None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def unscorable(cls, reason: str, **info: Any) -> Score:
        return cls(None, {"reason": reason, **info})

    def __post_init__(self) -> None:
        if self.value is not None:
            value = float(self.value)
            if not math.isfinite(value):
                self.info = {**self.info, "reason": "non-finite value", "raw_value": repr(value)}
                value = None
            self.value = value


@dataclass(frozen=True)
class ReferenceFields:
    """The reference fields a scorer reads, declared on the class as `reads = ReferenceFields(...)`.

    `param` names the scorer's param that holds the field's name (math's `answer_field`), so a spec
    that renames the field is checked against the configured name; `any_of` lists fixed names of which
    one suffices (code_tests' test layouts). `unless` names a param that, when set, makes the field
    optional (json_schema's inline schema); `when` is a predicate on the params that must hold for the
    field to be needed (remote reads its label only under `api: openrlhf`).
    A data set without any of them is a misconfiguration (see `columns.check_columns`); a row whose
    field is empty or null is not: it scores None, as TRL's multi-task masking expects.
    """

    param: str | None = None
    any_of: tuple[str, ...] = ()
    unless: str | None = None
    when: Callable[[Any], bool] | None = None

    def needed(self, params: BaseModel) -> tuple[str, ...]:
        """The field names of which the data must have one, for these params (empty: none needed)."""
        if self.unless is not None and getattr(params, self.unless, None) is not None:
            return ()
        if self.when is not None and not self.when(params):
            return ()
        return (getattr(params, self.param),) if self.param is not None else self.any_of


class ParamsModel(BaseModel):
    """The base of the built-in `Params` (a plugin's may use it too): an unknown key is an error (a
    misspelt option must not be ignored), and the validator is built on first use, so that loading
    the registry does not build the schemas of scorers a run never names."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class NoParams(ParamsModel):
    """The `Params` of a scorer (or sandbox backend) without options."""


def first_doc_line(cls: type) -> str:
    """A class's one-line description: the first line of its docstring."""
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


def validate_params(model: type[BaseModel], params: BaseModel | Mapping[str, Any] | None,
                    overrides: Mapping[str, Any], registry: Any = None) -> BaseModel:
    """`params` as an instance of `model`: an instance passes as is (validated once, by the spec),
    a mapping (plus `overrides`) is validated with the run's `registry` in the validation context."""
    if isinstance(params, model) and not overrides:
        return params
    if isinstance(params, BaseModel):
        # Re-validated: model_copy(update=...) would let an out-of-bounds override through.
        params = params.model_dump()
    return model.model_validate({**(params or {}), **overrides}, context={"registry": registry})


@dataclass
class RewardBatch:
    """Scores of one batch: totals plus every scorer's `Score`s, by alias."""

    totals: list[float | None]
    scores: dict[str, list[Score]]
    errors: dict[str, int] = field(default_factory=dict)  # alias -> samples that got None by an exception
    groups: list[list[int]] = field(default_factory=list)  # indices of each prompt's samples
    # Each member's value after its None policy and gate (None on dropped samples): what the
    # aggregation reads and what the TRL adapter hands TRL. Equal to `values` by default.
    gated: dict[str, list[float | None]] = field(default_factory=dict)
    # alias -> weight * (normalised) value: the member's share of each total.
    contributions: dict[str, list[float | None]] = field(default_factory=dict)
    cache_hits: dict[str, int] = field(default_factory=dict)  # alias -> samples not scored again
    # Sum of weight * value after policy and gate, before any group normalisation (None where a
    # sample has no value or is dropped): the total itself under `aggregate: sum`; under
    # `normalize_then_sum`, the reward's scale, which the totals (normalised) do not show.
    # None: the same as `totals`.
    weighted_sums: list[float | None] | None = None

    @property
    def values(self) -> dict[str, list[float | None]]:
        return {alias: [s.value for s in scores] for alias, scores in self.scores.items()}

    def __len__(self) -> int:
        return len(self.totals)

    def record(self, i: int, with_info: bool = False) -> dict[str, Any]:
        """The JSON-ready result of sample `i`: total, per-scorer values (and infos)."""
        out: dict[str, Any] = {"total": self.totals[i], "scores": {a: s[i].value for a, s in self.scores.items()}}
        if with_info:
            out["info"] = {a: s[i].info for a, s in self.scores.items()}
        return out


class Scorer(ABC):
    """Base class of every scorer, built-in or from a plugin.

    Subclasses set:
      name:        registry name (`math_accuracy`); unique across all plugins.
      Params:      pydantic model of the options (`extra="forbid"`), with a description
                   on every field; it becomes validation, JSON schema and docs.
      value_range: (low, high) that every non-None value lies in; documented and fuzz-tested.
      deterministic: False when the same sample can score differently (time limits, randomness);
                   such a scorer is never served from the score cache.
      reads:       the `ReferenceFields` it needs from the data (None: only prompt and completion);
                   a data set without them is refused before anything is scored.
    and implement `score`. The one-line description is the first line of the class docstring.

    `registry` is the run's registry (`CompositeReward` passes its own): a scorer that looks names
    up (a sandbox backend) finds them there. None, for a scorer built standalone, means the
    process-wide one (`get_registry()`).
    """

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    # Same sample and params, same Score: the composite may serve it from its score cache.
    # False for anything that depends on time or load (timeouts) or on other samples.
    deterministic: ClassVar[bool] = True
    reads: ClassVar[ReferenceFields | None] = None

    def __init__(self, params: BaseModel | Mapping[str, Any] | None = None, *, registry: Any = None,
                 **kwargs: Any) -> None:
        self.registry = registry
        self.params = validate_params(self.Params, params, kwargs, registry)

    @classmethod
    def description(cls) -> str:
        return first_doc_line(cls)

    def reference_fields(self) -> tuple[str, ...]:
        """The reference fields of which the data must have one, for this scorer's params."""
        return self.reads.needed(self.params) if self.reads is not None else ()

    @classmethod
    def dependencies(cls, params: BaseModel) -> list[str]:
        """Aliases of scorers whose results this one reads, given its params.

        They must come earlier in the same spec; the spec loader checks that before anything runs.
        """
        return []

    @abstractmethod
    def score(
        self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None
    ) -> list[Score]:
        """Score a batch. Returns one `Score` per sample, in order.

        `results` maps the alias of each scorer that ran earlier in the same spec to its
        scores for this batch, so a scorer can condition on another without recomputing it.
        """

    def __call__(self, samples: Sequence[Sample] | Sample) -> list[Score] | Score:
        if isinstance(samples, Sample):
            return self.score([samples])[0]
        return self.score(list(samples))

    def open(self) -> None:
        """Start, in the background, what scoring will need (worker processes, connections), so
        that it is ready by the first batch; returns at once. Optional: `score` starts whatever is
        not started. Entering a `CompositeReward` (or this scorer) opens it."""

    def close(self) -> None:
        """Release worker processes or other resources. Safe to call twice."""

    def __enter__(self) -> Scorer:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
