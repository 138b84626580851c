"""Regular expressions compiled at their first use rather than at import."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class LazyPattern:
    """`compile(*args)` (`re.compile` or `regex.compile`), made when one of its attributes is first
    asked for: `.search`, `.sub`, `.pattern`, ...

    Why: the registry imports every built-in scorer, and compiling each module's patterns at import
    was a large part of every command's start, mostly for scorers the run never calls. An attribute
    once asked for becomes this object's own, so a later call costs what the pattern's does."""

    def __init__(self, compile: Callable[..., Any], *args: Any) -> None:
        self._compile, self._args = compile, args

    def __getattr__(self, name: str) -> Any:  # only for a name not set on this object yet
        if name.startswith("_"):  # ours, or a protocol's probe (copy, pickle): never the pattern's
            raise AttributeError(name)
        compiled = self.__dict__.get("_compiled")
        if compiled is None:  # two threads may both compile it: the same pattern either way
            compiled = self.__dict__["_compiled"] = self._compile(*self._args)
        value = getattr(compiled, name)
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return f"LazyPattern({self._args[0]!r})"
