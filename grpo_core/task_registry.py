"""The registries of prompt tasks and built-in tokenizers (grpo_core/tasks.py registers the built-in ones).

A leaf module: tasks register here and grpo_core.data looks them up, so neither imports the other in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from grpo_rewards.errors import UnknownNameError


@dataclass(frozen=True)
class Task:
    name: str
    build: Callable[..., list[dict[str, Any]]]
    params: type[BaseModel] | None = None


_tasks: dict[str, Task] = {}
_tokenizers: dict[str, Callable[[], Any]] = {}
# Families of tasks named `<source>:<name>` (e.g. `reasoning_gym:chain_sum`): the factory makes the Task.
_sources: dict[str, Callable[[str], Task]] = {}


def register_task(name: str, params: type[BaseModel] | None = None) -> Callable:
    """Decorator: register `fn(split, size, seed, **options) -> list[record]` as task `name`."""
    def decorate(fn: Callable[..., list[dict[str, Any]]]) -> Callable[..., list[dict[str, Any]]]:
        _tasks[name] = Task(name, fn, params)
        return fn
    return decorate


def register_tokenizer(name: str) -> Callable:
    """Decorator: register a zero-argument tokenizer factory, referenced as `builtin:<name>`."""
    def decorate(fn: Callable[[], Any]) -> Callable[[], Any]:
        _tokenizers[name] = fn
        return fn
    return decorate


def register_task_source(prefix: str) -> Callable:
    """Decorator: register `factory(name) -> Task` for the tasks named `<prefix>:<name>`."""
    def decorate(fn: Callable[[str], Task]) -> Callable[[str], Task]:
        _sources[prefix] = fn
        return fn
    return decorate


def get_task(name: str) -> Task:
    prefix, _, rest = name.partition(":")
    if rest and prefix in _sources:
        return _sources[prefix](rest)
    if name not in _tasks:
        raise UnknownNameError("task", name, sorted(_tasks) + [f"{p}:<name>" for p in sorted(_sources)])
    return _tasks[name]


def get_tokenizer_factory(name: str) -> Callable[[], Any]:
    if name not in _tokenizers:
        raise UnknownNameError("built-in tokenizer", name, sorted(_tokenizers))
    return _tokenizers[name]
