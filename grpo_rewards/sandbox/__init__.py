"""Code execution for the `code_tests` scorer: the backend contract and the local sandbox."""

from grpo_rewards.sandbox.base import ExecResult, Limits, SandboxBackend

__all__ = ["ExecResult", "Limits", "SandboxBackend"]
