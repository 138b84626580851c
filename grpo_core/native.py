"""grpo_core's optional compiled op: the decode loop's layer (csrc/decode_layer.cpp) in one call.

    python -m grpo_core.native            # build it (scripts/setup.sh does); a no-op when up to date

It is the same ATen ops as `decode._Layer` in the same order, bitwise the same results, without the
Python between them, which is most of a small layer's decode step (docs/benchmarks.md). Built
with torch's own extension builder (a C++17 compiler and ninja) into a cache directory keyed by
the source, torch and Python versions, so a new torch never loads a stale build. At run time
it is only loaded, never built: without a build, or with `GRPO_CORE_NATIVE=0`, the decode loop
runs its Python layer, on the CPU. Other devices always run the Python layer (untested there).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("csrc") / "decode_layer.cpp"
NAME = "grpo_core_native"


def library_path() -> Path:
    """Where the build for this source, torch and Python lives (`GRPO_CORE_NATIVE_DIR` overrides the root)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = os.environ.get("GRPO_CORE_NATIVE_DIR") or cache / "grpo_core" / "native"
    key = hashlib.sha256(SOURCE.read_bytes() + f"{_torch_version()}|{sys.version}".encode()).hexdigest()[:16]
    return Path(root) / key / f"{NAME}.so"


def _torch_version() -> str:
    """The installed torch's version, from its metadata: scripts/setup.sh checks the build on every run,
    and `import torch` alone would make that check many times slower."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a torch without distribution metadata
        import torch  # only when the metadata is missing (see above)

        return torch.__version__


@functools.cache
def decode_layer_op() -> Any:
    """`torch.ops.grpo_core.decode_layer` when built (loaded once per process), else None.

    A build that does not load (a damaged file) is reported once and left alone: decoding then
    runs the Python layer rather than stopping a run over a speed-up.
    """
    import torch  # not at the top: setup.sh's build check imports this module and must not pay for torch

    path = library_path()
    if os.environ.get("GRPO_CORE_NATIVE", "1") == "0" or not path.is_file():
        return None
    try:
        torch.ops.load_library(str(path))
        return torch.ops.grpo_core.decode_layer
    except (OSError, RuntimeError) as exc:
        warnings.warn(f"grpo_core.native: cannot load {path} ({exc}); the decode loop runs its Python layer. "
                      "Delete the file and run `python -m grpo_core.native` to rebuild it.", stacklevel=2)
        return None


def build_extension(verbose: bool = False) -> Path:
    """Compile the op unless this source's build exists; returns the library's path.

    The build runs in a temporary directory beside the target and the finished library is renamed
    into place, so a concurrent reader never loads half a file.
    """
    path = library_path()
    if path.is_file():
        return path
    from torch.utils.cpp_extension import load  # imports setuptools: only here, never at run time

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix="build-") as tmp:
        load(name=NAME, sources=[str(SOURCE)], build_directory=tmp, extra_cflags=["-O2"],
             is_python_module=False, verbose=verbose)
        # A rename, not grpo_rewards.fileio: importing grpo_rewards would slow setup.sh's build check.
        os.replace(Path(tmp) / f"{NAME}.so", path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_core.native", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show the compiler's commands and output")
    args = parser.parse_args(argv)
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        print(f"grpo_core.native: no C++ compiler ({os.environ.get('CXX', 'c++')}) on PATH; the decode loop "
              "keeps its Python layer", file=sys.stderr)
        return 1
    try:
        path = build_extension(args.verbose)
    except Exception as exc:  # the compiler's own output is in the message
        print(f"grpo_core.native: build failed; the decode loop keeps its Python layer.\n{exc}", file=sys.stderr)
        return 1
    print(f"grpo_core.native: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
