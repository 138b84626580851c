"""A real `grpo-rewards serve` process on loopback, plain HTTP calls, and two scorers for fault tests.

The server runs as a subprocess exactly as a user starts it; it listens on port 0 (a free port)
and prints the address it got. Everything stops by itself: every call has a timeout.
"""

from __future__ import annotations

import atexit
import functools
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grpo_rewards import Score, Scorer, hookimpl

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent
MATH_FORMAT_SPEC = (
    "scorers:\n"
    "  - scorer: math_accuracy\n    name: correct\n    params: {timeout_s: 5, workers: 2}\n"
    "  - scorer: think_format\n    name: format\n    weight: 0.2\n"
)


def spec_file(directory: Path, text: str = MATH_FORMAT_SPEC, name: str = "spec.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


class Boom(Scorer):
    """1 per sample, but raises on a batch holding a completion with `BOOM` (fault tests)."""

    name = "t_boom"

    def score(self, samples, results=None):
        if any("BOOM" in s.completion_text for s in samples):
            raise RuntimeError("BOOM in the batch")
        return [Score(1.0) for _ in samples]


class NapParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(0.2, ge=0, le=30, description="Sleep per batch.")


class Nap(Scorer):
    """Sleeps per batch, then scores each sample's `value` field: a slow server."""

    name = "t_nap"
    Params = NapParams

    def score(self, samples, results=None):
        time.sleep(self.params.seconds)
        return [Score(float(s.reference.get("value", 1.0))) for s in samples]


@hookimpl
def grpo_rewards_scorers():
    return [Boom, Nap]


def write_plugin_site(site: Path) -> Path:
    """A site dir whose entry point registers this module's scorers in a server subprocess."""
    info = site / "serve_helpers-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: serve-helpers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[grpo_rewards]\nserve_helpers = _serve_helpers\n")
    return site


class Server:
    """`grpo-rewards serve` in a subprocess; `url` once it listens."""

    def __init__(self, spec: Path, *args: str, env: dict[str, str] | None = None, port: int = 0) -> None:
        cmd = [str(Path(sys.executable).with_name("grpo-rewards")), "serve", "--spec", str(spec),
               "--port", str(port), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()  # the banner, printed once the socket is bound
        match = re.search(r"http://([\d.]+):(\d+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.url = f"http://{match.group(1)}:{match.group(2)}"
        self.port = int(match.group(2))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the socket is bound before the app has started
            try:
                if get(self.url + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server never became healthy")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def post(url: str, body: Any, timeout: float = 60, token: str | None = None,
         raw: bytes | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers); HTTP errors are returned, not raised."""
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}"), dict(err.headers)


def get(url: str, timeout: float = 30, token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def cli_scores(spec: Path, rows: list[dict], tmp: Path) -> list[dict]:
    """What `grpo-rewards score` writes for `rows`: the reference every server answer must equal."""
    inp, out = tmp / "rows.jsonl", tmp / "cli.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [str(Path(sys.executable).with_name("grpo-rewards")), "score", "--spec", str(spec), "--input", str(inp),
           "--output", str(out), "--no-progress"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=180)
    return [{k: r[k] for k in ("total", "scores")} for r in map(json.loads, out.read_text().splitlines())]


_WORK = Path(tempfile.mkdtemp(prefix="grpo-serve-tests-"))
atexit.register(shutil.rmtree, _WORK, True)


@functools.cache
def math_expected(n: int = 64) -> tuple[dict, ...]:
    """The CLI's results for `math_rows(n)` under MATH_FORMAT_SPEC, computed once per test session."""
    tmp = Path(tempfile.mkdtemp(dir=_WORK))
    return tuple(cli_scores(spec_file(tmp), math_rows(n), tmp))


@functools.cache
def math_server() -> Server:
    """One MATH_FORMAT_SPEC server shared by the tests that do not stop or break it; stopped at exit."""
    server = Server(spec_file(Path(tempfile.mkdtemp(dir=_WORK))))
    atexit.register(server.stop)
    return server


def math_rows(n: int) -> list[dict[str, Any]]:
    """`n` math + format rows: right, wrong, unformatted, and with an unparseable gold (None)."""
    rows = []
    for i in range(n):
        a, b = i % 17 + 2, i % 5 + 3
        kind = i % 4
        answer = a * b + (kind == 1)
        body = f"<think>{a} times {b}</think>\n<answer>{answer}</answer>" if kind != 2 else f"It is {answer}."
        gold = "\\frac{" if kind == 3 else str(a * b)
        rows.append({"id": f"r{i}", "prompt": f"What is {a}*{b}?", "completion": body, "answer": gold})
    return rows
