"""Length scorers: a length target/ramp/range, the cosine-scaled length reward, DAPO's overlong punishment.

All measure length through `textutil.measure_lengths` (characters, or tokens from the sample's
`completion_ids` or a tokenizer), so one spec means the same thing standalone and under TRL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from grpo_rewards.scorer import Sample, Score, Scorer
from grpo_rewards.scorers.textutil import LengthUnitParams, measure_lengths


class LengthParams(LengthUnitParams):
    mode: Literal["target", "ramp", "range"] = Field(
        "target",
        description="`target`: 1 within `tolerance` of `target`, falling linearly to 0 over `falloff`; "
        "`ramp`: 0 at `low` rising linearly to 1 at `high` (reversed with `reverse`); `range`: 1 inside "
        "[`low`, `high`], outside 0 or a linear fall over `falloff`.",
    )
    target: int | None = Field(None, ge=0, description="Target length (`target` mode).")
    tolerance: int = Field(0, ge=0, description="Distance from `target` that still earns 1.")
    falloff: int | None = Field(
        None, gt=0,
        description="Distance over which the value falls from 1 to 0 beyond the tolerance or the range; "
        "default: `target` in target mode, a hard edge in range mode.",
    )
    low: int | None = Field(None, ge=0, description="Lower length (`ramp`, `range`).")
    high: int | None = Field(None, ge=0, description="Upper length (`ramp`, `range`).")
    reverse: bool = Field(False, description="`ramp` only: reward shortness (1 at `low`, 0 at `high`).")

    @model_validator(mode="after")
    def _mode_fields(self) -> LengthParams:
        if self.mode == "target" and self.target is None:
            raise ValueError("mode 'target' needs 'target'")
        if self.mode in ("ramp", "range"):
            if self.low is None or self.high is None:
                raise ValueError(f"mode {self.mode!r} needs 'low' and 'high'")
            if self.low > self.high or (self.mode == "ramp" and self.low == self.high):
                raise ValueError(f"'low' ({self.low}) must be below 'high' ({self.high})")
        return self


class Length(Scorer):
    """Rewards completion length (characters or tokens): a target with tolerance, a linear ramp, or a range."""

    name = "length"
    Params = LengthParams
    value_range = (0.0, 1.0)

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        out = []
        for n, info in measure_lengths(samples, self.params):
            out.append(Score.unscorable(**info) if n is None else Score(self._value(n), info))
        return out

    def _value(self, n: int) -> float:
        p = self.params
        if p.mode == "target":
            distance = abs(n - p.target)
            falloff = p.falloff or max(p.target, 1)
            return 1.0 if distance <= p.tolerance else max(0.0, 1.0 - (distance - p.tolerance) / falloff)
        if p.mode == "ramp":
            up = min(1.0, max(0.0, (n - p.low) / (p.high - p.low)))
            return 1.0 - up if p.reverse else up
        distance = p.low - n if n < p.low else max(0, n - p.high)
        if distance == 0:
            return 1.0
        return max(0.0, 1.0 - distance / p.falloff) if p.falloff else 0.0


# ---------------------------------------------------------------------------------------------

class CosineLengthParams(LengthUnitParams):
    correctness_from: str = Field(
        "math_accuracy", min_length=1,
        description="Alias of the scorer (earlier in the same spec) whose value says whether a sample is "
        "correct; it is read, never recomputed.",
    )
    correct_threshold: float = Field(0.5, allow_inf_nan=False,
                                     description="A correctness value at or above this counts as correct.")
    max_len: int = Field(ge=1, description="Length at which the schedule reaches its long end (TRL `max_len`).")
    min_value_wrong: float = Field(-1.0, ge=-10, le=10, description="Value of a wrong completion of length 0.")
    max_value_wrong: float = Field(-0.5, ge=-10, le=10, description="Value of a wrong completion at `max_len`.")
    min_value_correct: float = Field(0.5, ge=-10, le=10, description="Value of a correct completion at `max_len`.")
    max_value_correct: float = Field(1.0, ge=-10, le=10, description="Value of a correct completion of length 0.")


class CosineLength(Scorer):
    """Cosine-scaled length reward conditioned on another scorer's correctness (short+correct is best)."""

    name = "cosine_length"
    Params = CosineLengthParams
    value_range = (-10.0, 10.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        p = self.params
        values = (p.min_value_wrong, p.max_value_wrong, p.min_value_correct, p.max_value_correct)
        self.value_range = (min(values), max(values))

    @classmethod
    def dependencies(cls, params: BaseModel) -> list[str]:
        return [params.correctness_from]

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        p = self.params
        source = (results or {}).get(p.correctness_from)
        if source is None or len(source) != len(samples):
            why = (f"no results of scorer {p.correctness_from!r}: list cosine_length after it in the same spec"
                   if source is None else f"scorer {p.correctness_from!r} returned {len(source)} scores for "
                   f"{len(samples)} samples")
            return [Score.unscorable(why) for _ in samples]
        out = []
        for (n, info), verdict in zip(measure_lengths(samples, p), source, strict=True):
            correctness = getattr(verdict, "value", None)
            if correctness is None:
                info.pop("reason", None)
                out.append(Score.unscorable(f"correctness from {p.correctness_from!r} is None", **info))
            elif n is None:
                out.append(Score.unscorable(**info))
            else:
                out.append(self._scaled(n, correctness >= p.correct_threshold, correctness, info))
        return out

    def _scaled(self, n: int, correct: bool, correctness: float, info: dict[str, Any]) -> Score:
        p = self.params
        # Clamped: cos is periodic, so past max_len the schedule would climb back (TRL clamps too).
        progress = min(n / p.max_len, 1.0)
        cosine = math.cos(progress * math.pi)
        if correct:
            lo, hi = p.min_value_correct, p.max_value_correct
        else:  # swapped: a short wrong answer is penalised most
            lo, hi = p.max_value_wrong, p.min_value_wrong
        value = lo + 0.5 * (hi - lo) * (1.0 + cosine)
        return Score(value, {**info, "correct": correct, "correctness": correctness, "progress": progress})


# ---------------------------------------------------------------------------------------------


class OverlongPunishmentParams(LengthUnitParams):
    padding: Literal["ignore", "count"] = Field(
        "count", description="`count`: the raw length, padding included (an overlong completion costs its "
        "tokens, whatever they hold); `ignore`: the content's length, as `length` measures it.")
    max_length: int = Field(ge=1, description="Hard length limit L_max (TRL `max_completion_len`).")
    buffer: int = Field(
        ge=0, description="Soft punishment interval L_cache before `max_length` (TRL `soft_punish_cache`); "
        "0: only lengths past `max_length` are punished.")
    penalty: float = Field(1.0, gt=0, le=10, description="Penalty at and past `max_length` (DAPO uses 1).")

    @model_validator(mode="after")
    def _buffer_fits(self) -> OverlongPunishmentParams:
        if self.buffer > self.max_length:
            raise ValueError(f"'buffer' ({self.buffer}) must not exceed 'max_length' ({self.max_length})")
        return self


class OverlongPunishment(Scorer):
    """DAPO's soft overlong punishment: 0 up to max_length - buffer, then linearly down to -penalty."""

    name = "overlong_punishment"
    Params = OverlongPunishmentParams
    value_range = (-10.0, 0.0)

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.value_range = (-self.params.penalty, 0.0)

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        p = self.params
        soft_start = p.max_length - p.buffer
        out = []
        for n, info in measure_lengths(samples, p):
            if n is None:
                out.append(Score.unscorable(**info))
            elif n <= soft_start:
                out.append(Score(0.0, {**info, "zone": "within limit"}))
            elif n <= p.max_length:
                out.append(Score(p.penalty * (soft_start - n) / p.buffer, {**info, "zone": "soft buffer"}))
            else:
                out.append(Score(-p.penalty, {**info, "zone": "over max_length"}))
        return out
