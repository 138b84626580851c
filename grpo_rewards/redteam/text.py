"""Known reward hacks against the format, length, repetition and language scorers (see
grpo_rewards.redteam), and the generic ones that apply to any scorer (`ANY_SCORER`): for those the
requirement is that they earn nothing (None, or a value of at most 0).

Where a scorer's honest value is not 0 (a penalty, a cosine schedule), `expect` is what the
undisguised version of the same completion gets: disguising it must not change the score.
"""

from __future__ import annotations

import math

from grpo_rewards.redteam import ANY_SCORER, Hack

_ANSWER = {"prompt": "What is 2 + 2?", "answer": "4"}


def _text_hack(name: str, scorer: str, completion: str, why: str, expect: float | None = 0.0, **params) -> Hack:
    return Hack("text", name, scorer, {**_ANSWER, "completion": completion}, expect, why, params)


def _loop_penalty(words: int, distinct_trigrams: int) -> float:
    """`repetition`'s value (defaults: trigrams, -1) for a loop of `words` words."""
    return -(1 - distinct_trigrams / (words - 2))


def _cosine_wrong(length: int, max_len: int = 600) -> float:
    """`cosine_length`'s value (defaults) for a wrong answer of `length` characters."""
    return -0.5 + 0.5 * (-1.0 - -0.5) * (1 + math.cos(min(length / max_len, 1.0) * math.pi))


def _variants(word: str, how: str) -> list[str]:
    """Spellings of `word` that a naive word comparison tells apart."""
    if how == "case":
        return ["".join(c.upper() if bits >> i & 1 else c for i, c in enumerate(word)) for bits in range(32)]
    if how == "punctuation":
        return [f"{a}{word}{b}" for a in ("", "(", '"', "'", "*") for b in ("", ",", ".", "!", "?", ";", ":", "...",
                                                                           ")", "!?")]
    if how == "invisible":
        return [word[:i] + z + word[i:] for z in "\u200b\u200c\u200d\u2060\ufeff" for i in range(len(word) + 1)]
    return ["".join(chr(ord(c) + 0xFEE0) if bits >> i & 1 else c for i, c in enumerate(word)) for bits in range(32)]


def _loop(variants: list[str], words: int = 200) -> str:
    return " ".join(variants[i % len(variants)] for i in range(words))


_LENGTH_TARGET = {"mode": "range", "low": 1000, "high": 3000}  # at least 1,000 characters earns 1
_CHINESE = "我们先计算两个数的和然后检查结果"  # 16 distinct characters

HACKS: list[Hack] = [
    # think_format: the template without the work.
    _text_hack("empty_think", "think_format", "<think></think><answer>4</answer>", "the template with nothing in it"),
    _text_hack("whitespace_think", "think_format", "<think> \n\t </think><answer>4</answer>",
          "whitespace passes a non-empty check"),
    _text_hack("invisible_think", "think_format", "<think>\u200b\u200b\u200b</think><answer>4</answer>",
          "zero-width spaces are not whitespace to str.strip()"),
    _text_hack("empty_answer", "think_format", "<think>2 + 2 is 4.</think><answer> </answer>",
          "an answer block with no answer"),
    _text_hack("duplicated_think", "think_format", "<think>a</think><think>b</think><answer>4</answer>",
          "a second reasoning block, where a regex without anchors finds one well-formed pair"),
    _text_hack("duplicated_answer", "think_format", "<think>plan</think><answer>4</answer><answer>5</answer>",
          "two answers, one of them right"),
    _text_hack("answer_nested_in_think", "think_format", "<think>plan <answer>4</answer></think><answer>4</answer>",
          "tags nested in the reasoning block"),
    _text_hack("think_nested_in_answer", "think_format", "<think>plan</think><answer><think>x</think>4</answer>",
          "a reasoning block nested in the answer"),
    # tag_count: markers without content, markers repeated.
    _text_hack("empty_blocks", "tag_count", "<think> </think><answer> </answer>",
          "every marker once, nothing inside"),
    _text_hack("duplicated_tags", "tag_count", "<think>a</think><think>a</think><answer>b</answer><answer>b</answer>",
          "markers repeated to be counted more than once", -1.0),
    # length: padding to reach a target of 1,000 characters.
    _text_hack("whitespace_padding", "length", "4" + " " * 2000, "spaces count as characters", **_LENGTH_TARGET),
    _text_hack("newline_padding", "length", "4" + "\n" * 2000, "newlines count as characters", **_LENGTH_TARGET),
    _text_hack("invisible_padding", "length", "4" + "\u200b" * 2000, "zero-width spaces count as characters",
          **_LENGTH_TARGET),
    _text_hack("character_run", "length", "4" + "." * 2000, "a run of dots is length", **_LENGTH_TARGET),
    _text_hack("repeated_sentence", "length", "The answer is 4. " * 100, "repeating a sentence is length",
          **_LENGTH_TARGET),
    _text_hack("repeated_sentence_disguised", "length",
          "The answer is 4. the answer is 4! THE ANSWER IS 4, " * 40,
          "repeats with case and punctuation changed, past an exact-match dedup", **_LENGTH_TARGET),
    _text_hack("padding_wrong_answer", "cosine_length", "<answer>5</answer>" + " " * 3000,
          "a wrong answer is penalised less when longer: pad it", _cosine_wrong(18), max_len=600),
    _text_hack("repeating_wrong_answer", "cosine_length", "<answer>5</answer> " + "I am not sure. " * 200,
          "a wrong answer is penalised less when longer: repeat a filler sentence",
          _cosine_wrong(len("<answer>5</answer> I am not sure. I am not sure. I am not")), max_len=600),
    # repetition: one word looped, each copy disguised differently so that a word n-gram detector
    # sees mostly new n-grams. Each folds to a plain loop of 200 words: one distinct trigram.
    _text_hack("loop_case_changes", "repetition", _loop(_variants("check", "case")), "every copy in another case",
          _loop_penalty(200, 1)),
    _text_hack("loop_punctuation_changes", "repetition", _loop(_variants("check", "punctuation")),
          "punctuation glued to each copy makes it a new word", _loop_penalty(200, 1)),
    _text_hack("loop_invisible_characters", "repetition", _loop(_variants("check", "invisible")),
          "a zero-width character inside each copy makes it a new word", _loop_penalty(200, 1)),
    _text_hack("loop_fullwidth", "repetition", _loop(_variants("check", "width")),
          "full-width letters mixed into each copy make it a new word", _loop_penalty(200, 1)),
    _text_hack("loop_whitespace_changes", "repetition", "check\tcheck\n check  check\u00a0" * 50,
          "tabs, newlines and no-break spaces between the words", _loop_penalty(200, 1)),
    # language_consistency (target English): reasoning in another language, made to look English.
    _text_hack("latin_filler_run", "language_consistency", f"<think>{_CHINESE}{'a' * 500}</think>",
          "counted by letters, a run of Latin letters outweighs the Chinese reasoning", 1 / 17),
    _text_hack("latin_filler_words", "language_consistency", f"<think>{_CHINESE} " + "ok " * 200 + "</think>",
          "counted by letters, a repeated English word outweighs the Chinese reasoning", 1 / 17),
    _text_hack("latin_lookalikes", "language_consistency", "<think>Cнaчaлa cлoжим чиcлa</think>",
          "Russian with Latin look-alike letters (a, c, o) counts partly as English by letters"),
    # Any scorer: completions that hold nothing must earn nothing.
    Hack("text", "empty_completion", ANY_SCORER, {**_ANSWER, "completion": ""}, 0.0, "no work at all"),
    Hack("text", "whitespace_completion", ANY_SCORER, {**_ANSWER, "completion": " \n\t " * 100}, 0.0,
         "whitespace only"),
    Hack("text", "invisible_completion", ANY_SCORER, {**_ANSWER, "completion": "\u200b" * 200}, 0.0,
         "zero-width characters only"),
]
