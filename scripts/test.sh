#!/usr/bin/env bash
# The whole test suite, in the project's own virtual environment.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
