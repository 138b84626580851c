"""Batched generation for evaluation: prompts in, completions out, ready for `grpo-rewards score`.

    grpo-train generate --model smollm2-135m-instruct --data eval.jsonl --output completions.jsonl

Each output row is the input row (its reference fields: `answer`, `tests`, ...) with `prompt` and
a `completion`: chat messages (`[{"role": "assistant", "content": ...}]`, TRL's conversational
shape) when the prompt was chat messages, plain text when it was text.

Prompts go through grpo_core.prompts and completions through grpo_core.rollout's `generate`, the
trainer's own path: a model is evaluated on the token ids it was trained on. A text prompt is
given raw, as in training; `--chat-template` renders it as one user message instead (an
instruction-tuned model answers raw text poorly).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from grpo_core.data import check_prompts, load_records
from grpo_core.hub import load_pretrained
from grpo_core.lora import load_adapter
from grpo_core.prompts import Prompts, completion_for, eos_token_ids
from grpo_core.rollout import generate, generation_config, left_pad
from grpo_rewards.errors import UserError
from grpo_rewards.fileio import OutputFile, atomic_file
from grpo_rewards.progress import counting_bar


def generate_completions(
    model: Any,
    tokenizer: Any,
    records: Sequence[Mapping[str, Any]],
    num_samples: int = 1,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    batch_size: int = 8,
    chat_template: bool = False,
    top_p: float = 1.0,
    max_prompt_length: int | None = None,
    seed: int | None = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """`num_samples` completions for each record's `prompt`, in record order.

    `temperature == 0` is greedy decoding. `batch_size` counts sequences per generation call.
    Returns one row per completion: the record's fields with `completion` set.
    """
    if num_samples < 1 or batch_size < 1 or max_new_tokens < 1:
        raise UserError("num_samples, batch_size and max_new_tokens must each be at least 1")
    if num_samples > 1 and temperature == 0:
        raise UserError(f"{num_samples} samples with greedy decoding would be identical; set a temperature > 0")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    prompts = Prompts(tokenizer, max_prompt_length, chat_template)
    ids = prompts.encode([r["prompt"] for r in records])
    jobs = [i for i in range(len(records)) for _ in range(num_samples)]  # record index per sequence
    eos = eos_token_ids(model.generation_config, tokenizer)
    config = generation_config(tokenizer, eos, max_new_tokens, temperature > 0, temperature, top_p, 0)
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    eos_ids = torch.tensor(eos, device=device)
    out: list[dict[str, Any]] = [{} for _ in jobs]
    with counting_bar("generating", len(jobs), progress) as advance:
        for start in range(0, len(jobs), batch_size):
            chunk = jobs[start : start + batch_size]
            prompt_ids, prompt_mask = left_pad([ids[i] for i in chunk], tokenizer.pad_token_id, device)  # (b, P)
            completion_ids, completion_mask = generate(model, prompt_ids, prompt_mask, config, eos_ids)  # (b, C)
            texts = prompts.decode(completion_ids, completion_mask)
            for offset, (i, text) in enumerate(zip(chunk, texts)):
                record = records[i]
                out[start + offset] = {**record, "completion": completion_for(record["prompt"], text)}
            advance(len(chunk))
    return out


def read_prompt_records(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of a data file (JSONL; json, parquet, csv through `datasets`), each with a `prompt`."""
    if not Path(path).is_file():
        raise UserError(f"cannot read data file {path}: no such file")
    records = load_records(path)
    return check_prompts(records[:limit] if limit else records, "prompt", str(path))


def write_jsonl_atomic(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows as JSONL, through a temporary file renamed into place: a reader never sees half a file."""
    with atomic_file(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def generate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-train generate",
        description="Generate completions for the prompts of a data file, for `grpo-rewards score`.",
    )
    parser.add_argument("--model", required=True, help="local directory, alias (smollm2-135m-instruct), .gguf file or hub id")
    parser.add_argument("--adapter", help="a LoRA adapter directory to apply on top of --model")
    parser.add_argument("--data", required=True, help="JSONL (or JSON list) with a 'prompt' field per row")
    parser.add_argument("--output", required=True, help="completions JSONL to write")
    parser.add_argument("--num-samples", type=int, default=1, help="completions per prompt (default 1)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per generate call")
    parser.add_argument("--limit", type=int, help="use only the first N rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, ...")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    parser.add_argument("--chat-template", action="store_true",
                        help="render text prompts as one user message through the chat template (training gives "
                             "them raw; chat-message prompts always use the template)")
    parser.add_argument("--no-chat-template", action="store_true", help=argparse.SUPPRESS)  # the default now
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`grpo-train generate ...`; returns the exit status (2 for a user error, printed without traceback)."""
    args = generate_parser().parse_args(argv)
    output = None
    try:
        output = OutputFile(args.output, [args.data])
        records = read_prompt_records(args.data, args.limit)
        model, tokenizer = load_pretrained(args.model, dtype=args.dtype, device=args.device)
        if args.adapter:
            model = load_adapter(model, args.adapter)
        rows = generate_completions(
            model, tokenizer, records,
            num_samples=args.num_samples, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_p=args.top_p, batch_size=args.batch_size,
            chat_template=args.chat_template, seed=args.seed, progress=not args.no_progress,
        )
        write_jsonl_atomic(args.output, rows)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        said = output.outcome() if output else "no output written"
        print(f"grpo-train generate: interrupted; {said}", file=sys.stderr)
        return 130
    print(f"wrote {len(rows)} completions to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
