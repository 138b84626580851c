"""A sandbox backend plugin with a `url` param, for the registry-wiring tests.

It stands in for a remote execution service: it records the URL it was configured with and
really runs each program, in a plain `python -I` subprocess (no isolation: test programs only).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import hookimpl
from grpo_rewards.sandbox.base import ExecResult, Limits, SandboxBackend


class RelayParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://\S+$", description="Address of the execution service.")
    workers: int = Field(1, ge=1, le=8, description="Programs run at once.")


class RelaySandbox(SandboxBackend):
    """Runs programs in a plain subprocess, standing in for the service at `url`."""

    name = "relay"
    Params = RelayParams
    opened: ClassVar[list[dict[str, Any]]] = []  # the params of every backend built, in order

    def __init__(self, params: Any = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        RelaySandbox.opened.append(self.params.model_dump())

    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        limits = limits or Limits()
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-I", "-c", code], input=stdin, capture_output=True, text=True,
                                  timeout=limits.wall_s, env={"PATH": "/usr/bin:/bin"})
        except subprocess.TimeoutExpired:
            return ExecResult("timeout", seconds=limits.wall_s, detail="wall clock")
        status = "ok" if proc.returncode == 0 else "error"
        return ExecResult(status, proc.stdout, proc.stderr, proc.returncode, time.monotonic() - start)


@hookimpl
def grpo_rewards_sandboxes():
    return [RelaySandbox]
