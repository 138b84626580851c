"""Batched generation for evaluation: prompts in, completions out, ready for `grpo-rewards score`.

    grpo-train generate --model smollm2-135m-instruct --data eval.jsonl --output completions.jsonl

Each output row is the input row (its reference fields: `answer`, `tests`, ...) with `prompt` and
a `completion`: chat messages (`[{"role": "assistant", "content": ...}]`, TRL's conversational
shape) when the prompt was chat messages, plain text when it was text.

Prompt rendering (shared with the trainer through `render_prompt`): chat messages go through the
tokenizer's chat template with the generation prompt appended; a text prompt is used as it is,
or, with `chat_template=True` and a tokenizer that has a template, rendered as one user message,
since an instruction-tuned model answers raw text poorly.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from grpo_rewards.errors import UserError
from grpo_rewards.fileio import atomic_file


def is_conversational(prompt: Any) -> bool:
    """True for chat messages: a list of mappings with a `role`."""
    return (
        isinstance(prompt, Sequence)
        and not isinstance(prompt, str)
        and len(prompt) > 0
        and all(isinstance(m, Mapping) and "role" in m for m in prompt)
    )


def render_prompt(tokenizer: Any, prompt: Any, chat_template: bool = True) -> str:
    """The text the model is given for `prompt` (see the module docstring for the rules)."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if is_conversational(prompt):
        if not has_template:
            raise UserError(
                "a prompt is given as chat messages but the tokenizer has no chat template; "
                "give text prompts or use a model with a template"
            )
        messages = [dict(m) for m in prompt]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if not isinstance(prompt, str):
        raise UserError(f"a prompt must be text or a list of chat messages, not {type(prompt).__name__}")
    if chat_template and has_template:
        messages = [{"role": "user", "content": prompt}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return prompt


def completion_for(prompt: Any, text: str) -> str | list[dict[str, str]]:
    """A completion in the shape TRL gives scorers: conversational for chat prompts, else text."""
    if is_conversational(prompt):
        return [{"role": "assistant", "content": text}]
    return text


def encode_prompts(tokenizer: Any, texts: Sequence[str], max_length: int | None = None) -> Any:
    """Left-padded token ids of rendered prompts (left: generation appends on the right).

    No special tokens are added: a rendered chat template already has them, and adding a BOS
    again would give the model a prompt it never saw in training (TRL does the same).
    """
    kwargs: dict[str, Any] = {}
    if max_length is not None:
        # Keep the end of an over-long prompt: the question and the generation prompt are there.
        kwargs = {"truncation": True, "max_length": max_length}
    previous = tokenizer.truncation_side, tokenizer.padding_side
    tokenizer.truncation_side, tokenizer.padding_side = "left", "left"
    try:
        return tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False, **kwargs)
    finally:
        tokenizer.truncation_side, tokenizer.padding_side = previous


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every token id that ends a completion (generation config's, and the tokenizer's EOS)."""
    ids = getattr(model.generation_config, "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def decode_completions(tokenizer: Any, completion_ids: Any, eos_ids: Sequence[int]) -> list[str]:
    """Text of each row up to its first EOS (the trainer's completion mask); what follows is padding."""
    import torch

    from grpo_core import rollout

    mask = rollout.completion_mask(completion_ids, torch.tensor(list(eos_ids), device=completion_ids.device))
    return rollout.decode_completions(tokenizer, completion_ids, mask)  # the EOS itself is a special token


def generate_completions(
    model: Any,
    tokenizer: Any,
    records: Sequence[Mapping[str, Any]],
    num_samples: int = 1,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    batch_size: int = 8,
    chat_template: bool = True,
    top_p: float = 1.0,
    max_prompt_length: int | None = None,
    seed: int | None = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """`num_samples` completions for each record's `prompt`, in record order.

    `temperature == 0` is greedy decoding. `batch_size` counts sequences per `generate` call.
    Returns one row per completion: the record's fields with `completion` set.
    """
    import torch

    from grpo_core.rollout import generation_config

    if num_samples < 1 or batch_size < 1 or max_new_tokens < 1:
        raise UserError("num_samples, batch_size and max_new_tokens must each be at least 1")
    if num_samples > 1 and temperature == 0:
        raise UserError(f"{num_samples} samples with greedy decoding would be identical; set a temperature > 0")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    texts = [render_prompt(tokenizer, r["prompt"], chat_template) for r in records]
    jobs = [i for i in range(len(records)) for _ in range(num_samples)]  # record index per sequence
    eos_ids = eos_token_ids(model, tokenizer)
    config = generation_config(tokenizer, eos_ids, max_new_tokens, temperature > 0, temperature, top_p, 0)
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    out: list[dict[str, Any]] = [{} for _ in jobs]
    was_training = model.training
    model.eval()
    try:
        with _progress(progress, len(jobs)) as advance, torch.inference_mode():
            for start in range(0, len(jobs), batch_size):
                chunk = jobs[start : start + batch_size]
                batch = encode_prompts(tokenizer, [texts[i] for i in chunk], max_prompt_length).to(device)
                generated = model.generate(**batch, generation_config=config)
                completions = decode_completions(tokenizer, generated[:, batch["input_ids"].shape[1] :], eos_ids)
                for offset, (i, text) in enumerate(zip(chunk, completions)):
                    record = records[i]
                    out[start + offset] = {**record, "completion": completion_for(record["prompt"], text)}
                advance(len(chunk))
    finally:
        model.train(was_training)
    return out


@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (or nothing); yields `advance(n)`."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task("generate", total=total)
        yield lambda n: bar.advance(task, n)


def read_prompt_records(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of a data file (JSONL; json, parquet, csv through `datasets`), each with a `prompt`."""
    from grpo_core.data import check_prompts, read_records

    if not Path(path).is_file():
        raise UserError(f"cannot read data file {path}: no such file")
    records = read_records(path)
    return check_prompts(records[:limit] if limit else records, "prompt", str(path))


def write_jsonl_atomic(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows as JSONL, through a temporary file renamed into place: a reader never sees half a file."""
    with atomic_file(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def build_parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--no-chat-template", action="store_true", help="give text prompts to the model raw")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`grpo-train generate ...`; returns the exit status (2 for a user error, printed without traceback)."""
    args = build_parser().parse_args(argv)
    try:
        records = read_prompt_records(args.data, args.limit)
        from grpo_core.hub import load_pretrained

        model, tokenizer = load_pretrained(args.model, dtype=args.dtype, device=args.device)
        if args.adapter:
            from grpo_core.lora import load_adapter

            model = load_adapter(model, args.adapter)
        rows = generate_completions(
            model, tokenizer, records,
            num_samples=args.num_samples, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_p=args.top_p, batch_size=args.batch_size,
            chat_template=not args.no_chat_template, seed=args.seed, progress=not args.no_progress,
        )
        write_jsonl_atomic(args.output, rows)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(rows)} completions to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
