"""grpo_core.llama against transformers' own Llama, Qwen2 and Qwen3 classes: the same logits and
gradients, checkpoints that load both ways, and what a training process does not import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from grpo_core import llama
from grpo_core.model import build_model, frozen_copy
from grpo_core.prompts import Prompts
from grpo_core.rollout import generate, generation_config, left_pad
from grpo_core.tasks import chars_tokenizer
from grpo_rewards.errors import UserError

VARIANTS = {
    "llama": ("llama", {}),
    "llama-gqa-bias-untied": ("llama", {"num_key_value_heads": 2, "attention_bias": True, "mlp_bias": True,
                                        "tie_word_embeddings": False}),
    "qwen2": ("qwen2", {"num_key_value_heads": 2}),
    "qwen3": ("qwen3", {"num_key_value_heads": 2, "head_dim": 16}),
}


def hf_model(kind: str, extra: dict, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
                  tie_word_embeddings=True) | extra
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **kwargs))


def native_twin(hf, tmp_path):
    hf.save_pretrained(tmp_path / "hf")
    return llama.from_pretrained(tmp_path / "hf", llama.read_config(tmp_path / "hf"))


def left_padded_batch(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 40, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    mask[1, :1] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_and_gradients_equal_transformers(variant, tmp_path):
    hf = hf_model(*VARIANTS[variant])
    native = native_twin(hf, tmp_path)
    assert type(native).__name__ == "CausalLM" and native.architecture == type(hf).__name__
    ids, mask, positions = left_padded_batch()
    real = mask.bool()
    ours = native(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    theirs = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    torch.testing.assert_close(ours[real], theirs[real], rtol=1e-5, atol=1e-5)
    (ours[real].logsumexp(-1).sum()).backward()
    (theirs[real].logsumexp(-1).sum()).backward()
    hf_params = dict(hf.named_parameters())
    for name, param in native.named_parameters():
        torch.testing.assert_close(param.grad, hf_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("variant", ["llama", "qwen3"])
def test_checkpoints_load_both_ways(variant, tmp_path):
    from transformers import AutoModelForCausalLM

    hf = hf_model(*VARIANTS[variant])
    native = native_twin(hf, tmp_path)
    with torch.no_grad():
        native.model.norm.weight.add_(0.5)  # a change that must survive the round trip
    native.save_pretrained(tmp_path / "native")
    saved = json.loads((tmp_path / "native" / "config.json").read_text())
    assert saved["architectures"] == [type(hf).__name__] and saved["model_type"] == variant
    reloaded_hf = AutoModelForCausalLM.from_pretrained(tmp_path / "native")
    reloaded = llama.from_pretrained(tmp_path / "native", llama.read_config(tmp_path / "native"))
    ids, mask, positions = left_padded_batch(2)
    expected = native(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    for model in (reloaded_hf, reloaded):
        got = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], rtol=1e-5, atol=1e-5)
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight  # still tied


def test_unsupported_configs_say_why(tmp_path):
    hf = hf_model("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}})
    hf.save_pretrained(tmp_path / "scaled")
    with pytest.raises(ValueError, match="rope_type 'linear'"):
        llama.read_config(tmp_path / "scaled")
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        llama.read_config(tmp_path / "gpt2")


def test_bf16_reference_copy_gives_the_same_logprobs_under_autocast():
    # frozen_copy stores linear weights in bf16: what autocast would compute from float32 ones.
    hf = hf_model("llama", {"tie_word_embeddings": True})
    ids, mask, positions = left_padded_batch(3)
    for model in (hf, llama_from(hf)):
        ref32, ref16 = frozen_copy(model), frozen_copy(model, torch.bfloat16)
        assert ref16.lm_head.weight.dtype == torch.bfloat16 and ref16.model.embed_tokens.weight.dtype == torch.float32
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            a = ref32(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            b = ref16(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        assert torch.equal(a[mask.bool()], b[mask.bool()])


def saved_bytes(fn, *args):
    """(output, bytes of the tensors autograd saves for the backward of `fn(*args)`)."""
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, sum(sizes)


def leaves(*shapes, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen).to(dtype).requires_grad_() for s in shapes]


def plain_mlp(gate, up, weight):
    return torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, weight)


def plain_attention(q, k, v, mask, scale):
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    return torch.matmul(scores.float().masked_fill(~mask, -float("inf")).softmax(-1).to(v.dtype), v)


@pytest.mark.parametrize(("part", "dtype"), [("norm", torch.float32), ("mlp", torch.float32), ("mlp", torch.bfloat16),
                                            ("attention", torch.float32), ("attention", torch.bfloat16)])
def test_recomputing_functions_save_less_and_give_autograds_gradients(part, dtype):
    # Each of grpo_core.llama's autograd functions keeps fewer tensors for the backward than plain
    # autograd would and recomputes the rest; the values and gradients must be bitwise autograd's.
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    if part == "norm":
        shapes, eps = [(2, 5, 16), (16,)], 1e-6
        ours = lambda x, w: llama._RecomputedRMSNorm.apply(x, w, eps)  # noqa: E731
        plain = lambda x, w: llama._rms_norm(x, w, eps)  # noqa: E731
    elif part == "mlp":
        shapes = [(2, 5, 24), (2, 5, 24), (16, 24)]
        ours = lambda g, u, w: llama.SwiGLUDown.apply(g, u, w, None, dtype)  # noqa: E731
        plain = plain_mlp
    else:
        shapes = [(2, 4, 5, 8), (2, 4, 5, 8), (2, 4, 5, 8)]
        ours = lambda q, k, v: llama._RecomputedAttention.apply(q, k, v, mask, 0.3)  # noqa: E731
        plain = lambda q, k, v: plain_attention(q, k, v, mask, 0.3)  # noqa: E731
    results = []
    for fn in (ours, plain):
        inputs = leaves(*shapes, dtype=dtype)
        out, saved = saved_bytes(fn, *inputs)
        out.backward(torch.ones_like(out) * torch.linspace(-1, 1, out.size(-1), dtype=out.dtype))
        results.append((out, saved, [t.grad for t in inputs]))
    (out, saved, grads), (plain_out, plain_saved, plain_grads) = results
    assert torch.equal(out, plain_out)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))
    assert saved < plain_saved


def llama_from(hf):
    native = llama.CausalLM(llama.Config.from_dict(hf.config.to_dict()))
    native.load_state_dict(hf.state_dict())
    return native


@pytest.mark.parametrize("sampling", [None, {"temperature": 0.8, "top_k": 5, "top_p": 0.9}])
def test_decode_on_the_native_model_picks_hf_generates_tokens(sampling):
    tokenizer = chars_tokenizer()
    hf = hf_model("qwen2", {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
                            "eos_token_id": tokenizer.eos_token_id})
    native = llama_from(hf)
    rows = Prompts(tokenizer, 8).encode(["1+2=", "33+4=", "5="])
    ids, mask = left_pad([r for r in rows for _ in range(3)], tokenizer.pad_token_id, torch.device("cpu"))
    eos = torch.tensor([tokenizer.eos_token_id])
    s = sampling or {}
    config = generation_config(tokenizer, [tokenizer.eos_token_id], 12, sampling is not None,
                               s.get("temperature", 1.0), s.get("top_p", 1.0), s.get("top_k", 0))
    torch.manual_seed(7)
    expected = generate(hf, ids, mask, config, eos, "hf")
    torch.manual_seed(7)
    got = generate(native, ids, mask, config, eos, "auto")
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


def test_build_model_chooses_the_implementation(tmp_path):
    from grpo_core.config import ModelConfig

    tokenizer = chars_tokenizer()
    hf = hf_model("llama", {"vocab_size": len(tokenizer)})
    hf.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    auto = ModelConfig(name_or_path=str(tmp_path / "m"))
    assert isinstance(build_model(auto, tokenizer), llama.CausalLM)
    assert not isinstance(build_model(auto, tokenizer, native=False), llama.CausalLM)  # generation_backend: hf
    forced = ModelConfig(name_or_path=str(tmp_path / "m"), implementation="transformers")
    assert type(build_model(forced, tokenizer)).__name__ == "LlamaForCausalLM"
    built = ModelConfig(config={"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
                                "num_hidden_layers": 1, "num_attention_heads": 2}, tokenizer="builtin:chars")
    assert isinstance(build_model(built, tokenizer), llama.CausalLM)
    strict = ModelConfig(config={"model_type": "gpt2", "n_embd": 16, "n_layer": 1, "n_head": 2},
                         tokenizer="builtin:chars", implementation="grpo_core")
    with pytest.raises(UserError, match="grpo_core cannot run this model: model_type 'gpt2'"):
        build_model(strict, tokenizer)


def test_a_training_process_imports_neither_transformers_modeling_nor_dynamo(tmp_path):
    # The point of grpo_core.llama, grpo_core.optim and the tokenizer fast path: what they leave out
    # is ~250 MiB of a small run's resident memory (docs/benchmarks.md). A regression brings it back.
    tokenizer = chars_tokenizer()
    hf = hf_model("llama", {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
                            "eos_token_id": tokenizer.eos_token_id})
    hf.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                                              for i in range(8)))
    script = f"""
import json, sys
from grpo_core.config import validate_config
from grpo_core.trainer import Trainer
config = validate_config({{
    "model": {{"name_or_path": {str(tmp_path / "m")!r}}}, "data": {{"path": {str(tmp_path / "p.jsonl")!r}}},
    "rewards": {{"scorers": [{{"scorer": "length", "params": {{"unit": "chars", "mode": "target", "target": 2}}}}]}},
    "num_generations": 4, "per_device_train_batch_size": 4, "max_completion_length": 4, "max_steps": 2,
    "bf16": True, "device": "cpu", "output_dir": {str(tmp_path / "out")!r}, "progress": False, "plot": False}})
Trainer(config).train()
heavy = ["transformers.modeling_utils", "torch._dynamo", "sympy", "peft", "accelerate"]
print(json.dumps([m for m in heavy if m in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "out" / "final" / "model.safetensors").exists()
