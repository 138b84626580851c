"""Run by tests/test_ddp.py under `torchrun --nproc_per_node=2` (CPU, gloo).

    _grpo_core_ddp_worker.py CONFIG OUT_DIR

1. two optimizer steps (loss_type dapo, then grpo) on fixed global rollouts, each rank updating on
   its half of them;
2. a short real training run; then every rank's parameters are compared with rank 0's.
Rank 0 writes OUT_DIR/result.json and OUT_DIR/fixed_step.pt (parameters after part 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from grpo_core.config import load_config
from grpo_core.runtime import close_process_group
from grpo_core.rollout import Rollout, completion_mask
from grpo_core.trainer import Trainer


def fixed_rollout(trainer: Trainer, rows: int, seed: int = 123) -> Rollout:
    """A deterministic batch of `rows` completions (the same on every rank) with advantages and, when
    the config has beta > 0, reference log-probs."""
    g = torch.Generator().manual_seed(seed)
    vocab, pad, eos = len(trainer.tokenizer), trainer.tokenizer.pad_token_id, trainer.tokenizer.eos_token_id
    prompt_ids = torch.randint(3, vocab, (rows, 5), generator=g)
    prompt_mask = (torch.arange(5)[None, :] >= torch.randint(0, 4, (rows, 1), generator=g)).long()
    prompt_ids = prompt_ids.masked_fill(prompt_mask == 0, pad)
    completion_ids = torch.randint(3, vocab, (rows, 6), generator=g)
    ends = torch.randint(0, 6, (rows,), generator=g)
    completion_ids[torch.arange(rows), ends] = eos
    mask = completion_mask(completion_ids, torch.tensor([eos]))
    rollout = Rollout(prompt_ids, prompt_mask, completion_ids, mask, torch.randn(rows, generator=g))
    rollout.ref_logps = trainer.policy.reference_logprobs(rollout)  # None when beta == 0
    return rollout


def fixed_step(trainer: Trainer, rollout: Rollout) -> float:
    """One optimizer step on this rank's share of `rollout`; returns the loss averaged over ranks."""
    share = len(rollout) // trainer.rt.world_size
    mine = rollout.rows(trainer.rt.rank * share, (trainer.rt.rank + 1) * share)
    mine.loss_tokens = float(rollout.completion_mask.sum()) / trainer.rt.world_size
    return trainer.optimize(mine)["loss"]


def fixed_steps(trainer: Trainer) -> list[float]:
    """The losses of the fixed steps of part 1 (the config's loss_type is switched between them)."""
    rows = trainer.cfg.generation_batch_size * trainer.rt.world_size
    losses = []
    for seed, loss_type in [(123, "dapo"), (7, "grpo")]:
        trainer.cfg.loss_type = loss_type
        losses.append(fixed_step(trainer, fixed_rollout(trainer, rows, seed)))
    return losses


def flat_params(trainer: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in trainer.policy.model.parameters()])


def main() -> None:
    config_path, out = sys.argv[1], Path(sys.argv[2])
    trainer = Trainer(load_config(config_path))
    rank, world = trainer.rt.rank, trainer.rt.world_size
    config_loss_type = trainer.cfg.loss_type
    losses = fixed_steps(trainer)
    trainer.cfg.loss_type = config_loss_type
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in trainer.policy.model.state_dict().items()}, out / "fixed_step.pt")
    before = flat_params(trainer).clone()
    summary = trainer.train()
    params = flat_params(trainer)
    gathered = [torch.empty_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    max_diff = max(float((g - gathered[0]).abs().max()) for g in gathered)
    if rank == 0:
        (out / "result.json").write_text(json.dumps(
            {"world_size": world, "fixed_losses": losses, "max_param_diff_across_ranks": max_diff,
             "steps": summary["step"], "moved": float((params - before).abs().max())}))
    close_process_group()


if __name__ == "__main__":
    main()
