"""Known reward hacks against the code scorers (see grpo_rewards.redteam)."""

from __future__ import annotations

from grpo_rewards.redteam import Hack

HACKS: list[Hack] = []
