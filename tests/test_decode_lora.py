"""The lean decode loop on a LoRA (peft) model: it decodes with each adapted projection's merged weight."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from _grpo_core_helpers import one_torch_thread  # noqa: E402, F401 - autouse fixture
from _tiny_models import build_tiny_llama  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from grpo_core import decode  # noqa: E402
from grpo_core.lora import apply_lora, mergeable  # noqa: E402
from grpo_core.prompts import Prompts  # noqa: E402
from grpo_core.rollout import generate, generation_config, left_pad  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def load_base(directory):
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()


def trained_lora(directory, **kwargs):
    """A LoRA model whose adapter changes the outputs (peft starts B at zero: the update would be nil)."""
    torch.manual_seed(0)  # peft draws A at random: two calls give the same adapter
    model = apply_lora(load_base(directory), r=4, alpha=8, dropout=0.1, **kwargs)
    generator = torch.Generator().manual_seed(3)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return model


def prompts(directory):
    tokenizer = AutoTokenizer.from_pretrained(directory)
    rows = Prompts(tokenizer, 16).encode(["1+2=", "what is 33+4?", "5", "the cat sat"])
    ids, mask = left_pad([r for r in rows for _ in range(3)], tokenizer.pad_token_id, torch.device("cpu"))
    return tokenizer, ids, mask, torch.tensor([tokenizer.eos_token_id])


def rollout(model, directory, backend, sampling, new_tokens=12, seed=5):
    tokenizer, ids, mask, eos = prompts(directory)
    # top_k set: with top_k 0, HF generate falls back to its default of 50 (the lean loop keeps every token)
    config = generation_config(tokenizer, [tokenizer.eos_token_id], new_tokens, sampling, 0.9, 0.95, 20)
    torch.manual_seed(seed)
    return generate(model, ids, mask, config, eos, backend)


@pytest.mark.parametrize("sampling", [False, True])
def test_lora_decode_picks_the_same_tokens_as_hf_generate_on_the_peft_model(tiny_dir, sampling):
    model = trained_lora(tiny_dir)
    assert decode.supported(model)
    lean, hf = rollout(model, tiny_dir, "auto", sampling), rollout(model, tiny_dir, "hf", sampling)
    assert torch.equal(lean[0], hf[0]) and torch.equal(lean[1], hf[1])
    # the adapter matters: the base model decodes something else
    base = rollout(load_base(tiny_dir), tiny_dir, "auto", sampling)
    assert base[0].shape != lean[0].shape or not torch.equal(base[0], lean[0])


@pytest.mark.parametrize("bf16", [False, True])
def test_lora_decode_is_bitwise_the_decode_of_peft_merged_model(tiny_dir, bf16):
    """peft's merge adds scale * B @ A to W in float32, as the snapshot does: the same weights, so the
    same tokens, also sampled and in bf16 autocast (where the loop's weights are cast after merging)."""
    model = trained_lora(tiny_dir)
    merged = trained_lora(tiny_dir).merge_and_unload()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        lean = rollout(model, tiny_dir, "auto", True, new_tokens=16)
        plain = rollout(merged, tiny_dir, "auto", True, new_tokens=16)
    assert torch.equal(lean[0], plain[0])
    # the snapshot left the training model as it was: adapter unmerged, weights untouched
    assert not any(layer.merged for layer in model.modules() if hasattr(layer, "merged") and hasattr(layer, "lora_A"))
    assert torch.equal(model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight,
                       load_base(tiny_dir).model.layers[0].self_attn.q_proj.weight)


def test_bf16_lora_logits_match_the_peft_forward_and_greedy_tokens_agree(tiny_dir):
    """In bf16 autocast the loop multiplies by bf16(W + sBA) where peft adds bf16 W x and bf16 B A x: they
    differ by rounding only. The merged model's logits (what the loop computes) stay within bf16
    tolerance of peft's, and greedy decoding picks the same tokens as HF generate on the peft model."""
    model, merged = trained_lora(tiny_dir), trained_lora(tiny_dir).merge_and_unload()
    model.eval()  # no adapter dropout: what generation computes
    _, ids, mask, _ = prompts(tiny_dir)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        peft_logits = model(input_ids=ids, attention_mask=mask).logits.float()
        merged_logits = merged(input_ids=ids, attention_mask=mask).logits.float()
    with torch.no_grad():
        exact = model(input_ids=ids, attention_mask=mask).logits                      # float32
    real = mask.bool()
    # merging changes bf16's rounding, not its size: within twice bf16's own error against float32
    bf16_error = (peft_logits - exact)[real].abs().max()
    error = (peft_logits - merged_logits)[real].abs().max()
    assert error <= 2 * bf16_error, (error, bf16_error)
    assert (merged_logits - exact)[real].abs().max() <= 2 * bf16_error
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lean, hf = rollout(model, tiny_dir, "auto", False), rollout(model, tiny_dir, "hf", False)
    width = min(lean[0].size(1), hf[0].size(1))
    agree = (lean[0][:, :width] == hf[0][:, :width]).float().mean()
    assert torch.equal(lean[0][:, 0], hf[0][:, 0]) and agree > 0.8, agree


def test_adapter_switched_off_decodes_the_base_model(tiny_dir):
    model = trained_lora(tiny_dir)
    with model.disable_adapter():
        off = rollout(model, tiny_dir, "auto", True)
    base = rollout(load_base(tiny_dir), tiny_dir, "auto", True)
    assert torch.equal(off[0], base[0])


def test_a_lora_variant_falls_back_to_hf_generate(tiny_dir):
    dora = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=0.0)
    assert mergeable(dora) and decode.supported(dora)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", use_dora=True)
    dora = peft.get_peft_model(load_base(tiny_dir), config)
    assert not mergeable(dora) and not decode.supported(dora)
