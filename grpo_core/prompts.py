"""The one prompt pipeline: what the model is given for a prompt, and what a scorer gets back.

Training rollouts, periodic evaluation and `grpo-train generate` all go through `Prompts`, so a
model is evaluated on exactly the token ids it was trained on. The rules follow TRL 1.16:

* a text prompt is given raw (TRL's "standard" format) and tokenized with the tokenizer's usual
  special tokens (a BOS where the tokenizer adds one), as TRL's `processing_class(text=prompts)`;
* chat messages go through the chat template with the generation prompt appended, and no special
  tokens are added on top (the template already has them), as TRL's `apply_chat_template`;
* `chat_template=True` (`grpo-train generate --chat-template`) renders a text prompt as one user
  message instead: an instruction-tuned model answers raw text poorly;
* a prompt longer than `max_prompt_length` tokens keeps its end (the question and the generation
  prompt are there);
* a completion is text for a text prompt and `[{"role": "assistant", "content": ...}]` for chat
  messages (TRL's conversational shape); its text runs up to the first EOS, which is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from grpo_rewards.errors import UserError
from grpo_rewards.scorer import Sample


def is_conversational(prompt: Any) -> bool:
    """True for chat messages: a non-empty list of mappings with a `role`."""
    return (isinstance(prompt, Sequence) and not isinstance(prompt, str) and len(prompt) > 0
            and all(isinstance(m, Mapping) and "role" in m for m in prompt))


def completion_for(prompt: Any, text: str) -> str | list[dict[str, str]]:
    """A completion in the shape TRL gives scorers: conversational for chat prompts, else text."""
    if is_conversational(prompt):
        return [{"role": "assistant", "content": text}]
    return text


def eos_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a completion: the generation config's EOS ids and the tokenizer's, sorted."""
    ids = getattr(generation_config, "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return sorted(set(ids))


class Prompts:
    """Render, encode and decode prompts and completions for one tokenizer (see the module docstring)."""

    def __init__(self, tokenizer: Any, max_prompt_length: int | None = None, chat_template: bool = False) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.chat_template = chat_template

    def templated(self, prompt: Any) -> bool:
        """Whether `prompt` goes through the chat template (then no special tokens are added)."""
        if is_conversational(prompt):
            return True
        if not isinstance(prompt, str):
            raise UserError(f"a prompt must be text or a list of chat messages, not {type(prompt).__name__}")
        return self.chat_template and bool(getattr(self.tokenizer, "chat_template", None))

    def render(self, prompt: Any) -> str:
        """The text the model is given for `prompt`."""
        if not self.templated(prompt):
            return prompt
        if not getattr(self.tokenizer, "chat_template", None):
            raise UserError("a prompt is given as chat messages but the tokenizer has no chat template; "
                            "give text prompts or use a model with a template")
        messages = [dict(m) for m in prompt] if is_conversational(prompt) else [{"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode(self, prompts: Sequence[Any]) -> list[list[int]]:
        """Token ids of each prompt, the last `max_prompt_length` kept; batched per special-token rule."""
        rows: list[list[int]] = [[] for _ in prompts]
        templated = [self.templated(p) for p in prompts]
        for special in (True, False):
            picked = [i for i, t in enumerate(templated) if t != special]
            if picked:
                ids = self.tokenizer([self.render(prompts[i]) for i in picked], add_special_tokens=special)["input_ids"]
                for i, row in zip(picked, ids):
                    rows[i] = row[-self.max_prompt_length:] if self.max_prompt_length else row
        return rows

    def decode(self, completion_ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
        """Text of each completion (B, C) under its mask (B, C); the EOS, a special token, is dropped."""
        lengths = mask.sum(-1).tolist()
        rows = [row[:n] for row, n in zip(completion_ids.tolist(), lengths)]
        return self.tokenizer.batch_decode(rows, skip_special_tokens=True)

    def samples(self, records: Sequence[Mapping[str, Any]], texts: Sequence[str]) -> list[Sample]:
        """What the scorers see: each record's prompt, its completion in TRL's shape, the other fields."""
        return [Sample(r["prompt"], completion_for(r["prompt"], text), {k: v for k, v in r.items() if k != "prompt"})
                for r, text in zip(records, texts)]
