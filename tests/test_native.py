"""grpo_core.native: the compiled decode layer is bitwise the Python one, and the decode loop uses it."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch

from _grpo_core_helpers import char_tokenizer, small_decoder
from _grpo_core_helpers import one_torch_thread  # noqa: F401 - autouse fixture
from grpo_core import decode, native
from grpo_core.prompts import Prompts
from grpo_core.rollout import generate, generation_config, left_pad


@pytest.fixture(scope="module")
def native_op():
    """The compiled op, built here when setup has not built it (it fails the test if the build fails)."""
    if native.decode_layer_op() is None:
        if shutil.which("c++") is None:
            pytest.skip("no C++ compiler: the decode loop keeps its Python layer")
        native.build_extension()
        native.decode_layer_op.cache_clear()
    op = native.decode_layer_op()
    assert op is not None
    return op


def layer_pair(layer, dtype, rows):
    """The same layer twice: once through the compiled op, once through Python."""
    compiled, python = decode._Layer(layer, 12, dtype, rows), decode._Layer(layer, 12, dtype, rows)
    python.native = None
    assert compiled.native is not None
    return compiled, python


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3", "grpo_core"])
def test_compiled_layer_is_bitwise_the_python_layer(native_op, kind, dtype):
    tokenizer = char_tokenizer()
    model = small_decoder("llama" if kind == "grpo_core" else kind, len(tokenizer), tokenizer)
    if kind == "grpo_core":  # grpo_core's own Llama (the trainer's), same shapes
        from grpo_core import llama

        config = llama.Config.from_dict({**model.config.to_dict(), "model_type": "llama"})
        torch.manual_seed(1)
        model = llama.from_config(config)
    body, gen = model.model, torch.Generator().manual_seed(0)
    rows, prompt = 3, 5
    with torch.inference_mode():
        compiled, python = layer_pair(body.layers[0], dtype, rows)
        x = torch.randn(rows, prompt, model.config.hidden_size, generator=gen)
        valid = torch.ones(rows, 12, dtype=torch.bool)
        valid[0, :2] = False  # a left-padded row
        positions = torch.arange(prompt).expand(rows, prompt)
        mask = (torch.ones(prompt, prompt, dtype=torch.bool).tril()[None] & valid[:, None, :prompt]
                | torch.eye(prompt, dtype=torch.bool)[None])[:, None]                        # (B, 1, P, P)
        start = 0
        for step in range(4):  # the prompt, then three decode steps
            cos, sin = (t[:, None] for t in body.rotary_emb(x, positions))
            out_c, out_p = compiled(x, cos, sin, mask, start), python(x, cos, sin, mask, start)
            assert torch.equal(out_c, out_p), f"step {step}: max diff {(out_c - out_p).abs().max()}"
            assert torch.equal(compiled.keys, python.keys) and torch.equal(compiled.values, python.values)
            start += x.size(1)
            x = torch.randn(rows, 1, model.config.hidden_size, generator=gen)
            positions = torch.full((rows, 1), start)
            mask = valid[:, None, None, :start + 1]


def test_sampling_uses_the_compiled_layer_and_picks_the_same_tokens(native_op, monkeypatch):
    tokenizer = char_tokenizer()
    model = small_decoder("qwen3", len(tokenizer), tokenizer)
    ids, mask = left_pad(Prompts(tokenizer, 8).encode(["1+2=", "33+4=", "5="]) * 2, tokenizer.pad_token_id,
                         torch.device("cpu"))
    config = generation_config(tokenizer, [tokenizer.eos_token_id], 10, True, 0.9, 1.0, 0)
    calls = []

    def counted(*args):
        calls.append(args[0].shape)
        return native_op(*args)

    results = {}
    for which, op in (("compiled", counted), ("python", None)):
        monkeypatch.setattr(native, "decode_layer_op", lambda op=op: op)
        torch.manual_seed(5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results[which] = generate(model, ids, mask, config, torch.tensor([tokenizer.eos_token_id]))
    assert torch.equal(results["compiled"][0], results["python"][0])
    completion_length = results["compiled"][0].size(1)
    assert len(calls) == 2 * completion_length  # both layers at every step: the prompt, then each new token


def test_without_a_build_or_when_disabled_the_python_layer_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_CORE_NATIVE_DIR", str(tmp_path))  # nothing built there
    native.decode_layer_op.cache_clear()
    try:
        assert native.decode_layer_op() is None
        tokenizer = char_tokenizer()
        model = small_decoder("llama", len(tokenizer), tokenizer)
        assert decode._Layer(model.model.layers[0], 8, None, 2).native is None
        monkeypatch.delenv("GRPO_CORE_NATIVE_DIR")
        monkeypatch.setenv("GRPO_CORE_NATIVE", "0")
        native.decode_layer_op.cache_clear()
        assert native.decode_layer_op() is None
    finally:
        native.decode_layer_op.cache_clear()


def test_layers_the_op_does_not_cover_keep_the_python_layer(native_op):
    tokenizer = char_tokenizer()
    model = small_decoder("llama", len(tokenizer), tokenizer)
    layer = model.model.layers[0]
    layer.mlp.act_fn = torch.nn.GELU()  # the op computes SiLU only
    assert decode._Layer(layer, 8, None, 2).native is None


def test_build_cli_reports_a_missing_compiler_without_a_traceback(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "CXX": "no-such-compiler", "GRPO_CORE_NATIVE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "grpo_core.native"], env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "no C++ compiler (no-such-compiler)" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())


def test_a_layer_is_freed_by_reference_counting(native_op):
    """No reference cycle through the compiled op: the rollout's weight snapshot and caches go when the
    loop ends, not when the garbage collector next runs (a cycle cost 50-140 MiB at the 20M bench size)."""
    import gc
    import weakref

    tokenizer = char_tokenizer()
    model = small_decoder("llama", len(tokenizer), tokenizer)
    gc.disable()
    try:
        layer = decode._Layer(model.model.layers[0], 8, torch.bfloat16, 2)
        assert layer.native is not None
        freed = weakref.ref(layer)
        del layer
        assert freed() is None
    finally:
        gc.enable()


def test_a_damaged_build_is_reported_and_the_python_layer_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_CORE_NATIVE_DIR", str(tmp_path))
    path = native.library_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a shared library")
    native.decode_layer_op.cache_clear()
    try:
        with pytest.warns(UserWarning, match="cannot load .*python -m grpo_core.native"):
            assert native.decode_layer_op() is None
    finally:
        native.decode_layer_op.cache_clear()
