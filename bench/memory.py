"""Peak memory of one GRPO step on SmolLM2-135M-Instruct: full fine-tuning vs LoRA, with and
without gradient checkpointing, chunked selective log-probs vs a naive full log-softmax.

    python bench/memory.py                      # all 8 configurations, a markdown table
    python bench/memory.py --completion-len 128 --configs full,chunked,off lora,chunked,on

One step = reference log-probs (no grad) + policy log-probs, GRPO loss, backward and an AdamW
step, over G completions of one prompt (random token ids: memory does not depend on their values;
no generation, which costs little memory next to the backward). The reference is a frozen copy of
the weights for full fine-tuning and the base with the adapter disabled for LoRA.

Each configuration runs in its own process. Memory is the process's peak resident set (VmHWM):
"setup" is after loading (weights, reference copy), "step" the peak during the step; the
high-water mark is reset between the two (/proc/self/clear_refs), so a load spike does not hide
the step's own peak. Linux only.

`--trainer CONFIG [--set key=value ...]` instead runs `--steps` real steps of the trainer on a
training config (generation, scoring, reference log-probs, policy forward/backward and AdamW, as
`grpo-train` runs them) and prints each phase's peak RSS, in this process, with the allocator
settings it was started with:

    python bench/memory.py --trainer examples/smollm2_arith.yaml --set model.gradient_checkpointing=false
    MALLOC_MMAP_THRESHOLD_=1048576 python bench/memory.py --trainer examples/smollm2_arith.yaml

glibc keeps freed heap memory resident (a no-grad forward of 8 x 288 tokens left ~800 MiB of RSS
behind after freeing everything), which would measure the allocator rather than the algorithm.
The children therefore run with MALLOC_MMAP_THRESHOLD_=65536: every allocation over 64 KiB is its
own mapping, returned to the system when freed, so RSS follows the live tensors
(`--glibc-default` measures with the allocator's defaults instead).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def vm_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # "5" resets the peak RSS (Linux >= 4.0)


def naive_logprobs(lm, prompt_ids, prompt_mask, completion_ids, completion_mask):
    """What the chunked path avoids: logits and a float32 log-softmax over every position and the
    whole vocabulary, (B, T, V), then a gather of the sampled tokens."""
    import torch

    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention = torch.cat([prompt_mask, completion_mask], 1)
    logits = lm(input_ids=input_ids, attention_mask=attention, use_cache=False).logits  # (B, T, V)
    logp_all = logits.float().log_softmax(-1)                                           # (B, T, V)
    p = prompt_ids.size(1)
    return logp_all[:, p - 1 : -1].gather(-1, completion_ids[..., None]).squeeze(-1)    # (B, C)


def run_one(cfg: dict) -> dict:
    """One configuration, in this process; returns its measurements."""
    import torch

    from grpo_core.hub import load_pretrained
    from grpo_core.lora import apply_lora, enable_gradient_checkpointing, reference_mode
    from grpo_core.loss import CompletionLogprobs, grpo_loss
    from grpo_core.model import frozen_copy

    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(0)
    policy, _ = load_pretrained(cfg["model"], dtype="float32", device="cpu")
    lora = cfg["mode"] == "lora"
    reference = None if lora else frozen_copy(policy)
    if lora:
        policy = apply_lora(policy, r=16, alpha=32, dropout=0.0)
    if cfg["checkpointing"]:
        enable_gradient_checkpointing(policy)
    policy.train()
    lm = policy.get_base_model() if lora else policy  # LoRA layers live inside the base model
    if cfg["logprobs"] == "chunked":
        policy_fn = CompletionLogprobs(lm, 1.0, 64)
        ref_fn = CompletionLogprobs(reference, 1.0, 64) if reference is not None else policy_fn
    else:
        def policy_fn(*batch):
            return naive_logprobs(lm, *batch), None
        def ref_fn(*batch):
            return naive_logprobs(reference if reference is not None else lm, *batch), None
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-6)
    vocab = policy.config.vocab_size
    g, p_len, c_len = cfg["G"], cfg["prompt_len"], cfg["completion_len"]
    prompt_ids = torch.randint(0, vocab, (1, p_len)).expand(g, p_len).contiguous()  # one prompt, G completions
    completion_ids = torch.randint(0, vocab, (g, c_len))
    prompt_mask, completion_mask = torch.ones_like(prompt_ids), torch.ones_like(completion_ids)
    batch = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    advantages = torch.randn(g)
    with torch.no_grad():  # page every weight in (they are memory-mapped), so "setup" counts them all
        for module in {id(m): m for m in (lm, reference) if m is not None}.values():
            module(input_ids=prompt_ids[:1, :1], use_cache=False)
    setup_rss = vm_rss_mib()
    reset_peak()
    start = time.perf_counter()
    if lora:
        with reference_mode(lm):
            ref_logps = ref_fn(*batch)[0]
    else:
        with torch.no_grad():
            ref_logps = ref_fn(*batch)[0]
    logps = policy_fn(*batch)[0]
    loss, _ = grpo_loss(logps, None, ref_logps, advantages, completion_mask, loss_type="grpo",
                        beta=0.04, epsilon=0.2, epsilon_high=0.2)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    return {**cfg, "setup_mib": setup_rss, "peak_mib": vm_hwm_mib(), "step_s": seconds,
            "trainable": trainable, "loss": float(loss)}


def profile_trainer(config: str, overrides: list[str], steps: int) -> int:
    """Peak RSS per phase of `steps` real trainer steps (high-water mark reset before each phase)."""
    import grpo_core.trainer as trainer_module
    from grpo_core.config import load_config

    def measured(name, fn):
        def run(*args, **kwargs):
            reset_peak()
            before, start = vm_rss_mib(), time.perf_counter()
            out = fn(*args, **kwargs)
            print(f"| {step} | {name} | {before:.0f} | {vm_hwm_mib():.0f} | {vm_rss_mib():.0f} "
                  f"| {time.perf_counter() - start:.1f} |", flush=True)
            return out
        return run

    step = "load"
    reset_peak()
    start = time.perf_counter()
    trainer = trainer_module.Trainer(load_config(config, overrides + ["eval_steps=0", "progress=false"]))
    print(f"malloc: MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_', 'default')}; "
          f"chunked log-prob path (CompletionLogprobs.fast): {trainer.policy.logprobs.fast}\n")
    print("| step | phase | RSS before (MiB) | peak RSS (MiB) | RSS after (MiB) | seconds |\n|---|---|---:|---:|---:|---:|")
    print(f"| load | model, tokenizer, data | 0 | {vm_hwm_mib():.0f} | {vm_rss_mib():.0f} "
          f"| {time.perf_counter() - start:.1f} |", flush=True)
    trainer_module.generate = measured("generate", trainer_module.generate)
    trainer.score = measured("score", trainer.score)
    trainer.policy.reference_logprobs = measured("reference log-probs", trainer.policy.reference_logprobs)
    trainer.optimize = measured("policy fwd + bwd + AdamW", trainer.optimize)
    for step in range(1, steps + 1):
        trainer.train_step()
    trainer.reward.close()
    return 0


CONFIGS = [
    {"mode": m, "logprobs": lp, "checkpointing": ck}
    for m, lp, ck in itertools.product(["full", "lora"], ["naive", "chunked"], [False, True])
]


def parse_config(text: str) -> dict:
    mode, logprobs, checkpointing = text.split(",")
    return {"mode": mode, "logprobs": logprobs, "checkpointing": checkpointing == "on"}


def table(results: list[dict]) -> str:
    base = next((r for r in results if r["mode"] == "full" and r["logprobs"] == "naive"
                 and not r["checkpointing"]), results[0])
    lines = ["| fine-tuning | log-probs | grad. checkpointing | trainable params | RSS after load (MiB) "
             "| peak RSS in step (MiB) | step peak / baseline | step (s) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(
            f"| {r['mode']} | {r['logprobs']} | {'on' if r['checkpointing'] else 'off'} | {r['trainable'] / 1e6:.2f}M "
            f"| {r['setup_mib']:.0f} | {r['peak_mib']:.0f} | {r['peak_mib'] / base['peak_mib']:.2f} "
            f"| {r['step_s']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--G", type=int, default=8, help="completions per prompt")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--completion-len", type=int, default=96)
    parser.add_argument("--configs", nargs="*", help="mode,logprobs,checkpointing e.g. lora,chunked,on")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per run (1: stable timings on a shared machine; memory is unaffected)")
    parser.add_argument("--glibc-default", action="store_true",
                        help="keep glibc's malloc defaults (RSS then includes freed memory it keeps)")
    parser.add_argument("--json", help="also write the raw results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration (JSON)
    parser.add_argument("--trainer", metavar="CONFIG", help="profile real trainer steps of this config by phase")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (--trainer)")
    parser.add_argument("--steps", type=int, default=2, help="trainer steps to profile (--trainer)")
    args = parser.parse_args(argv)
    if args.trainer:
        return profile_trainer(args.trainer, args.set, args.steps)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return 0
    from grpo_core.hub import resolve_model

    model_dir = str(resolve_model(args.model))  # convert/cache once, not in every child
    configs = [parse_config(c) for c in args.configs] if args.configs else CONFIGS
    env = dict(os.environ)
    if not args.glibc_default:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    results = []
    for cfg in configs:
        cfg = {**cfg, "model": model_dir, "G": args.G, "prompt_len": args.prompt_len,
               "completion_len": args.completion_len, "threads": args.threads}
        done = subprocess.run([sys.executable, __file__, "--one", json.dumps(cfg)],
                              capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0:
            print(f"{cfg['mode']},{cfg['logprobs']},{cfg['checkpointing']}: failed\n{done.stderr[-2000:]}",
                  file=sys.stderr)
            continue
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), file=sys.stderr)
    print(f"G={args.G}, prompt {args.prompt_len} + completion {args.completion_len} tokens, float32, CPU, "
          f"{args.threads} thread(s), glibc malloc {'defaults' if args.glibc_default else 'mmap threshold 64 KiB'}\n")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
