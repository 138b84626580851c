"""LoRA on a tiny Llama: the adapter-disabled reference is the base, checkpointing, save/load."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from _tiny_models import build_tiny_llama  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from grpo_core.lora import (  # noqa: E402
    LoraSettings,
    apply_lora,
    apply_lora_settings,
    enable_gradient_checkpointing,
    has_adapter,
    is_adapter_dir,
    load_adapter,
    reference_mode,
    save_model,
    trainable_parameters,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def load_base(directory):
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)


@pytest.fixture()
def batch():
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, 300, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0  # a left-padded row, as in GRPO batches
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def logits_of(model, batch):
    with torch.no_grad():
        return model(**batch).logits


def train_step(model, batch, lr=5e-2):
    """One optimizer step on a language-modelling loss over the adapter parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr)
    model.train()
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def test_only_adapter_parameters_train(tiny_dir):
    model = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=0.0)
    assert has_adapter(model)
    trainable, total = trainable_parameters(model)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert 0 < trainable < total / 2
    # "all-linear" adapts every projection of both layers (q, k, v, o, gate, up, down), not the head.
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_reference_mode_is_the_base_before_and_after_training(tiny_dir, batch):
    base_logits = logits_of(load_base(tiny_dir).eval(), batch)
    model = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=0.0)
    for _ in range(3):
        train_step(model, batch)
    model.eval()
    adapted = logits_of(model, batch)
    with reference_mode(model) as ref:
        reference = ref(**batch).logits
    assert not reference.requires_grad  # the reference forward builds no graph
    assert torch.allclose(reference, base_logits, atol=1e-6)
    assert (adapted - base_logits).abs().max() > 1e-3  # the adapter did change the policy
    # leaving the block re-enables the adapter
    assert torch.allclose(logits_of(model, batch), adapted)


def test_reference_mode_through_a_logprob_wrapper(tiny_dir, batch):
    """The trainer wraps `get_base_model()` in its log-prob module (and DDP): the switch still works."""
    from grpo_core.loss import CompletionLogprobs

    ids, mask = batch["input_ids"], batch["attention_mask"]
    prompt, completion = (ids[:, :6], mask[:, :6]), (ids[:, 6:], torch.ones_like(ids[:, 6:]))
    with torch.no_grad():
        base_logps, _ = CompletionLogprobs(load_base(tiny_dir).eval(), 1.0, 64)(*prompt, *completion)
    peft_model = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=0.0)
    train_step(peft_model, batch)
    wrapper = CompletionLogprobs(peft_model.get_base_model(), 1.0, 64).eval()
    assert has_adapter(wrapper)
    with torch.no_grad():
        policy_logps, _ = wrapper(*prompt, *completion)
    with reference_mode(wrapper) as ref:
        ref_logps, _ = ref(*prompt, *completion)
    assert torch.allclose(ref_logps, base_logps, atol=1e-6)
    assert (policy_logps - base_logps).abs().max() > 1e-4
    with torch.no_grad():  # the adapter is back on, and trainable, after the block
        assert torch.allclose(wrapper(*prompt, *completion)[0], policy_logps)
    assert all(p.requires_grad for n, p in wrapper.named_parameters() if "lora_" in n)


def test_reference_mode_needs_an_adapter(tiny_dir):
    with pytest.raises(ValueError, match="LoRA"):
        with reference_mode(load_base(tiny_dir)):
            pass


@pytest.mark.parametrize("use_lora", [True, False])
def test_gradient_checkpointing_gives_the_same_gradients(tiny_dir, batch, use_lora):
    def grads(checkpointing):
        torch.manual_seed(0)
        model = load_base(tiny_dir)
        if use_lora:
            model = apply_lora(model, r=4, alpha=8, dropout=0.0)
            # make B non-zero so the adapter path carries gradient into A as well
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    torch.nn.init.normal_(p, std=0.1)
        if checkpointing:
            enable_gradient_checkpointing(model)
        calls = []
        # count the MLP's forward calls (module hooks are not replayed by the recompute, forward is)
        mlp = (model.get_base_model() if use_lora else model).model.layers[0].mlp
        original_forward = mlp.forward
        mlp.forward = lambda *a, **k: calls.append(1) or original_forward(*a, **k)
        model.train()
        model(**batch, labels=batch["input_ids"]).loss.backward()
        # checkpointing recomputes the layer's forward during the backward
        assert len(calls) == (2 if checkpointing else 1)
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    plain, checkpointed = grads(False), grads(True)
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        assert checkpointed[name] is not None
        assert torch.allclose(plain[name], checkpointed[name], atol=1e-6), name


def test_save_merged_round_trip_keeps_the_training_model(tiny_dir, batch, tmp_path):
    model = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=0.0)
    train_step(model, batch)
    model.eval()
    expected = logits_of(model, batch)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    out = save_model(model, tokenizer, tmp_path / "merged", merged=True)
    assert not is_adapter_dir(out)
    reloaded = load_base(out).eval()
    # W + BA * s in one matrix rounds differently from the two paths summed: ~1e-5 on logits of
    # magnitude 5, depending on the adapter's random init; a wrong merge is off by orders more.
    diff = (logits_of(reloaded, batch) - expected).abs().max()
    assert diff < 1e-4, diff
    assert AutoTokenizer.from_pretrained(out).chat_template == tokenizer.chat_template
    # merging happened on a copy: the training model still has its adapter and its outputs
    assert has_adapter(model)
    assert torch.allclose(logits_of(model, batch), expected)
    assert not any(tmp_path.glob(".merged*"))  # no temporary directory left behind


def test_save_adapter_only_round_trip(tiny_dir, batch, tmp_path):
    model = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=0.0)
    train_step(model, batch)
    model.eval()
    expected = logits_of(model, batch)
    out = save_model(model, AutoTokenizer.from_pretrained(tiny_dir), tmp_path / "adapter", merged=False)
    assert is_adapter_dir(out)
    adapter_bytes = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    base_bytes = sum(f.stat().st_size for f in tiny_dir.glob("*.safetensors"))
    assert 0 < adapter_bytes < base_bytes  # the base weights are not in it
    restored = load_adapter(load_base(tiny_dir), out).eval()
    assert torch.allclose(logits_of(restored, batch), expected, atol=1e-6)
    with reference_mode(restored) as ref:
        assert torch.allclose(ref(**batch).logits, logits_of(load_base(tiny_dir).eval(), batch), atol=1e-6)


def test_save_replaces_an_existing_directory(tiny_dir, tmp_path):
    target = tmp_path / "final"
    target.mkdir()
    (target / "stale.txt").write_text("old")
    save_model(load_base(tiny_dir), None, target, merged=True)
    assert (target / "config.json").is_file() and not (target / "stale.txt").exists()


def test_lora_settings_validate_and_apply(tiny_dir):
    settings = LoraSettings.model_validate({"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]})
    model = apply_lora_settings(load_base(tiny_dir), settings)
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad}
    assert adapted == {"q_proj", "v_proj"}
    with pytest.raises(ValidationError, match="r"):
        LoraSettings.model_validate({"r": 0})
    with pytest.raises(ValidationError, match="rank"):
        LoraSettings.model_validate({"rank": 8})  # unknown key: extra="forbid"
    assert all(field.description for field in LoraSettings.model_fields.values())


# ---------------------------------------------------------------------------------------------
# LoRA in the trainer: adapter-only checkpoints that resume exactly, and the example config's save mode

# `length` varies between a random model's completions, so groups have advantages and the adapter moves.
REWARDS = {"scorers": [{"scorer": "math_accuracy"}, {"scorer": "think_format", "params": {"whitespace": "lenient"}},
                       {"scorer": "length", "params": {"mode": "ramp", "low": 0, "high": 40}}]}


def lora_run_config(tiny_dir, out, **overrides):
    return {"model": {"name_or_path": str(tiny_dir)}, "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "save": "adapter"},
            "data": {"task": "arith_words", "train_size": 24, "eval_size": 2}, "rewards": REWARDS,
            "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 6,
            "learning_rate": 1e-2, "beta": 0.1, "temperature": 1.0, "output_dir": str(out), "progress": False,
            "plot": False, "device": "cpu", "seed": 0, "torch_threads": 1, **overrides}


def adapter_state(directory):
    from safetensors.torch import load_file

    return load_file(directory / "adapter_model.safetensors")


@pytest.mark.timeout(240)
def test_lora_checkpoint_holds_the_adapter_alone_and_resume_continues_exactly(tiny_dir, tmp_path):
    from grpo_core.config import validate_config
    from grpo_core.metrics import read_metrics
    from grpo_core.trainer import Trainer

    # checkpoint-3 falls inside a generation batch (num_iterations 2): the pending rollout is resumed too
    settings = dict(max_steps=6, save_steps=3, num_iterations=2, eval_steps=3, logging_steps=1)
    straight = Trainer(validate_config(lora_run_config(tiny_dir, tmp_path / "straight", **settings)))
    straight.train()
    checkpoint = tmp_path / "straight" / "checkpoint-3"
    assert is_adapter_dir(checkpoint) and not list(checkpoint.glob("model*.safetensors"))
    trainable, _ = trainable_parameters(straight.policy.model)
    weights = sum(f.stat().st_size for f in checkpoint.glob("*.safetensors"))
    assert trainable * 4 <= weights < trainable * 4 + 64 * 1024  # float32 adapter plus a header
    base = sum(f.stat().st_size for f in tiny_dir.glob("*.safetensors"))
    assert weights < base / 3

    # The same run, stopped after checkpoint-3 and resumed: the base is rebuilt, the adapter loaded.
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    import shutil

    shutil.copytree(checkpoint, resumed_dir / "checkpoint-3")
    lines = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    (resumed_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines if json_step(line) <= 3))
    again = Trainer(validate_config(lora_run_config(tiny_dir, resumed_dir, **settings)))
    again.train(resume=True)
    assert again.step == 6
    a, b = adapter_state(tmp_path / "straight" / "final"), adapter_state(resumed_dir / "final")
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0, msg=key)
    assert any(not torch.equal(p, torch.zeros_like(p)) for k, p in a.items() if "lora_B" in k)  # it trained
    x, y = read_metrics(tmp_path / "straight" / "metrics.jsonl"), read_metrics(resumed_dir / "metrics.jsonl")
    assert [r["step"] for r in y] == [r["step"] for r in x] == list(range(7))
    for r, s in zip(x, y):
        assert r.get("reward") == s.get("reward") and r.get("eval/reward") == s.get("eval/reward")


def json_step(line):
    import json

    return json.loads(line)["step"]


def test_a_lora_checkpoint_needs_a_matching_lora_section(tiny_dir, tmp_path):
    from grpo_core.config import validate_config
    from grpo_core.trainer import Trainer
    from grpo_rewards.errors import UserError

    trainer = Trainer(validate_config(lora_run_config(tiny_dir, tmp_path / "run", max_steps=1, eval_steps=0)))
    saved = trainer.save()
    plain = lora_run_config(tiny_dir, tmp_path / "run", max_steps=1, eval_steps=0)
    plain.pop("lora")
    with pytest.raises(UserError, match="no `lora:` section"):
        Trainer(validate_config(plain)).restore(saved)
    wider = lora_run_config(tiny_dir, tmp_path / "run", max_steps=1, eval_steps=0)
    wider["lora"]["r"] = 8
    with pytest.raises(UserError, match="does not fit"):
        Trainer(validate_config(wider)).restore(saved)


def test_example_config_saves_the_adapter_alone(tiny_dir, tmp_path):
    """examples/smollm2_arith.yaml says `save: adapter`: the final model is the adapter alone."""
    from pathlib import Path

    from grpo_core.config import load_config
    from grpo_core.trainer import Trainer

    example = Path(__file__).resolve().parents[1] / "examples" / "smollm2_arith.yaml"
    overrides = [f"model.name_or_path={tiny_dir}", f"output_dir={tmp_path / 'run'}", "data.train_size=8",
                 "data.eval_size=0", "device=cpu"]
    cfg = load_config(example, overrides)
    assert cfg.lora.save == "adapter" and cfg.lora.merge_on_save is False
    trainer = Trainer(cfg)
    final = trainer.save_final(tmp_path / "final")
    assert is_adapter_dir(final) and not list(final.glob("model*.safetensors"))
    # `merge_on_save: true` (or `save: merged`) gives a plain model directory instead
    merged = Trainer(load_config(example, [*overrides, "lora.save=merged"])).save_final(tmp_path / "merged")
    assert not is_adapter_dir(merged) and (merged / "model.safetensors").is_file()


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_lean_training_forward_gives_peft_s_values_and_gradients_and_keeps_less(tiny_dir, batch, dropout):
    """Under bf16 autocast the adapter layers' own training forward (frozen weights kept, not their
    cast copies; one cast input per tensor) and the MLPs' (silu(gate) not kept) compute what peft's
    and transformers' forwards compute, bit for bit, and the autograd graph holds at least the
    base weights' bf16 size less."""

    def run(lean):
        torch.manual_seed(0)
        model = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=dropout)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)  # so that the adapter path carries gradient into A
        patched = [m for m in model.modules() if "forward" in vars(m)]
        layers = [m for m in patched if hasattr(m, "get_base_layer")]
        assert len(layers) == 7 * 2 and len(patched) == len(layers) + 2  # every projection, and the MLPs
        if not lean:
            for module in patched:
                del module.forward  # peft's and transformers' own
        saved = {}
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}

        def pack(t):  # what the graph holds beyond the parameters themselves
            if t.untyped_storage().data_ptr() not in params:
                saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        model.train()
        torch.manual_seed(1)  # the same dropout masks in both
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", torch.bfloat16):
            loss = model(**batch, labels=batch["input_ids"]).loss
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        frozen_bf16 = sum(m.get_base_layer().weight.numel() * 2 for m in layers)
        return loss.detach(), grads, sum(saved.values()), frozen_bf16

    lean_loss, lean_grads, lean_saved, frozen_bf16 = run(True)
    peft_loss, peft_grads, peft_saved, _ = run(False)
    assert torch.equal(lean_loss, peft_loss)
    assert lean_grads.keys() == peft_grads.keys() and lean_grads
    for name in lean_grads:
        assert torch.equal(lean_grads[name], peft_grads[name]), name
    assert peft_saved - lean_saved >= frozen_bf16


def test_lean_forward_leaves_inference_and_the_reference_to_peft(tiny_dir, batch):
    """Without grad (generation, the reference) the layers run peft's own forward: the same logits."""
    torch.manual_seed(0)
    model = apply_lora(load_base(tiny_dir), r=4, alpha=8, dropout=0.0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)

    def outputs():
        with torch.autocast("cpu", torch.bfloat16):
            with reference_mode(model) as ref:
                reference = ref(**batch).logits
            return reference, logits_of(model, batch)

    lean = outputs()
    for layer in [m for m in model.modules() if "forward" in vars(m)]:
        del layer.forward
    assert all(torch.equal(a, b) for a, b in zip(lean, outputs()))
    with torch.autocast("cpu", torch.bfloat16):
        assert torch.equal(lean[0], logits_of(load_base(tiny_dir), batch))  # the reference is the base
