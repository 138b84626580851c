#!/usr/bin/env bash
# The main job on the embedded default: score the bundled example completions.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/grpo-rewards score --spec examples/rewards.yaml --input examples/completions.jsonl \
  --output outputs/example_scores.jsonl "$@"
