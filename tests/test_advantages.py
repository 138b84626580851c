"""grpo_rewards.advantages: every aggregation mode and scale_rewards, None rewards, equal-reward groups;
the combinations that make no sense are refused. TRL parity: tests/test_aggregate.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_rewards.advantages import AGGREGATIONS, EPS, SCALES, advantages, scale_problem
from grpo_rewards.group import consecutive_groups

REWARDS = [1.0, 0.0, 0.0, 1.0, 2.0, 4.0, 6.0, 8.0]
GROUPS = consecutive_groups(8, 4)


def test_group_scaling_uses_group_mean_and_unbiased_std():
    adv, zero_std = advantages(REWARDS, GROUPS, "sum", "group")
    for g in range(2):
        r = np.array(REWARDS[4 * g:4 * g + 4])
        expected = (r - r.mean()) / (r.std(ddof=1) + EPS)
        assert np.allclose(adv[4 * g:4 * g + 4], expected, atol=1e-12)
    assert not any(zero_std)


def test_batch_scaling_divides_by_the_batch_std_but_centres_per_group():
    adv, _ = advantages(REWARDS, GROUPS, "sum", "batch")
    r = np.array(REWARDS)
    centred = r - np.repeat(r.reshape(2, 4).mean(1), 4)
    assert np.allclose(adv, centred / (r.std(ddof=1) + EPS), atol=1e-12)


def test_none_scaling_is_dr_grpo_centring_only():
    adv, _ = advantages(REWARDS, GROUPS, "sum", "none")
    assert adv == [0.5, -0.5, -0.5, 0.5, -3.0, -1.0, 1.0, 3.0]


def test_normalize_then_sum_scales_the_totals_over_the_batch():
    adv, zero_std = advantages(REWARDS, GROUPS, "normalize_then_sum")
    r = np.array(REWARDS)
    assert np.allclose(adv, (r - r.mean()) / (r.std(ddof=1) + EPS), atol=1e-12)  # a group's own spread stays
    assert not any(zero_std)


@pytest.mark.parametrize("aggregate,scale", [(a, s) for a in AGGREGATIONS for s in SCALES
                                             if scale_problem(a, s) is None])
def test_equal_rewards_give_zero_advantage_and_are_flagged(aggregate, scale):
    rewards = [0.7] * 8
    adv, zero_std = advantages(rewards, GROUPS, aggregate, scale)
    assert adv == [0.0] * 8 and all(zero_std)


def test_none_rewards_get_zero_advantage_and_stay_out_of_group_statistics():
    nan = None
    rewards = [1.0, nan, 0.0, 2.0, nan, nan, nan, nan, 3.0, nan, nan, nan]
    adv, zero_std = advantages(rewards, consecutive_groups(12, 4), "sum", "group")
    valid = np.array([1.0, 0.0, 2.0])
    assert np.allclose([adv[i] for i in (0, 2, 3)], (valid - valid.mean()) / (valid.std(ddof=1) + EPS))
    assert adv[1] == 0.0
    assert adv[4:] == [0.0] * 8  # a group without rewards, and one with a single reward: no signal
    assert zero_std == [False] * 12


def test_a_scale_that_an_aggregation_fixes_is_refused_unless_it_is_that_scale():
    assert scale_problem("sum", "none") is None
    assert scale_problem("normalize_then_sum", "batch") is None
    problem = scale_problem("normalize_then_sum", "group")
    assert "scale_rewards: group" in problem and "batch" in problem


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(-5, 5)), min_size=8, max_size=8), st.sampled_from(SCALES))
def test_advantages_are_finite_and_sum_to_zero_per_group(values, scale):
    adv, _ = advantages(values, GROUPS, "sum", scale)
    assert all(math.isfinite(a) for a in adv)
    assert all(a == 0 for a, v in zip(adv, values, strict=True) if v is None)
    for g in range(2):
        assert abs(math.fsum(adv[4 * g:4 * g + 4])) < 1e-9 * max(1.0, max(map(abs, adv)) * 4)
