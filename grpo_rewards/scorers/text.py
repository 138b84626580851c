"""Built-in text scorers plugin: format, tags, regex, length family, repetition, steps, language, JSON.

The implementations live in sibling modules (format, length, repetition, language, json_schema);
this module only registers them through the same hook a third-party plugin implements.
"""

from grpo_rewards.hookspecs import hookimpl
from grpo_rewards.scorers.format import ReasoningSteps, RegexFormat, TagCount, ThinkFormat
from grpo_rewards.scorers.json_schema import JsonSchema
from grpo_rewards.scorers.language import LanguageConsistency
from grpo_rewards.scorers.length import CosineLength, Length, OverlongPunishment
from grpo_rewards.scorers.repetition import Repetition

TEXT_SCORERS = [
    ThinkFormat, TagCount, RegexFormat, Length, CosineLength, OverlongPunishment,
    Repetition, ReasoningSteps, LanguageConsistency, JsonSchema,
]


@hookimpl
def grpo_rewards_scorers():
    return list(TEXT_SCORERS)
