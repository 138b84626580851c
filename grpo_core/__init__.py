"""grpo_core: a compact GRPO trainer (rollout, group-relative advantages, clipped surrogate + KL)."""
