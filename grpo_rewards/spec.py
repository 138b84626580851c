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

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, create_model, model_validator,
)

from grpo_rewards.advantages import AGGREGATIONS
from grpo_rewards.errors import ConfigError, UnknownNameError
from grpo_rewards.registry import Registry, get_registry
from grpo_rewards.structured import (  # noqa: F401 - LineOf and read_structured_file: the spec's readers
    Found, LineOf, messages, no_lines, quoted_scalars, raise_problems, read_structured_file, validate,
)


class GateSpec(BaseModel):
    """A condition on another member's value; where it fails, this member's value is `otherwise`."""

    model_config = ConfigDict(extra="forbid", strict=True)

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
    """One weighted scorer in a reward spec: the one member type (alias, weight, None policy, gate).

    Validated with the run's registry in the context (`{"registry": ...}`, as `load_spec` does), it
    also checks its params against its scorer's `Params` and learns which members it reads."""

    # strict: a quoted number in a file is a mistake, not a number
    model_config = ConfigDict(extra="forbid", strict=True)

    scorer: str = Field(description="Registry name of the scorer (see `grpo-rewards list`).")
    name: str | None = Field(
        None, min_length=1, description="Alias used in logs, breakdowns and TRL metric names; defaults to `scorer`."
    )
    weight: float = Field(1.0, allow_inf_nan=False, description="Weight of this scorer in the total.")
    params: dict[str, Any] = Field(default_factory=dict, description="The scorer's options (its `Params`).")
    on_error: Literal["none", "raise"] | None = Field(
        None, description="Override of the spec's `on_error` for this scorer."
    )
    # The scorer's `Params` instance made at validation; `params` is its plain-data dump.
    _validated: BaseModel | None = PrivateAttr(None)
    _reads: tuple[str, ...] = PrivateAttr(())  # aliases of the members its scorer reads
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

    @model_validator(mode="wrap")
    @classmethod
    def _with_its_scorer(cls, data: Any, handler: Any, info: ValidationInfo) -> ScorerSpec:
        """The fields, and with a registry in the context the scorer and its params: every problem at once."""
        spec, found = None, []
        try:
            spec = handler(data)
        except ValidationError as exc:
            found = messages(exc, cls)
        registry = (info.context or {}).get("registry") if isinstance(info.context, Mapping) else None
        raw = data if isinstance(data, Mapping) else {}
        params, reads = None, ()
        if registry is not None and isinstance(raw.get("scorer"), str) and isinstance(raw.get("params", {}), Mapping):
            params, reads, problems = _scorer_params(registry, raw["scorer"], raw.get("params") or {})
            found += problems
        raise_problems(found)
        if params is not None:
            spec.params, spec._validated, spec._reads = params.model_dump(), params, reads
        return spec


class RewardSpec(BaseModel):
    """A weighted sum of scorers. Its validators check what spans members: unique aliases, gates on
    known members without cycles, and members reading only members listed before them."""

    model_config = ConfigDict(extra="forbid", strict=True)

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

    @model_validator(mode="wrap")
    @classmethod
    def _across_members(cls, data: Any, handler: Any) -> RewardSpec:
        """The fields, then the rules across members; the aliases and gates of members that are
        themselves invalid still count, so that every problem is reported at once."""
        if isinstance(data, RewardSpec):
            return handler(data)
        if not isinstance(data, Mapping):
            raise_problems([((), f"a reward spec must be a mapping with a 'scorers' list, got {type(data).__name__}")])
        spec, found = None, []
        try:
            spec = handler(data)
        except ValidationError as exc:
            found = messages(exc, cls)
        members = _member_keys(data.get("scorers"))
        found += _alias_problems(members) + _gate_problems(members)
        if spec is not None:
            found += _read_order_problems(spec.scorers)
        raise_problems(found)
        return spec


# ---------------------------------------------------------------------------------------------
# The checks the validators run


def _scorer_params(registry: Registry, name: str, raw: Mapping[str, Any]) -> tuple[BaseModel | None, tuple[str, ...], Found]:
    """(the scorer's validated `Params`, the members it reads, problems) for a member's `scorer` and `params`."""
    try:
        cls = registry.scorer(name)
    except UnknownNameError as exc:
        return None, (), [(("scorer",), str(exc))]
    context = {"registry": registry}
    try:
        params = cls.Params.model_validate(raw, context=context)
    except ValidationError as exc:
        return None, (), [(("params", *loc), message) for loc, message in messages(exc, cls.Params)]
    quoted = quoted_scalars(cls.Params, raw, context)
    if quoted:
        return None, (), [(("params", *loc), message) for loc, message in quoted]
    try:
        return params, tuple(cls.dependencies(params)), []
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, reported like any other problem
        return None, (), [(("params",), f"scorer {name!r} failed to name its dependencies: {type(exc).__name__}: {exc}")]


def _member_keys(items: Any) -> list[tuple[int, str, str | None]]:
    """(position, alias, alias it is gated on) of each member whose alias can be read."""
    keys = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        alias = (item.get("name") or item.get("scorer")) if isinstance(item, Mapping) else None
        if isinstance(alias, str):
            gate = GateSpec.yaml_on(item.get("gate"))
            on = gate.get("on") if isinstance(gate, Mapping) else None
            keys.append((i, alias, on if isinstance(on, str) else None))
    return keys


def _alias_problems(members: list[tuple[int, str, str | None]]) -> Found:
    found: Found = []
    first: dict[str, int] = {}
    for i, alias, _ in members:
        if alias in first:
            found.append((("scorers", i, "scorer"),
                          f"duplicate scorer name {alias!r} (also scorers[{first[alias]}]); give one a distinct 'name'"))
        first.setdefault(alias, i)
    return found


def _gate_problems(members: list[tuple[int, str, str | None]]) -> Found:
    """A gate on an unknown member or on itself, and chains of gates that loop (each loop once)."""
    found: Found = []
    known = list(dict.fromkeys(alias for _, alias, _ in members))
    gate_of: dict[str, tuple[int, str]] = {}  # gated alias -> (its position, the alias it is gated on)
    for i, alias, on in members:
        if on is None:
            continue
        if on == alias:
            found.append((("scorers", i, "gate", "on"), f"scorer {alias!r} cannot be gated on itself"))
        elif on not in known:
            found.append((("scorers", i, "gate", "on"),
                          f"gate on unknown scorer {on!r}; the spec's scorers are: {', '.join(known)}"))
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
            found.append((("scorers", i, "gate", "on"), "gates form a cycle: " + " -> ".join([*chain, start])))
    return found


def _read_order_problems(members: Sequence[ScorerSpec]) -> Found:
    """A member may read only the results of members listed before it."""
    found: Found = []
    position = {}
    for i, member in enumerate(members):
        position.setdefault(member.alias, i)
    for i, member in enumerate(members):
        for dep in member._reads:
            if position.get(dep, i) < i:
                continue
            if dep == member.alias:
                where = "a scorer cannot read its own results"
            elif dep in position:
                where = f"it is scorers[{position[dep]}], which comes later"
            else:
                where = "no scorer has that name"
            found.append((("scorers", i, "params"),
                          f"reads the results of scorer {dep!r}, which must be listed before it ({where})"))
    return found


# ---------------------------------------------------------------------------------------------
# Loading


def validate_spec(data: Any, registry: Registry | None = None, *, source: str | None = None,
                  line_of: LineOf | None = None, path_prefix: str = "",
                  loc_prefix: tuple[Any, ...] = ()) -> tuple[RewardSpec | None, list]:
    """Validate a spec given as plain data; returns the spec (or None) and every problem found.

    `loc_prefix` places the spec inside a larger document (a training config's `rewards:`
    section): problems get their full path and `line_of` is asked for full locations.
    `path_prefix` is a text prefix for the paths, used only without `loc_prefix` (a spec read
    from its own file but referenced from a config).
    """
    return validate(RewardSpec, data, source=source, line_of=line_of or no_lines,
                    context={"registry": registry or get_registry()}, loc_prefix=loc_prefix, path_prefix=path_prefix)


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

