"""docs/serving.md and the README's serve line, run against a real server on loopback."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from _serve_helpers import Server
from reward_helpers import REPO, subprocess_env

from grpo_rewards import load_spec

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(300)

DOC = REPO / "docs" / "serving.md"


def block(text: str, language: str, first_line_contains: str) -> str:
    [body] = [b for b in re.findall(rf"```{language}\n(.*?)```", text, re.S) if first_line_contains in b.split("\n")[0]]
    return body


def test_the_readme_serve_line_starts_a_server():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    line = block(text, "bash", "grpo-rewards serve").split("#")[0].split()
    assert line[:2] == ["grpo-rewards", "serve"]
    # As printed, plus --port 0 so the test never collides with a port in use.
    with Server(REPO / line[3], *line[4:], "--port", "0", env=subprocess_env()) as server:
        assert server.url.startswith("http://127.0.0.1:")


def test_the_serving_guide_curl_and_python_examples_answer_as_shown(tmp_path):
    text = DOC.read_text(encoding="utf-8")
    start = block(text, "bash", "grpo-rewards serve --spec examples/rewards.yaml --port 8000")
    args = shlex.split(start.split("\n")[0])
    assert args[-2:] == ["--port", "8000"]
    with Server(REPO / args[3], "--port", "0", env=subprocess_env()) as server:
        banner_shown = start.split("\n")[1].lstrip("# ")
        assert banner_shown.startswith("grpo-rewards serve: 4 scorers (correct, format, brevity, repetition)")
        curl = block(text, "bash", "curl -s localhost:8000/score")
        command = "\n".join(line for line in curl.splitlines() if not line.startswith("#"))
        command = command.replace("localhost:8000", f"127.0.0.1:{server.port}")
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        shown = "".join(line.lstrip("# ") for line in curl.splitlines() if line.startswith("#"))
        assert answer["aliases"] == ["correct", "format", "brevity", "repetition"] and shown.startswith(
            '{"aliases":["correct","format","brevity","repetition"],"weights":[1.0,0.2,0.1,0.1]')
        assert answer["results"][0]["total"] == pytest.approx(1.2995, abs=1e-3)
        code = block(text, "python", "import json, urllib.request").replace("127.0.0.1:8000",
                                                                           f"127.0.0.1:{server.port}")
        ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env=subprocess_env())
        assert ran.returncode == 0, ran.stderr
        assert float(ran.stdout) == pytest.approx(1.0 + 0.1 * 1.0, abs=0.3)  # correct, no format tags


def test_the_remote_scorer_example_is_a_valid_spec():
    spec = yaml.safe_load(block(DOC.read_text(encoding="utf-8"), "yaml", "scorers:"))
    assert load_spec(spec).scorers[0].scorer == "remote"
