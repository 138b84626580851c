"""Scorer and sandbox discovery: built-in plugins plus the ``grpo_rewards`` entry points."""

from __future__ import annotations

import importlib
import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from grpo_rewards import hookspecs
from grpo_rewards.errors import UnknownNameError, UserError
from grpo_rewards.sandbox.base import SandboxBackend
from grpo_rewards.scorer import Scorer

log = logging.getLogger(__name__)

# Built-in families, each a plugin module implementing the same hooks as third parties.
BUILTIN_PLUGINS = (
    "grpo_rewards.scorers.text",
    "grpo_rewards.scorers.instructions",
    "grpo_rewards.scorers.math",
    "grpo_rewards.scorers.code",
    "grpo_rewards.scorers.group",
    "grpo_rewards.scorers.remote",
    "grpo_rewards.scorers.reward_model",
    "grpo_rewards.scorers.llm_judge",
    "grpo_rewards.sandbox.local",
)


class DuplicateNameError(UserError, ValueError):
    """Two plugins registered a scorer (or sandbox) under one name.

    A `UserError`: the fix is on the user's side (uninstall or rename one plugin), so the CLI
    prints it and exits 2 without a traceback.
    """


# Hook name -> what one item of it is called in messages.
_KIND = {"grpo_rewards_scorers": "scorer", "grpo_rewards_sandboxes": "sandbox"}


@dataclass(frozen=True)
class Entry:
    name: str
    cls: type
    plugin: str


@dataclass(frozen=True)
class PluginFailure:
    plugin: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} failed to load: {self.error}"


@dataclass
class Registry:
    """Everything the installed plugins provide, by name."""

    scorers: dict[str, Entry] = field(default_factory=dict)
    sandboxes: dict[str, Entry] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)

    def scorer(self, name: str) -> type[Scorer]:
        return self._lookup(self.scorers, name, "scorer").cls

    def sandbox(self, name: str) -> type[SandboxBackend]:
        return self._lookup(self.sandboxes, name, "sandbox").cls

    def _lookup(self, table: dict[str, Entry], name: str, kind: str) -> Entry:
        if name in table:
            return table[name]
        raise UnknownNameError(kind, name, sorted(table), self.failures)


def _plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def _register_module(pm: pluggy.PluginManager, module_name: str, plugin_name: str,
                     failures: list[PluginFailure]) -> None:
    try:
        pm.register(importlib.import_module(module_name), name=plugin_name)
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the others
        failures.append(PluginFailure(plugin_name, f"{type(exc).__name__}: {exc}"))


def _load_entry_points(pm: pluggy.PluginManager, failures: list[PluginFailure]) -> None:
    # By hand rather than pm.load_setuptools_entrypoints: that stops at the first plugin
    # whose import raises, and we must report it by name and load the rest.
    for ep in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
        if ep.value in BUILTIN_PLUGINS:
            continue
        name = ep.name
        if pm.has_plugin(name):
            # Two distributions chose one entry-point name: keep both, told apart by distribution,
            # rather than silently dropping the second.
            dist = getattr(ep.dist, "name", None) or ep.value
            name = f"{ep.name} ({dist})"
        try:
            plugin = ep.load()
            pm.register(plugin, name=name)
        except Exception as exc:  # noqa: BLE001
            failures.append(PluginFailure(name, f"{type(exc).__name__}: {exc}"))


def _collect(pm: pluggy.PluginManager, hook_name: str, base: type | None,
             failures: list[PluginFailure]) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    # Each implementation is called on its own so that one that raises cannot hide the others.
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        plugin = impl.plugin_name
        try:
            provided = list(impl.function() or [])
            for cls in provided:
                if not isinstance(cls, type) or (base is not None and not issubclass(cls, base)):
                    wanted = f"{base.__name__} subclass" if base is not None else "class"
                    raise TypeError(f"{hook_name} returned {cls!r}, not a {wanted}")
                if not isinstance(getattr(cls, "name", None), str) or not cls.name:
                    raise TypeError(f"{cls.__qualname__} has no string attribute 'name'")
        except Exception as exc:  # noqa: BLE001
            failures.append(PluginFailure(plugin, f"{hook_name}: {type(exc).__name__}: {exc}"))
            continue
        for cls in provided:
            if cls.name in table:
                other = table[cls.name]
                raise DuplicateNameError(
                    f"{_KIND.get(hook_name, hook_name)} name {cls.name!r} is registered by "
                    f"plugin {other.plugin!r} ({other.cls.__module__}.{other.cls.__qualname__}) "
                    f"and by plugin {plugin!r} ({cls.__module__}.{cls.__qualname__})"
                )
            table[cls.name] = Entry(cls.name, cls, plugin)
    return table


def load_registry(extra_plugins: list[Any] | None = None, entry_points: bool = True) -> Registry:
    """Discover built-in and installed plugins. `extra_plugins` are registered too (tests, notebooks)."""
    pm = _plugin_manager()
    failures: list[PluginFailure] = []
    for module_name in BUILTIN_PLUGINS:
        _register_module(pm, module_name, module_name, failures)
    if entry_points:
        _load_entry_points(pm, failures)
    for i, plugin in enumerate(extra_plugins or []):
        name = getattr(plugin, "__name__", None) or f"extra-{i}"
        pm.register(plugin, name=name if not pm.has_plugin(name) else f"{name}-{i}")
    registry = Registry(
        scorers=_collect(pm, "grpo_rewards_scorers", Scorer, failures),
        sandboxes=_collect(pm, "grpo_rewards_sandboxes", SandboxBackend, failures),
        failures=failures,
        plugins=[name for name, _ in pm.list_name_plugin()],
    )
    for failure in failures:
        warnings.warn(str(failure), RuntimeWarning, stacklevel=2)
    return registry


_default: Registry | None = None


def get_registry(refresh: bool = False) -> Registry:
    """The process-wide registry, discovered on first use: the default of standalone use only.

    A run (a training config, a CLI command, `build(spec, registry)`) builds its registry once and
    passes it down; scorers receive it from `CompositeReward`, params validators in the context.
    """
    global _default
    if _default is None or refresh:
        _default = load_registry()
    return _default


def registry_in(context: Mapping[str, Any] | None) -> Registry:
    """The registry a pydantic validation context carries (`{"registry": ...}`); the process-wide
    one when it carries none (a `Params` or scorer built standalone)."""
    registry = (context or {}).get("registry")
    return registry if registry is not None else get_registry()

