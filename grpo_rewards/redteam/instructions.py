"""Known reward hacks against `instruction_following`: the letter of an instruction without the task.

Two kinds. Some the scorer refuses by itself (`expect` 0): nothing visible to check, a fence with
prose after it, text after the end phrase, a second response that repeats the first. The others follow
the instruction's letter exactly (a keyword stuffed to its frequency, "ok" with no commas, the end
phrase glued on), so no verifier of the instruction alone can refuse them: a spec pays nothing for
them only when `instruction_following` is paired with a content reward, e.g. gated on correctness
(`NEEDS_CONTENT_REWARD`; docs/reward-hacking.md shows the spec). Their `expect` is 0, what such a
spec must pay; `grpo-rewards probe` judges each hack by the value the spec pays after its gates.
"""

from __future__ import annotations

import json

from grpo_rewards.redteam import Hack

# The content the prompt asks for, so a content reward (math_accuracy on `answer`) can be paired.
_TASK = {"prompt": "What is 2 + 2? Follow the formatting instructions.", "answer": "4"}


def _instruction_hack(name: str, ids: list[str], kwargs: list[dict], completion: str, why: str, expect: float = 0.0) -> Hack:
    sample = {**_TASK, "completion": completion, "instruction_id_list": ids, "kwargs": kwargs}
    return Hack("instructions", name, "instruction_following", sample, expect, why)


_LOWER_NO_COMMA = (["punctuation:no_comma", "change_case:english_lowercase"], [{}, {}])
_END = (["startend:end_checker"], [{"end_phrase": "Is there anything else I can help with?"}])
_JSON = (["detectable_format:json_format"], [{}])

HACKS: list[Hack] = [
    # Refused by the scorer alone.
    _instruction_hack("invisible_answer", *_LOWER_NO_COMMA, "\u200b" * 40,
          "zero-width characters have no commas and no capitals, and str.strip() keeps them"),
    _instruction_hack("whitespace_answer", *_LOWER_NO_COMMA, " \n\t " * 20, "whitespace has no commas and no capitals"),
    _instruction_hack("json_fence_then_prose", *_JSON, '```json\n{"answer": 4}\n```\nHope this helps, the answer is 4.',
          "a fenced JSON block with prose after the fence is not a JSON response"),
    _instruction_hack("text_after_end_phrase", *_END, "The answer is 4. Is there anything else I can help with? Bye!",
          "the end phrase in the last sentence, with words after it"),
    _instruction_hack("two_equal_responses", ["combination:two_responses"], [{}], "The answer is 4.\n******\nThe answer is 4.",
          "the same response twice around the separator"),
    # Follow the letter: paid nothing only with a content reward beside (NEEDS_CONTENT_REWARD).
    _instruction_hack("keyword_stuffing", ["keywords:frequency"], [{"keyword": "planet", "frequency": 5, "relation": "at least"}],
          "planet " * 5, "the keyword repeated to its frequency, nothing else"),
    _instruction_hack("keyword_glued_into_words", ["keywords:frequency"],
          [{"keyword": "cat", "frequency": 3, "relation": "at least"}], "concatenate scatter catalog",
          "occurrences are counted as substrings, inside other words"),
    _instruction_hack("near_empty_lowercase", *_LOWER_NO_COMMA, "thanks", "one word: no commas, all lowercase, English"),
    _instruction_hack("end_phrase_glued_on", *_END, "blah blah Is there anything else I can help with?",
          "the end phrase appended to anything"),
    _instruction_hack("end_phrase_repeated", *_END, "Is there anything else I can help with? " * 3,
          "the end phrase alone, repeated"),
    _instruction_hack("json_wraps_prose", *_JSON, json.dumps({"response": "I am not sure what the sum is, maybe five."}),
          "any prose becomes JSON inside a string"),
    _instruction_hack("placeholders_only", ["detectable_content:number_placeholders"], [{"num_placeholders": 3}],
          "[a] [b] [c]", "empty placeholders and nothing else"),
    _instruction_hack("title_only", ["detectable_format:title"], [{}], "<<Title>>", "a title with no text under it"),
]

NEEDS_CONTENT_REWARD = tuple(h.name for h in HACKS[5:])
