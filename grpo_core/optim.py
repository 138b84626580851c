"""AdamW and the learning-rate schedules, without torch.optim.

Why hand-written: constructing any `torch.optim` optimizer imports torch._dynamo (its
`add_param_group` is wrapped to disable compilation), and with it sympy: a large share of a small
run's memory and start-up (figures: docs/benchmarks.md, "grpo_core's measured choices"). The update
is the kernel `torch.optim.AdamW(fused=True)` runs (`torch._fused_adamw_`), with the same
per-tensor formula as a fallback; tests/test_optim.py checks both against torch.optim.AdamW.
The schedules are transformers' formulas (importing `transformers.optimization` also imports
peft, slow to start); a test compares them with `get_scheduler`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

_FUSED_DEVICES = ("cpu", "cuda")


def lr_schedule(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    """The learning-rate factor at optimizer step `step` (0-based), as transformers' schedule of that name."""
    def factor(step: int) -> float:
        if kind == "constant":
            return 1.0
        if step < warmup:
            return step / max(1, warmup)
        if kind == "constant_with_warmup":
            return 1.0
        if kind == "linear":
            return max(0.0, (total - step) / max(1, total - warmup))
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))  # cosine, half a cycle

    return factor


class AdamW:
    """AdamW (Loshchilov & Hutter: decoupled weight decay) over a flat list of parameters, one group.

    State (the two moments and the step count) is created at the first step, as torch.optim does.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.steps = 0
        self.exp_avg: list[torch.Tensor] = []
        self.exp_avg_sq: list[torch.Tensor] = []

    @torch.no_grad()
    def step(self) -> None:
        if not self.exp_avg:
            self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
            self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps += 1
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        by_device: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i in live:
            by_device.setdefault((self.params[i].device, self.params[i].dtype), []).append(i)
        for (device, dtype), index in by_device.items():
            params = [self.params[i] for i in index]
            grads = [p.grad for p in params]
            exp_avg, exp_avg_sq = [self.exp_avg[i] for i in index], [self.exp_avg_sq[i] for i in index]
            if device.type in _FUSED_DEVICES and dtype.is_floating_point and hasattr(torch, "_fused_adamw_"):
                steps = [torch.tensor(float(self.steps), device=device) for _ in index]
                torch._fused_adamw_(params, grads, exp_avg, exp_avg_sq, [], steps, lr=self.lr, beta1=self.betas[0],
                                    beta2=self.betas[1], weight_decay=self.weight_decay, eps=self.eps,
                                    amsgrad=False, maximize=False)
            else:
                for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
                    self._update(p, g, m, v)

    def _update(self, p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> None:
        beta1, beta2 = self.betas
        p.mul_(1 - self.lr * self.weight_decay)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        bias1, bias2 = 1 - beta1 ** self.steps, 1 - beta2 ** self.steps
        denom = (v.sqrt() / math.sqrt(bias2)).add_(self.eps)
        p.addcdiv_(m, denom, value=-self.lr / bias1)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "lr": self.lr, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.lr = state["steps"], state["lr"]
        if state["exp_avg"] and len(state["exp_avg"]) != len(self.params):
            raise ValueError(f"optimizer state holds {len(state['exp_avg'])} tensors for {len(self.params)} parameters")
        self.exp_avg = [t.to(p.device) for t, p in zip(state["exp_avg"], self.params)]
        self.exp_avg_sq = [t.to(p.device) for t, p in zip(state["exp_avg_sq"], self.params)]


class Schedule:
    """Sets the optimizer's lr to `base_lr * factor(step)` (LambdaLR's contract, without torch.optim)."""

    def __init__(self, optimizer: AdamW, factor: Callable[[int], float]) -> None:
        self.optimizer, self.factor, self.base_lr = optimizer, factor, optimizer.lr
        self.last_step = 0
        optimizer.lr = self.base_lr * factor(0)

    def get_last_lr(self) -> list[float]:
        return [self.optimizer.lr]

    def step(self) -> None:
        self.last_step += 1
        self.optimizer.lr = self.base_lr * self.factor(self.last_step)

    def state_dict(self) -> dict[str, Any]:
        return {"last_step": self.last_step, "base_lr": self.base_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_step, self.base_lr = state["last_step"], state["base_lr"]
        self.optimizer.lr = self.base_lr * self.factor(self.last_step)
