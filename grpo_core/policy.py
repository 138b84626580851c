"""The policy being trained and its reference, the two models of GRPO.

`Policy.model` is the causal LM whose weights train (a peft model with a `lora:` section);
`Policy.logprobs` scores completions with it (DDP-wrapped under torchrun for the training forward).
The reference exists only when beta > 0, decided here and nowhere else: a frozen copy of the
initial weights for full fine-tuning, or, with LoRA, the same model with its adapter switched off
(grpo_core.lora.reference_mode), so no second copy of the weights is held.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from grpo_core.config import TrainConfig
from grpo_core.loss import CompletionLogprobs
from grpo_core.lora import reference_mode
from grpo_core.model import build_model, frozen_copy
from grpo_core.rollout import Rollout
from grpo_core.runtime import Runtime


class Policy:
    """The trained model and its reference (see the module docstring); built once per run."""

    def __init__(self, cfg: TrainConfig, tokenizer: Any, source: str | None, rt: Runtime) -> None:
        self.rt, self.micro_batch = rt, cfg.per_device_train_batch_size
        self.lora = cfg.lora is not None
        self.model = build_model(cfg.model, tokenizer, source, cfg.lora,
                                 native=cfg.generation_backend == "auto").to(rt.device)
        if cfg.disable_dropout:
            for module in self.model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
        self.model.train()
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        # peft's wrapper forwards to the LM with the LoRA layers injected: score that LM directly.
        lm = self.model.get_base_model() if self.lora else self.model
        self.logprobs = CompletionLogprobs(lm, cfg.temperature, cfg.logprob_chunk_mib)
        self._synced: torch.nn.Module = self.logprobs  # what the training forward calls
        if rt.world_size > 1:
            ids = [rt.device.index] if rt.device.type == "cuda" else None
            self._synced = DistributedDataParallel(self.logprobs, device_ids=ids)
        # The only beta check: no reference when beta == 0. With LoRA it is the policy's own module,
        # scored with the adapter switched off (reference_logprobs).
        self.reference: CompletionLogprobs | None = None
        if cfg.beta != 0.0:
            self.reference = self.logprobs if self.lora else CompletionLogprobs(
                frozen_copy(self.model, rt.autocast_dtype), cfg.temperature, cfg.logprob_chunk_mib)

    def forward(self, part: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies (b, c) of a micro-batch, with grad (through DDP under torchrun)."""
        with self.rt.autocast():
            return self._synced(part.prompt_ids, part.prompt_mask, part.completion_ids, part.completion_mask)

    def accumulating(self, sync: bool) -> contextlib.AbstractContextManager:
        """Around a micro-batch's forward and backward: DDP all-reduces gradients only when `sync`
        (the step's last micro-batch)."""
        if isinstance(self._synced, DistributedDataParallel) and not sync:
            return self._synced.no_sync()
        return contextlib.nullcontext()

    @torch.no_grad()
    def score(self, module: CompletionLogprobs, rollout: Rollout) -> torch.Tensor:
        """Log-probs (B, C) of a rollout under `module`, in micro-batches, without grad."""
        out = torch.zeros(rollout.completion_ids.shape, device=self.rt.device)
        step = self.micro_batch
        for start in range(0, len(rollout), step):
            part = rollout.rows(start, start + step)
            with self.rt.autocast():
                logps, _ = module(part.prompt_ids, part.prompt_mask, part.completion_ids, part.completion_mask)
            out[start:start + step, :logps.size(1)] = logps
        return out

    def reference_logprobs(self, rollout: Rollout) -> torch.Tensor | None:
        """Log-probs (B, C) under the reference; None when there is none (beta == 0)."""
        if self.reference is None:
            return None
        with reference_mode(self.reference) if self.lora else contextlib.nullcontext(self.reference) as reference:
            return self.score(reference, rollout)
