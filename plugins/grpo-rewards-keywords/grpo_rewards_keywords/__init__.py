"""grpo-rewards plugin: the `keywords` scorer."""

from grpo_rewards_keywords.scorer import KeywordsParams, KeywordsScorer

__all__ = ["KeywordsParams", "KeywordsScorer"]
