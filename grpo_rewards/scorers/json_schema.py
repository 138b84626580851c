"""JSON output scorer: the answer parses as JSON and validates against a JSON Schema (via `jsonschema`)."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, Literal

from cachetools import LRUCache
from pydantic import Field, field_validator

from grpo_rewards.extract import after_think, fenced_code, tag_block
from grpo_rewards.scorer import ParamsModel, ReferenceFields, Sample, Score, Scorer
from grpo_rewards.scorers.textutil import completion_text, reference_of


@functools.cache
def _jsonschema() -> SimpleNamespace:
    # Imported on first use, not with the module: the registry imports every built-in scorer,
    # and a run that validates no JSON never needs jsonschema.
    from jsonschema import exceptions, validators
    from referencing.exceptions import Unresolvable

    return SimpleNamespace(exceptions=exceptions, validators=validators, Unresolvable=Unresolvable)


def fenced_json_blocks(text: str) -> list[str]:
    """Bodies of ```json blocks, else of untagged non-blank ones (an unterminated last block counts)."""
    blocks = fenced_code(text)
    return [b for lang, b in blocks if lang == "json"] or [b for lang, b in blocks if not lang and b.strip()]


def _validator_class(schema: Any) -> Any:
    """The jsonschema validator class for `schema` (its `$schema`, else the newest draft); raises SchemaError."""
    if not isinstance(schema, (Mapping, bool)):
        raise _jsonschema().exceptions.SchemaError(f"a schema must be an object or a boolean, got {type(schema).__name__}")
    cls = _jsonschema().validators.validator_for(schema)
    cls.check_schema(schema)
    return cls


class JsonSchemaParams(ParamsModel):
    json_schema: dict[str, Any] | None = Field(
        None, description="The JSON Schema (any draft jsonschema knows; `$schema` picks it, default 2020-12). "
        "A per-sample schema in `reference[schema_field]` takes precedence.")
    schema_field: str = Field("schema", min_length=1,
                              description="Reference field holding a per-sample schema (object or JSON text).")
    source: Literal["auto", "completion", "answer_block", "fenced"] = Field(
        "auto", description="Where the JSON is: `completion` (the whole text, stripped), `answer_block` "
        "(`<answer>…</answer>`), `fenced` (the last ```json or untagged fenced block); `auto`: fenced, else "
        "answer block, else the text after `</think>`, else the whole completion.")
    answer_tag: str = Field("answer", min_length=1, description="Tag name of the answer block.")
    invalid_credit: float = Field(0.0, ge=0.0, le=1.0,
                                  description="Value of JSON that parses but does not validate.")
    check_formats: bool = Field(False, description="Also check `format` keywords (email, date-time, ...).")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            try:
                _validator_class(schema)
            except _jsonschema().exceptions.SchemaError as exc:
                raise ValueError(f"invalid JSON Schema: {exc.message}") from None
        return schema


class JsonSchema(Scorer):
    """1 when the answer parses as JSON and validates against the schema; partial credit configurable."""

    name = "json_schema"
    Params = JsonSchemaParams
    reads = ReferenceFields(param="schema_field", unless="json_schema")
    value_range = (0.0, 1.0)
    _CACHE_SIZE = 256

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._validators: LRUCache[str, Any] = LRUCache(self._CACHE_SIZE)  # schema text -> validator (a group shares one)

    def _validator(self, schema: Any) -> Any:
        key = json.dumps(schema, sort_keys=True, default=str)
        validator = self._validators.get(key)
        if validator is None:
            cls = _validator_class(schema)
            checker = cls.FORMAT_CHECKER if self.params.check_formats else None
            validator = cls(schema, format_checker=checker)
            self._validators[key] = validator
        return validator

    def _schema_for(self, sample: Sample) -> tuple[Any, str]:
        value = reference_of(sample).get(self.params.schema_field)
        if value is None:
            return self.params.json_schema, "params"
        if isinstance(value, str):
            try:
                return json.loads(value), "reference"
            except (ValueError, RecursionError):
                raise _jsonschema().exceptions.SchemaError(f"reference {self.params.schema_field!r} is not JSON") from None
        return value, "reference"

    def _candidate(self, text: str) -> tuple[str | None, str]:
        source = self.params.source
        if source in ("auto", "fenced"):
            blocks = fenced_json_blocks(text)
            if blocks:
                return blocks[-1], "fenced"
            if source == "fenced":
                return None, "fenced"
        if source in ("auto", "answer_block"):
            block = tag_block(text, self.params.answer_tag)
            if block is not None:
                return block, "answer_block"
            if source == "answer_block":
                return None, "answer_block"
        if source == "auto":
            rest = after_think(text)
            if rest is not None:
                return rest, "after_think"
        return text, "completion"

    def score(self, samples: Sequence[Sample], results: Mapping[str, Sequence[Score]] | None = None) -> list[Score]:
        return [self._one(s) for s in samples]

    def _one(self, sample: Sample) -> Score:
        try:
            schema, schema_from = self._schema_for(sample)
            if schema is None:
                return Score.unscorable(f"no schema: set params.json_schema or reference[{self.params.schema_field!r}]")
            validator = self._validator(schema)
        except _jsonschema().exceptions.SchemaError as exc:
            return Score.unscorable(f"invalid JSON Schema: {exc.message}")
        candidate, where = self._candidate(completion_text(sample))
        info: dict[str, Any] = {"source": where, "schema_from": schema_from}
        if candidate is None or not candidate.strip():
            return Score(0.0, {**info, "problem": f"no JSON found ({where})"})
        try:
            document = json.loads(candidate)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            return Score(0.0, {**info, "problem": f"not JSON: {str(exc)[:200]}"})
        try:
            errors = list(itertools.islice(validator.iter_errors(document), 20))
        except RecursionError:
            return Score.unscorable("document too deeply nested to validate", **info)
        except _jsonschema().Unresolvable as exc:  # a `$ref` to nowhere: the schema's fault, not the completion's
            return Score.unscorable(f"invalid JSON Schema: unresolvable reference: {exc}"[:300], **info)
        if errors:
            best = _jsonschema().exceptions.best_match(errors)
            where_in = "/".join(str(p) for p in best.absolute_path) or "(root)"
            return Score(self.params.invalid_credit,
                         {**info, "problem": f"schema violation at {where_in}: {best.message[:300]}",
                          "errors": len(errors)})
        return Score(1.0, {**info, "valid": True})
