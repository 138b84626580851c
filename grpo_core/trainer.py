"""The GRPO loop: rollout -> rewards -> group advantages -> clipped surrogate + KL -> AdamW step.

One step is one optimizer step. Every `num_iterations` steps a new generation batch is sampled:
`per_device_train_batch_size * gradient_accumulation_steps` completions per rank, G per prompt
(as TRL), then split into micro-batches. Under torchrun each rank samples whole groups of its own
prompts; rewards are gathered for the advantages' group statistics and for logging. The parts:
grpo_core.prompts (what the model is given), grpo_core.policy (the model and its reference),
grpo_core.rollout (generation and the `Rollout`), grpo_core.loss (the objective table),
grpo_core.checkpoint (saving and resuming).
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grpo_core import checkpoint as ckpt
from grpo_core.config import TrainConfig
from grpo_core.data import PromptSampler, load_splits
from grpo_core.lora import save_model
from grpo_core.loss import grpo_loss, nanstd
from grpo_core.metrics import METRICS_FILE, PLOT_FILE, MetricsLog, average, plot_metrics, truncate_after
from grpo_core.model import load_tokenizer, model_source
from grpo_core.optim import AdamW, Schedule, lr_schedule
from grpo_core.policy import Policy
from grpo_core.prompts import Prompts, eos_token_ids
from grpo_core.rollout import Rollout, generate, generation_config, left_pad
from grpo_core.runtime import release_free_heap, setup_runtime
from grpo_rewards.advantages import advantages
from grpo_rewards.columns import columns_of
from grpo_rewards.compose import build
from grpo_rewards.diagnostics import StepDiagnostics
from grpo_rewards.errors import UserError
from grpo_rewards.group import consecutive_groups
from grpo_rewards.scorer import RewardBatch


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
        source = model_source(cfg.model)  # the local directory of an alias / hub id / path
        self.tokenizer = load_tokenizer(cfg.model.tokenizer or source, cfg.model.trust_remote_code)
        self.prompts = Prompts(self.tokenizer, cfg.max_prompt_length)  # text raw, chat messages templated
        self.train_records, self.eval_records = load_splits(cfg.data, cfg.seed)
        self.train_ids = self.prompts.encode([r["prompt"] for r in self.train_records])
        self.eval_ids = self.prompts.encode([r["prompt"] for r in self.eval_records])
        if not all(self.train_ids) or not all(self.eval_ids):
            raise UserError("a prompt encodes to zero tokens: the model needs at least one token to continue")
        self.policy = Policy(cfg, self.tokenizer, source, self.rt)
        self.optimizer = AdamW(self.policy.trainable, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                               weight_decay=cfg.weight_decay)
        self.sampler = PromptSampler(len(self.train_records), cfg.generation_batch_size // cfg.num_generations,
                                     self.rt.world_size, self.rt.rank, cfg.seed, cfg.data.shuffle)
        self.total_steps = cfg.max_steps or max(1, math.ceil(
            cfg.num_train_epochs * self.sampler.batches_per_epoch)) * cfg.num_iterations
        self.scheduler = Schedule(self.optimizer, lr_schedule(cfg.lr_scheduler_type, cfg.warmup_steps,
                                                              self.total_steps))
        self.reward = build(cfg.rewards, cfg.registry)
        # A field the spec reads that the data lacks altogether would train on the other terms alone.
        self.reward.check_columns(columns_of(self.train_records),
                                  f"data {cfg.data.path or cfg.data.dataset or cfg.data.task}")
        self.reward_diagnostics = StepDiagnostics(enabled=self.rt.is_main)
        eos = eos_token_ids(self.policy.model.generation_config, self.tokenizer)
        self.eos_ids = torch.tensor(eos, device=self.rt.device)                          # (E,)
        sampling = dict(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k)
        self.gen_config = generation_config(self.tokenizer, eos, cfg.max_completion_length, True, **sampling)
        self.eval_gen_config = generation_config(self.tokenizer, eos, cfg.max_completion_length,
                                                 cfg.eval_do_sample, **sampling)
        seed_everything(cfg.seed + self.rt.rank)  # each rank its own sampling stream
        self.step, self.iteration = 0, 0
        self.rollout: Rollout | None = None  # the generation batch the next steps train on
        self.rollout_stats: dict[str, float] = {}
        self.window: list[dict[str, float]] = []
        self.last_eval: dict[str, float] = {}
        self.stop_signal: int | None = None
        self.saved_step: int | None = None

    # -----------------------------------------------------------------------------------------
    # rollout

    def complete(self, records: list[dict[str, Any]], ids: list[list[int]], gen_config: Any,
                 group_size: int | None = None) -> tuple[Rollout, RewardBatch, list[str]]:
        """Completions of encoded prompts, scored: a Rollout whose advantages are still zero, the
        reward batch and the completions' text (for the reward diagnostics)."""
        prompt_ids, prompt_mask = left_pad(ids, self.tokenizer.pad_token_id, self.rt.device)     # (B, P)
        with self.rt.autocast():
            completion_ids, completion_mask = generate(self.policy.model, prompt_ids, prompt_mask, gen_config,
                                                       self.eos_ids, self.cfg.generation_backend)  # (B, C)
        samples = self.prompts.samples(records, self.prompts.decode(completion_ids, completion_mask))
        rollout = Rollout(prompt_ids, prompt_mask, completion_ids, completion_mask,
                          torch.zeros(len(ids), device=self.rt.device))
        batch = self.reward.score(samples, group_size)
        rollout.rewards, rollout.reward_sums, rollout.scorer_rewards = self.reward_columns(batch)
        return rollout, batch, [s.completion_text for s in samples]

    def reward_columns(self, batch: RewardBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Totals (B,), their sums before any group normalisation (B,) and each scorer's values (B, S),
        NaN where None."""
        column = lambda values: torch.tensor([math.nan if v is None else v for v in values],  # noqa: E731
                                             dtype=torch.float32, device=self.rt.device)
        per_scorer = [column([s.value for s in batch.scores[a]]) for a in self.reward.aliases]
        totals = column(batch.totals)                                                    # (B,)
        sums = totals if batch.weighted_sums is None else column(batch.weighted_sums)    # (B,)
        return totals, sums, torch.stack(per_scorer, 1) if per_scorer else totals.new_zeros(len(totals), 0)

    def make_rollout(self) -> tuple[Rollout, dict[str, float]]:
        """A generation batch with rewards, advantages and (when needed) old and reference log-probs."""
        cfg, g, rank = self.cfg, self.cfg.num_generations, self.rt.rank
        prompts = [i for i in self.sampler.next() for _ in range(g)]
        rollout, batch, texts = self.complete([self.train_records[i] for i in prompts],
                                              [self.train_ids[i] for i in prompts], self.gen_config, g)
        everyone = self.rt.gather_columns({                                               # (world * B, ...)
            "total": rollout.rewards, "reward": rollout.reward_sums, "scorers": rollout.scorer_rewards,
            "completion_length": rollout.completion_mask.sum(-1), "prompt_length": rollout.prompt_mask.sum(-1)})
        totals = [None if math.isnan(t) else t for t in everyone["total"].tolist()]
        adv, zero = advantages(totals, consecutive_groups(len(totals), g), self.reward.spec.aggregate,
                               cfg.scale_rewards)
        zero_std = torch.tensor(zero, device=self.rt.device)                              # (world * B,)
        rollout.advantages = torch.tensor(adv[rank * len(prompts):(rank + 1) * len(prompts)],
                                          dtype=torch.float32, device=self.rt.device)     # (B,)
        if cfg.mask_truncated_completions:
            ended = torch.isin(rollout.completion_ids, self.eos_ids).any(-1)
            rollout.completion_mask = rollout.completion_mask * ended[:, None]
        tokens = self.rt.all_sum(rollout.completion_mask.sum().float())
        rollout.loss_tokens = float(tokens) / self.rt.world_size
        rollout.ref_logps = self.policy.reference_logprobs(rollout)
        if cfg.num_iterations > 1:  # with one update per batch, old = logp.detach() (never recomputed)
            rollout.old_logps = self.policy.score(self.policy.logprobs, rollout)
        sums, lengths = everyone["reward"], everyone["completion_length"]
        stats = {"reward": sums.nanmean(), "reward_std": nanstd(sums), "completion_length": lengths.mean(),
                 "frac_reward_zero_std": zero_std.float().mean(),
                 "tokens": lengths.sum() + everyone["prompt_length"].sum()}
        stats |= {f"reward/{a}": everyone["scorers"][:, i].nanmean() for i, a in enumerate(self.reward.aliases)}
        diagnostics = self.reward_diagnostics.metrics(self.reward, batch, texts)  # this rank's batch
        return rollout, dict(zip(stats, torch.stack(list(stats.values())).tolist())) | diagnostics

    # -----------------------------------------------------------------------------------------
    # update

    def optimize(self, rollout: Rollout) -> dict[str, float]:
        """One optimizer step over a generation batch, in micro-batches; returns rank-averaged stats."""
        cfg = self.cfg
        micro = cfg.per_device_train_batch_size
        starts = list(range(0, len(rollout), micro))
        sums = {name: torch.zeros((), device=self.rt.device) for name in ("loss", "kl", "clip_ratio", "entropy")}
        for k, start in enumerate(starts):
            part = rollout.rows(start, start + micro)
            with self.policy.accumulating(sync=k == len(starts) - 1):
                logps, entropy = self.policy.forward(part)                                 # (b, c)
                release_free_heap(self.rt.device)  # before the backward pass, the step's peak
                loss, st = grpo_loss(
                    logps, part.old_logps, part.ref_logps, part.advantages, part.completion_mask,
                    loss_type=cfg.loss_type, beta=cfg.beta, epsilon=cfg.epsilon, epsilon_high=cfg.clip_high,
                    importance_sampling_level=cfg.importance_sampling_level,
                    max_completion_length=cfg.max_completion_length,
                    accumulation_steps=len(starts), dapo_tokens=rollout.loss_tokens)
                loss.backward()
            mask = part.completion_mask
            sums["loss"] += loss.detach()  # already divided for accumulation; the rest are means over micro-batches
            sums["kl"] += st["kl"] / len(starts)
            sums["clip_ratio"] += st["clip_ratio"] / len(starts)
            sums["entropy"] += (entropy.detach() * mask).sum() / mask.sum().clamp(min=1) / len(starts)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.policy.trainable, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf"))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        stats = {k: v / self.rt.world_size for k, v in self.rt.sum_over_ranks(sums).items()}
        return stats | {"grad_norm": float(grad_norm), "learning_rate": lr}

    # -----------------------------------------------------------------------------------------
    # evaluation

    def evaluate(self) -> dict[str, float]:
        """Mean reward (total and per scorer) of one completion per held-out prompt, over all ranks."""
        mine = list(range(self.rt.rank, len(self.eval_records), self.rt.world_size))
        width = 1 + len(self.reward.aliases)
        zero = lambda *shape: torch.zeros(shape, device=self.rt.device)  # noqa: E731
        sums = {"values": zero(width), "counts": zero(width), "completion_tokens": zero(), "prompts": zero()}
        for start in range(0, len(mine), self.cfg.eval_batch_size):
            chunk = mine[start:start + self.cfg.eval_batch_size]
            rollout, _, _ = self.complete([self.eval_records[i] for i in chunk],
                                          [self.eval_ids[i] for i in chunk], self.eval_gen_config)
            values = torch.cat([rollout.reward_sums[:, None], rollout.scorer_rewards], 1)   # (b, width)
            sums["values"] += values.nan_to_num(0.0).sum(0)
            sums["counts"] += (~values.isnan()).sum(0)
            sums["completion_tokens"] += rollout.completion_mask.sum()
            sums["prompts"] += len(chunk)
        sums = self.rt.sum_over_ranks(sums)
        names = ["eval/reward"] + [f"eval/{a}" for a in self.reward.aliases]
        out = {n: v / c for n, v, c in zip(names, sums["values"], sums["counts"]) if c > 0}
        out["eval/completion_length"] = sums["completion_tokens"] / max(sums["prompts"], 1)
        return out

    # -----------------------------------------------------------------------------------------
    # checkpoints

    def save(self) -> Path:
        pending = self.rollout is not None and self.iteration < self.cfg.num_iterations
        state = {"step": self.step, "iteration": self.iteration, "sampler": self.sampler.state(),
                 "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                 "window": self.window, "world_size": self.rt.world_size, "last_eval": self.last_eval}
        rank_state = {"rollout": self.rollout.state() if pending else None, "rollout_stats": self.rollout_stats}
        self.saved_step = self.step
        # With LoRA the peft model saves the adapter alone: the frozen base is rebuilt from the model
        # source on resume, so checkpoints are a few MB instead of a full copy of the weights.
        return ckpt.save_checkpoint(self.out, self.step, self.policy.model, self.tokenizer, state, rank_state,
                                    self.rt.rank, self.rt.world_size, self.cfg.save_total_limit)

    def save_final(self, directory: Path) -> Path:
        """The trained model and tokenizer, atomically; with LoRA merged or the adapter alone (`lora.save`)."""
        merged = not self.policy.lora or self.cfg.lora.merge_on_save
        return save_model(self.policy.model, self.tokenizer, directory, merged=merged)

    def restore(self, directory: Path) -> None:
        state, rank_state = ckpt.load_checkpoint(directory, self.policy.model, self.rt.rank)
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
        self.rollout_stats = rank_state["rollout_stats"]

    # -----------------------------------------------------------------------------------------
    # the loop

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_signal = signum
        signal.signal(signum, signal.SIG_DFL)  # a second signal stops at once (checkpoints are atomic)

    def _should_stop(self) -> bool:
        flag = self.rt.all_max(torch.tensor([float(self.stop_signal or 0)], device=self.rt.device))
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
        if log and entry:
            log.say(f"step {self.step}: " + _brief(entry))
        if log:
            log.log(self.step, entry) if entry else log.advance(self.step)
        if cfg.save_steps and self.step % cfg.save_steps == 0:
            self.save()

    def _start(self, resume: bool) -> MetricsLog | None:
        """Resume if asked (and possible), open the metric sinks (rank 0), evaluate at step 0."""
        self.out.mkdir(parents=True, exist_ok=True)
        start_from = ckpt.prepare_output_dir(self.out, resume, self.cfg.overwrite_output_dir, self.rt.is_main)
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
        """Train to `total_steps`, or until SIGINT/SIGTERM (then checkpoint and return).

        `resume` on a run that already reached `total_steps` does nothing and says so (`complete`).
        """
        done = ckpt.completed_step(self.out) if resume else None
        if done is not None and done >= self.total_steps:
            self.reward.close()
            return {"step": done, "total_steps": self.total_steps, "output_dir": str(self.out), "complete": True,
                    "interrupted": None}
        self.reward.open()  # its workers boot while the first completions are generated
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
            ckpt.mark_complete(self.out, self.step)
            if self.cfg.plot:
                summary["plot"] = str(plot_metrics(self.out / METRICS_FILE, self.out / PLOT_FILE))
        summary["metrics_file"] = str(self.out / METRICS_FILE)
        self.reward.close()
        return summary


def _brief(metrics: dict[str, float]) -> str:
    """The console line of a logged step: reward (total and per scorer), kl, step time, eval."""
    keys = [k for k in metrics if k in ("reward", "kl", "step_seconds") or k.startswith(("reward/", "eval/"))]
    return "  ".join(f"{k}={metrics[k]:.3f}" for k in keys)


def train(config: TrainConfig, resume: bool = False) -> dict[str, Any]:
    """Run a whole training; returns a summary (steps, eval metrics, output paths)."""
    return Trainer(config).train(resume=resume)
