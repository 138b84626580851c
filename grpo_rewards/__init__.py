"""grpo-rewards: reward scorers for GRPO, composed from validated specs, extensible by plugins."""

from grpo_rewards.compose import CompositeReward, RewardBatch, build
from grpo_rewards.errors import ConfigError, Problem, UserError
from grpo_rewards.group import GroupScorer
from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.integrations import trl as _trl, verl as _verl  # noqa: F401 - they register as_trl, as_verl
from grpo_rewards.registry import get_registry, load_registry
from grpo_rewards.scorer import NoParams, Sample, Score, Scorer
from grpo_rewards.spec import RewardSpec, ScorerSpec, load_spec

__all__ = [
    "CompositeReward", "ConfigError", "GroupScorer", "NoParams", "Problem", "RewardBatch", "RewardSpec", "Sample", "Score",
    "Scorer", "ScorerSpec", "UserError", "build", "get_registry", "hookimpl", "load_registry", "load_spec",
]
__version__ = "0.1.0"
