"""Model resolution: local directories, aliases, the offline GGUF package, hub ids offline."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from _tiny_models import build_tiny_llama  # noqa: E402

from grpo_core import hub  # noqa: E402
from grpo_rewards.errors import UnknownNameError, UserError  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture()
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_local_directory_is_used_as_it_is(tiny_dir):
    assert hub.resolve_model(tiny_dir) == tiny_dir
    assert hub.resolve_model(str(tiny_dir)) == tiny_dir


def test_hub_id_offline_says_how_to_get_the_model(offline):
    with pytest.raises(UserError) as caught:
        hub.resolve_model("nobody-at-all/no-such-model-0")
    message = str(caught.value)
    assert "nobody-at-all/no-such-model-0" in message
    assert "offline" in message and "hf download" in message and "smollm2-135m-instruct" in message
    assert not hub.hub_reachable()


def test_unknown_name_suggests_the_alias():
    with pytest.raises(UnknownNameError, match="did you mean smollm2-135m-instruct"):
        hub.resolve_model("smollm2-135m-instruc")


def test_missing_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        hub.resolve_model(str(tmp_path / "runs" / "final"))
    with pytest.raises(UserError, match="no such directory"):
        hub.resolve_model("./final")


def test_missing_gguf_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        hub.resolve_model(tmp_path / "absent.gguf")


def test_shipped_gguf_is_found_through_package_metadata():
    path = hub.shipped_gguf(hub.ALIASES["smollm2-135m-instruct"])
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
    assert path.read_bytes()[:4] == b"GGUF"  # the format's magic number


def test_missing_package_names_the_install_command():
    alias = hub.ModelAlias("x/y", "no-such-package-for-grpo", "model.gguf", "pip install no-such-package-for-grpo")
    with pytest.raises(UserError, match="pip install no-such-package-for-grpo"):
        hub.shipped_gguf(alias)


def test_alias_offline_uses_a_finished_cached_conversion(offline, tiny_dir):
    """A cached copy (marker written last) is used without touching the GGUF; one without is not."""
    import shutil

    cached = offline / "smollm2-135m-instruct"
    shutil.copytree(tiny_dir, cached)
    gguf = hub.shipped_gguf(hub.ALIASES["smollm2-135m-instruct"])
    (cached / hub.CACHE_MARKER).write_text(json.dumps({"source": str(gguf), "source_size": gguf.stat().st_size}))
    assert hub.resolve_model("SmolLM2-135M-Instruct") == cached
    model, tokenizer = hub.load_pretrained("smollm2-135m-instruct", dtype="float32", device="cpu")
    assert model.config.hidden_size == 32  # the tiny model stood in for the cache
    # a cache whose source changed size is stale
    (cached / hub.CACHE_MARKER).write_text(json.dumps({"source": str(gguf), "source_size": 1}))
    assert not hub._cache_valid(cached, gguf)
    assert hub._cache_valid(cached)  # ... but still serves when the package has been uninstalled


def test_load_pretrained_gives_a_padded_tokenizer_and_the_dtype(tiny_dir):
    model, tokenizer = hub.load_pretrained(tiny_dir, dtype="bfloat16", device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).device.type == "cpu"
    assert tokenizer.pad_token_id is not None and tokenizer.chat_template


def test_dtype_names_and_auto():
    cpu = torch.device("cpu")
    assert hub.pick_dtype("auto", cpu) == torch.float32
    assert hub.pick_dtype("bf16", cpu) == torch.bfloat16
    assert hub.pick_dtype(torch.float16, cpu) == torch.float16
    with pytest.raises(UserError, match="unknown dtype 'float8'"):
        hub.pick_dtype("float8", cpu)
