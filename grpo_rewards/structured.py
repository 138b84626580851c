"""Structured input: YAML, TOML and JSON read with the line of every node, and validation errors as
`Problem`s that name the path, the file and the line.

A model's own checks (a cross-field rule, a scorer's params) report through `raise_problems`:
pydantic places those errors under the model's location like its own, so a spec inside a training
config gets the config's paths and lines without a second implementation.
"""

from __future__ import annotations

import difflib
import json
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from grpo_rewards.errors import ConfigError, Problem, format_loc

LineOf = Callable[[tuple[Any, ...]], int | None]
Found = list[tuple[tuple[Any, ...], str]]  # (location, message) of each problem a validator finds
PROBLEM = "problem"  # the error type of a message a validator wrote in full


def no_lines(loc: tuple[Any, ...]) -> int | None:
    return None


def _yaml_line_index(text: str) -> LineOf:
    """Map a location tuple to the 1-based line of the YAML (or JSON) node it names. The text is
    composed at the first call, which only a problem to report makes."""
    composed: list[Any] = []  # the root node, once composed (None: not YAML)

    def line_of(loc: tuple[Any, ...]) -> int | None:
        import yaml  # deferred: a JSON file needs YAML only to point at a line, which a valid one never asks

        if not composed:
            try:
                composed.append(yaml.compose(text, Loader=yaml.SafeLoader))
            except yaml.YAMLError:
                composed.append(None)
        node, line = composed[0], None
        for part in loc:
            if node is None:
                break
            line = node.start_mark.line + 1
            if isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if k.value == part), None)
                if node is None:  # a missing key: point at its mapping
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                return line
        return node.start_mark.line + 1 if node is not None else line

    return line_of


def read_structured_file(path: str | Path, what: str = "spec") -> tuple[Any, LineOf]:
    """Parse a YAML, TOML or JSON file; a missing file or a syntax error is a `ConfigError`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([Problem("", f"cannot read file: {exc.strerror or exc}", str(path))], what) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        problem = Problem("", f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column} (save the file as "
                          "UTF-8)", str(path), line)
        raise ConfigError([problem], what) from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            return tomllib.loads(text), no_lines
        if suffix == ".json":
            return json.loads(text), _yaml_line_index(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([Problem("", f"invalid JSON: {exc.msg} (column {exc.colno})", str(path), exc.lineno)],
                          what) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([Problem("", f"invalid TOML: {exc}", str(path))], what) from None
    import yaml  # deferred: JSON and TOML files never need it, and every command would import it

    try:
        return yaml.safe_load(text), _yaml_line_index(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        msg = f"{getattr(exc, 'problem', None) or exc}"
        raise ConfigError([Problem("", f"invalid YAML: {msg}", str(path), mark.line + 1 if mark else None)],
                          what) from None


# ---------------------------------------------------------------------------------------------
# Errors


def raise_problems(found: Found) -> None:
    """Raise every (location, message) at once as a `ValidationError`, if there are any."""
    if found:
        raise ValidationError.from_exception_data("problems", [
            InitErrorDetails(type=PydanticCustomError(PROBLEM, "{message}", {"message": message}), loc=loc, input=None)
            for loc, message in found])


_SCALAR_TYPES = {"float_type": "a number", "int_type": "an integer", "bool_type": "true or false"}
_LAX = {"float_type": TypeAdapter(float), "int_type": TypeAdapter(int), "bool_type": TypeAdapter(bool)}


def error_message(err: Mapping[str, Any], model: type[BaseModel] | None = None,
                  hints: Mapping[str, str] | None = None) -> str:
    """One pydantic error as a user reads it. With `model` (the model validated), an unknown field
    gets a "did you mean"; `hints` maps a name this project does not use (a TRL option, say) to
    where the concept lives."""
    kind = err["type"]
    if kind == PROBLEM:
        return err["ctx"]["message"]
    if kind == "extra_forbidden":
        return _unknown_field(err["loc"][-1], _fields_at(model, tuple(err["loc"][:-1])), hints or {})
    if kind in _SCALAR_TYPES and isinstance(err.get("input"), str):
        try:
            _LAX[kind].validate_python(err["input"])
        except ValidationError as lax:  # not a number (or boolean) even when read leniently
            return f"{lax.errors()[0]['msg']} (got {err['input']!r})"
        return (f"a quoted value ({err['input']!r}) where {_SCALAR_TYPES[kind]} is expected: write it without "
                "quotes")
    if kind == "value_error":  # a validator's own message, which names the value itself
        return str(err["ctx"]["error"])
    if "input" in err and kind != "missing" and not isinstance(err["input"], (dict, list)):
        return f"{err['msg']} (got {err['input']!r})"
    return err["msg"]


def messages(exc: ValidationError, model: type[BaseModel] | None = None,
             hints: Mapping[str, str] | None = None) -> Found:
    """(location, message) of each error of `exc`."""
    return [(tuple(err["loc"]), error_message(err, model, hints)) for err in exc.errors(include_url=False)]


def quoted_scalars(model: type[BaseModel], data: Any, context: Any = None) -> Found:
    """Strings that lax validation of `model` turned into numbers or booleans.

    For models this project does not declare strict (a plugin's `Params`): pydantic's lax mode reads
    `max_penalty: "-1"` as -1, and in a YAML or JSON file a quoted number is almost always a mistake.
    Only these coercions are refused: YAML lists still fill tuples."""
    try:
        model.model_validate(data, strict=True, context=context)
    except ValidationError as exc:
        return [(tuple(err["loc"]), error_message(err)) for err in exc.errors(include_url=False)
                if err["type"] in _SCALAR_TYPES and isinstance(err.get("input"), str)]
    return []


def validate(model: type[BaseModel], data: Any, *, source: str | None = None, line_of: LineOf = no_lines,
             context: Any = None, hints: Mapping[str, str] | None = None, loc_prefix: tuple[Any, ...] = (),
             path_prefix: str = "") -> tuple[Any, list[Problem]]:
    """`model` validated from `data`, or None and every problem, with its path (after `loc_prefix`,
    or the text `path_prefix`), file and line; in document order where lines are known."""
    try:
        return model.model_validate(data, context=context), []
    except ValidationError as exc:
        found = messages(exc, model, hints)
    path_prefix = "" if loc_prefix else path_prefix
    problems = [Problem(format_loc(loc_prefix + loc, path_prefix), message, source, line_of(loc_prefix + loc))
                for loc, message in found]
    return None, sorted(problems, key=lambda p: (p.line is None, p.line or 0))


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the (nested) model that `loc` points into: the candidates for a typo."""
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int):
            continue  # an item of a list field: the same model
        field = model.model_fields.get(part)
        if field is None:
            return []
        model = next((t for t in _models_in(field.annotation)), None)
    return list(model.model_fields) if model is not None else []


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _unknown_field(key: Any, known: list[str], hints: Mapping[str, str]) -> str:
    if key in hints:
        return f"unknown field ({hints[key]})"
    close = difflib.get_close_matches(str(key), known, n=3, cutoff=0.6)
    return f"unknown field; did you mean {' or '.join(close)}?" if close else "unknown field"
