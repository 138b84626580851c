#!/usr/bin/env bash
# The main job: GRPO from scratch on the CPU (examples/quickstart.yaml); outputs in outputs/quickstart.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/grpo-train examples/quickstart.yaml "$@"
