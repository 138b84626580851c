"""Composition: weighted totals, None rules, error isolation, scorers reading earlier results."""

from __future__ import annotations

import logging
import math

import pytest
from reward_helpers import Answer, HelperPlugin, plugin, samples

from grpo_rewards import Sample, Score, Scorer, build, load_registry


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[HelperPlugin()])


def test_weighted_total_and_breakdown(registry):
    reward = build({"scorers": [
        {"scorer": "t_contains", "weight": 2.0, "params": {"text": "42"}},
        {"scorer": "t_length", "name": "len", "weight": -0.5, "params": {"max_chars": 4}},
    ]}, registry)
    batch = reward.score(samples("42", "x", "the answer is 42"))
    assert batch.values == {"t_contains": [1.0, 0.0, 1.0], "len": [0.5, 0.25, 1.0]}
    assert batch.totals == pytest.approx([2.0 - 0.25, -0.125, 2.0 - 0.5])
    assert batch.errors == {"t_contains": 0, "len": 0}
    assert reward.aliases == ["t_contains", "len"] and reward.weights == [2.0, -0.5]
    assert batch.record(1) == {"total": -0.125, "scores": {"t_contains": 0.0, "len": 0.25}}
    assert batch.record(0, with_info=True)["info"]["t_contains"] == {"looked_for": "42"}


def test_none_is_skipped_in_the_total_and_all_none_gives_none(registry):
    reward = build({"scorers": [{"scorer": "t_contains"}, {"scorer": "t_answer", "weight": 3.0}]}, registry)
    batch = reward.score([
        Sample("q", "", {}),                  # both None
        Sample("q", "yes", {}),               # answer None: total is the other one alone
        Sample("q", "no 7", {"answer": 7}),   # both scored
    ])
    assert batch.totals == [None, 1.0, 3.0]
    assert batch.scores["t_answer"][0].info == {"reason": "no gold answer"}


def test_a_raising_scorer_gives_none_is_counted_and_logged_once(registry, caplog):
    reward = build({"scorers": [{"scorer": "t_explode", "name": "bad"}, {"scorer": "t_length"}]}, registry)
    with caplog.at_level(logging.WARNING, logger="grpo_rewards.compose"):
        first = reward.score(samples("a", "bb"))
        second = reward.score(samples("ccc"))
    assert first.values["bad"] == [None, None]
    assert first.errors == {"bad": 2, "t_length": 0} and second.errors["bad"] == 1
    assert reward.error_counts == {"bad": 3, "t_length": 0}
    assert first.totals == pytest.approx([0.1, 0.2])  # the other scorer still counts
    assert "boom" in first.scores["bad"][0].info["error"]
    logged = [r for r in caplog.records if "'bad'" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


@pytest.mark.parametrize("spec", [
    {"on_error": "raise", "scorers": [{"scorer": "t_explode"}]},
    {"scorers": [{"scorer": "t_explode", "on_error": "raise"}]},
])
def test_on_error_raise_propagates(spec, registry):
    with pytest.raises(RuntimeError, match="boom"):
        build(spec, registry).score(samples("a"))


def test_per_scorer_none_overrides_spec_raise(registry):
    reward = build({"on_error": "raise", "scorers": [{"scorer": "t_explode", "on_error": "none"}]}, registry)
    assert reward.score(samples("a")).totals == [None]


class Broken(Scorer):
    """Returns the wrong number of scores, or non-numbers."""

    name = "t_broken"

    def score(self, samples, results=None):
        if len(samples) > 1:
            return [Score(1.0)]
        return ["not a number"]


class NonFinite(Scorer):
    """Returns NaN and inf."""

    name = "t_nonfinite"

    def score(self, samples, results=None):
        return [Score(math.nan), Score(math.inf), 0.5][: len(samples)]


def extras():
    return plugin("compose-extras", scorers=[Broken, NonFinite])


def test_wrong_length_or_garbage_results_are_scorer_errors():
    registry = load_registry(extra_plugins=[HelperPlugin(), extras()])
    reward = build({"scorers": [{"scorer": "t_broken"}, {"scorer": "t_length"}]}, registry)
    batch = reward.score(samples("a", "b"))
    assert batch.values["t_broken"] == [None, None] and batch.errors["t_broken"] == 2
    assert "returned 1 scores for 2 samples" in batch.scores["t_broken"][0].info["error"]
    assert reward.score(samples("a")).errors["t_broken"] == 1


def test_non_finite_values_become_none_and_bare_floats_are_accepted():
    registry = load_registry(extra_plugins=[extras()])
    batch = build({"scorers": [{"scorer": "t_nonfinite"}]}, registry).score(samples("a", "b", "c"))
    assert batch.values["t_nonfinite"] == [None, None, 0.5]
    assert batch.totals == [None, None, 0.5]
    assert batch.scores["t_nonfinite"][0].info["reason"] == "non-finite value"


def test_later_scorers_read_earlier_results_without_recomputing(registry):
    Answer.calls = 0
    reward = build({"scorers": [
        {"scorer": "t_answer", "name": "correct"},
        {"scorer": "t_gated", "params": {"of": "correct"}},
    ]}, registry)
    batch = reward.score([Sample("q", "it is 5", {"answer": 5}), Sample("q", "it is 6", {"answer": 5})])
    assert batch.values["t_gated"] == [0.5, 0.0]
    assert Answer.calls == 1


def test_records_become_samples_and_empty_batches_are_fine(registry):
    reward = build({"scorers": [{"scorer": "t_answer"}]}, registry)
    batch = reward.score([{"prompt": "p", "completion": "x 3", "answer": 3},
                          {"prompt": [{"role": "user", "content": "p"}],
                           "completion": [{"role": "assistant", "content": "3"}], "reference": {"answer": 3}}])
    assert batch.values["t_answer"] == [1.0, 1.0]
    empty = reward.score([])
    assert len(empty) == 0 and empty.scores == {"t_answer": []}


class Closing(Scorer):
    """Counts close() calls."""

    name = "t_closing"
    closed = 0

    def score(self, samples, results=None):
        return [Score(0.0) for _ in samples]

    def close(self):
        type(self).closed += 1


def test_context_manager_closes_every_scorer():
    registry = load_registry(extra_plugins=[plugin("closing", scorers=[Closing])])
    Closing.closed = 0
    with build({"scorers": [{"scorer": "t_closing"}, {"scorer": "t_closing", "name": "again"}]}, registry) as r:
        r.score(samples("a"))
    assert Closing.closed == 2


def test_scorer_params_overrides_are_validated():
    from pydantic import ValidationError
    from reward_helpers import Length

    scorer = Length(max_chars=4)
    assert Length(scorer.params, max_chars=8).params.max_chars == 8
    with pytest.raises(ValidationError):
        Length(scorer.params, max_chars=-1)
    with pytest.raises(ValidationError):
        Length({"colour": "red"})
