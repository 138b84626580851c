"""Group-relative advantages: unbiased std, scaling modes, None rewards, equal-reward groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_core.loss import ADVANTAGE_EPS, group_advantages, nanstd

NAN = math.nan


def test_group_scaling_uses_group_mean_and_unbiased_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0, 6.0, 8.0])
    adv, zero_std = group_advantages(rewards, 4, "group")
    for g in range(2):
        r = rewards[4 * g:4 * g + 4].numpy()
        expected = (r - r.mean()) / (r.std(ddof=1) + ADVANTAGE_EPS)
        assert np.allclose(adv[4 * g:4 * g + 4].numpy(), expected, atol=1e-6)
    assert not zero_std.any()


def test_batch_scaling_divides_by_the_batch_std_but_centres_per_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0, 6.0, 8.0])
    adv, _ = group_advantages(rewards, 4, "batch")
    r = rewards.numpy()
    centred = r - np.repeat(r.reshape(2, 4).mean(1), 4)
    assert np.allclose(adv.numpy(), centred / (r.std(ddof=1) + ADVANTAGE_EPS), atol=1e-6)


def test_none_scaling_is_dr_grpo_centring_only():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0, 6.0, 8.0])
    adv, _ = group_advantages(rewards, 4, "none")
    assert adv.tolist() == [0.5, -0.5, -0.5, 0.5, -3.0, -1.0, 1.0, 3.0]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_equal_rewards_give_zero_advantage_without_nan(scale):
    rewards = torch.tensor([0.7] * 4 + [1.0, 0.0, 1.0, 0.0])
    adv, zero_std = group_advantages(rewards, 4, scale)
    assert not adv.isnan().any()
    assert adv[:4].abs().max() < 1e-6
    if scale == "group":
        assert zero_std.tolist() == [True] * 4 + [False] * 4


def test_none_rewards_get_zero_advantage_and_stay_out_of_group_statistics():
    rewards = torch.tensor([1.0, NAN, 0.0, 2.0, NAN, NAN, NAN, NAN, 3.0, NAN, NAN, NAN])
    adv, _ = group_advantages(rewards, 4, "group")
    valid = np.array([1.0, 0.0, 2.0])
    expected = (valid - valid.mean()) / (valid.std(ddof=1) + ADVANTAGE_EPS)
    assert np.allclose(adv[[0, 2, 3]].numpy(), expected, atol=1e-6)
    assert adv[1] == 0.0
    assert (adv[4:] == 0).all()  # a group without rewards, and one with a single reward: no signal, no NaN


def test_nanstd_matches_numpy_and_is_nan_below_two_values():
    x = torch.tensor([[1.0, NAN, 3.0, 7.0], [NAN, NAN, 2.0, NAN]])
    std = nanstd(x, -1)
    assert std[0].item() == pytest.approx(np.std([1.0, 3.0, 7.0], ddof=1), rel=1e-6)
    assert std[1].isnan()
    assert nanstd(torch.tensor([2.0, 4.0])).item() == pytest.approx(math.sqrt(2.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(-5, 5)), min_size=8, max_size=8),
       st.sampled_from(["group", "batch", "none"]))
def test_advantages_are_finite_and_sum_to_zero_per_group(values, scale):
    rewards = torch.tensor([NAN if v is None else v for v in values], dtype=torch.float64)
    adv, _ = group_advantages(rewards, 4, scale)
    assert torch.isfinite(adv).all()
    assert (adv[rewards.isnan()] == 0).all()
    for g in range(2):
        assert abs(adv[4 * g:4 * g + 4].sum().item()) < 1e-6 * max(1.0, adv.abs().max().item() * 4)
