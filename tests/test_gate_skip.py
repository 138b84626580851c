"""A gated member is not scored where its gate alone decides its value, and that changes no total:
the composite's totals equal the aggregation of every member scored on every sample."""

from __future__ import annotations

import pytest

from grpo_rewards.aggregate import combine
from grpo_rewards.compose import build
from grpo_rewards.scorer import Sample

SAMPLES = [Sample("Find n.", c, {"answer": a}) for c, a in [
    ("<think>ok</think><answer>\\boxed{4}</answer>", "4"), ("<think>x</think>\\boxed{5}", "4"),
    ("\\boxed{4}", "4"), ("nothing here", "4"), ("<think>long " + "word " * 40 + "</think>\\boxed{7}", "7"),
    ("\\boxed{3}", "not a number {"), ("<think></think><answer>9</answer>", "9"), ("", "1")]]

SPEC = {"scorers": [
    {"scorer": "math_accuracy", "name": "correct", "params": {"timeout_s": 5, "workers": 1}},
    {"scorer": "think_format", "name": "format", "weight": 0.5, "gate": {"on": "correct", "min": 1.0}},
    {"scorer": "tag_count", "name": "tags", "weight": 0.3, "on_none": "zero",
     "gate": {"on": "format", "min": 0.5, "otherwise": None}},  # a chain: gated on a gated member
    {"scorer": "length", "name": "short", "weight": 0.2, "params": {"mode": "range", "low": 1, "high": 30},
     "gate": {"on": "correct", "max": 0.0}},
    {"scorer": "cosine_length", "name": "cosine", "weight": 0.1,
     "params": {"max_len": 200, "correctness_from": "correct"},
     "gate": {"on": "short", "min": 0.5}},
]}


@pytest.mark.timeout(300)
def test_totals_equal_the_aggregation_of_every_member_scored_everywhere():
    with build(SPEC) as reward:
        batch = reward.score(SAMPLES)
        full = {m.alias: [s.value for s in m.scorer.score(SAMPLES, {a: batch.scores[a] for a in ("correct",)})]
                for m in reward.members}
        totals, gated, _, _ = combine(full, reward.spec.scorers, reward.spec.aggregate, batch.groups)
    assert batch.totals == totals and batch.gated == gated
    skipped = {a: [i for i, s in enumerate(col) if s.info.get("reason") == "not scored: its gate decides"]
               for a, col in batch.scores.items()}
    assert skipped["correct"] == [] and skipped["format"] and skipped["tags"] and skipped["short"]
    assert skipped["cosine"] and set(skipped["format"]).isdisjoint({0})


@pytest.mark.timeout(300)
def test_a_member_read_by_another_or_dropping_samples_is_scored_in_full():
    spec = {"scorers": [
        {"scorer": "think_format", "name": "format"},
        {"scorer": "math_accuracy", "name": "correct", "params": {"timeout_s": 5, "workers": 1},
         "gate": {"on": "format", "min": 1.0}},
        {"scorer": "cosine_length", "name": "cosine", "params": {"max_len": 200, "correctness_from": "correct"}},
        {"scorer": "tag_count", "name": "tags", "on_none": "drop_sample", "gate": {"on": "format", "min": 1.0}},
    ]}
    with build(spec) as reward:
        batch = reward.score(SAMPLES)
    reasons = {a: {s.info.get("reason") for s in col} for a, col in batch.scores.items()}
    assert "not scored: its gate decides" not in reasons["correct"] | reasons["tags"]
    assert batch.values["format"].count(0.0) >= 3  # the gates were shut somewhere
