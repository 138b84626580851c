"""The same GRPO recipe with TRL's GRPOTrainer: a grpo-train config's data, rewards (through `as_trl()`),
LoRA and hyper-parameters, stopped at a wall-clock budget, with an adapter checkpoint every few steps
for `grpo-train eval` (held-out accuracy against time).

    .venv/bin/python scripts/trl_recipe.py examples/smollm2_rg.yaml --seed 1 --budget-minutes 45 \\
        --save-steps 20 --out outputs/rg_experiment/trl_seed_1

Writes in --out: checkpoint-<step>/ (adapters), clock.jsonl (step, wall and CPU seconds since the
start of training, one line per step). What TRL's config has no field for is said when the run starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def trl_arguments(cfg: Any, out: Path, save_steps: int) -> dict[str, Any]:
    """GRPOConfig keyword arguments for a validated grpo-train config (same names, same meaning)."""
    from grpo_rewards.compose import build
    from grpo_rewards.integrations.trl import trl_config_kwargs

    return dict(
        output_dir=str(out), max_steps=cfg.max_steps, per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps, num_generations=cfg.num_generations,
        learning_rate=cfg.learning_rate, lr_scheduler_type=cfg.lr_scheduler_type, warmup_steps=cfg.warmup_steps,
        beta=cfg.beta, loss_type=cfg.loss_type, temperature=cfg.temperature, top_p=cfg.top_p,
        max_completion_length=cfg.max_completion_length, seed=cfg.seed, use_cpu=True, bf16=bool(cfg.bf16),
        gradient_checkpointing=cfg.model.gradient_checkpointing, logging_steps=1, report_to=[], disable_tqdm=True,
        save_strategy="steps", save_steps=save_steps, save_only_model=True,
        **trl_config_kwargs(build(cfg.rewards, cfg.registry)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a grpo-train config (e.g. examples/smollm2_rg.yaml)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget-minutes", type=float, default=45.0, help="stop training after this wall time")
    parser.add_argument("--save-steps", type=int, default=20, help="an adapter checkpoint every N steps")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--set", action="append", default=[], help="override a config value (KEY=VALUE)")
    args = parser.parse_args(argv)

    import datasets
    import torch
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_core.config import load_config
    from grpo_core.data import load_splits
    from grpo_core.hub import resolve_model
    from grpo_rewards.compose import build

    cfg = load_config(args.config, [f"seed={args.seed}", *args.set])
    if cfg.lora is None:
        sys.exit("trl_recipe: the config has no lora section (this runner trains LoRA adapters only)")
    torch.set_num_threads(cfg.torch_threads or 1)
    print(f"trl_recipe: not mapped to TRL: max_prompt_length={cfg.max_prompt_length} (TRL 1.16 has no field), "
          f"eval_steps (evaluate the checkpoints with grpo-train eval)", file=sys.stderr)
    train, _ = load_splits(cfg.data, cfg.seed)
    model_dir = resolve_model(cfg.model.name_or_path)
    reward_funcs, _ = build(cfg.rewards, cfg.registry).as_trl(cfg.num_generations)
    lora = cfg.lora
    peft_config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                             target_modules=lora.target_modules, task_type="CAUSAL_LM")
    clock_path = args.out / "clock.jsonl"
    args.out.mkdir(parents=True, exist_ok=True)

    class Clock(TrainerCallback):
        """Wall and CPU seconds at each step's end; stops training when the budget is spent."""

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            self.wall, self.cpu = time.perf_counter(), time.process_time()

        def on_step_end(self, _args: Any, state: Any, control: Any, **__: Any) -> None:
            wall = time.perf_counter() - self.wall
            with open(clock_path, "a", encoding="utf-8") as f:  # appended per step: a killed run keeps its clock
                f.write(json.dumps({"step": state.global_step, "wall_s": wall,
                                    "cpu_s": time.process_time() - self.cpu}) + "\n")
            if wall > args.budget_minutes * 60:
                control.should_save = control.should_training_stop = True

    clock_path.unlink(missing_ok=True)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=reward_funcs,
                          args=GRPOConfig(**trl_arguments(cfg, args.out, args.save_steps)),
                          train_dataset=datasets.Dataset.from_list(train),
                          processing_class=AutoTokenizer.from_pretrained(model_dir),
                          callbacks=[Clock()], peft_config=peft_config)
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
