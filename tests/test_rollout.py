"""Rollouts: the completion mask from the first EOS (pad may equal EOS), left padding, generation."""

from __future__ import annotations

import pytest
import torch

from _grpo_core_helpers import char_tokenizer, char_tokenizer_pad_is_eos, small_decoder
from _grpo_core_helpers import one_torch_thread  # noqa: F401 - autouse fixture
from grpo_core.loss import CompletionLogprobs, grpo_loss
from grpo_core.rollout import (
    Rollout, completion_mask, generate, generation_config, left_pad)
from grpo_core.prompts import Prompts

EOS = 9


def test_mask_runs_through_the_first_eos_inclusive():
    ids = torch.tensor([[3, 4, EOS, 5, EOS], [EOS, 1, 1, 1, 1], [3, 3, 3, 3, 3], [3, 3, 3, 3, EOS]])
    mask = completion_mask(ids, torch.tensor([EOS]))
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]


def test_mask_when_pad_equals_eos_and_with_several_eos_ids():
    # pad == EOS: everything after the first EOS is padding that looks like EOS; only the first counts
    ids = torch.tensor([[3, EOS, EOS, EOS], [3, 4, 7, EOS]])
    assert completion_mask(ids, torch.tensor([EOS])).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert completion_mask(ids, torch.tensor([EOS, 7])).tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]


def test_left_padding_and_left_truncation_of_prompts():
    tokenizer = char_tokenizer()
    rows = Prompts(tokenizer, 5).encode(["1+2=", "12345678+9="])
    assert tokenizer.decode(rows[1]) == "678+9="[-5:]  # the end is kept: it is what the model continues
    ids, mask = left_pad(rows, tokenizer.pad_token_id, torch.device("cpu"))
    assert mask.tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert ids[0, 0].item() == tokenizer.pad_token_id
    assert tokenizer.decode(ids[0, 1:]) == "1+2="


def test_chat_prompts_go_through_the_chat_template():
    tokenizer = char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    rows = Prompts(tokenizer, 16).encode([[{"role": "user", "content": "1+2"}]])
    assert tokenizer.decode(rows[0]) == "1+2="


def eos_happy_model(tokenizer, eos_logit: float):
    """A tiny random Llama whose output head favours EOS by `eos_logit`, so completions end at varied lengths."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config)
    head = model.lm_head
    model.lm_head = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        model.lm_head.weight.copy_(head.weight)
        model.lm_head.bias.zero_()
        model.lm_head.bias[tokenizer.eos_token_id] = eos_logit
    return model


def test_generate_with_pad_equal_to_eos_gives_masks_that_end_at_the_first_eos():
    tokenizer = char_tokenizer_pad_is_eos()
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    model = eos_happy_model(tokenizer, eos_logit=1.5)
    eos = torch.tensor([tokenizer.eos_token_id])
    rows = Prompts(tokenizer, 8).encode(["1+2=", "3+4=", "5="])
    prompt_ids, prompt_mask = left_pad([r for r in rows for _ in range(8)], tokenizer.pad_token_id,
                                       torch.device("cpu"))
    config = generation_config(tokenizer, [tokenizer.eos_token_id], 12, True, temperature=1.0, top_p=1.0, top_k=0)
    torch.manual_seed(1)
    ids, mask = generate(model, prompt_ids, prompt_mask, config, eos)                     # (24, C)
    lengths = mask.sum(-1)
    assert lengths.min() < lengths.max()  # ragged, so the test means something
    assert ids.size(1) == lengths.max()   # trimmed to the longest completion
    for row, n in zip(ids, lengths.tolist()):
        first = (row == tokenizer.eos_token_id).nonzero()
        if len(first):
            assert n == first[0].item() + 1  # EOS included
        assert (row[n:] == tokenizer.pad_token_id).all()
    assert not ids.is_inference() and not mask.is_inference()
    texts = Prompts(tokenizer).decode(ids, mask)
    assert all("<eos>" not in t for t in texts) and len(texts) == 24


def test_the_eos_token_is_trained():
    """The log-prob of the EOS gets gradient; the pads after it (equal to EOS) get none."""
    tokenizer = char_tokenizer_pad_is_eos()
    model = eos_happy_model(tokenizer, eos_logit=0.0)
    eos = tokenizer.eos_token_id
    prompt_ids, prompt_mask = left_pad(Prompts(tokenizer, 8).encode(["1+2=", "3="]), eos, torch.device("cpu"))
    completion_ids = torch.tensor([[5, eos, eos, eos], [5, 6, 7, eos]])
    mask = completion_mask(completion_ids, torch.tensor([eos]))
    rollout = Rollout(prompt_ids, prompt_mask, completion_ids, mask, torch.tensor([1.0, -1.0]))
    logps, _ = CompletionLogprobs(model, 1.0, 64)(rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                                  rollout.completion_mask)
    logps.retain_grad()
    loss, _ = grpo_loss(logps, None, None, rollout.advantages, mask, loss_type="bnpo", beta=0.0, epsilon=0.2,
                        epsilon_high=0.2)
    loss.backward()
    grad = logps.grad
    assert grad[0, 1] != 0 and grad[1, 3] != 0       # the EOS positions
    assert (grad[0, 2:] == 0).all()                  # pads after the EOS
    assert model.lm_head.bias.grad[eos] != 0


def test_rollout_rows_trim_columns_to_the_micro_batch():
    ids = torch.tensor([[1, 9, 9, 9], [1, 2, 9, 9], [1, 2, 3, 4]])
    mask = completion_mask(ids, torch.tensor([9]))
    rollout = Rollout(torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2, dtype=torch.long), ids, mask,
                      torch.zeros(3), old_logps=torch.randn(3, 4))
    part = rollout.rows(0, 2)
    assert part.completion_ids.shape == (2, 3) and part.old_logps.shape == (2, 3)
    assert rollout.rows(2, 3).completion_ids.shape == (1, 4)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("sampling", [None, {"temperature": 0.9, "top_k": 0, "top_p": 1.0},
                                      {"temperature": 0.7, "top_k": 6, "top_p": 0.8}])
def test_lean_decode_picks_the_same_tokens_as_hf_generate(kind, sampling):
    from grpo_core import decode

    tokenizer = char_tokenizer()
    model = small_decoder(kind, len(tokenizer), tokenizer)
    assert decode.supported(model)
    rows = Prompts(tokenizer, 8).encode(["1+2=", "33+4=", "5="])
    ids, mask = left_pad([r for r in rows for _ in range(3)], tokenizer.pad_token_id, torch.device("cpu"))
    eos = torch.tensor([tokenizer.eos_token_id])
    s = sampling or {}
    config = generation_config(tokenizer, [tokenizer.eos_token_id], 10, sampling is not None,
                               s.get("temperature", 1.0), s.get("top_p", 1.0), s.get("top_k", 0))
    results = {}
    for backend in ("hf", "auto"):
        torch.manual_seed(5)
        results[backend] = generate(model, ids, mask, config, eos, backend)
    assert torch.equal(results["hf"][0], results["auto"][0]) and torch.equal(results["hf"][1], results["auto"][1])


@pytest.mark.parametrize("sampling", [False, True])
def test_rows_that_finish_early_leave_the_batch_and_the_tokens_stay_hf_generates(sampling):
    """Many EOS ids make rows end at different steps, so the lean loop drops finished rows from its
    caches mid-batch; greedy and seeded sampling still pick HF `generate`'s tokens for every row."""
    tokenizer = char_tokenizer()
    model = small_decoder("llama", len(tokenizer), tokenizer)
    rows = Prompts(tokenizer, 8).encode(["1+2=", "33+4=", "5=", "71-8="])
    ids, mask = left_pad([r for r in rows for _ in range(4)], tokenizer.pad_token_id, torch.device("cpu"))
    eos_ids = [i for i in range(len(tokenizer)) if i % 4 == 1]
    config = generation_config(tokenizer, eos_ids, 16, sampling, 1.0, 1.0, 0)
    results = {}
    for backend in ("hf", "auto"):
        torch.manual_seed(11)
        results[backend] = generate(model, ids, mask, config, torch.tensor(eos_ids), backend)
    assert torch.equal(results["hf"][0], results["auto"][0]) and torch.equal(results["hf"][1], results["auto"][1])
    lengths = results["auto"][1].sum(1)
    assert len(set(lengths.tolist())) >= 3 and int(lengths.min()) < 16 // 2  # rows did end at different steps


def test_prepacked_bf16_projections_are_bitwise_f_linear():
    from grpo_core import decode

    gen = torch.Generator().manual_seed(0)
    linears = [torch.nn.Linear(24, n, bias=True) for n in (16, 8)]
    projection = decode._Projection(*linears, dtype=torch.bfloat16, rows=6)
    if not decode._packable(torch.zeros(1, dtype=torch.bfloat16)):
        pytest.skip("no native bf16 oneDNN matmul on this CPU: the decode loop keeps F.linear")
    assert projection.packed is not None and projection.weight is None
    weight = torch.cat([lin.weight for lin in linears]).bfloat16()
    bias = torch.cat([lin.bias for lin in linears]).bfloat16()
    for shape in [(6, 1, 24), (6, 9, 24), (1, 1, 24)]:  # decode steps, a prompt, another batch size
        x = torch.randn(*shape, generator=gen).bfloat16()
        assert torch.equal(projection(x), torch.nn.functional.linear(x, weight, bias))


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_bf16_decode_picks_the_same_tokens_with_and_without_prepacked_weights(kind, monkeypatch):
    from grpo_core import decode

    tokenizer = char_tokenizer()
    model = small_decoder(kind, len(tokenizer), tokenizer)
    rows = Prompts(tokenizer, 8).encode(["1+2=", "33+4=", "5="])
    ids, mask = left_pad([r for r in rows for _ in range(3)], tokenizer.pad_token_id, torch.device("cpu"))
    eos = torch.tensor([tokenizer.eos_token_id])
    config = generation_config(tokenizer, [tokenizer.eos_token_id], 10, True, 0.9, 1.0, 0)
    results = []
    for packable in (decode._packable, lambda weight: False):
        monkeypatch.setattr(decode, "_packable", packable)
        torch.manual_seed(5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results.append(generate(model, ids, mask, config, eos))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_top_k_zero_means_no_top_k_in_hf_generate_too():
    """TRL's top_k 0 (off) must not become HF's default top-k of 50 on the `hf` backend."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from grpo_core.rollout import generation_config

    model = LlamaForCausalLM(LlamaConfig(vocab_size=200, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2)).eval()
    tokenizer = type("Tok", (), {"pad_token_id": 0})()
    config = generation_config(tokenizer, [1], 1, True, temperature=1.0, top_p=1.0, top_k=0)
    out = model.generate(torch.ones(1, 1, dtype=torch.long), generation_config=config, output_scores=True,
                         return_dict_in_generate=True)
    assert int(torch.isfinite(out.scores[0]).sum()) == 200  # every token can be sampled
