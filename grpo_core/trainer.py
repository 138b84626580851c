"""The GRPO loop: rollout -> rewards -> group advantages -> clipped surrogate + KL -> AdamW step.

One step is one optimizer step. Every `num_iterations` steps a new generation batch is sampled:
`per_device_train_batch_size * gradient_accumulation_steps` completions per rank, G per prompt
(as TRL), then split into micro-batches. Under torchrun each rank samples whole groups of its own
prompts; rewards are gathered only for logging and for `scale_rewards: batch`.
With a `lora:` section only the adapter trains, and the KL reference is the same model with the
adapter disabled (grpo_core.lora.reference_mode), so no second copy of the weights is held.
"""

from __future__ import annotations

import contextlib
import math
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from grpo_core import checkpoint as ckpt
from grpo_core.config import TrainConfig
from grpo_core.data import PromptSampler, load_splits
from grpo_core.loss import CompletionLogprobs, group_advantages, grpo_loss, nanstd
from grpo_core.metrics import METRICS_FILE, PLOT_FILE, MetricsLog, average, plot_metrics, truncate_after
from grpo_core.model import build_model, frozen_copy, load_tokenizer, model_source, release_free_heap, setup_runtime
from grpo_core.optim import AdamW, Schedule, lr_schedule
from grpo_core.rollout import Rollout, decode_completions, encode_prompts, generate, generation_config, left_pad
from grpo_rewards.compose import build
from grpo_rewards.errors import UserError
from grpo_rewards.scorer import Sample


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    def __init__(self, config: TrainConfig) -> None:
        cfg = self.cfg = config
        self.rt = setup_runtime(cfg.device, cfg.bf16, cfg.torch_threads)
        self.out = Path(cfg.output_dir)
        seed_everything(cfg.seed)  # the same initial weights on every rank
        self.source = model_source(cfg.model)  # the local directory of an alias / hub id / path
        self.tokenizer = load_tokenizer(cfg.model.tokenizer or self.source, cfg.model.trust_remote_code)
        train, evals = load_splits(cfg.data, cfg.seed)
        self.train_records, self.eval_records = train, evals
        self.train_ids = encode_prompts([r["prompt"] for r in train], self.tokenizer, cfg.max_prompt_length)
        self.eval_ids = encode_prompts([r["prompt"] for r in evals], self.tokenizer, cfg.max_prompt_length)
        if not all(self.train_ids) or not all(self.eval_ids):
            raise UserError("a prompt encodes to zero tokens: the model needs at least one token to continue")
        self._build_models()
        # One fused kernel over all parameters: on this CPU a 20M model's step took 0.019 s against
        # 0.12-0.14 s for a per-tensor loop (measured).
        self.optimizer = AdamW(self.trainable, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                               weight_decay=cfg.weight_decay)
        self.sampler = PromptSampler(len(train), cfg.generation_batch_size // cfg.num_generations,
                                     self.rt.world_size, self.rt.rank, cfg.seed, cfg.data.shuffle)
        self.total_steps = cfg.max_steps or max(1, math.ceil(
            cfg.num_train_epochs * self.sampler.batches_per_epoch)) * cfg.num_iterations
        self.scheduler = Schedule(self.optimizer, lr_schedule(cfg.lr_scheduler_type, cfg.warmup_steps,
                                                              self.total_steps))
        self.reward = build(cfg.rewards, cfg.registry)
        self._build_generation()
        seed_everything(cfg.seed + self.rt.rank)  # each rank its own sampling stream
        self.step, self.iteration, self.rollout = 0, 0, None
        self.rollout_stats: dict[str, float] = {}
        self.window: list[dict[str, float]] = []
        self.last_eval: dict[str, float] = {}
        self.stop_signal: int | None = None
        self.saved_step: int | None = None

    def _build_models(self) -> None:
        """The policy, its log-prob module (DDP-wrapped under torchrun) and, when beta > 0, the reference:
        a frozen copy for full fine-tuning; with LoRA the policy itself, adapter disabled (no second copy)."""
        cfg = self.cfg
        self.policy = build_model(cfg.model, self.tokenizer, self.source, cfg.lora,
                                  native=cfg.generation_backend == "auto").to(self.rt.device)
        if cfg.disable_dropout:
            for module in self.policy.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
        self.policy.train()
        self.lora = cfg.lora is not None
        # The LM with its LoRA layers injected (peft's wrapper forwards to it); the policy itself without LoRA.
        self.lm = self.policy.get_base_model() if self.lora else self.policy
        self.trainable = [p for p in self.policy.parameters() if p.requires_grad]
        self.ref = None  # never loaded when beta == 0
        if cfg.beta != 0.0 and not self.lora:
            self.ref = CompletionLogprobs(frozen_copy(self.policy, self.rt.autocast_dtype), cfg.temperature,
                                          cfg.logprob_chunk_mib)
        self.logprobs = CompletionLogprobs(self.lm, cfg.temperature, cfg.logprob_chunk_mib)
        self.model: torch.nn.Module = self.logprobs
        if self.rt.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.rt.device.index] if self.rt.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.logprobs, device_ids=ids)

    def _build_generation(self) -> None:
        """EOS ids (the tokenizer's and the model's generation config's) and the sampling settings."""
        cfg = self.cfg
        eos = self.policy.generation_config.eos_token_id
        eos = {self.tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos] if eos is not None else [])}
        self.eos_ids = torch.tensor(sorted(eos), device=self.rt.device)
        sampling = dict(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k)
        self.gen_config = generation_config(self.tokenizer, sorted(eos), cfg.max_completion_length, True, **sampling)
        self.eval_gen_config = generation_config(self.tokenizer, sorted(eos), cfg.max_completion_length,
                                                 cfg.eval_do_sample, **sampling)

    # -----------------------------------------------------------------------------------------
    # distributed helpers

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:  # (b, ...) -> (world * b, ...)
        if self.rt.world_size == 1:
            return t
        parts = [torch.empty_like(t) for _ in range(self.rt.world_size)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts)

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.rt.world_size > 1:
            dist.all_reduce(t)
        return t

    # -----------------------------------------------------------------------------------------
    # rollout

    def samples(self, records: list[dict[str, Any]], texts: list[str]) -> list[Sample]:
        out = []
        for record, text in zip(records, texts):
            prompt = record["prompt"]
            completion = text if isinstance(prompt, str) else [{"role": "assistant", "content": text}]
            out.append(Sample(prompt, completion, {k: v for k, v in record.items() if k != "prompt"}))
        return out

    def reward_matrix(self, records: list[dict[str, Any]], texts: list[str]) -> torch.Tensor:
        """(B, 1 + scorers): total then each scorer's value, NaN where None."""
        batch = self.reward.score(self.samples(records, texts))
        columns = [batch.totals] + [[s.value for s in batch.scores[a]] for a in self.reward.aliases]
        rows = [[math.nan if v is None else v for v in row] for row in zip(*columns)]
        return torch.tensor(rows, dtype=torch.float32, device=self.rt.device)

    def make_rollout(self) -> tuple[Rollout, dict[str, float]]:
        cfg, g = self.cfg, self.cfg.num_generations
        prompts = self.sampler.next()
        rows = [self.train_ids[i] for i in prompts for _ in range(g)]
        prompt_ids, prompt_mask = left_pad(rows, self.tokenizer.pad_token_id, self.rt.device)  # (B, P)
        with self.rt.autocast():
            completion_ids, completion_mask = generate(self.policy, prompt_ids, prompt_mask, self.gen_config,
                                                       self.eos_ids, cfg.generation_backend)  # (B, C)
        texts = decode_completions(self.tokenizer, completion_ids, completion_mask)
        rewards = self.reward_matrix([self.train_records[i] for i in prompts for _ in range(g)], texts)
        lengths = completion_mask.sum(-1)                                                    # (B,)
        local = torch.cat([rewards, lengths[:, None].float(), prompt_mask.sum(-1, keepdim=True).float()], 1)
        everyone = self.gather_rows(local)                                                   # (world*B, S+3)
        advantages, zero_std = group_advantages(everyone[:, 0], g, cfg.scale_rewards)
        b = len(rows)
        advantages = advantages[self.rt.rank * b:(self.rt.rank + 1) * b]
        if cfg.mask_truncated_completions:
            ended = torch.isin(completion_ids, self.eos_ids).any(-1)
            completion_mask = completion_mask * ended[:, None]
        rollout = Rollout(prompt_ids, prompt_mask, completion_ids, completion_mask, advantages)
        rollout.ref_logps = self.reference_logprobs(rollout)
        if cfg.num_iterations > 1:  # with one update per batch, old = logp.detach() (never recomputed)
            rollout.old_logps = self.score_logprobs(self.logprobs, rollout)
        self.dapo_tokens = float(self.all_sum(completion_mask.sum().float())) / self.rt.world_size
        totals = everyone[:, 0]
        stats = {"reward": totals.nanmean(), "reward_std": nanstd(totals), "completion_length": everyone[:, -2].mean(),
                 "frac_reward_zero_std": zero_std.float().mean(), "tokens": everyone[:, -2:].sum()}
        stats |= {f"reward/{a}": everyone[:, 1 + i].nanmean() for i, a in enumerate(self.reward.aliases)}
        return rollout, dict(zip(stats, torch.stack(list(stats.values())).tolist()))

    def reference_logprobs(self, rollout: Rollout) -> torch.Tensor | None:
        """Log-probs (B, C) under the reference policy; None when beta == 0."""
        if self.cfg.beta == 0.0:
            return None
        if not self.lora:
            return self.score_logprobs(self.ref, rollout)
        from grpo_core.lora import reference_mode

        with reference_mode(self.logprobs) as base:  # the same weights, adapter switched off
            return self.score_logprobs(base, rollout)

    @torch.no_grad()
    def score_logprobs(self, module: CompletionLogprobs, rollout: Rollout) -> torch.Tensor:
        """Log-probs (B, C) of a rollout under `module`, in micro-batches, without grad."""
        out = torch.zeros(rollout.completion_ids.shape, device=self.rt.device)
        step = self.cfg.per_device_train_batch_size
        for start in range(0, len(rollout), step):
            part = rollout.rows(start, start + step)
            with self.rt.autocast():
                logps, _ = module(part.prompt_ids, part.prompt_mask, part.completion_ids, part.completion_mask)
            out[start:start + step, :logps.size(1)] = logps
        return out

    # -----------------------------------------------------------------------------------------
    # update

    def optimize(self, rollout: Rollout) -> dict[str, float]:
        """One optimizer step over a generation batch, in micro-batches; returns rank-averaged stats."""
        cfg = self.cfg
        micro = cfg.per_device_train_batch_size
        starts = list(range(0, len(rollout), micro))
        totals = torch.zeros(4, device=self.rt.device)  # loss, kl, clip_ratio, entropy
        weights = torch.tensor([1.0] + [1.0 / len(starts)] * 3, device=self.rt.device)  # loss is pre-divided
        for k, start in enumerate(starts):
            part = rollout.rows(start, start + micro)
            last = k == len(starts) - 1
            no_sync = self.model.no_sync() if self.rt.world_size > 1 and not last else contextlib.nullcontext()
            with no_sync:
                with self.rt.autocast():
                    logps, entropy = self.model(part.prompt_ids, part.prompt_mask, part.completion_ids,
                                                part.completion_mask)                       # (b, c)
                release_free_heap(self.rt.device)  # before the backward pass, the step's peak
                loss, st = grpo_loss(
                    logps, part.old_logps, part.ref_logps, part.advantages, part.completion_mask,
                    loss_type=cfg.loss_type, beta=cfg.beta, epsilon=cfg.epsilon, epsilon_high=cfg.clip_high,
                    importance_sampling_level=cfg.importance_sampling_level,
                    max_completion_length=cfg.max_completion_length,
                    accumulation_steps=len(starts), dapo_tokens=self.dapo_tokens)
                loss.backward()
            mask = part.completion_mask
            mean_entropy = (entropy.detach() * mask).sum() / mask.sum().clamp(min=1)
            totals += torch.stack([loss.detach(), st["kl"], st["clip_ratio"], mean_entropy]).float() * weights
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.trainable, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf"))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        totals = self.all_sum(totals) / self.rt.world_size
        loss, kl, clip, entropy = totals.tolist()
        return {"loss": loss, "kl": kl, "clip_ratio": clip, "entropy": entropy, "grad_norm": float(grad_norm),
                "learning_rate": lr}

    # -----------------------------------------------------------------------------------------
    # evaluation

    def evaluate(self) -> dict[str, float]:
        """Mean reward (total and per scorer) of one completion per held-out prompt, over all ranks."""
        mine = list(range(self.rt.rank, len(self.eval_records), self.rt.world_size))
        width = 1 + len(self.reward.aliases)
        sums = torch.zeros(2 * width + 2, device=self.rt.device)  # value sums, counts, length sum, prompts
        for start in range(0, len(mine), self.cfg.eval_batch_size):
            chunk = mine[start:start + self.cfg.eval_batch_size]
            ids, mask = left_pad([self.eval_ids[i] for i in chunk], self.tokenizer.pad_token_id, self.rt.device)
            with self.rt.autocast():
                completion_ids, completion_mask = generate(self.policy, ids, mask, self.eval_gen_config, self.eos_ids,
                                                           self.cfg.generation_backend)
            texts = decode_completions(self.tokenizer, completion_ids, completion_mask)
            values = self.reward_matrix([self.eval_records[i] for i in chunk], texts)        # (b, width)
            sums[:width] += values.nan_to_num(0.0).sum(0)
            sums[width:2 * width] += (~values.isnan()).sum(0)
            sums[-2] += completion_mask.sum()
            sums[-1] += len(chunk)
        sums = self.all_sum(sums).tolist()
        names = ["eval/reward"] + [f"eval/{a}" for a in self.reward.aliases]
        out = {n: sums[i] / sums[width + i] for i, n in enumerate(names) if sums[width + i] > 0}
        out["eval/completion_length"] = sums[-2] / max(sums[-1], 1)
        return out

    # -----------------------------------------------------------------------------------------
    # checkpoints

    def save(self) -> Path:
        pending = self.rollout is not None and self.iteration < self.cfg.num_iterations
        state = {"step": self.step, "iteration": self.iteration, "sampler": self.sampler.state(),
                 "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                 "window": self.window, "world_size": self.rt.world_size, "last_eval": self.last_eval}
        rank_state = {"rollout": self.rollout.state() if pending else None,
                      "rollout_stats": self.rollout_stats, "dapo_tokens": getattr(self, "dapo_tokens", 1.0)}
        self.saved_step = self.step
        # With LoRA the peft model saves the adapter alone: the frozen base is rebuilt from the model
        # source on resume, so checkpoints are a few MB instead of a full copy of the weights.
        weights = self.policy if self.lora else self.lm
        return ckpt.save_checkpoint(self.out, self.step, weights, self.tokenizer, state, rank_state,
                                    self.rt.rank, self.rt.world_size, self.cfg.save_total_limit)

    def save_final(self, directory: Path) -> Path:
        """The trained model and tokenizer, atomically; with LoRA merged or the adapter alone (`lora.save`)."""
        from grpo_core.lora import save_model

        return save_model(self.policy, self.tokenizer, directory, merged=not self.lora or self.cfg.lora.merge_on_save)

    def restore(self, directory: Path) -> None:
        state, rank_state = ckpt.load_checkpoint(directory, self.policy if self.lora else self.lm, self.rt.rank)
        if state["world_size"] != self.rt.world_size:
            raise UserError(f"{directory} was written by {state['world_size']} ranks; resume with as many")
        self.step, self.iteration = state["step"], state["iteration"]
        self.saved_step = self.step
        self.sampler.load_state(state["sampler"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.window, self.last_eval = state["window"], state["last_eval"]
        pending = rank_state["rollout"]
        self.rollout = Rollout(**pending) if pending is not None else None
        self.rollout_stats, self.dapo_tokens = rank_state["rollout_stats"], rank_state["dapo_tokens"]

    def prepare_output_dir(self, resume: bool) -> Path | None:
        """The checkpoint to resume from, if any; refuses to mix a fresh run into an old one."""
        found = ckpt.checkpoints(self.out)
        if resume:
            return found[-1] if found else None
        if found and not self.cfg.overwrite_output_dir:
            raise UserError(f"{self.out} already has checkpoints ({found[-1].name}); pass --resume to continue "
                            "that run, or set overwrite_output_dir: true to start afresh")
        if self.rt.is_main:
            for old in found:
                shutil.rmtree(old, ignore_errors=True)
            (self.out / METRICS_FILE).unlink(missing_ok=True)
        return None

    # -----------------------------------------------------------------------------------------
    # the loop

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_signal = signum
        signal.signal(signum, signal.SIG_DFL)  # a second signal stops at once (checkpoints are atomic)

    def _should_stop(self) -> bool:
        flag = torch.tensor([float(self.stop_signal or 0)], device=self.rt.device)
        if self.rt.world_size > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() and self.stop_signal is None:
            self.stop_signal = int(flag.item())
        return bool(flag.item())

    def train_step(self) -> dict[str, float]:
        start = time.perf_counter()
        fresh = self.rollout is None or self.iteration >= self.cfg.num_iterations
        if fresh:
            self.rollout, self.rollout_stats = self.make_rollout()
            self.iteration = 0
        stats = self.optimize(self.rollout)
        self.iteration += 1
        self.step += 1
        seconds = time.perf_counter() - start
        if fresh:  # reward metrics belong to the step that sampled them
            stats |= {k: v for k, v in self.rollout_stats.items() if k != "tokens"}
        stats |= {"step_seconds": seconds, "tokens_per_second": self.rollout_stats.get("tokens", 0.0) / seconds}
        return stats

    def _log_step(self, log: MetricsLog | None) -> None:
        """After a step: log the window's averages, evaluate and checkpoint when due."""
        cfg, entry = self.cfg, {}
        last = self.step == self.total_steps
        if self.step % cfg.logging_steps == 0 or last:
            entry, self.window = average(self.window), []
        if cfg.eval_steps and self.eval_records and (self.step % cfg.eval_steps == 0 or last):
            self.last_eval = self.evaluate()
            entry |= self.last_eval
            if log:
                log.say(f"step {self.step}: " + _brief(entry))
        if log:
            log.log(self.step, entry) if entry else log.advance(self.step)
        if cfg.save_steps and self.step % cfg.save_steps == 0:
            self.save()

    def _start(self, resume: bool) -> MetricsLog | None:
        """Resume if asked (and possible), open the metric sinks (rank 0), evaluate at step 0."""
        self.out.mkdir(parents=True, exist_ok=True)
        start_from = self.prepare_output_dir(resume)
        if start_from is not None:
            self.restore(start_from)
            if self.rt.is_main:
                truncate_after(self.out / METRICS_FILE, self.step)
        log = MetricsLog(self.out, self.total_steps, "tensorboard" in self.cfg.report_to, self.cfg.progress,
                         self.step) if self.rt.is_main else None
        if start_from is not None and log:
            log.say(f"resumed from {start_from} at step {self.step}")
        if self.cfg.eval_steps and self.eval_records and self.step == 0:
            self.last_eval = self.evaluate()
            if log:
                log.log(0, self.last_eval)
                log.say("step 0: " + _brief(self.last_eval))
        return log

    def train(self, resume: bool = False) -> dict[str, Any]:
        """Train to `total_steps`, or until SIGINT/SIGTERM (then checkpoint and return)."""
        handlers = {}
        with contextlib.suppress(ValueError):  # signal handlers only install on the main thread
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self._on_signal)
        started, log = time.perf_counter(), None
        try:
            log = self._start(resume)
            while self.step < self.total_steps and not self._should_stop():
                self.window.append(self.train_step())
                self._log_step(log)
            if (self.stop_signal is not None or self.cfg.save_steps) and self.saved_step != self.step:
                self.save()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            if log:
                log.close()
        return self._finish(time.perf_counter() - started)

    def _finish(self, seconds: float) -> dict[str, Any]:
        summary: dict[str, Any] = {"step": self.step, "total_steps": self.total_steps, "seconds": seconds,
                                   "output_dir": str(self.out), "eval": self.last_eval,
                                   "interrupted": signal.Signals(self.stop_signal).name if self.stop_signal else None}
        if self.rt.is_main and self.stop_signal is None:
            summary["final_model"] = str(self.save_final(self.out / "final"))
            if self.cfg.plot:
                summary["plot"] = str(plot_metrics(self.out / METRICS_FILE, self.out / PLOT_FILE))
        summary["metrics_file"] = str(self.out / METRICS_FILE)
        self.reward.close()
        return summary


def _brief(metrics: dict[str, float]) -> str:
    keys = [k for k in metrics if k in ("reward", "kl") or k.startswith("eval/")]
    return "  ".join(f"{k}={metrics[k]:.3f}" for k in keys)


def train(config: TrainConfig, resume: bool = False) -> dict[str, Any]:
    """Run a whole training; returns a summary (steps, eval metrics, output paths)."""
    return Trainer(config).train(resume=resume)
