"""TRL 1.16's own GRPO loss on a stub, and the batch both losses are compared on (tests/test_loss.py on
the CPU, tests/test_cuda.py on the GPU). Importing this module needs TRL: import it after importorskip."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import torch
from trl.trainer import grpo_trainer as trl_grpo


def make_batch(seed: int = 0, b: int = 6, c: int = 7, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Drawn on the CPU, then moved: the same values on every device."""
    g = torch.Generator().manual_seed(seed)
    logps = torch.rand(b, c, generator=g).clamp(min=0.05).log()                   # (B, C)
    lengths = torch.tensor([c, 1, 3, c - 1, 5, 2][:b])
    mask = (torch.arange(c)[None, :] < lengths[:, None]).long()                   # (B, C)
    batch = {
        "logps": logps,
        "old": logps + 0.3 * torch.randn(b, c, generator=g),  # far enough for both clips to bind
        "ref": logps + 0.5 * torch.randn(b, c, generator=g),
        "adv": torch.tensor([1.5, -0.7, 0.0, 0.9, -1.2, 0.4][:b]),
        "mask": mask,
    }
    return {k: v.to(device) for k, v in batch.items()}


def trl_loss(batch: dict[str, torch.Tensor], logps: torch.Tensor, *, loss_type: str, beta: float, level: str,
             eps: float, eps_high: float, accum: int, max_len: int, num_items: float,
             with_old: bool) -> tuple[torch.Tensor, dict]:
    """TRL 1.16's own `GRPOTrainer._compute_loss`, called on a stub holding just what it reads."""
    b, c = batch["mask"].shape
    device = batch["mask"].device
    accelerator = SimpleNamespace(num_processes=1, reduce=lambda t, reduction="sum": t, gather=lambda t: t,
                                  gather_for_metrics=lambda t: t)
    stub = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level=level, beta=beta,
        loss_type=loss_type, epsilon_low=eps, epsilon_high=eps_high, use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=accum, max_completion_length=max_len, accelerator=accelerator,
        _entropy_bonus_enabled=False, aux_loss_enabled=False, _metrics=defaultdict(lambda: defaultdict(list)),
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=accum),
    )
    inputs = {"prompt_ids": torch.zeros(b, 2, dtype=torch.long, device=device),
              "prompt_mask": torch.ones(b, 2, dtype=torch.long, device=device),
              "completion_ids": torch.zeros(b, c, dtype=torch.long, device=device), "completion_mask": batch["mask"],
              "advantages": batch["adv"], "ref_per_token_logps": batch["ref"],
              "num_items_in_batch": torch.tensor(num_items, device=device)}
    if with_old:
        inputs["old_per_token_logps"] = batch["old"]
    loss = trl_grpo.GRPOTrainer._compute_loss(stub, None, inputs)
    return loss, stub._metrics["train"]
