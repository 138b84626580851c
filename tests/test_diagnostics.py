"""Reward diagnostics by hand: spread per group, correlation, variance share, None and errors,
duplicates, the warnings; in the `score` summary and in the trainer's metrics."""

from __future__ import annotations

import logging
import math

import pytest
from _compose_helpers import Column
from _compose_helpers import column as member

from grpo_rewards import build, hookimpl, load_registry
from grpo_rewards.diagnostics import RewardDiagnostics, StepDiagnostics


class Plugin:
    @hookimpl
    def grpo_rewards_scorers(self):
        return [Column]


@pytest.fixture(scope="module")
def registry():
    return load_registry(extra_plugins=[Plugin()])


# Two groups of 3. `correct` is constant in group p, varies in q; `format` is constant everywhere.
ROWS = [("p", "x", {"correct": 1.0, "format": 1.0}), ("p", "x ", {"correct": 1.0, "format": 1.0}),
        ("p", "y", {"correct": 1.0, "format": 1.0}), ("q", "u", {"correct": 0.0, "format": 1.0}),
        ("q", "v", {"correct": 1.0, "format": 1.0}), ("q", "w", {"format": 1.0})]


def scored(registry, spec, rows=ROWS):
    with build(spec, registry) as reward:
        batch = reward.score([{"prompt": p, "completion": c, **ref} for p, c, ref in rows])
    diagnostics = RewardDiagnostics(list(batch.scores))
    diagnostics.add(batch, [c for _, c, _ in rows])
    return batch, diagnostics


def test_member_rows_by_hand(registry):
    batch, diagnostics = scored(registry, {"scorers": [member("correct"), member("format", 0.5)]})
    # totals: p = 1.5, 1.5, 1.5 (no spread); q = 0.5, 1.5, 0.5
    assert batch.totals == [1.5, 1.5, 1.5, 0.5, 1.5, 0.5]
    rows = diagnostics.member_rows()
    assert rows["correct"]["zero_std"] == 0.5 and rows["format"]["zero_std"] == 1.0
    assert rows["correct"]["none"] == pytest.approx(1 / 6) and rows["format"]["none"] == 0.0
    assert rows["correct"]["errors"] == 0.0
    # correct's values where present: 1, 1, 1, 0, 1 against totals 1.5, 1.5, 1.5, 0.5, 1.5: a line, corr 1
    assert rows["correct"]["corr_total"] == pytest.approx(1.0)
    assert rows["format"]["corr_total"] is None  # a constant has no correlation
    # the total's variance is all correct's (format's contribution is constant)
    assert rows["correct"]["variance_share"] == pytest.approx(1.0)
    assert rows["format"]["variance_share"] == pytest.approx(0.0, abs=1e-12)
    assert diagnostics.zero_std_share == 0.5
    assert diagnostics.duplicate_rate == pytest.approx(2 / 6)  # "x" and "x " repeat each other
    assert [w.key for w in diagnostics.warnings()] == ["dominant:correct"]
    assert "'correct' decides 100% of the total's variance" in str(diagnostics.warnings()[0])


def test_variance_shares_add_up_and_negative_weights_count(registry):
    rows = [("p", str(i), {"a": a, "b": b}) for i, (a, b) in enumerate([(0, 1), (1, 0), (2, 2), (3, 0)])]
    _, diagnostics = scored(registry, {"scorers": [member("a"), member("b", -1.0)]}, rows)
    # totals a - b = -1, 1, 0, 3: mean 0.75, population variance 2.1875
    # cov(a, t) = mean(a t) - 1.5 * 0.75 = (0 + 1 + 0 + 9) / 4 - 1.125 = 1.375
    shares = {k: v["variance_share"] for k, v in diagnostics.member_rows().items()}
    assert shares["a"] == pytest.approx(1.375 / 2.1875)
    assert shares["a"] + shares["b"] == pytest.approx(1.0)
    assert diagnostics.warnings() == []


def test_no_gradient_warning_names_the_constant_members(registry):
    rows = [(p, str(i), {"correct": 1.0, "format": f}) for i, (p, f) in
            enumerate([("p", 1.0), ("p", 1.0), ("q", 0.0), ("q", 0.0), ("r", 1.0), ("r", 0.0)])]
    _, diagnostics = scored(registry, {"scorers": [member("correct"), member("format", 0.1)]}, rows)
    warnings = diagnostics.warnings()
    assert [w.key for w in warnings] == ["dominant:format", "no_gradient"]
    assert str(warnings[1]) == "67% of groups give no gradient (equal totals): 'correct' is constant in 100%, " \
                               "'format' is constant in 67%"


def test_none_everywhere_groups_of_one_and_errors(registry):
    rows = [("p", "a", {"correct": "boom", "format": None}), ("q", "b", {"correct": 1.0})]
    batch, diagnostics = scored(registry, {"scorers": [member("correct"), member("format")]}, rows)
    assert batch.totals == [None, None]
    rows_ = diagnostics.member_rows()
    assert rows_["correct"] == {"zero_std": None, "corr_total": None, "variance_share": None, "none": 1.0,
                                "errors": 1.0}
    assert diagnostics.zero_std_share is None and diagnostics.duplicate_rate is None
    assert diagnostics.warnings() == []
    assert diagnostics.metrics() == {"reward_diag/correct/none": 1.0, "reward_diag/correct/errors": 1.0,
                                     "reward_diag/format/none": 1.0, "reward_diag/format/errors": 0.0}


def test_step_diagnostics_log_each_warning_once(registry, caplog):
    reward = build({"scorers": [member("correct"), member("format", 0.5)]}, registry)
    batch = reward.score([{"prompt": p, "completion": c, **ref} for p, c, ref in ROWS])
    step = StepDiagnostics()
    with caplog.at_level(logging.WARNING, logger="grpo_rewards.diagnostics"):
        first = step.metrics(reward, batch, [c for _, c, _ in ROWS])
        step.metrics(reward, batch, [c for _, c, _ in ROWS])
    assert [r.getMessage() for r in caplog.records] == [
        "reward: 'correct' decides 100% of the total's variance; the other members barely move the advantages "
        "(said once per run)"]
    assert first["reward_diag/correct/zero_std"] == 0.5
    assert first["reward_diag/duplicate_rate"] == pytest.approx(1 / 3)
    assert first["reward_diag/cache_hit_rate"] == pytest.approx(0.0)
    assert all(math.isfinite(v) for v in first.values())


@pytest.mark.timeout(180)
def test_trainer_logs_the_diagnostics_of_each_step(tmp_path):
    from _grpo_core_helpers import base_config

    from grpo_core.config import validate_config
    from grpo_core.metrics import read_metrics
    from grpo_core.trainer import train

    rewards = {"aggregate": "normalize_then_sum", "scorers": [
        {"scorer": "test_char_fraction", "name": "a_frac"}, {"scorer": "group_duplicates", "name": "dup"}]}
    summary = train(validate_config(base_config(tmp_path, max_steps=2, logging_steps=1, plot=True, rewards=rewards)))
    steps = [r for r in read_metrics(summary["metrics_file"]) if r.get("step", 0) > 0]
    assert len(steps) == 2
    for record in steps:
        for alias in ("a_frac", "dup"):
            assert 0.0 <= record[f"reward_diag/{alias}/zero_std"] <= 1.0
            assert record[f"reward_diag/{alias}/none"] == 0.0 and record[f"reward_diag/{alias}/errors"] == 0.0
        assert 0.0 <= record["reward_diag/duplicate_rate"] <= 1.0
        # groups are the trainer's G = 4: a duplicate within them is what group_duplicates penalises
        assert (record["reward_diag/duplicate_rate"] == 0.0) == (record["reward/dup"] == 0.0)
