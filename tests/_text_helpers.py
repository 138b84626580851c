"""Shared by the text-scorer tests: a real local BPE tokenizer and a varied completion corpus."""

from __future__ import annotations

import random
from pathlib import Path

TOKENIZER_CORPUS = [
    "<think>Let me add the numbers step by step.</think><answer>42</answer>",
    "First, compute 3 + 4. Next, multiply by 2. Finally, the answer is 14.",
    "这是一个测试。答案是五。 Привет, мир! ¿Qué tal? 😀 مرحبا",
    "the the the same words again and again and again",
] * 8


def build_tokenizer(directory: Path, corpus: list[str] | None = None, vocab_size: int = 300) -> Path:
    """Train a small byte-level BPE (any text encodes) and save it as an AutoTokenizer directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(corpus or TOKENIZER_CORPUS, trainer)
    PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>").save_pretrained(directory)
    return directory


WORDS = ["the", "answer", "is", "step", "compute", "x", "=", "42", "so", "we", "get", "then", "答案", "是",
         "привет", "😀", "e\u0301", "\u05e9\u05dc\u05d5\u05dd", "\\frac{1}{2}", "\n"]


def _prose(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def varied_completions(seed: int = 0, n: int = 330) -> list[str]:
    """Well-formed, broken-tag, empty, unicode, surrogate, very long and repetitive completions."""
    rng = random.Random(seed)
    fixed = [
        "", " ", "\n", "<think>", "</think>", "<think></think>", "<think>a</think>", "<think>\n</think>\n",
        "<think>a</think>b</think>", "<think>a<think>b</think>", " <think>a</think>", "x<think>a</think>",
        "<THINK>a</THINK>", "<think >a</think>", "</think><think>", "<think>a</think><think>b</think>",
        "<think>a</think >", "<think>a\n</think>\nanswer\n</think>", "<think>\ud800</think>", "\udfff",
        "<think>" + "a" * 100_000 + "</think>", "<think>" + "b" * 50_000, "</think>" * 1000,
        "<think>" + "x </think>" * 500, "<think>答案</think><answer>五</answer>",
    ]
    out = list(fixed)
    shapes = ["ok", "ok_answer", "no_open", "no_close", "lead", "double_open", "double_close", "nested",
              "reversed", "plain", "repetitive", "long", "unicode", "surrogate"]
    while len(out) < n:
        shape = rng.choice(shapes)
        body = _prose(rng, rng.randint(0, 40))
        tail = _prose(rng, rng.randint(0, 10))
        out.append({
            "ok": f"<think>{body}</think>{tail}",
            "ok_answer": f"<think>\n{body}\n</think>\n<answer>\n{tail}\n</answer>",
            "no_open": f"{body}</think>{tail}",
            "no_close": f"<think>{body}{tail}",
            "lead": f"{rng.choice([' ', chr(10), 'Sure! '])}<think>{body}</think>{tail}",
            "double_open": f"<think>{body}<think>{tail}</think>",
            "double_close": f"<think>{body}</think>{tail}</think>{tail}",
            "nested": f"<think>{body}<answer>{tail}</think></answer>",
            "reversed": f"</think>{body}<think>{tail}",
            "plain": body,
            "repetitive": (rng.choice(WORDS) + " ") * rng.randint(1, 300) + body,
            "long": f"<think>{_prose(rng, rng.randint(2_000, 6_000))}</think>{tail}",
            "unicode": f"<think>{'🙂' * rng.randint(0, 50)}{body}</think>ñ{tail}",
            "surrogate": f"<think>{body}\ud83d</think>{tail}\udc00",
        }[shape])
    return out
