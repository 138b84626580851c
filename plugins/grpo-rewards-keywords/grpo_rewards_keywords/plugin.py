"""The plugin module named by the `grpo_rewards` entry point."""

from grpo_rewards import hookimpl


@hookimpl
def grpo_rewards_scorers():
    # Imported inside the hook: discovery of every installed plugin stays cheap.
    from grpo_rewards_keywords.scorer import KeywordsScorer

    return [KeywordsScorer]
