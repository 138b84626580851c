"""The batch passes of the text scorers (`textbatch.py`) against plain Python definitions of what they
count, on texts mixing scripts, separators, invisible characters, loops and empty ones."""

from __future__ import annotations

import random

from grpo_rewards.scorers import textbatch, textutil

ALPHABET = list("abc xyz 123 我们 😀 \n\t.,-$`<>/\\") + ["\u200b", "е", "α", "ー", "々", "〇", "ก", "\ud800", "\u3164"]


def _texts(seed: int, count: int = 200) -> list[str]:
    rng = random.Random(seed)
    texts = ["", " ", "a", "ab " * 500, "我们计算" * 100, "check-check " * 60, "\u3164" * 80]
    texts += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 1500))) for _ in range(count)]
    loop = "".join(rng.choice(ALPHABET) for _ in range(90))
    return texts + [loop * 5, "intro " + loop * 3 + " outro"]


def _content_length(text: str) -> int:
    """The definition `content_lengths` implements, one text at a time: runs compared as strings."""
    tokens = textutil.visible_text(text).split()
    shown = max(sum(map(len, tokens)) + len(tokens) - 1, 0)
    if shown <= textutil.REPEAT_CHARS:
        return shown
    units = [unit for token in tokens for unit in textutil._token_units(token)]
    stream, starts, at = "".join(units), [], 0
    for unit in units:
        starts.append(at)
        at += len(unit)
    runs = [stream[i : i + textutil.REPEAT_CHARS] for i in starts if i <= len(stream) - textutil.REPEAT_CHARS]
    repeated = len(runs) - len(set(runs))
    return round(shown * (1 - repeated / len(units))) if repeated else shown


def test_content_lengths_count_repeated_runs_as_strings_would():
    texts = _texts(0)
    assert textutil.content_lengths(texts) == [_content_length(t) for t in texts]
    looped = "intro " + "go on and on " * 40  # past its first copy and one run, a loop adds nothing
    assert textutil.content_lengths([looped]) < [len("intro " + "go on and on " * 10)] < [len(looped)]


def test_word_ngrams_are_counted_as_tuples_would():
    texts = _texts(1)
    for n in (1, 3, 5):
        counted = textbatch.distinct_ngrams(textutil.word_hashes(texts), n)
        for text, (total, distinct) in zip(texts, counted, strict=True):
            tokens = textutil.visible_text(text).split()
            words = [w for token in tokens for w in textutil._token_words(token, True)]
            grams = list(zip(*[words[i:] for i in range(n)], strict=False))
            assert (total, distinct) == (len(grams), len(set(grams)))


def test_token_analysis_remembers_a_bounded_number_of_tokens_per_batch():
    calls = []
    analysis = textbatch.TokenAnalysis(lambda token: calls.append(token) or len(token), maxsize=10_000)
    first = analysis.table()
    assert [first[t] for t in ["ab", "c", "ab"]] == [2, 1, 2] and calls == ["ab", "c"]
    assert analysis.table()["ab"] == 2 and calls == ["ab", "c"]  # the next batch finds it in the cache
    flood = analysis.table()
    for i in range(textbatch._BatchTable.NEW_PER_BATCH + 100):
        flood[f"t{i}"]
    assert len(analysis.cache) == 2 + textbatch._BatchTable.NEW_PER_BATCH
