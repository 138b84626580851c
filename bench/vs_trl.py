"""grpo_core vs TRL's GRPOTrainer (pinned 1.16): seconds per optimizer step, time to first step, peak RSS.

    python bench/vs_trl.py --bf16               # both sizes, bf16 autocast in both (TRL's default)
    python bench/vs_trl.py                      # the same in float32
    python bench/vs_trl.py --sizes 2m --steps 6 --json outputs/bench_vs_trl.json
    python bench/vs_trl.py --sizes smollm2,smollm2-lora --bf16 --steps 3 --warmup 1 --repeat 1
    python bench/vs_trl.py --sizes smollm2,smollm2-lora --bf16 --device cuda   # what scripts/gpu_check.sh runs

For each size one model is built from a preset in grpo_core/tasks.py with the built-in `chars`
tokenizer, saved once to a temp dir, and loaded by both trainers, each in its own subprocess
(`--child`), on the same prompts (the built-in arithmetic task), the same reward spec (TRL gets it
through `build(spec).as_trl()`), G, batch sizes, beta (a frozen reference in both), learning rate,
temperature, loss type and steps, on the CPU, in float32 or (`--bf16`) both with bf16 autocast
over float32 weights (TRL: `bf16=True`, its default; grpo_core: `bf16: true`). Both generate exactly
`max_completion_length` tokens (`min_new_tokens`: EOS is suppressed until then), so they train on
the same number of tokens; the measured mean completion lengths are reported to show it.

Both run with the same number of torch threads (`--threads`, default 1: on a shared, busy machine
two OpenMP threads spin against other processes and a step can take ten times longer).

Each trainer runs `--repeat` times, alternating with the other, and its run with the lowest
CPU time per step is kept. CPU seconds per step (the process's own, one thread) are what other
processes' load distorts least; wall seconds include waiting for a shared CPU.

Step time is the wall time between consecutive optimizer-step ends (TRL: a callback's
`on_step_end`; grpo_core: after `Trainer.train_step`), median over the steps after warm-up, so both
include their per-step logging. Time to first step runs from the subprocess launch (interpreter
start and imports included) to the end of step 1. Peak RSS is the subprocess's own high-water
mark (`VmHWM`; reward worker processes, the same for both, are not included).

`smollm2` is SmolLM2-135M-Instruct (`--smollm2`: the offline alias by default, see docs/models.md),
fully fine-tuned; `smollm2-lora` the same model with the same LoRA adapter in both (r 16, alpha 32,
all linear layers, no dropout; the reference is the model with the adapter off, in both). Their
prompts are the arithmetic ones as chat messages, so both trainers apply its chat template.
A `--smollm2` directory without weights (what scripts/fetch_gpu_wheels.sh carries to a GPU machine:
the weights do not fit its 64 MiB) gets that architecture with seeded random weights: the same
arithmetic and memory. `--tiny` shrinks it to two narrow layers and 8-token completions (the dry run
of scripts/gpu_check.sh). With `--device cuda` both also report tokens per second (completion tokens
of a step over its time) and peak GPU memory (`torch.cuda.max_memory_allocated`); TRL then runs with
its own defaults for one GPU (bf16, gradient checkpointing on), no vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grpo_rewards.fileio import write_atomic

SIZES = {"2m": 32, "20m": 64, "smollm2": 128, "smollm2-lora": 128}  # model -> max_completion_length
TINY_COMPLETION = 8  # --tiny
LORA = {"r": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": "all-linear"}  # smollm2-lora, both trainers
# Cheap text scorers on purpose: the bench measures the trainers, and math-verify on 32-64 random
# characters costs seconds per batch (its timeouts), the same in both, which would only dilute the ratios.
REWARDS = {"scorers": [
    {"scorer": "regex_format", "name": "format", "weight": 1.0, "params": {"pattern": "[0-9]+", "mode": "full"}},
    {"scorer": "length", "weight": 0.1, "params": {"unit": "chars", "mode": "target", "target": 1, "falloff": 4}},
]}
COMMON = {"num_generations": 8, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
          "beta": 0.04, "learning_rate": 1e-4, "temperature": 1.0, "loss_type": "dapo", "epsilon": 0.2,
          "scale_rewards": "group", "seed": 0}


# ---------------------------------------------------------------------------------------------
# children: one training run each, results written as JSON


def run_grpo_core(settings: dict, step_ends: list[tuple[float, float]]) -> dict:
    import torch

    from grpo_core.config import validate_config
    from grpo_core.trainer import Trainer

    config = validate_config({
        "model": {"name_or_path": settings["model_dir"]},
        "data": {"path": settings["data_path"]},
        "rewards": REWARDS, **COMMON,
        "max_completion_length": settings["completion_length"], "max_steps": settings["total_steps"],
        "lr_scheduler_type": "linear", "device": settings["device"], "bf16": settings["bf16"],
        "output_dir": settings["output_dir"], "overwrite_output_dir": True, "logging_steps": 1, "plot": False,
        "progress": False, "save_steps": 0, **({"lora": LORA} if settings["lora"] else {}),
    })

    class TimedTrainer(Trainer):
        def train_step(self) -> dict:
            stats = super().train_step()
            step_ends.append((time.time(), time.process_time()))
            return stats

    trainer = TimedTrainer(config)
    # grpo_core has no min_new_tokens option: an EOS id outside the vocabulary makes every completion run
    # to max_completion_length, as TRL's min_new_tokens does (the lengths are checked by the parent)
    trainer.eos_ids = torch.tensor([10**9], device=trainer.eos_ids.device)
    trainer.train()
    lengths = [json.loads(line).get("completion_length") for line in open(Path(settings["output_dir"]) / "metrics.jsonl")]
    return {"completion_lengths": [x for x in lengths if x is not None]}


def run_trl(settings: dict, step_ends: list[tuple[float, float]]) -> dict:
    import datasets
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_rewards import compose

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append((time.time(), time.process_time()))

    records = [json.loads(line) for line in open(settings["data_path"])]
    reward_funcs, reward_weights = compose.build(REWARDS).as_trl()
    length = settings["completion_length"]
    on_cpu = settings["device"] == "cpu"
    # One GPU: TRL's own defaults (gradient checkpointing on); on the CPU off, as grpo_core there
    checkpointing = {"gradient_checkpointing": False} if on_cpu else {}
    args = GRPOConfig(
        output_dir=settings["output_dir"], max_steps=settings["total_steps"], max_completion_length=length,
        generation_kwargs={"min_new_tokens": length}, reward_weights=reward_weights, use_cpu=on_cpu,
        bf16=settings["bf16"], logging_steps=1, report_to=[], save_strategy="no", lr_scheduler_type="linear",
        disable_tqdm=True, **checkpointing, **COMMON)
    peft_config = None
    if settings["lora"]:
        from peft import LoraConfig

        peft_config = LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                                 target_modules=LORA["target_modules"], task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=settings["model_dir"], reward_funcs=reward_funcs, args=args,
                          train_dataset=datasets.Dataset.from_list(records),
                          processing_class=AutoTokenizer.from_pretrained(settings["model_dir"]),
                          callbacks=[StepClock()], peft_config=peft_config)
    trainer.train()
    lengths = [e["completions/mean_length"] for e in trainer.state.log_history if "completions/mean_length" in e]
    return {"completion_lengths": lengths}


def peak_rss_mib() -> float:
    """This process's peak resident memory: VmHWM, the high-water mark of its own address space.

    Not `ru_maxrss`: Linux carries that across fork and exec, so a child started by a parent
    holding 440 MiB reports at least 440 MiB whatever it uses itself (measured: the 2m run after
    the 20m one read 439 instead of 374).
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux; no /proc elsewhere


def child(which: str, settings_path: str) -> None:
    settings = json.loads(Path(settings_path).read_text())
    step_ends: list[tuple[float, float]] = []  # (wall, process CPU) at each optimizer step's end
    extra = (run_trl if which == "trl" else run_grpo_core)(settings, step_ends)
    result = {"step_ends": step_ends, "peak_rss_mib": peak_rss_mib(), **extra}
    if settings["device"] == "cuda":
        import torch

        result["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    write_atomic(settings["result_path"], json.dumps(result))


# ---------------------------------------------------------------------------------------------
# parent: prepare weights and data once, run both, summarise


def prepare(size: str, workdir: Path, smollm2: str, tiny: bool) -> tuple[Path, Path, int]:
    """Save one model (seeded) and its tokenizer to workdir/model; the prompts to workdir/prompts.jsonl."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from grpo_core.tasks import arithmetic, chars_tokenizer, model_config

    records = arithmetic("train", 512, 0, operations=["+", "-"])
    data_path = workdir / "prompts.jsonl"
    if size.startswith("smollm2"):
        model_dir, params = prepare_smollm2(smollm2, workdir / "model", tiny)
        records = [{**r, "prompt": [{"role": "user", "content": r["prompt"]}]} for r in records]
    else:
        tokenizer = chars_tokenizer()
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(model_config(size, tokenizer))
        model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                                   pad_token_id=tokenizer.pad_token_id)
        model_dir = workdir / "model"
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        params = sum(p.numel() for p in model.parameters())
    write_atomic(data_path, "".join(json.dumps(r) + "\n" for r in records))
    return model_dir, data_path, params


def prepare_smollm2(source: str, model_dir: Path, tiny: bool) -> tuple[Path, int]:
    """SmolLM2's directory as it is when it holds weights; else its architecture, seeded, saved to model_dir."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from grpo_core.hub import resolve_model

    directory = resolve_model(source)
    config = AutoConfig.from_pretrained(directory)
    if tiny:  # the dry run: SmolLM2's tokenizer and layer types, two narrow layers
        config.update({"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16})
    if any(directory.glob("*.safetensors")) and not tiny:
        with torch.device("meta"):
            params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
        return directory, params
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig.from_pretrained(directory)
    model.save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(directory).save_pretrained(model_dir)
    return model_dir, sum(p.numel() for p in model.parameters())


def run_child(which: str, settings: dict, workdir: Path) -> dict:
    settings = {**settings, "output_dir": str(workdir / f"out-{which}"), "result_path": str(workdir / f"{which}.json")}
    settings_path = workdir / f"{which}-settings.json"
    settings_path.write_text(json.dumps(settings))
    threads = str(settings["threads"])
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    launched = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", which, str(settings_path)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{which} run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(Path(settings["result_path"]).read_text())
    if os.environ.get("BENCH_VERBOSE"):
        print(which, f"peak {result['peak_rss_mib']:.0f} MiB", file=sys.stderr)
    ends = result.pop("step_ends")
    skip = settings["warmup_steps"] - 1
    wall = [b[0] - a[0] for a, b in zip(ends, ends[1:])][skip:]
    cpu = [b[1] - a[1] for a, b in zip(ends, ends[1:])][skip:]
    lengths = result.pop("completion_lengths")
    step_s, mean_length = statistics.median(wall), statistics.fmean(lengths)
    return {"median_step_s": step_s, "median_step_cpu_s": statistics.median(cpu),
            "first_step_s": ends[0][0] - launched, "steps_timed": len(wall), "mean_completion_length": mean_length,
            "tokens_per_s": COMMON["per_device_train_batch_size"] * mean_length / step_s, **result}


def bench_size(size: str, steps: int, warmup: int, threads: int, repeats: int, bf16: bool, device: str = "cpu",
               smollm2: str = "smollm2-135m-instruct", tiny: bool = False) -> dict:
    length = TINY_COMPLETION if tiny and size.startswith("smollm2") else SIZES[size]
    with tempfile.TemporaryDirectory(prefix=f"bench-vs-trl-{size}-") as tmp:
        workdir = Path(tmp)
        model_dir, data_path, params = prepare(size, workdir, smollm2, tiny)
        settings = {"model_dir": str(model_dir), "data_path": str(data_path), "completion_length": length,
                    "total_steps": warmup + steps, "warmup_steps": warmup, "threads": threads, "bf16": bf16,
                    "device": device, "lora": size.endswith("-lora")}
        runs: dict[str, list[dict]] = {"trl": [], "core": []}
        for _ in range(repeats):  # alternate, so a burst of load from other processes hits both alike
            for which in runs:
                runs[which].append(run_child(which, settings, workdir))
        trl, core = (min(runs[w], key=lambda r: r["median_step_cpu_s"]) for w in ("trl", "core"))
    ratios = {"step_time_ratio": core["median_step_s"] / trl["median_step_s"],
              "step_cpu_ratio": core["median_step_cpu_s"] / trl["median_step_cpu_s"],
              "first_step_ratio": core["first_step_s"] / trl["first_step_s"],
              "peak_rss_ratio": core["peak_rss_mib"] / trl["peak_rss_mib"],
              "tokens_per_s_ratio": core["tokens_per_s"] / trl["tokens_per_s"]}
    if device == "cuda":
        ratios["peak_gpu_ratio"] = core["peak_gpu_mib"] / trl["peak_gpu_mib"]
    return {"size": size, "params": params, "threads": threads, "repeats": repeats, "bf16": bf16, "device": device,
            "tiny": tiny, "completion_length": length, "trl": trl, "grpo_core": core, **ratios}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2m,20m", help=f"comma-separated models ({', '.join(SIZES)})")
    parser.add_argument("--steps", type=int, default=12, help="timed optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed optimizer steps first (at least 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads of each trainer")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each trainer (alternating); lowest-CPU run kept")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 autocast in both (TRL: bf16=True, its default; grpo_core: bf16: true); float32 otherwise")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both trainers run")
    parser.add_argument("--smollm2", default="smollm2-135m-instruct",
                        help="SmolLM2's source for the smollm2 sizes: an alias or a directory (without weights: "
                             "its architecture with seeded random weights)")
    parser.add_argument("--tiny", action="store_true",
                        help="smollm2 sizes with two narrow layers and 8-token completions (a dry run, not a figure)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", nargs=2, metavar=("WHICH", "SETTINGS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child)
    sizes = [size.strip() for size in args.sizes.split(",")]
    if unknown := [size for size in sizes if size not in SIZES]:
        parser.error(f"unknown size {', '.join(unknown)}; choose from {', '.join(SIZES)}")
    rows = [bench_size(size, args.steps, max(1, args.warmup), args.threads, max(1, args.repeat), args.bf16,
                       args.device, args.smollm2, args.tiny) for size in sizes]
    print(f"{'size':>12} {'params':>8} {'len':>4} | {'trl cpu/step':>12} {'core cpu/step':>13} {'ratio':>6} | "
          f"{'trl s/step':>10} {'core s/step':>11} {'ratio':>6} | "
          f"{'trl 1st':>7} {'core 1st':>8} | {'trl MiB':>7} {'core MiB':>8} {'ratio':>6}")
    for r in rows:
        t, c = r["trl"], r["grpo_core"]
        print(f"{r['size']:>12} {r['params'] / 1e6:>7.2f}M {r['completion_length']:>4} | {t['median_step_cpu_s']:>12.3f} "
              f"{c['median_step_cpu_s']:>13.3f} {r['step_cpu_ratio']:>6.2f} | {t['median_step_s']:>10.3f} "
              f"{c['median_step_s']:>11.3f} {r['step_time_ratio']:>6.2f} | {t['first_step_s']:>7.1f} "
              f"{c['first_step_s']:>8.1f} | {t['peak_rss_mib']:>7.0f} {c['peak_rss_mib']:>8.0f} "
              f"{r['peak_rss_ratio']:>6.2f}   (lengths trl {t['mean_completion_length']:.1f}, "
              f"core {c['mean_completion_length']:.1f})")
    if args.device == "cuda":
        print(f"{'size':>12} | {'trl tok/s':>9} {'core tok/s':>10} {'ratio':>6} | {'trl GPU MiB':>11} "
              f"{'core GPU MiB':>12} {'ratio':>6}")
        for r in rows:
            t, c = r["trl"], r["grpo_core"]
            print(f"{r['size']:>12} | {t['tokens_per_s']:>9.0f} {c['tokens_per_s']:>10.0f} "
                  f"{r['tokens_per_s_ratio']:>6.2f} | {t['peak_gpu_mib']:>11.0f} {c['peak_gpu_mib']:>12.0f} "
                  f"{r['peak_gpu_ratio']:>6.2f}")
    if args.json:
        write_atomic(args.json, json.dumps({"rows": rows, "cpu_threads": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
