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


def _seed_conversion(cache, tiny_dir, gguf, alias=None):
    """A finished conversion of `gguf` in the cache (the tiny model stands in for it), where the hub puts it."""
    import shutil

    digest = hub.file_sha256(gguf)
    cached = cache / f"{gguf.stem}-{digest[:16]}"
    shutil.copytree(tiny_dir, cached)
    (cached / hub.CACHE_MARKER).write_text(json.dumps({"source": str(gguf), "sha256": digest, "alias": alias}))
    return cached


def test_alias_offline_uses_a_finished_cached_conversion(offline, tiny_dir, monkeypatch):
    """A cached copy (marker written last) is used without converting; one without a marker is not."""
    gguf = hub.shipped_gguf(hub.ALIASES["smollm2-135m-instruct"])
    cached = _seed_conversion(offline, tiny_dir, gguf, alias="smollm2-135m-instruct")
    assert hub.resolve_model("SmolLM2-135M-Instruct") == cached
    model, tokenizer = hub.load_pretrained("smollm2-135m-instruct", dtype="float32", device="cpu")
    assert model.config.hidden_size == 32  # the tiny model stood in for the cache
    assert hub._cache_valid(cached)
    (cached / hub.CACHE_MARKER).unlink()  # an interrupted conversion: not used
    assert not hub._cache_valid(cached)
    (cached / hub.CACHE_MARKER).write_text(json.dumps({"alias": "smollm2-135m-instruct"}))
    # The package uninstalled after converting: the copy made for the alias still serves.
    alias = hub.ALIASES["smollm2-135m-instruct"]
    monkeypatch.setitem(hub.ALIASES, "smollm2-135m-instruct",
                        hub.ModelAlias(alias.hub_id, "no-such-package-for-grpo", alias.gguf_file, alias.install))
    assert hub.resolve_model("smollm2-135m-instruct") == cached


def test_the_converted_copy_is_keyed_by_content_so_every_clone_shares_it(offline, tiny_dir, tmp_path):
    """Two clones (two venvs) holding the same GGUF at different paths resolve to one cached copy, in
    fresh processes; a changed file gets another key. The fake GGUF would fail to convert, so reaching
    the copy proves nothing was converted."""
    import subprocess
    import sys

    from reward_helpers import subprocess_env

    first, second = tmp_path / "clone-a" / "m.gguf", tmp_path / "clone-b" / "venv" / "m.gguf"
    for path in (first, second):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    cached = _seed_conversion(offline, tiny_dir, first)
    env = {**subprocess_env(), "GRPO_CACHE": str(offline), "HF_HUB_OFFLINE": "1"}
    code = "import sys; from grpo_core.hub import resolve_model; print(resolve_model(sys.argv[1]))"
    for path in (first, second):
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(cached)
    index = json.loads((offline / hub.HASH_INDEX).read_text())
    assert sorted(k.split("|")[0] for k in index) == sorted([str(first), str(second)])  # each file hashed once
    with second.open("ab") as fh:
        fh.write(b"changed")
    assert hub.file_sha256(second) != hub.file_sha256(first)
    assert len(json.loads((offline / hub.HASH_INDEX).read_text())) == 2  # the stale entry of `second` replaced


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
