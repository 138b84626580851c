"""Property-based robustness of every text scorer: arbitrary text (surrogates, tag soup, chat messages,
odd references) gives a finite value inside the scorer's range, or None with a reason; never an exception."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_rewards.registry import get_registry
from grpo_rewards.scorer import Sample, Score
from grpo_rewards.scorers.format import ReasoningSteps, RegexFormat, TagCount, ThinkFormat
from grpo_rewards.scorers.json_schema import JsonSchema
from grpo_rewards.scorers.language import LanguageConsistency
from grpo_rewards.scorers.length import CosineLength, Length, OverlongPunishment
from grpo_rewards.scorers.repetition import Repetition

SCORERS = {
    "think_format": [ThinkFormat(), ThinkFormat(answer_tag=None, prompt_opens_think=True, whitespace="lenient")],
    "tag_count": [TagCount(), TagCount(require_newlines=True, penalty=0.3)],
    "regex_format": [RegexFormat(pattern=r"<answer>.*</answer>", mode="search"),
                     RegexFormat(pattern=r"\w+", mode="count", target_count=5, flags=["ignorecase"])],
    "length": [Length(target=50, tolerance=5), Length(mode="range", low=3, high=9, falloff=4),
               Length(mode="ramp", low=0, high=100, unit="tokens")],
    "cosine_length": [CosineLength(correctness_from="c", max_len=64),
                      CosineLength(correctness_from="c", max_len=8, unit="tokens", min_value_wrong=-10)],
    "overlong_punishment": [OverlongPunishment(max_length=40, buffer=10),
                            OverlongPunishment(max_length=8, buffer=0, unit="tokens", penalty=3)],
    "repetition": [Repetition(), Repetition(ngram_size=1, max_penalty=-2.5, unit="tokens")],
    "reasoning_steps": [ReasoningSteps(), ReasoningSteps(source="reasoning", ignore_case=True, target_steps=1)],
    "language_consistency": [LanguageConsistency(target="zh"), LanguageConsistency(target="ja", source="completion")],
    "json_schema": [JsonSchema(json_schema={"type": "object"}), JsonSchema(source="answer_block", invalid_credit=0.5)],
}

FRAGMENTS = ["<think>", "</think>", "<answer>", "</answer>", "<THINK>", "\n", " ", "```json\n", "```", "{", "}",
             "[", "]", '"', "$", "\\frac", "Step 1:", "1. ", "- ", "First,", "答案", "😀", "\ud800", "\udfff",
             "e\u0301", "\u200b", "\x00", "42", "null", "a"]

text = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(), max_size=100),
    st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join),
    st.tuples(st.sampled_from(FRAGMENTS + ["ab ", "go "]), st.integers(0, 5000)).map(lambda t: t[0] * t[1]),
)
content = st.one_of(text, st.none(), st.integers(), st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image"]), "text": text})))
message = st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user", "system", "tool"]), "content": content})
completion = st.one_of(text, st.lists(message, max_size=4), st.none())
odd_ids = st.one_of(st.lists(st.integers(-5, 5), max_size=200), st.none(), text, st.integers(),
                    st.lists(st.lists(st.integers(), max_size=2), max_size=3))
schema = st.one_of(st.none(), st.just({"type": "integer"}), st.just('{"type": "string"}'), st.just("{bad json"),
                   st.just({"type": 5}), st.integers(), st.just({"$ref": "#/nope"}))
reference = st.fixed_dictionaries({}, optional={"completion_ids": odd_ids, "schema": schema})
sample = st.builds(Sample, completion, completion, reference)
verdict = st.one_of(st.none(), st.floats(0, 1), st.sampled_from([0.0, 1.0]))


def assert_valid(scorer, scores: list[Score], n: int) -> None:
    assert len(scores) == n
    lo, hi = scorer.value_range
    for s in scores:
        assert isinstance(s, Score)
        if s.value is None:
            assert s.info.get("reason"), f"{scorer.name}: None without a reason: {s.info}"
        else:
            assert math.isfinite(s.value) and lo <= s.value <= hi, f"{scorer.name}: {s.value} outside [{lo}, {hi}]"


def test_fuzz_covers_every_text_scorer():
    assert set(SCORERS) == {n for n, e in get_registry().scorers.items() if e.plugin == "grpo_rewards.scorers.text"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(SCORERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(st.tuples(sample, verdict), min_size=1, max_size=6))
def test_text_scorer_never_raises_and_stays_in_range(name, batch):
    samples = [s for s, _ in batch]
    results = {"c": [Score(v) for _, v in batch]}
    for scorer in SCORERS[name]:
        assert_valid(scorer, scorer.score(samples, results), len(samples))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(SCORERS))
def test_one_megabyte_completions_are_scored_quickly(name):
    huge = [
        "<think>" + "Step 1: the answer is 42. 答案 " * 30_000 + "</think><answer>{}</answer>",
        "<think>" * 150_000,
        "[" * 1_000_000,
        "$" * 500_000 + "```" * 100_000,
        ("\ud800a " * 300_000),
    ]
    samples = [Sample("", t, {"completion_ids": list(range(len(t) // 4))}) for t in huge]
    for scorer in SCORERS[name]:
        start = time.perf_counter()
        assert_valid(scorer, scorer.score(samples, {"c": [Score(1.0)] * len(samples)}), len(samples))
        assert time.perf_counter() - start < 20, f"{name} took too long on 1 MB completions"
