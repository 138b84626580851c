"""scripts/gpu_check.sh: its dry run (the same steps on the CPU, tiny sizes) passes and writes its results;
the carried wheel folder, when fetched, fits the device's 64 MiB and holds the pinned versions."""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "gpu_wheels"
STEPS = ["env", "install", "imports", "tests", "bench"]


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("the dry run uses the project's .venv: run scripts/setup.sh")
    out = tmp_path_factory.mktemp("gpu-check")
    return run_check("--dry-run", str(out)), out


@pytest.mark.timeout(600)
def test_dry_run_passes_every_step(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] and summary["passed"]
    assert [s["name"] for s in summary["steps"]] == STEPS
    assert all(s["exit"] == 0 for s in summary["steps"])
    log = (out / "gpu_check.log").read_text()
    assert "gpu_check: PASSED" in log and "torch" in (out / "env.txt").read_text()
    if (WHEELS / "MANIFEST.txt").exists():  # fetched: the dry run installed every wheel it names
        for wheel in (WHEELS / "MANIFEST.txt").read_text().split():
            assert f"  {wheel}" in log
        assert re.search(r"installed into \S+: \d+ distributions", log)
    else:
        assert "install step not exercised" in log


def test_dry_run_ran_the_cuda_tests_on_the_cpu(dry_run):
    _, out = dry_run
    suite = ET.parse(out / "cuda_tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert int(suite.get("tests")) >= 5
    assert (int(suite.get("failures")), int(suite.get("errors")), int(suite.get("skipped"))) == (0, 0, 0)


def test_dry_run_benched_both_trainers_on_smollm2_full_and_lora(dry_run):
    _, out = dry_run
    rows = json.loads((out / "bench_vs_trl.json").read_text())["rows"]
    assert [r["size"] for r in rows] == ["smollm2", "smollm2-lora"]
    for row in rows:
        assert row["tiny"] and row["device"] == "cpu" and row["completion_length"] == 8
        for who in ("trl", "grpo_core"):
            assert row[who]["mean_completion_length"] == 8.0  # both generated exactly the same lengths
            assert row[who]["median_step_s"] > 0 and row[who]["tokens_per_s"] > 0
    summary = (out / "summary.md").read_text()
    assert summary.count("| smollm2-lora |") == 2


def test_an_unknown_option_is_a_usage_error():
    proc = run_check("--fast")
    assert proc.returncode == 2 and "usage: scripts/gpu_check.sh" in proc.stderr


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {re.sub(r"[-_.]+", "_", n.lower()): v for n, _, v in (x.partition("==") for x in lines if "==" in x)}


def test_fetched_wheels_fit_the_carry_limit_and_are_the_pinned_versions():
    if not (WHEELS / "MANIFEST.txt").exists():
        pytest.skip("gpu_wheels/ not fetched (scripts/fetch_gpu_wheels.sh)")
    manifest = (WHEELS / "MANIFEST.txt").read_text().split()
    assert sorted(manifest) == sorted(p.name for p in WHEELS.glob("*.whl"))
    pinned = pins()
    names = set()
    for wheel in manifest:
        name, version = wheel.split("-")[:2]
        assert pinned[name.lower()] == version, wheel
        names.add(name.lower())
    assert {"pydantic", "pydantic_core", "trl", "datasets", "math_verify", "jsonschema"} <= names
    assert not any(n in names for n in ("torch", "transformers"))  # the image's own are used
    size = sum(p.stat().st_size for p in WHEELS.rglob("*") if p.is_file())
    assert size < 48 * 2**20  # leaves the working tree 16 of the device's 64 MiB
    smollm2 = WHEELS / "smollm2-135m-instruct"
    assert (smollm2 / "config.json").exists() and (smollm2 / "tokenizer.json").exists()
    assert not list(smollm2.glob("*.safetensors"))  # weights never travel
