"""Batched generation and the `generate` command on a tiny Llama (prompt rendering: test_prompts.py)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from _tiny_models import build_tiny_llama  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from grpo_core import decode  # noqa: E402
from grpo_core.generate import generate_completions, main, read_prompt_records, write_jsonl_atomic  # noqa: E402
from grpo_rewards.errors import UserError  # noqa: E402
from grpo_rewards.scorer import Sample  # noqa: E402

pytestmark = pytest.mark.timeout(120)

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def model(tiny_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


def test_batched_greedy_equals_one_prompt_at_a_time(model, tokenizer):
    records = [{"prompt": CHAT, "answer": "5"}, {"prompt": "hi", "answer": "x"}, {"prompt": "the answer", "id": 3}]
    batched = generate_completions(model, tokenizer, records, max_new_tokens=6, batch_size=3, progress=False)
    single = [
        generate_completions(model, tokenizer, [r], max_new_tokens=6, batch_size=1, progress=False)[0]
        for r in records
    ]
    assert batched == single
    texts = [Sample.from_record(r).completion_text for r in batched]
    assert all(texts) and len(set(texts)) == 3  # real, prompt-dependent text: the comparison means something
    assert batched[0]["completion"][0]["role"] == "assistant"  # chat prompt: conversational completion
    assert isinstance(batched[1]["completion"], str)
    assert batched[0]["answer"] == "5" and batched[2]["id"] == 3  # reference fields carried through


def test_samples_per_prompt_in_order_and_seeded(model, tokenizer):
    records = [{"prompt": "hi", "n": 0}, {"prompt": CHAT, "n": 1}]
    kwargs = dict(num_samples=3, max_new_tokens=5, temperature=1.0, batch_size=4, progress=False, seed=7)
    rows = generate_completions(model, tokenizer, records, **kwargs)
    assert [r["n"] for r in rows] == [0, 0, 0, 1, 1, 1]
    assert len({r["completion"] for r in rows[:3]}) > 1  # sampling gives different completions
    assert rows == generate_completions(model, tokenizer, records, **kwargs)  # same seed, same rows
    with pytest.raises(UserError, match="identical"):
        generate_completions(model, tokenizer, records, num_samples=2, temperature=0.0)


def test_read_prompt_records_names_the_bad_line(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "a"}\n\n{"prompt": oops}\n')
    with pytest.raises(UserError, match=r"data.jsonl:3: invalid JSON"):
        read_prompt_records(data)
    data.write_text('{"prompt": "a"}\n{"question": "b"}\n')
    with pytest.raises(UserError, match=r"data.jsonl: record 2 \(counting from 1\) has no 'prompt'"):
        read_prompt_records(data)
    data.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"}\n')
    assert [r["prompt"] for r in read_prompt_records(data, limit=2)] == ["a", "b"]


def test_write_jsonl_atomic_replaces_and_leaves_no_temp(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    write_jsonl_atomic(out, [{"a": 1}, {"b": "é"}])
    assert [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] == [{"a": 1}, {"b": "é"}]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_generate_command_writes_scoreable_rows(tiny_dir, tmp_path, capsys):
    data = tmp_path / "eval.jsonl"
    rows = [{"prompt": CHAT, "answer": "5"}, {"prompt": "2 + 2?", "answer": "4"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "completions.jsonl"
    argv = ["--model", str(tiny_dir), "--data", str(data), "--output", str(out), "--num-samples", "2",
            "--temperature", "0.8", "--max-new-tokens", "4", "--device", "cpu", "--no-progress"]
    assert main(argv) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(written) == 4 and "wrote 4 completions" in capsys.readouterr().err
    samples = [Sample.from_record(r) for r in written]
    assert [s.reference["answer"] for s in samples] == ["5", "5", "4", "4"]
    assert isinstance(written[0]["completion"], list) and isinstance(written[2]["completion"], str)
    assert all(isinstance(s.completion_text, str) for s in samples)


def test_generate_command_user_errors_exit_2(tiny_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "eval.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    out = tmp_path / "c.jsonl"
    assert main(["--model", "nobody-at-all/no-model", "--data", str(data), "--output", str(out)]) == 2
    assert "offline" in capsys.readouterr().err
    assert main(["--model", str(tiny_dir), "--data", str(tmp_path / "none.jsonl"), "--output", str(out)]) == 2
    assert "cannot read data file" in capsys.readouterr().err
    assert not out.exists()


def test_weights_held_in_bfloat16_generate_through_hf(tiny_dir, tokenizer):
    """`--dtype bfloat16`: the lean decode loop takes float32 weights only, so HF `generate` runs these."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.bfloat16).eval()
    assert not decode.supported(model)
    rows = generate_completions(model, tokenizer, [{"prompt": "hi"}, {"prompt": CHAT}], max_new_tokens=4,
                                progress=False)
    assert isinstance(rows[0]["completion"], str) and rows[1]["completion"][0]["role"] == "assistant"


@pytest.mark.parametrize("lands", ["while generating", "after the write"])
def test_generate_interrupted_says_what_it_left(tiny_dir, tmp_path, capsys, monkeypatch, lands):
    """Ctrl-C: the previous output is intact and the message says so, or the new one is whole and it says that."""
    import grpo_core.generate as generate_module

    data = tmp_path / "eval.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    out = tmp_path / "c.jsonl"
    out.write_text("previous\n")

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    if lands == "while generating":
        monkeypatch.setattr(generate_module, "generate_completions", interrupt)
    else:
        real_write = generate_module.write_jsonl_atomic
        monkeypatch.setattr(generate_module, "write_jsonl_atomic", lambda *a: (real_write(*a), interrupt()))
    argv = ["--model", str(tiny_dir), "--data", str(data), "--output", str(out), "--max-new-tokens", "2",
            "--device", "cpu", "--no-progress"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    if lands == "while generating":
        assert f"interrupted; no output written ({out} unchanged)" in err and out.read_text() == "previous\n"
    else:
        assert f"interrupted; {out} was already written in full" in err
        assert json.loads(out.read_text().splitlines()[0])["prompt"] == "hi"
