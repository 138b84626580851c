"""Parity with the pinned TRL's reward functions on 300+ varied completions.

Each test calls TRL's own function (trl.rewards, trl 1.16) and ours with params matching TRL's
defaults and asserts equal values; where we deliberately differ, the difference is pinned.
"""

from __future__ import annotations

import random

import pytest

from _text_helpers import build_tokenizer, varied_completions
from grpo_rewards.scorer import Sample, Score
from grpo_rewards.scorers.format import ThinkFormat
from grpo_rewards.scorers.length import CosineLength, OverlongPunishment
from grpo_rewards.scorers.repetition import Repetition
from grpo_rewards.scorers.textutil import without_surrogates

trl_rewards = pytest.importorskip("trl.rewards", reason="TRL is the parity anchor (extra 'trl')")

COMPLETIONS = varied_completions(seed=1)
assert len(COMPLETIONS) >= 300


def conversational(texts: list[str]) -> list[list[dict[str, str]]]:
    return [[{"role": "assistant", "content": t}] for t in texts]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return str(build_tokenizer(tmp_path_factory.mktemp("bpe")))


@pytest.fixture(scope="module")
def token_ids(tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    return [tok(without_surrogates(t), add_special_tokens=False)["input_ids"] for t in COMPLETIONS]


def values(scores: list[Score]) -> list[float | None]:
    return [s.value for s in scores]


# ---------------------------------------------------------------------------------------------


def second_close_after_valid_open(text: str) -> bool:
    """Where we deliberately differ: TRL's regex accepts a second `</think>` (`.*` after the first)."""
    first = text.find("</think>", len("<think>"))
    return text.startswith("<think>") and text.count("<think>") == 1 and first >= 0 \
        and text.find("</think>", first + len("</think>")) >= 0


@pytest.mark.timeout(120)
def test_think_format_matches_trl_except_repeated_closing_tag():
    theirs = trl_rewards.think_format_reward(conversational(COMPLETIONS))
    scorer = ThinkFormat(answer_tag=None, prompt_opens_think=False, whitespace="strict", require_content=False)
    ours = values(scorer.score([Sample("", m) for m in conversational(COMPLETIONS)]))
    differing = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    expected = [i for i, t in enumerate(COMPLETIONS) if second_close_after_valid_open(t)]
    assert differing == expected
    assert len(expected) >= 5 and len(ours) - len(expected) >= 295  # the pin covers real cases
    for i in expected:  # TRL rewards the broken template; we do not
        assert theirs[i] == 1.0 and ours[i] == 0.0
    assert sum(theirs) >= 40 and 0 in theirs  # the corpus exercises both verdicts


def test_think_format_prompt_opened_block_where_trl_gives_zero():
    """The chat template added `<think>`: TRL scores the (correct) continuation 0; we score it 1."""
    completion = "reasoning here</think>The answer is 4."
    assert trl_rewards.think_format_reward(conversational([completion])) == [0.0]
    scorer = ThinkFormat(answer_tag=None)
    prompt = "<|im_start|>assistant\n<think>\n"
    assert scorer.score([Sample(prompt, completion)])[0].value == 1.0


# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("ngram_size,max_penalty", [(3, -1.0), (1, -0.5), (2, -2.0), (5, -1.0)])
def test_repetition_matches_trl_on_token_ids(token_ids, tokenizer_dir, ngram_size, max_penalty):
    theirs = trl_rewards.get_repetition_penalty_reward(ngram_size, max_penalty)(completion_ids=token_ids)
    with_ids = [Sample("", t, {"completion_ids": ids}) for t, ids in zip(COMPLETIONS, token_ids, strict=True)]
    ours_ids = values(Repetition(ngram_size=ngram_size, max_penalty=max_penalty).score(with_ids))
    assert ours_ids == theirs
    ours_tok = Repetition(ngram_size=ngram_size, max_penalty=max_penalty, tokenizer=tokenizer_dir)
    assert values(ours_tok.score([Sample("", t) for t in COMPLETIONS])) == theirs
    assert len({round(v, 6) for v in theirs}) >= 20  # not a corpus of zeros


# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("max_len,cache", [(100, 20), (50, 0), (400, 400), (1000, 100)])
def test_overlong_punishment_matches_trl(max_len, cache, token_ids, tokenizer_dir):
    rng = random.Random(max_len)
    ids = token_ids + [[7] * n for n in range(0, 2 * max_len + 3)] + [[1] * rng.randint(0, 3 * max_len)
                                                                      for _ in range(50)]
    theirs = trl_rewards.get_soft_overlong_punishment(max_len, cache)(completion_ids=ids)
    scorer = OverlongPunishment(max_length=max_len, buffer=cache, unit="tokens")
    ours = values(scorer.score([Sample("", "", {"completion_ids": x}) for x in ids]))
    assert ours == theirs
    by_tokenizer = OverlongPunishment(max_length=max_len, buffer=cache, tokenizer=tokenizer_dir)
    assert values(by_tokenizer.score([Sample("", t) for t in COMPLETIONS])) == theirs[: len(COMPLETIONS)]


# ---------------------------------------------------------------------------------------------

GOLDS = ["42", r"\frac{1}{3}", "2x+1", "", "no math here"]  # the last two are unparseable: None
ANSWERS = ["42", r"\frac{1}{3}", "2x+1", "7", r"\frac{2}{6}", "0.5", ""]


@pytest.mark.timeout(240)
def test_cosine_length_matches_trl_given_trls_correctness(token_ids, tokenizer_dir):
    rng = random.Random(3)
    texts, golds, ids = [], [], []
    for i, prose in enumerate(COMPLETIONS):
        answer = rng.choice(ANSWERS)
        texts.append(prose[:300] + (f" The answer is $\\boxed{{{answer}}}$." if answer else ""))
        golds.append(GOLDS[i % len(GOLDS)])
        ids.append([5] * rng.randint(0, 250))
    completions = conversational(texts)
    correctness = trl_rewards.accuracy_reward(completions, golds)  # what a math scorer said, once
    kwargs = dict(min_value_wrong=-1.0, max_value_wrong=-0.5, min_value_correct=0.5, max_value_correct=1.0)
    theirs = trl_rewards.get_cosine_scaled_reward(100, **kwargs)(completions, golds, ids)

    # The raw length, as TRL counts it: this compares the formula, not the padding rule.
    scorer = CosineLength(correctness_from="math", max_len=100, unit="tokens", padding="count", **kwargs)
    samples = [Sample("", c, {"completion_ids": x}) for c, x in zip(completions, ids, strict=True)]
    ours = values(scorer.score(samples, {"math": [Score(v) for v in correctness]}))
    assert ours == theirs
    assert theirs.count(None) >= 100 and {v > 0 for v in theirs if v is not None} == {True, False}

    # Lengths from a tokenizer instead of completion_ids: TRL again, on the tokenizer's ids.
    # (the lengths are those of the prose COMPLETIONS, on both sides)
    theirs_tok = trl_rewards.get_cosine_scaled_reward(100, **kwargs)(completions, golds, token_ids)
    by_tokenizer = CosineLength(correctness_from="math", max_len=100, tokenizer=tokenizer_dir, padding="count",
                                **kwargs)
    prose = [Sample("", t) for t in COMPLETIONS]
    ours_tok = values(by_tokenizer.score(prose, {"math": [Score(v) for v in correctness]}))
    assert ours_tok == theirs_tok
