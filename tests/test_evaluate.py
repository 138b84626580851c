"""The statistics of `grpo-train eval` against hand-computed values (grpo_core/stats.py, grpo_core/evaluate.py)."""

from __future__ import annotations

import math

import pytest

from grpo_core import stats
from grpo_core.evaluate import compare, problem_digest, summarize
from grpo_rewards.errors import UserError


def test_wilson_interval_matches_published_and_hand_computed_cases():
    # Newcombe (1998), Statistics in Medicine 17:857, Table I: 81/263 -> 0.2553 to 0.3662 (score method)
    low, high = stats.wilson_interval(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    # 8/10 by hand: centre (0.8 + z^2/20) / (1 + z^2/10) = 0.71674, half-width 0.22658
    low, high = stats.wilson_interval(8, 10)
    assert low == pytest.approx(0.49016, abs=1e-4) and high == pytest.approx(0.94331, abs=1e-4)
    # at the edges the interval stays inside [0, 1] and is not empty (the Wald interval would be [0, 0])
    assert stats.wilson_interval(0, 10) == (0.0, pytest.approx(0.27753, abs=1e-4))
    assert stats.wilson_interval(10, 10) == (pytest.approx(0.72247, abs=1e-4), 1.0)
    with pytest.raises(ValueError):
        stats.wilson_interval(3, 2)


def test_proportion_reports_the_share_and_its_interval():
    estimate = stats.proportion([True, False, True, True, False, True, True, True, True, True])
    assert estimate.value == 0.8 and estimate.n == 10 and estimate.method == "wilson"
    assert (estimate.low, estimate.high) == stats.wilson_interval(8, 10)


def test_pass_at_k_unbiased_estimator_by_hand():
    # 1 - C(n-c, k) / C(n, k)
    assert stats.pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)
    assert stats.pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert stats.pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    assert stats.pass_at_k(8, 0, 8) == 0.0 and stats.pass_at_k(8, 1, 8) == 1.0
    assert stats.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # pass@1 is the share of correct samples
    with pytest.raises(ValueError):
        stats.pass_at_k(4, 1, 5)


def test_pass_at_k_over_a_fixed_sample_of_problems():
    counts = [0, 1, 2, 4]  # correct samples of 4, for four problems
    summary = summarize([False, True, True, True], counts, num_samples=4, ks=[1, 2, 4], seed=0, rounds=2000)
    assert summary["pass@1"]["value"] == pytest.approx((0 + 0.25 + 0.5 + 1) / 4)
    assert summary["pass@2"]["value"] == pytest.approx((0 + 0.5 + 5 / 6 + 1) / 4)
    assert summary["pass@4"]["value"] == pytest.approx(3 / 4)
    assert summary["greedy_accuracy"]["value"] == 0.75
    for key in ("pass@1", "pass@2", "pass@4"):
        entry = summary[key]
        assert 0 <= entry["low"] <= entry["value"] <= entry["high"] <= 1 and entry["low"] < entry["high"]
        assert "bootstrap over problems" in entry["method"]


def test_bootstrap_is_seeded_and_close_to_the_normal_interval_on_a_large_sample():
    values = [1.0] * 120 + [0.0] * 280  # mean 0.3, se sqrt(0.21 / 400) = 0.022913
    first = stats.bootstrap_mean(values, seed=7)
    assert first == stats.bootstrap_mean(values, seed=7)
    assert first != stats.bootstrap_mean(values, seed=8)
    assert first.value == pytest.approx(0.3)
    assert first.low == pytest.approx(0.3 - 1.96 * 0.022913, abs=0.006)
    assert first.high == pytest.approx(0.3 + 1.96 * 0.022913, abs=0.006)


def test_paired_difference_by_hand():
    a, b = [1, 0, 1, 0, 1], [1, 1, 1, 1, 0]
    diff = stats.paired_difference(a, b, seed=0)
    assert diff.estimate.value == pytest.approx(0.2) and (diff.better, diff.worse) == (2, 1)
    # every problem moves by the same amount: the interval is that amount exactly
    same = stats.paired_difference([0, 0, 1, 0], [1, 1, 2, 1], seed=0)
    assert (same.estimate.value, same.estimate.low, same.estimate.high) == (1.0, 1.0, 1.0)
    # 400 problems, B alone right on 60, A alone right on 20: mean 0.1, se sqrt(0.19 / 400) = 0.021794
    a = [0] * 60 + [1] * 20 + [1] * 100 + [0] * 220
    b = [1] * 60 + [0] * 20 + [1] * 100 + [0] * 220
    diff = stats.paired_difference(a, b, seed=3)
    assert diff.estimate.value == pytest.approx(0.1) and (diff.better, diff.worse) == (60, 20)
    assert diff.estimate.low == pytest.approx(0.1 - 1.96 * 0.021794, abs=0.006)
    assert diff.estimate.high == pytest.approx(0.1 + 1.96 * 0.021794, abs=0.006)
    assert diff.estimate.low > 0  # the interval excludes 0
    with pytest.raises(ValueError, match="same problems"):
        stats.paired_difference([1, 0], [1], seed=0)


def _result(greedy, counts, digest="d"):
    return {"problem_digest": digest, "model": "m", "settings": {"num_samples": 4},
            "metrics": {"greedy_accuracy": {}, "pass@1": {}, "pass@4": {}},
            "problems": [{"greedy_solved": g, "samples_solved": c} for g, c in zip(greedy, counts)]}


def test_compare_pairs_problems_and_refuses_other_problems():
    base = _result([True, False, False, True], [4, 0, 1, 2])
    after = _result([True, True, True, False], [4, 2, 1, 4])
    out = compare(after, base, seed=0, rounds=500)
    assert out["greedy_accuracy"]["value"] == pytest.approx(0.25)  # (0 + 1 + 1 - 1) / 4
    assert (out["greedy_accuracy"]["better"], out["greedy_accuracy"]["worse"]) == (2, 1)
    assert out["pass@1"]["value"] == pytest.approx((0 + 2 / 4 + 0 + 2 / 4) / 4)
    assert out["pass@4"]["value"] == pytest.approx((0 + 1 + 0 + 0) / 4)
    with pytest.raises(UserError, match="other problems"):
        compare(after, _result([True] * 4, [4] * 4, digest="other"), seed=0, rounds=500)


def test_problem_digest_changes_with_prompt_or_answer():
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}]
    assert problem_digest(rows) == problem_digest([dict(r) for r in rows])
    assert problem_digest(rows) != problem_digest([rows[0], {"prompt": "2+2=", "answer": "5"}])
    assert problem_digest(rows) != problem_digest(rows[::-1])
