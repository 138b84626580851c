"""The CUDA path: loss parity with TRL, a bf16 step against float32, greedy decoding against HF
`generate`, the chunked log-probs' memory, checkpoint and resume.

Marked `cuda` and skipped without a GPU. `GRPO_TEST_DEVICE=cpu` runs them on the CPU with smaller
sizes (the dry run of scripts/gpu_check.sh, so CI proves they work); `GRPO_TEST_DEVICE=cuda` makes a
missing GPU a failure rather than a skip (the check on the GPU machine).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from _grpo_core_helpers import base_config, char_tokenizer
from _grpo_core_helpers import one_torch_thread  # noqa: F401 - autouse fixture
from grpo_core.config import validate_config
from grpo_core.loss import LOSS_TYPES, CompletionLogprobs, grpo_loss, selective_logprobs
from grpo_core.metrics import read_metrics
from grpo_core.prompts import Prompts
from grpo_core.rollout import generate, generation_config, left_pad
from grpo_core.trainer import train

pytestmark = pytest.mark.cuda
REQUESTED = os.environ.get("GRPO_TEST_DEVICE", "")
# Deterministic cuBLAS for the resume test; read when cuBLAS starts, so set before any CUDA work.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


@pytest.fixture
def device() -> Iterator[torch.device]:
    if REQUESTED == "cpu":
        yield torch.device("cpu")
        return
    if not torch.cuda.is_available():
        if REQUESTED == "cuda":
            pytest.fail("GRPO_TEST_DEVICE=cuda but torch sees no CUDA device")
        pytest.skip("no CUDA device (GRPO_TEST_DEVICE=cpu runs these tests on the CPU)")
    tf32 = torch.backends.cuda.matmul.allow_tf32  # the trainer turns TF32 on; float32 references need it off
    torch.backends.cuda.matmul.allow_tf32 = False
    yield torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = tf32


def llama(tokenizer_or_vocab, device: torch.device, hidden: int, layers: int) -> torch.nn.Module:
    """A seeded transformers Llama (grouped heads) in float32."""
    vocab = tokenizer_or_vocab if isinstance(tokenizer_or_vocab, int) else len(tokenizer_or_vocab)
    torch.manual_seed(0)
    config = AutoConfig.for_model("llama", vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=256, tie_word_embeddings=False)
    return AutoModelForCausalLM.from_config(config).to(device)


# ---------------------------------------------------------------------------------------------


CASES = list(itertools.product(LOSS_TYPES, ["token", "sequence"], [0.0, 0.04], [True, False]))


def test_loss_and_gradient_match_trl_on_the_device(device):
    pytest.importorskip("trl.trainer.grpo_trainer", reason="TRL (the `trl` extra) is the parity anchor")
    from _trl_loss import make_batch, trl_loss  # imports TRL: only once it is known to be there

    accum, max_len, eps, eps_high = 2, 9, 0.2, 0.28
    for loss_type, level, beta, with_old in CASES:
        batch = make_batch(device=device)
        num_items = float(batch["mask"].sum()) * accum
        ours_in = batch["logps"].clone().requires_grad_(True)
        theirs_in = batch["logps"].clone().requires_grad_(True)
        ours, stats = grpo_loss(ours_in, batch["old"] if with_old else None, batch["ref"], batch["adv"],
                                batch["mask"], loss_type=loss_type, beta=beta, epsilon=eps, epsilon_high=eps_high,
                                importance_sampling_level=level, max_completion_length=max_len,
                                accumulation_steps=accum, dapo_tokens=num_items)
        theirs, metrics = trl_loss(batch, theirs_in, loss_type=loss_type, beta=beta, level=level, eps=eps,
                                   eps_high=eps_high, accum=accum, max_len=max_len, num_items=num_items,
                                   with_old=with_old)
        case = (loss_type, level, beta, with_old)
        assert ours.device.type == device.type and theirs.device.type == device.type
        assert ours.item() == pytest.approx(theirs.item(), abs=1e-5), case
        ours.backward()
        theirs.backward()
        assert torch.allclose(ours_in.grad, theirs_in.grad, atol=1e-5), case
        assert stats["clip_ratio"].item() == pytest.approx(metrics["clip_ratio/region_mean"][0], abs=1e-6), case


# ---------------------------------------------------------------------------------------------


def training_step(model: torch.nn.Module, batch: dict[str, torch.Tensor], bf16: bool) -> dict[str, torch.Tensor]:
    """One GRPO step on a fixed batch (bf16 autocast or float32): loss, log-probs, gradient, weights after."""
    device = batch["prompt_ids"].device
    module = CompletionLogprobs(model, temperature=1.0, chunk_mib=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        logps, _ = module(batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["mask"])
    loss, _ = grpo_loss(logps, batch["old"], batch["ref"], batch["adv"], batch["mask"], loss_type="dapo", beta=0.04,
                        epsilon=0.2, epsilon_high=0.2, dapo_tokens=float(batch["mask"].sum()))
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {"loss": loss.detach(), "logps": logps.detach(), "grad": grad, "weights": weights}


def test_bf16_step_matches_float32(device):
    """Tolerances: loss within 0.01, per-token log-probs within 0.05 on average, gradients aligned
    (cosine >= 0.99), the weights moved alike (cosine >= 0.9); bf16 keeps about 3 significant digits, and must still differ from float32 (it ran)."""
    big = device.type == "cuda"
    vocab, b, p, c = (4096, 16, 32, 64) if big else (256, 8, 8, 16)
    model = llama(vocab, device, hidden=256 if big else 64, layers=4 if big else 2)
    start = torch.cat([q.detach().flatten() for q in model.parameters()])
    g = torch.Generator().manual_seed(1)
    batch = {"prompt_ids": torch.randint(vocab, (b, p), generator=g), "prompt_mask": torch.ones(b, p, dtype=torch.long),
             "completion_ids": torch.randint(vocab, (b, c), generator=g),
             "mask": (torch.arange(c)[None, :] < torch.randint(1, c + 1, (b, 1), generator=g)).long(),
             "adv": torch.randn(b, generator=g)}
    batch = {k: v.to(device) for k, v in batch.items()}
    with torch.no_grad():  # old = the float32 policy before the step; ref = a nearby policy, so KL binds
        old, _ = CompletionLogprobs(model, 1.0, 64)(batch["prompt_ids"], batch["prompt_mask"],
                                                    batch["completion_ids"], batch["mask"])
    batch |= {"old": old, "ref": old + 0.1 * torch.randn(old.shape, generator=g).to(device)}
    full = training_step(copy.deepcopy(model), batch, bf16=False)
    half = training_step(copy.deepcopy(model), batch, bf16=True)
    mask = batch["mask"].bool()
    assert half["loss"].item() != full["loss"].item()  # autocast really ran in bf16
    assert abs(half["loss"].item() - full["loss"].item()) <= 0.01, (half["loss"], full["loss"])
    assert (half["logps"] - full["logps"])[mask].abs().mean() <= 0.05
    cosine = torch.nn.functional.cosine_similarity(half["grad"], full["grad"], dim=0)
    assert cosine >= 0.99, cosine
    moved_full, moved_half = full["weights"] - start, half["weights"] - start
    # Adam's first step is nearly sign(grad): entries whose gradient is within bf16 noise may flip
    assert torch.nn.functional.cosine_similarity(moved_half, moved_full, dim=0) >= 0.9


# ---------------------------------------------------------------------------------------------


def test_greedy_decoding_with_kv_cache_equals_hf_generate(device):
    """grpo_core's decode loop (its own KV cache) against HF `generate` (use_cache), greedy, float32, ragged
    left-padded prompts: the same tokens and masks."""
    tokenizer = char_tokenizer()
    big = device.type == "cuda"
    model = llama(tokenizer, device, hidden=256 if big else 32, layers=4 if big else 2).eval()
    # Kernels that sum in another order may break a float32 near-tie differently: few enough tokens that one is
    # unlikely, enough to cover the prompt pass, the cache growing and rows ending at different steps.
    prompts = ["1+2=", "33+4=", "5=", "a b c", "987+65="] * (2 if big else 1)
    rows = Prompts(tokenizer, 16).encode(prompts)
    ids, mask = left_pad(rows, tokenizer.pad_token_id, device)
    eos = torch.tensor([tokenizer.eos_token_id], device=device)
    config = generation_config(tokenizer, [tokenizer.eos_token_id], 32 if big else 12, False, 1.0, 1.0, 0)
    hf_ids, hf_mask = generate(model, ids, mask, config, eos, backend="hf")
    ours_ids, ours_mask = generate(model, ids, mask, config, eos, backend="auto")
    assert ours_ids.device.type == device.type
    assert torch.equal(ours_ids, hf_ids) and torch.equal(ours_mask, hf_mask)
    assert hf_mask.sum() >= len(prompts) * 2  # real completions, not all immediate EOS


# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def large_allocations_mapped(device: torch.device) -> Iterator[None]:
    """On the CPU, glibc's malloc serves every allocation over 64 KiB with its own mapping, returned on free,
    so that the resident set follows what is live (by default freed chunks stay in the heap, reused or not,
    and the peak RSS wandered from 2 to 75 MiB for the same chunked run)."""
    if device.type == "cuda":
        yield
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        pytest.skip("no glibc mallopt: the peak RSS would not follow live memory")
    m_mmap_threshold = -3
    mallopt(m_mmap_threshold, 64 * 1024)
    try:
        yield
    finally:
        mallopt(m_mmap_threshold, 128 * 1024)  # glibc's default


def peak_growth(device: torch.device, run: Callable[[], None]) -> int:
    """Bytes by which memory peaked above its level before `run`: CUDA's allocator statistics, or on the
    CPU the process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        run()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    def status(field: str) -> int:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field))
        return int(line.split()[1]) * 1024

    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    except OSError:
        pytest.skip("cannot reset the peak RSS here (/proc/self/clear_refs)")
    before = status("VmRSS:")
    run()
    return status("VmHWM:") - before


def test_chunked_logprobs_peak_below_an_eighth_of_full_logits(device):
    big = device.type == "cuda"
    n, hidden_size, vocab = (16384, 576, 49152) if big else (4096, 32, 4096)  # big: SmolLM2's head
    full_logit_bytes = n * vocab * 4  # float32 logits, what an unchunked log-softmax holds at least
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(hidden_size, vocab, bias=False).to(device)
    hidden = torch.randn(n, hidden_size, generator=g).to(device).requires_grad_(True)
    targets = torch.randint(vocab, (n,), generator=g).to(device)
    chunk_rows = max(1, (64 if big else 1) * 2**20 // (vocab * 8))  # as CompletionLogprobs sizes its chunks

    def step(rows: int) -> Callable[[], None]:
        def run() -> None:
            logp, _ = selective_logprobs(hidden, head, targets, 1.0, rows)
            logp.sum().backward()
            hidden.grad = head.weight.grad = None
        return run

    with large_allocations_mapped(device):
        step(chunk_rows)()  # warm-up: kernels and allocator pools are not what is measured
        chunked = peak_growth(device, step(chunk_rows))
        unchunked = peak_growth(device, step(n))
    assert unchunked >= full_logit_bytes  # the measure sees the full logits when they exist
    assert chunked < full_logit_bytes / 8, (chunked, full_logit_bytes)


# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_checkpoint_and_resume_on_the_device(tmp_path, device):
    """Two steps, checkpoint, resume to four: the same steps logged once and the same final weights as four
    steps straight. On CUDA with deterministic algorithms; bf16 autocast as the trainer picks it (auto)."""
    settings = {"device": device.type, "save_steps": 2, "logging_steps": 1, "learning_rate": 1e-2, "bf16": None,
                "torch_threads": 1}
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        straight = train(validate_config(base_config(tmp_path, **settings, max_steps=4,
                                                     output_dir=str(tmp_path / "straight"))))
        first = train(validate_config(base_config(tmp_path, **settings, max_steps=2,
                                                  output_dir=str(tmp_path / "resumed"))))
        assert first["step"] == 2 and (tmp_path / "resumed" / "checkpoint-2").is_dir()
        resumed = train(validate_config(base_config(tmp_path, **settings, max_steps=4,
                                                    output_dir=str(tmp_path / "resumed"))), resume=True)
    finally:
        torch.use_deterministic_algorithms(False)
    if device.type == "cuda":
        assert torch.cuda.max_memory_allocated() > 0  # the runs used the GPU
    assert resumed["step"] == 4
    runs = {name: read_metrics(Path(s["metrics_file"])) for name, s in (("straight", straight), ("resumed", resumed))}
    assert [r["step"] for r in runs["resumed"]] == [1, 2, 3, 4] == [r["step"] for r in runs["straight"]]
    for x, y in zip(runs["resumed"], runs["straight"], strict=True):
        assert x["reward"] == y["reward"], (x, y)
    a = load_file(Path(resumed["final_model"]) / "model.safetensors")
    b = load_file(Path(straight["final_model"]) / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-5), key
