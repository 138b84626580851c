"""Reward specs: which scorers, with which weights and params, validated completely at load time.

```yaml
scorers:
  - scorer: math_accuracy        # registry name
    weight: 1.0
    params: {timeout_s: 2}
  - scorer: think_format
    name: format                 # alias used in logs and breakdowns
    weight: 0.2
```

`load_spec` accepts a path (YAML, TOML, JSON), a mapping or a `RewardSpec` and raises one
`ConfigError` listing every problem with its path (and file and line where known).
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model, model_validator

from grpo_rewards.advantages import AGGREGATIONS
from grpo_rewards.errors import ConfigError, Problem, UnknownNameError, format_loc
from grpo_rewards.registry import Registry, get_registry

LineOf = Callable[[tuple[Any, ...]], int | None]


class GateSpec(BaseModel):
    """A condition on another member's value; where it fails, this member's value is `otherwise`."""

    model_config = ConfigDict(extra="forbid")

    on: str = Field(min_length=1, description="Alias of the member whose value opens the gate.")
    min: float | None = Field(None, allow_inf_nan=False, description="The gate opens where that value is >= min.")
    max: float | None = Field(None, allow_inf_nan=False, description="The gate opens where that value is <= max.")
    otherwise: float | None = Field(
        0.0, allow_inf_nan=False,
        description="This member's value where the gate stays shut: a number (default 0) or null (None).")

    @model_validator(mode="before")
    @classmethod
    def yaml_on(cls, data: Any) -> Any:
        """YAML 1.1 reads a bare `on` key as the boolean true: take it back as `on`."""
        if isinstance(data, Mapping) and True in data and "on" not in data:
            return {("on" if key is True else key): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _bounds(self) -> GateSpec:
        if self.min is None and self.max is None:
            raise ValueError("a gate needs 'min', 'max' or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is above max ({self.max:g}): the gate could never open")
        return self


class ScorerSpec(BaseModel):
    """One weighted scorer in a reward spec."""

    model_config = ConfigDict(extra="forbid")

    scorer: str = Field(description="Registry name of the scorer (see `grpo-rewards list`).")
    name: str | None = Field(
        None, min_length=1, description="Alias used in logs, breakdowns and TRL metric names; defaults to `scorer`."
    )
    weight: float = Field(1.0, allow_inf_nan=False, description="Weight of this scorer in the total.")
    params: dict[str, Any] = Field(default_factory=dict, description="The scorer's options (its `Params`).")
    on_error: Literal["none", "raise"] | None = Field(
        None, description="Override of the spec's `on_error` for this scorer."
    )
    # The scorer's `Params` instance made by `validate_spec`; `params` is its plain-data dump.
    _validated: BaseModel | None = PrivateAttr(None)
    on_none: Literal["skip", "zero", "drop_sample"] = Field(
        "skip", description="What this member's None does: `skip` leaves it out of the total, `zero` counts it "
        "as 0, `drop_sample` makes the sample's total None (advantage 0).")
    gate: GateSpec | None = Field(
        None, description="Count this member only where another member's value meets a condition.")

    @property
    def alias(self) -> str:
        return self.name or self.scorer

    @property
    def scorer_params(self) -> BaseModel | dict[str, Any]:
        """What the scorer is built with: the validated `Params` instance of a loaded spec (not
        validated again), else the raw `params` (a spec built by hand; the scorer validates them)."""
        return self._validated if self._validated is not None else self.params


class RewardSpec(BaseModel):
    """A weighted sum of scorers."""

    model_config = ConfigDict(extra="forbid")

    scorers: list[ScorerSpec] = Field(min_length=1, description="The scorers, in evaluation order.")
    on_error: Literal["none", "raise"] = Field(
        "none",
        description="What a scorer that raises does: `none` gives its samples None (counted and logged), "
        "`raise` propagates the exception.",
    )
    aggregate: Literal[tuple(AGGREGATIONS)] = Field(  # type: ignore[valid-type]
        "sum", description="; ".join(f"`{name}`: {a.description}" for name, a in AGGREGATIONS.items()) + ".")
    cache_size: int = Field(
        4096, ge=0, le=10_000_000,
        description="Scores kept in the LRU score cache across batches (deterministic scorers only; 0 disables it).")

    @property
    def aliases(self) -> list[str]:
        return [s.alias for s in self.scorers]

    @classmethod
    def load(cls, source: str | Path | Mapping[str, Any] | RewardSpec, registry: Registry | None = None) -> RewardSpec:
        return load_spec(source, registry)


# ---------------------------------------------------------------------------------------------
# Reading files, with line numbers for the error messages


def _yaml_line_index(text: str) -> LineOf:
    """Map a location tuple to the 1-based line of the YAML (or JSON) node it names."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None

    def line_of(loc: tuple[Any, ...]) -> int | None:
        node, line = root, None
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
            return tomllib.loads(text), lambda loc: None
        if suffix == ".json":
            return json.loads(text), _yaml_line_index(text)
        return yaml.safe_load(text), _yaml_line_index(text)
    except json.JSONDecodeError as exc:
        problem = Problem("", f"invalid JSON: {exc.msg} (column {exc.colno})", str(path), exc.lineno)
    except tomllib.TOMLDecodeError as exc:
        problem = Problem("", f"invalid TOML: {exc}", str(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        msg = f"{getattr(exc, 'problem', None) or exc}"
        problem = Problem("", f"invalid YAML: {msg}", str(path), mark.line + 1 if mark else None)
    raise ConfigError([problem], what) from None


# ---------------------------------------------------------------------------------------------
# Validation


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


def _pydantic_problems(exc: ValidationError, loc_prefix: tuple[Any, ...], path_prefix: str,
                       source: str | None, line_of: LineOf, model: type[BaseModel] | None = None,
                       hints: Mapping[str, str] | None = None) -> list[Problem]:
    """Problems of a pydantic error; with `model`, an unknown field gets a "did you mean", and
    `hints` maps a name this project does not use (a TRL option, say) to where the concept lives."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = loc_prefix + tuple(err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = _unknown_field(err["loc"][-1], _fields_at(model, tuple(err["loc"][:-1])), hints or {})
        elif err["type"] == "value_error":  # a validator's own message, which names the value itself
            msg = str(err["ctx"]["error"])
        elif "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], (dict, list)):
            msg = f"{msg} (got {err['input']!r})"
        problems.append(Problem(format_loc(loc, path_prefix), msg, source, line_of(loc)))
    return problems


_SCALAR_TYPES = {"float_type": "a number", "int_type": "an integer", "bool_type": "true or false"}


def quoted_scalar_problems(model: type[BaseModel], data: Any, loc_prefix: tuple[Any, ...], path_prefix: str,
                           source: str | None, line_of: LineOf, context: Any = None) -> list[Problem]:
    """Strings that lax validation would have turned into numbers or booleans.

    Pydantic's lax mode reads `weight: "0.5"` as 0.5; in a YAML or JSON file a quoted number is
    almost always a mistake (a value pasted from elsewhere, a template gone wrong), so specs and
    configs reject it. Only these coercions are checked strictly: YAML lists still fill tuples.
    """
    try:
        model.model_validate(data, strict=True, context=context)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            if err["type"] in _SCALAR_TYPES and isinstance(err.get("input"), str):
                loc = loc_prefix + tuple(err["loc"])
                msg = (f"a quoted value ({err['input']!r}) where {_SCALAR_TYPES[err['type']]} is expected: "
                       "write it without quotes")
                problems.append(Problem(format_loc(loc, path_prefix), msg, source, line_of(loc)))
        return problems
    return []


def validate_spec(data: Any, registry: Registry | None = None, *, source: str | None = None,
                  line_of: LineOf | None = None, path_prefix: str = "",
                  loc_prefix: tuple[Any, ...] = ()) -> tuple[RewardSpec | None, list[Problem]]:
    """Validate a spec given as plain data; returns the spec (or None) and every problem found.

    `loc_prefix` places the spec inside a larger document (a training config's `rewards:`
    section): problems get their full path and `line_of` is asked for full locations.
    `path_prefix` is a text prefix for the paths, used only without `loc_prefix` (a spec read
    from its own file but referenced from a config).
    """
    registry = registry or get_registry()
    line_of = line_of or (lambda loc: None)
    problems: list[Problem] = []
    # loc_prefix already names the spec's place in the path; adding path_prefix too would say it twice.
    path_prefix = "" if loc_prefix else path_prefix

    def add(loc: tuple[Any, ...], message: str) -> None:
        full = loc_prefix + loc
        problems.append(Problem(format_loc(full, path_prefix), message, source, line_of(full)))

    if not isinstance(data, Mapping):
        add((), f"a reward spec must be a mapping with a 'scorers' list, got {type(data).__name__}")
        return None, problems

    spec = None
    try:
        spec = RewardSpec.model_validate(data)
        problems += quoted_scalar_problems(RewardSpec, data, loc_prefix, path_prefix, source, line_of)
    except ValidationError as exc:
        problems += _pydantic_problems(exc, loc_prefix, path_prefix, source, line_of, RewardSpec)

    items = data.get("scorers")
    items = items if isinstance(items, list) else []
    seen: dict[str, int] = {}
    validated_params: dict[int, BaseModel] = {}
    # Every alias's first position, so a dependency on a later scorer is told apart from a typo.
    positions: dict[str, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            alias = item.get("name") or item.get("scorer")
            if isinstance(alias, str):
                positions.setdefault(alias, i)
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("scorer"), str):
            continue  # already reported structurally
        alias = item.get("name") or item["scorer"]
        if isinstance(alias, str):
            if alias in seen:
                add(("scorers", i, "name" if item.get("name") else "scorer"),
                    f"duplicate scorer name {alias!r} (also scorers[{seen[alias]}]); give one a distinct 'name'")
            seen.setdefault(alias, i)
        try:
            cls = registry.scorer(item["scorer"])
        except UnknownNameError as exc:
            add(("scorers", i, "scorer"), str(exc))
            continue
        raw_params = item.get("params") or {}
        if not isinstance(raw_params, Mapping):
            continue
        at = loc_prefix + ("scorers", i, "params")
        try:
            params = cls.Params.model_validate(raw_params, context={"registry": registry})
        except ValidationError as exc:
            problems += _pydantic_problems(exc, at, path_prefix, source, line_of, cls.Params)
            continue
        quoted = quoted_scalar_problems(cls.Params, raw_params, at, path_prefix, source, line_of,
                                        context={"registry": registry})
        if quoted:
            problems += quoted
            continue
        validated_params[i] = params
        earlier = [a for a, j in seen.items() if j < i]
        try:
            dependencies = list(cls.dependencies(params))
        except Exception as exc:  # noqa: BLE001 - a plugin's bug, reported like any other problem
            add(("scorers", i, "params"), f"scorer {item['scorer']!r} failed to name its dependencies: "
                f"{type(exc).__name__}: {exc}")
            continue
        for dep in dependencies:
            if dep not in earlier:
                if dep == alias:
                    where = "a scorer cannot read its own results"
                elif dep in positions:
                    where = f"it is scorers[{positions[dep]}], which comes later"
                else:
                    where = "no scorer has that name"
                add(("scorers", i, "params"),
                    f"reads the results of scorer {dep!r}, which must be listed before it ({where})")

    check_gates(items, positions, add)

    if problems:
        # In document order where lines are known (structural and per-scorer checks run apart).
        problems.sort(key=lambda p: (p.line is None, p.line or 0))
        return None, problems
    assert spec is not None
    for i, params in validated_params.items():
        spec.scorers[i].params = params.model_dump()
        spec.scorers[i]._validated = params
    return spec, []


def check_gates(items: list[Any], positions: dict[str, int], add: Callable[[tuple[Any, ...], str], None]) -> None:
    """Report (through `add`) a gate on an unknown member or on itself, and chains of gates that loop."""
    gate_of: dict[str, tuple[int, str]] = {}  # gated alias -> (its position, the alias it is gated on)
    for i, item in enumerate(items):
        gate = GateSpec.yaml_on(item.get("gate")) if isinstance(item, Mapping) else None
        alias = item.get("name") or item.get("scorer") if isinstance(item, Mapping) else None
        if not isinstance(gate, Mapping) or not isinstance(gate.get("on"), str) or not isinstance(alias, str):
            continue  # a structural problem, reported by the model
        on = gate["on"]
        if on == alias:
            add(("scorers", i, "gate", "on"), f"scorer {alias!r} cannot be gated on itself")
        elif on not in positions:
            add(("scorers", i, "gate", "on"), f"gate on unknown scorer {on!r}; "
                f"the spec's scorers are: {', '.join(positions)}")
        else:
            gate_of[alias] = (i, on)
    reported: set[str] = set()
    for start, (i, _) in gate_of.items():
        chain, alias = [start], gate_of[start][1]
        while alias in gate_of and alias not in chain:
            chain.append(alias)
            alias = gate_of[alias][1]
        if alias == start and not reported.intersection(chain):
            reported.update(chain)
            add(("scorers", i, "gate", "on"), "gates form a cycle: " + " -> ".join([*chain, start]))


def load_spec(source: str | Path | Mapping[str, Any] | RewardSpec, registry: Registry | None = None) -> RewardSpec:
    """Load and completely validate a reward spec; raises `ConfigError` listing every problem."""
    if isinstance(source, RewardSpec):
        # Not exclude_none: that would also drop params explicitly set to None (meaningful, e.g. "no limit").
        data, name, line_of = source.model_dump(), None, None
    elif isinstance(source, (str, os.PathLike)):
        name = str(source)
        data, line_of = read_structured_file(source)
    else:  # plain data: a mapping, or anything else, which validation reports as not a mapping
        data, name, line_of = source, None, None
    spec, problems = validate_spec(data, registry, source=name, line_of=line_of)
    if problems:
        raise ConfigError(problems, "reward spec")
    assert spec is not None
    return spec


# ---------------------------------------------------------------------------------------------
# JSON schema, generated from every registered scorer's Params


def spec_model(registry: Registry | None = None) -> type[BaseModel]:
    """A pydantic model of a spec whose `scorers` items are discriminated by `scorer` name,
    each with its scorer's own `Params`: the source of the JSON schema editors autocomplete from."""
    registry = registry or get_registry()
    variants = []
    for name, entry in sorted(registry.scorers.items()):
        params_model = _narrowed(entry.cls.Params, registry)
        variants.append(create_model(
            f"{name}_spec",
            __base__=ScorerSpec,
            __doc__=entry.cls.description() or None,
            scorer=(Literal[name], Field(description=f"{entry.cls.description()} (plugin {entry.plugin})")),
            params=(params_model, Field(default_factory=params_model, description=f"Params of {name}.")),
        ))
    item: Any = ScorerSpec
    if len(variants) == 1:
        item = variants[0]
    elif variants:
        item = Annotated[Union[tuple(variants)], Field(discriminator="scorer")]  # noqa: UP007
    return create_model("RewardSpec", __base__=RewardSpec,
                        scorers=(list[item], Field(min_length=1, description="The scorers, in evaluation order.")))


def _narrowed(params_model: type[BaseModel], registry: Registry) -> type[BaseModel]:
    """`params_model` with each field whose type depends on the registry (a sandbox choice: its
    type has `for_registry`) replaced by that type for this registry, for the JSON schema."""
    fields: dict[str, Any] = {}
    for name, info in params_model.model_fields.items():
        for_registry = getattr(info.annotation, "for_registry", None)
        if for_registry is not None:
            fields[name] = (for_registry(registry), Field(info.default, description=info.description))
    if not fields:
        return params_model
    return create_model(params_model.__name__, __base__=params_model, **fields)


def spec_json_schema(registry: Registry | None = None) -> dict[str, Any]:
    schema = spec_model(registry).model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("title", "grpo-rewards reward spec")
    return schema

