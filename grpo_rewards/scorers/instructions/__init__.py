"""Built-in instruction-following plugin: IFEval's verifiable instructions as one scorer."""

from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.scorers.instructions.checks import INSTRUCTION_TYPES
from grpo_rewards.scorers.instructions.scorer import InstructionFollowing

__all__ = ["INSTRUCTION_TYPES", "InstructionFollowing"]


@hookimpl
def grpo_rewards_scorers():
    return [InstructionFollowing]
