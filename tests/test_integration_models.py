"""The trainer on a pretrained-style model (a tiny random Llama with a BPE tokenizer and a ChatML
template, saved to a directory): chat prompts, conversational completions, LoRA with the
adapter-disabled reference, merged / adapter-only saving, model names, and generate-then-score."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from _grpo_core_helpers import one_torch_thread  # noqa: F401 - autouse fixture
from _tiny_models import build_tiny_llama
from grpo_core.cli import main as train_main
from grpo_core.config import validate_config
from grpo_core.data import get_task
from grpo_core.metrics import read_metrics
from grpo_core.trainer import Trainer
from grpo_rewards.errors import ConfigError, UserError

pytest.importorskip("peft")
pytestmark = pytest.mark.timeout(120)

SYSTEM = {"role": "system", "content": "Answer inside <answer> tags."}
RECORDS = [{"prompt": [SYSTEM, {"role": "user", "content": f"What is {a} + {b}?"}], "answer": str(a + b)}
           for a in range(4) for b in range(3)]
REWARDS = {"scorers": [{"scorer": "math_accuracy"}, {"scorer": "think_format", "params": {"whitespace": "lenient"}}]}
# A random tiny model's text earns no math credit (its stray digits are no answer), so the LoRA runs add a
# length term that gives their groups the spread a gradient needs.
MOVING_REWARDS = {"scorers": [*REWARDS["scorers"],
                              {"scorer": "length", "weight": 0.5, "params": {"mode": "ramp", "low": 0, "high": 20}}]}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def chat_data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


def config(tiny_dir: Path, chat_data: Path, out: Path, **overrides) -> dict:
    return {"model": {"name_or_path": str(tiny_dir)}, "data": {"path": str(chat_data), "eval_size": 2},
            "rewards": REWARDS, "num_generations": 2, "per_device_train_batch_size": 4, "max_steps": 2,
            "max_completion_length": 6, "learning_rate": 1e-2, "output_dir": str(out), "progress": False,
            "plot": False, "device": "cpu", "seed": 0, **overrides}


def lora_config(tiny_dir, chat_data, out, **overrides) -> dict:
    return config(tiny_dir, chat_data, out, lora={"r": 4, "alpha": 8, "dropout": 0.0}, beta=0.1,
                  **{"rewards": MOVING_REWARDS, **overrides})


def test_chat_prompts_use_the_template_and_scorers_get_conversational_completions(tiny_dir, chat_data, tmp_path):
    trainer = Trainer(validate_config(config(tiny_dir, chat_data, tmp_path / "run")))
    record = trainer.train_records[0]
    text = trainer.tokenizer.apply_chat_template(record["prompt"], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert trainer.train_ids[0] == trainer.tokenizer(text, add_special_tokens=False)["input_ids"]
    seen = []
    score = trainer.reward.score
    trainer.reward.score = lambda samples, *rest: seen.extend(samples) or score(samples, *rest)  # a spy; real scorers run
    trainer.make_rollout()
    assert len(seen) == 4
    for sample in seen:
        assert isinstance(sample.prompt, list) and sample.prompt[-1]["role"] == "user"
        assert isinstance(sample.completion, list) and len(sample.completion) == 1
        assert sample.completion[0]["role"] == "assistant" and isinstance(sample.completion[0]["content"], str)
        assert sample.reference["answer"].isdigit()


def _tensor_ids(module: torch.nn.Module) -> set[int]:
    return {t.data_ptr() for t in [*module.parameters(), *module.buffers()]}


@pytest.mark.parametrize("save", ["adapter", "merged"])
def test_lora_reference_is_the_adapter_disabled_base_and_saving(tiny_dir, chat_data, tmp_path, save):
    from transformers import AutoModelForCausalLM

    cfg = lora_config(tiny_dir, chat_data, tmp_path / "run", max_steps=3)
    cfg["lora"]["save"] = save
    trainer = Trainer(validate_config(cfg))
    # No second copy of the weights: no reference module, every tensor anywhere belongs to the policy.
    assert trainer.policy.reference is trainer.policy.logprobs  # the policy's own module, adapter disabled
    policy = _tensor_ids(trainer.policy.model)
    modules = [v for v in [*vars(trainer).values(), *vars(trainer.policy).values()] if isinstance(v, torch.nn.Module)]
    assert modules and all(_tensor_ids(m) <= policy for m in modules)
    trained = [n for n, p in trainer.policy.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
    assert {id(p) for p in trainer.optimizer.params} == {id(p) for p in trainer.policy.trainable}
    summary = trainer.train()
    kls = [m["kl"] for m in read_metrics(Path(summary["metrics_file"])) if "kl" in m]
    assert len(kls) == 3 and kls[-1] > 0  # the adapter has moved the policy away from the base
    # The reference log-probs are the untouched base model's, after training too.
    rollout = trainer.make_rollout()[0]
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    from grpo_core.loss import CompletionLogprobs

    expected = trainer.policy.score(CompletionLogprobs(base, trainer.cfg.temperature, 64), rollout)
    torch.testing.assert_close(trainer.policy.reference_logprobs(rollout), expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(trainer.policy.score(trainer.policy.logprobs, rollout), expected, atol=1e-4)
    final = Path(summary["final_model"])
    if save == "adapter":
        assert (final / "adapter_config.json").is_file() and not (final / "model.safetensors").exists()
    else:
        assert not (final / "adapter_config.json").exists()
        merged = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
        got = trainer.policy.score(CompletionLogprobs(merged, trainer.cfg.temperature, 64), rollout)
        torch.testing.assert_close(got, trainer.policy.score(trainer.policy.logprobs, rollout), atol=1e-4, rtol=1e-4)


def test_lora_checkpoint_restores_the_adapter(tiny_dir, chat_data, tmp_path):
    trainer = Trainer(validate_config(lora_config(tiny_dir, chat_data, tmp_path / "run", save_steps=2,
                                                  eval_steps=0)))
    trainer.train()
    again = Trainer(validate_config(lora_config(tiny_dir, chat_data, tmp_path / "run", save_steps=2,
                                                eval_steps=0)))
    before = {n: p.clone() for n, p in again.policy.model.named_parameters() if "lora_B" in n}
    again.restore(tmp_path / "run" / "checkpoint-2")
    assert again.step == 2
    for name, param in again.policy.model.named_parameters():
        if "lora_B" in name:  # lora_B starts at zero, so equality shows the trained adapter came back
            assert not torch.equal(param, before[name])
            torch.testing.assert_close(param, dict(trainer.policy.model.named_parameters())[name])


def test_gradient_checkpointing_with_lora_gives_adapter_gradients(tiny_dir, chat_data, tmp_path):
    cfg = lora_config(tiny_dir, chat_data, tmp_path / "run", eval_steps=0)
    cfg["model"]["gradient_checkpointing"] = True
    trainer = Trainer(validate_config(cfg))
    assert trainer.policy.model.get_base_model().is_gradient_checkpointing
    rollout = trainer.make_rollout()[0]
    logps, _ = trainer.policy.forward(rollout)
    logps.sum().backward()  # frozen embeddings: checkpointed blocks must still pass gradients to the adapter
    grads = {n: p.grad for n, p in trainer.policy.model.named_parameters() if "lora_B" in n}
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values())


def test_model_names_and_lora_section_are_validated(tiny_dir, chat_data, tmp_path, monkeypatch):
    cases = {"no-such-alias": "unknown model 'no-such-alias'", "./missing/dir": "no such model directory",
             "weights.gguf": "no such model file"}
    for name, message in cases.items():
        cfg = config(tiny_dir, chat_data, tmp_path, lora={"r": 0, "save": "everything"})
        cfg["model"]["name_or_path"] = name
        with pytest.raises(ConfigError) as exc:
            validate_config(cfg)
        paths = {p.path for p in exc.value.problems}
        assert {"model.name_or_path", "lora.r", "lora.save"} <= paths, paths
        assert message in str(exc.value)
    with pytest.raises(ConfigError, match="disagree"):
        validate_config(config(tiny_dir, chat_data, tmp_path, lora={"save": "adapter", "merge_on_save": True}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    cfg = config(tiny_dir, chat_data, tmp_path)
    cfg["model"]["name_or_path"] = "nobody-at-all/no-model"
    with pytest.raises(UserError, match="offline"):
        Trainer(validate_config(cfg))


def test_arith_words_is_deterministic_held_out_and_scoreable():
    from grpo_rewards.compose import build
    from grpo_rewards.scorer import Sample
    from grpo_rewards.spec import load_spec

    task = get_task("arith_words")
    train, held = task.build("train", 300, 1), task.build("eval", 50, 2)
    assert train == task.build("train", 300, 1) and len(train) == 300 and len(held) == 50
    question = lambda r: r["prompt"][-1]["content"]  # noqa: E731
    assert not {question(r) for r in train} & {question(r) for r in held}
    assert all(r["prompt"][0]["role"] == "system" and "<answer>" in r["prompt"][0]["content"] for r in train)
    assert [m["role"] for m in train[0]["prompt"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    plain = task.build("train", 3, 1, system_prompt=False, shots=0)
    assert [m["role"] for m in plain[0]["prompt"]] == ["user"] and "<answer>" in plain[0]["prompt"][0]["content"]
    reward = build(load_spec(REWARDS))
    good = [Sample(r["prompt"], [{"role": "assistant", "content": f"<think>work</think><answer>{r['answer']}</answer>"}],
                   {"answer": r["answer"]}) for r in held[:5]]
    wrong = [Sample(s.prompt, "The answer is 1000.", s.reference) for s in good]
    shot = train[0]["prompt"][2]["content"]  # the worked examples follow the format they ask for
    assert reward.score([Sample(good[0].prompt, shot, {"answer": "8"})]).totals == [2.0]
    try:
        assert reward.score(good).totals == [2.0] * 5 and reward.score(wrong).totals == [0.0] * 5
    finally:
        reward.close()


def test_generate_subcommand_then_score(tiny_dir, chat_data, tmp_path, capsys):
    from grpo_rewards.cli import main as rewards_main

    out = tmp_path / "completions.jsonl"
    argv = ["generate", "--model", str(tiny_dir), "--data", str(chat_data), "--output", str(out), "--num-samples",
            "2", "--temperature", "0.9", "--max-new-tokens", "5", "--limit", "3", "--device", "cpu", "--no-progress"]
    assert train_main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(r["completion"][0]["role"] == "assistant" for r in rows)
    spec = tmp_path / "rewards.json"
    spec.write_text(json.dumps(REWARDS))
    scored = tmp_path / "scored.jsonl"
    assert rewards_main(["score", "--spec", str(spec), "--input", str(out), "--output", str(scored),
                         "--no-progress"]) == 0
    results = [json.loads(line) for line in scored.read_text().splitlines()]
    assert len(results) == 6
    assert train_main(["generate", "--model", str(tmp_path / "nowhere"), "--data", str(chat_data),
                       "--output", str(tmp_path / "x.jsonl")]) == 2
    assert "no such directory" in capsys.readouterr().err
