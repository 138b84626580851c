"""A scorer's declared value_range is enforced: a value outside it is an error, counted like an
exception (None with the value in info), or raised with `on_error: raise`."""

from __future__ import annotations

import pytest

from grpo_rewards import Score, Scorer, build, hookimpl, load_registry


class Overshoot(Scorer):
    """Returns the `answer` field as its value, whatever the declared range says."""

    name = "overshoot"
    value_range = (0.0, 1.0)

    def score(self, samples, results=None):
        return [Score(float(s.reference["answer"])) for s in samples]


class Plugin:
    __name__ = "overshoot-plugin"

    @hookimpl
    def grpo_rewards_scorers(self):
        return [Overshoot]


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[Plugin()])


def test_a_value_outside_the_declared_range_is_none_and_counted(registry, caplog):
    reward = build({"scorers": [{"scorer": "overshoot"}, {"scorer": "think_format", "weight": 0.5}]}, registry)
    batch = reward.score([{"completion": "x", "answer": a} for a in ("0.5", "2.0", "-0.25", "1.0")])
    assert batch.values["overshoot"] == [0.5, None, None, 1.0]
    assert batch.errors["overshoot"] == 2 and reward.error_counts["overshoot"] == 2
    info = batch.scores["overshoot"][1].info
    assert info["raw_value"] == 2.0 and "outside the declared value_range [0, 1]" in info["error"]
    assert batch.totals == [0.5, 0.0, 0.0, 1.0]  # the other member still counts
    assert "outside its value_range" in caplog.text


def test_on_error_raise_raises_for_a_value_outside_the_range(registry):
    reward = build({"scorers": [{"scorer": "overshoot", "on_error": "raise"}]}, registry)
    with pytest.raises(ValueError, match=r"returned 2\.0, outside its declared value_range \[0, 1\]"):
        reward.score([{"completion": "x", "answer": "2"}])
