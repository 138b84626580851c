"""grpo_core.optim against torch.optim.AdamW and transformers' schedules."""

import copy

import pytest
import torch

from grpo_core.optim import AdamW, Schedule, lr_schedule


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*shape, generator=gen)) for shape in [(5, 3), (7,), (2, 2, 2)]]


def _train(optimizer, params, steps: int, lrs=None) -> None:
    gen = torch.Generator().manual_seed(1)
    for k in range(steps):
        if lrs is not None:
            optimizer.lr = lrs[k]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        optimizer.step()


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adamw_matches_torch(fused, weight_decay, monkeypatch):
    ours, theirs = _params(), _params()
    reference = torch.optim.AdamW(theirs, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=weight_decay)
    optimizer = AdamW(ours, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=weight_decay)
    if not fused:  # the per-tensor formula, used where torch has no fused kernel
        monkeypatch.setattr("grpo_core.optim._FUSED_DEVICES", ())
    _train(reference, theirs, 7)
    _train(optimizer, ours, 7)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert not torch.equal(ours[0], _params()[0])  # it moved


def test_adamw_skips_parameters_without_grad_and_resumes_exactly():
    params = _params()
    optimizer = AdamW(params, lr=1e-2, weight_decay=0.1)
    _train(optimizer, params, 3)
    frozen = params[1].detach().clone()
    params[1].grad = None
    params[0].grad, params[2].grad = torch.ones_like(params[0]), torch.ones_like(params[2])
    optimizer.step()
    assert torch.equal(params[1], frozen)  # no grad: untouched, weight decay included

    resumed_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = AdamW(resumed_params, lr=1e-2, weight_decay=0.1)
    resumed.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    _train(optimizer, params, 2)
    _train(resumed, resumed_params, 2)
    for a, b in zip(params, resumed_params):
        assert torch.equal(a, b)


def test_adamw_rejects_state_of_another_model():
    optimizer = AdamW(_params(), lr=1e-2)
    _train(optimizer, optimizer.params, 1)
    other = AdamW(_params()[:2], lr=1e-2)
    with pytest.raises(ValueError, match="3 tensors for 2 parameters"):
        other.load_state_dict(optimizer.state_dict())


def test_schedule_drives_the_optimizer_like_lambdalr():
    ours, theirs = _params(), _params()
    reference = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.0)
    torch_schedule = torch.optim.lr_scheduler.LambdaLR(reference, lr_schedule("linear", 2, 6))
    optimizer = AdamW(ours, lr=1e-2)
    schedule = Schedule(optimizer, lr_schedule("linear", 2, 6))
    gen = torch.Generator().manual_seed(3)
    for _ in range(6):
        assert schedule.get_last_lr() == pytest.approx(torch_schedule.get_last_lr())
        for a, b in zip(ours, theirs):
            a.grad = b.grad = torch.randn(a.shape, generator=gen)
        optimizer.step()
        reference.step()
        schedule.step()
        torch_schedule.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    restored = Schedule(AdamW(_params(), lr=1e-2), lr_schedule("linear", 2, 6))
    restored.load_state_dict(schedule.state_dict())
    assert restored.get_last_lr() == schedule.get_last_lr()


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine", "constant_with_warmup"])
def test_lr_schedules_match_transformers(kind):
    # grpo_core writes its four schedules itself (importing transformers.optimization costs seconds);
    # they must be transformers' formulas exactly, including the warm-up and end edges.
    from transformers import get_scheduler

    from grpo_core.optim import lr_schedule as schedule_of

    for warmup, total in [(0, 10), (3, 10), (5, 5), (0, 1), (2, 7)]:
        param = torch.nn.Parameter(torch.zeros(1))
        optimizer = torch.optim.SGD([param], lr=1.0)
        scheduler = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total)
        expected = []
        for _ in range(total + 2):
            expected.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        ours = [schedule_of(kind, warmup, total)(step) for step in range(total + 2)]
        assert ours == pytest.approx(expected, abs=1e-12), (warmup, total)
