#!/usr/bin/env bash
# Fetch what scripts/gpu_check.sh needs on the GPU machine and that its image lacks, into gpu_wheels/
# (git-ignored; carried to the machine with the working tree, 64 MiB in all):
#   - Python 3.12 manylinux wheels of the packages below, at the versions pinned in constraints.txt;
#   - smollm2-135m-instruct/: SmolLM2-135M-Instruct's config, generation config and tokenizer, without
#     weights (538 MB in float32, 93 MB as GGUF: neither travels), so the GPU bench builds that exact
#     architecture with seeded random weights: the same FLOPs and memory as the real model.
# Re-runnable: a wheel already there is kept. Needs the project's .venv (scripts/setup.sh) for the tokenizer.
#
#   bash scripts/fetch_gpu_wheels.sh [DEST]        # DEST defaults to gpu_wheels
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-gpu_wheels}
LIMIT_MIB=${GPU_WHEELS_LIMIT_MIB:-48}  # of the 64 MiB a run may carry; the working tree needs the rest

# The image has torch 2.11, transformers 5.17, accelerate, peft, pluggy, numpy, pandas, pyarrow, pyyaml,
# sympy, regex, rich, xxhash, huggingface-hub, pytest. Missing there, and needed by grpo_rewards (pydantic,
# jsonschema, math-verify), by TRL's GRPOTrainer (trl, datasets) and by datasets (dill, multiprocess);
# typing_extensions because pydantic 2.14 needs a newer one than an image may hold.
# trl 1.16 asks for transformers>=4.56.2 and accelerate>=1.10.1: the image's 5.17 and 1.15 do, so
# transformers does not travel (its wheel alone would be 12 MB).
PACKAGES=(
  pydantic pydantic_core annotated-types typing-inspection typing_extensions
  jsonschema jsonschema-specifications referencing rpds-py
  math-verify latex2sympy2_extended antlr4-python3-runtime
  trl datasets dill multiprocess
)

pin() {  # the version constraints.txt pins for a package name (case and -/_ insensitive)
  local want
  want=$(echo "$1" | tr 'A-Z_' 'a-z-')
  awk -F'==' -v want="$want" '{ name = tolower($1); gsub("_", "-", name); if (name == want) print $2 }' constraints.txt
}

mkdir -p "$DEST"
specs=()
for name in "${PACKAGES[@]}"; do
  version=$(pin "$name")
  if [ -z "$version" ]; then
    echo "fetch_gpu_wheels: $name is not pinned in constraints.txt" >&2
    exit 2
  fi
  specs+=("$name==$version")
done
# --no-deps: the dependencies that matter are listed above; the rest are in the image.
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" "${specs[@]}"

# SmolLM2-135M-Instruct without its weights, from the offline copy (grpo_core.hub resolves it).
.venv/bin/python - "$DEST/smollm2-135m-instruct" <<'EOF'
import shutil
import sys
from pathlib import Path

from grpo_core.hub import resolve_model
from grpo_rewards.fileio import atomic_directory

source = Path(resolve_model("smollm2-135m-instruct"))
with atomic_directory(sys.argv[1]) as tmp:
    for path in source.iterdir():
        if path.is_file() and path.suffix not in {".safetensors", ".bin", ".gguf", ".pt"}:
            shutil.copy2(path, Path(tmp) / path.name)
EOF

# One line per package brought, and the size check against the carry limit.
( cd "$DEST" && ls ./*.whl | sed 's|^\./||' ) > "$DEST/MANIFEST.txt"
size_kib=$(du -sk "$DEST" | cut -f1)
echo "fetch_gpu_wheels: $(wc -l < "$DEST/MANIFEST.txt") wheels + smollm2-135m-instruct/ (no weights) in $DEST: $((size_kib / 1024)) MiB"
cat "$DEST/MANIFEST.txt"
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "fetch_gpu_wheels: $DEST is over ${LIMIT_MIB} MiB" >&2
  exit 1
fi
