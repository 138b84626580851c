"""Placeholder family: filled in by its issue."""

from grpo_rewards.hookspecs import hookimpl


@hookimpl
def grpo_rewards_scorers():
    return []
