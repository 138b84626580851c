"""grpo_core.loss: parity with the pinned TRL's GRPO loss, and the chunked selective log-probs."""

from __future__ import annotations

import itertools

import pytest
import torch

from _grpo_core_helpers import one_torch_thread  # noqa: F401 - autouse fixture
from grpo_core.loss import LOSS_TYPES, CompletionLogprobs, grpo_loss, nanstd, selective_logprobs

pytest.importorskip("trl.trainer.grpo_trainer", reason="TRL (the `trl` extra) is needed for parity")
from _trl_loss import make_batch, trl_loss  # noqa: E402 - needs TRL


CASES = list(itertools.product(LOSS_TYPES, ["token", "sequence"], [0.0, 0.04], [True, False]))


@pytest.mark.parametrize("loss_type,level,beta,with_old", CASES)
def test_loss_and_gradient_match_trl(loss_type, level, beta, with_old):
    batch = make_batch()
    accum, max_len, eps, eps_high = 2, 9, 0.2, 0.28
    num_items = float(batch["mask"].sum()) * accum  # the generation batch spans both micro-batches
    ours_in = batch["logps"].clone().requires_grad_(True)
    theirs_in = batch["logps"].clone().requires_grad_(True)
    ours, stats = grpo_loss(ours_in, batch["old"] if with_old else None, batch["ref"], batch["adv"], batch["mask"],
                            loss_type=loss_type, beta=beta, epsilon=eps, epsilon_high=eps_high,
                            importance_sampling_level=level, max_completion_length=max_len,
                            accumulation_steps=accum, dapo_tokens=num_items)
    theirs, metrics = trl_loss(batch, theirs_in, loss_type=loss_type, beta=beta, level=level, eps=eps,
                               eps_high=eps_high, accum=accum, max_len=max_len, num_items=num_items,
                               with_old=with_old)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-5)
    ours.backward()
    theirs.backward()
    assert torch.allclose(ours_in.grad, theirs_in.grad, atol=1e-5)
    assert stats["clip_ratio"].item() == pytest.approx(metrics["clip_ratio/region_mean"][0], abs=1e-6)
    if beta:
        assert stats["kl"].item() == pytest.approx(metrics["kl"][0], abs=1e-6)
    if with_old and level == "token":  # the batch is built so that clipping binds somewhere
        assert stats["clip_ratio"].item() > 0


def test_loss_types_differ_on_ragged_batch():
    batch = make_batch()
    values = {t: grpo_loss(batch["logps"], batch["old"], batch["ref"], batch["adv"], batch["mask"], loss_type=t,
                           beta=0.04, epsilon=0.2, epsilon_high=0.2, max_completion_length=9,
                           dapo_tokens=float(batch["mask"].sum()) + 3)[0].item() for t in LOSS_TYPES}
    assert len({round(v, 6) for v in values.values()}) == len(LOSS_TYPES)
    with pytest.raises(ValueError, match="loss_type"):
        grpo_loss(batch["logps"], None, None, batch["adv"], batch["mask"], loss_type="ppo", beta=0.0,
                  epsilon=0.2, epsilon_high=0.2)


def test_ratio_one_gives_policy_gradient_without_recomputed_old_logps():
    """old = logp.detach(): the loss value is -A (per token) and the gradient is -A * dlogp."""
    batch = make_batch()
    logps = batch["logps"].clone().requires_grad_(True)
    loss, stats = grpo_loss(logps, None, None, batch["adv"], batch["mask"], loss_type="bnpo", beta=0.0,
                            epsilon=0.2, epsilon_high=0.2)
    loss.backward()
    mask = batch["mask"].float()
    expected = -(batch["adv"][:, None] * mask) / mask.sum()
    assert torch.allclose(logps.grad, expected, atol=1e-7)
    assert stats["clip_ratio"].item() == 0.0


def test_nanstd_matches_numpy_and_is_nan_below_two_values():
    import math

    import numpy as np

    x = torch.tensor([[1.0, math.nan, 3.0, 7.0], [math.nan, math.nan, 2.0, math.nan]])
    std = nanstd(x, -1)
    assert std[0].item() == pytest.approx(np.std([1.0, 3.0, 7.0], ddof=1), rel=1e-6)
    assert std[1].isnan()
    assert nanstd(torch.tensor([2.0, 4.0])).item() == pytest.approx(math.sqrt(2.0))


# ---------------------------------------------------------------------------------------------
# selective log-probs


@pytest.mark.parametrize("chunk_rows", [1000, 3])  # one chunk; many checkpointed chunks
def test_selective_logprobs_match_full_log_softmax_with_gradients(chunk_rows):
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=True)
    hidden = torch.randn(10, 16, requires_grad=True)
    targets = torch.randint(0, 50, (10,))
    logp, entropy = selective_logprobs(hidden, head, targets, temperature=0.7, chunk_rows=chunk_rows)
    full = torch.log_softmax(head(hidden) / 0.7, -1)
    expected = full.gather(-1, targets[:, None]).squeeze(-1)
    assert torch.allclose(logp, expected, atol=1e-6)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-5)
    (logp * torch.arange(10.0)).sum().backward()
    ours = (hidden.grad.clone(), head.weight.grad.clone())
    hidden.grad = None
    head.zero_grad()
    (expected * torch.arange(10.0)).sum().backward()
    assert torch.allclose(ours[0], hidden.grad, atol=1e-6)
    assert torch.allclose(ours[1], head.weight.grad, atol=1e-6)


def tiny_lm(**overrides):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **overrides)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("chunk_mib", [64, 0])  # 0 -> one row per chunk (checkpointed path)
def test_completion_logprobs_match_the_models_own_logits(chunk_mib):
    """Left-padded prompts, ragged completions: equal to log_softmax of the model's full logits."""
    lm = tiny_lm()
    module = CompletionLogprobs(lm, temperature=0.9, chunk_mib=max(chunk_mib, 1))
    if chunk_mib == 0:
        module.chunk_rows = 1
    prompt_ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    prompt_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    completion_ids = torch.tensor([[11, 12, 13], [14, 15, 16]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    logps, entropy = module(prompt_ids, prompt_mask, completion_ids, completion_mask)
    for row in range(2):  # reference: the row alone, without padding, through the ordinary forward
        ids = torch.cat([prompt_ids[row][prompt_mask[row].bool()], completion_ids[row]])
        logits = lm(ids[None]).logits[0, -completion_ids.size(1) - 1:-1] / 0.9
        expected = torch.log_softmax(logits, -1).gather(-1, completion_ids[row][:, None]).squeeze(-1)
        keep = completion_mask[row].bool()
        assert torch.allclose(logps[row][keep], expected[keep], atol=1e-5)
        assert (logps[row][~keep] == 0).all() and (entropy[row][~keep] == 0).all()
    assert logps.requires_grad


def test_chunk_rows_follow_the_memory_budget():
    lm = tiny_lm()
    assert CompletionLogprobs(lm, 1.0, chunk_mib=1).chunk_rows == 2**20 // (40 * 8)
