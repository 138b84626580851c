#!/usr/bin/env bash
# The CUDA path in one command, for a bare GPU machine that cannot download anything (docs/gpu.md).
#
#   bash scripts/gpu_check.sh [--dry-run] [OUTDIR]
#
# Steps, each logged, timed and bounded (480 s in all), the check going on past a failed one:
#   env      python, torch, CUDA device, the image's transformers/accelerate/peft versions
#   install  the wheels of gpu_wheels/ (scripts/fetch_gpu_wheels.sh) into a private target put first on
#            PYTHONPATH: the image's torch and transformers are never touched
#   imports  grpo_rewards, grpo_core, pydantic, trl, datasets, math_verify import, with their versions
#   tests    pytest -m cuda tests/test_cuda.py (GRPO_TEST_DEVICE=cuda: a missing GPU fails, not skips)
#   bench    bench/vs_trl.py: SmolLM2-135M full and LoRA, grpo_core vs TRL, bf16, on the GPU
# Results (gpu_check.log, env.txt, cuda_tests.xml, bench_vs_trl.json, summary.json, summary.md) go to OUTDIR,
# by default $OUT (the device tool's folder that comes back) or outputs/gpu_check. Exit 0 when every step passed.
#
# --dry-run: the same steps on the CPU with tiny sizes, in the project's .venv (scripts/setup.sh):
# the wheels (when fetched) are installed with the same command into a scratch target for Python 3.12,
# which is checked, not used; the tests run with GRPO_TEST_DEVICE=cpu; the bench runs --tiny.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
case "${1:-}" in -*) echo "usage: scripts/gpu_check.sh [--dry-run] [OUTDIR]" >&2; exit 2;; esac
OUTDIR=${1:-${OUT:-outputs/gpu_check}}
WHEELS=${GPU_WHEELS:-gpu_wheels}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG=$OUTDIR/gpu_check.log
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

if [ "$DRY" = 1 ]; then
  PY=.venv/bin/python DEVICE=cpu
  SITE=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-site.XXXXXX")
  trap 'rm -rf "$SITE"' EXIT
  BENCH_ARGS="--device cpu --tiny --steps 1 --warmup 1 --repeat 1"
else
  PY=python3 DEVICE=cuda
  SITE=${GPU_CHECK_SITE:-/tmp/gpu-check-site}
  BENCH_ARGS="--device cuda --bf16 --steps 4 --warmup 1 --repeat 1"
fi
export GRPO_TEST_DEVICE=$DEVICE
SMOLLM2=$WHEELS/smollm2-135m-instruct
[ -d "$SMOLLM2" ] || SMOLLM2=smollm2-135m-instruct  # dry run in a fresh clone: the offline alias

STEPS=()  # "name rc seconds", for summary.json
step() {  # step NAME TIMEOUT_S COMMAND: run, log, time; a failure is recorded and the check goes on
  local name=$1 limit=$2 start rc
  echo "=== $name (at most ${limit} s)"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" bash -c "set -o pipefail; $3"  # a child bash: timeout runs commands, not functions
  rc=$?
  STEPS+=("$name $rc $(( $(date +%s) - start ))")
  echo "=== $name: exit $rc in $(( $(date +%s) - start )) s"
}

env_report() {
  "$PY" - <<'EOF'
import platform, sys
from importlib import metadata

import torch

print("python", sys.version.split()[0], platform.machine())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"{p.total_memory / 2**30:.0f} GiB", f"sm_{p.major}{p.minor}", p.multi_processor_count, "SMs")
for name in ("transformers", "accelerate", "peft", "numpy", "pyarrow", "huggingface-hub", "pytest"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "absent")
EOF
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  grep -m1 'model name' /proc/cpuinfo
}

install_wheels() {
  if [ ! -f "$WHEELS/MANIFEST.txt" ]; then
    echo "no $WHEELS/MANIFEST.txt: run scripts/fetch_gpu_wheels.sh first"
    [ "$DRY" = 1 ] && { echo "(dry run: install step not exercised)"; return 0; }
    return 1
  fi
  echo "bringing $(wc -l < "$WHEELS/MANIFEST.txt") packages ($(du -sh "$WHEELS" | cut -f1) with SmolLM2's config and tokenizer):"
  sed 's/^/  /' "$WHEELS/MANIFEST.txt"
  local target=()
  # the dry run installs the same wheels for the GPU machine's Python, to check them, not to use them
  [ "$DRY" = 1 ] && target=(--python-version 3.12 --implementation cp --only-binary=:all:
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  while read -r wheel; do
    [ -f "$WHEELS/$wheel" ] || { echo "missing $WHEELS/$wheel (listed in MANIFEST.txt)"; return 1; }
  done < "$WHEELS/MANIFEST.txt"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "${target[@]}" "$WHEELS"/*.whl || return 1
  echo "installed into $SITE: $(ls "$SITE" | grep -c '\.dist-info$') distributions"
}

import_report() {
  "$PY" - <<'EOF'
from importlib import metadata

import datasets, grpo_core.trainer, grpo_rewards, math_verify, pydantic, trl  # noqa: F401 - importable

for name in ("pydantic", "trl", "datasets", "math-verify", "jsonschema", "transformers", "torch"):
    print(name, metadata.version(name))
EOF
}

run_tests() {
  "$PY" -m pytest -m cuda tests/test_cuda.py -q -p no:cacheprovider -o addopts="" -rs \
    --junitxml "$OUTDIR/cuda_tests.xml"
}

run_bench() {
  # shellcheck disable=SC2086 - BENCH_ARGS is words
  "$PY" bench/vs_trl.py --sizes smollm2,smollm2-lora --smollm2 "$SMOLLM2" $BENCH_ARGS \
    --json "$OUTDIR/bench_vs_trl.json"
}

export -f env_report install_wheels import_report run_tests run_bench
export PY DRY WHEELS SITE OUTDIR SMOLLM2 BENCH_ARGS
echo "gpu_check: $([ "$DRY" = 1 ] && echo 'dry run on the CPU' || echo 'on the GPU'), results in $OUTDIR"
step env 30 'env_report | tee "$OUTDIR/env.txt"'
step install 60 install_wheels
if [ "$DRY" = 0 ]; then export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"; fi
step imports 60 import_report
step tests 90 run_tests
step bench 240 run_bench

"$PY" - "$OUTDIR" "$DRY" "${STEPS[@]}" <<'EOF'
import json
import sys
from pathlib import Path

from grpo_rewards.fileio import write_atomic

out, dry, steps = Path(sys.argv[1]), sys.argv[2] == "1", [s.split() for s in sys.argv[3:]]
summary = {"dry_run": dry, "steps": [{"name": n, "exit": int(rc), "seconds": int(s)} for n, rc, s in steps]}
summary["passed"] = all(s["exit"] == 0 for s in summary["steps"])
lines = ["| step | exit | seconds |", "|---|---|---|"] + [f"| {n} | {rc} | {s} |" for n, rc, s in steps]
bench = out / "bench_vs_trl.json"
if bench.exists():
    summary["bench"] = json.loads(bench.read_text())["rows"]
    lines += ["", "| size | trainer | s/step | tokens/s | peak RSS MiB | peak GPU MiB |", "|---|---|---|---|---|---|"]
    for row in summary["bench"]:
        for who in ("trl", "grpo_core"):
            r = row[who]
            gpu = f"{r['peak_gpu_mib']:.0f}" if "peak_gpu_mib" in r else "-"
            lines.append(f"| {row['size']} | {who} | {r['median_step_s']:.3f} | {r['tokens_per_s']:.0f} | "
                         f"{r['peak_rss_mib']:.0f} | {gpu} |")
write_atomic(out / "summary.json", json.dumps(summary, indent=2))
write_atomic(out / "summary.md", "\n".join(lines) + "\n")
print("\n".join(lines))
print("gpu_check:", "PASSED" if summary["passed"] else "FAILED")
sys.exit(0 if summary["passed"] else 1)
EOF
