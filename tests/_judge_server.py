"""A real judge on loopback: `transformers serve` with a real model, and a forwarding proxy in
front of it that counts and times the requests it sees and, when told to, answers 429 or 500,
stalls, or forwards them untouched. The proxy is how the tests see the server side: how many
requests arrived, when, and with which body.

The model is the tiny Llama of `_tiny_models` (random weights, a few milliseconds a reply), or,
with `GRPO_JUDGE_MODEL=smollm2`, the offline SmolLM2-135M-Instruct (seconds a reply on a shared
CPU; what the docs show)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SERVE_START_S = 240


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def judge_model_dir(scratch: Path) -> Path:
    """The judge's model directory: SmolLM2-135M-Instruct when GRPO_JUDGE_MODEL=smollm2, else the tiny Llama."""
    if os.environ.get("GRPO_JUDGE_MODEL", "tiny") == "smollm2":
        from _reward_model_helpers import smollm2_dir

        return smollm2_dir()
    from _tiny_models import build_tiny_llama

    return build_tiny_llama(scratch / "tiny-judge")


class TransformersServe:
    """`transformers serve MODEL` as a subprocess on 127.0.0.1, waited on until it answers."""

    def __init__(self, model_dir: Path, log: Path, *options: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
        serve = Path(sys.executable).with_name("transformers")
        self._log = log.open("wb")
        self.proc = subprocess.Popen([str(serve), "serve", str(model_dir), "--host", "127.0.0.1", "--port",
                                      str(self.port), "--device", "cpu", "--dtype", "float32", *options],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.model = str(model_dir)
        deadline = time.monotonic() + SERVE_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited {self.proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"transformers serve did not answer in {SERVE_START_S} s: {log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


class FaultProxy:
    """Forwards POSTs to `upstream`; records each request (arrival time, body) and can fail or stall."""

    def __init__(self, upstream: str, port: int = 0) -> None:
        self.upstream = upstream
        self.arrivals: list[float] = []
        self.bodies: list[dict] = []
        self.fail: list[int] = []  # status codes answered to the next requests, one each
        self.delay_s = 0.0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with proxy._lock:
                    proxy.arrivals.append(time.monotonic())
                    proxy.bodies.append(json.loads(body))
                    status = proxy.fail.pop(0) if proxy.fail else None
                    delay = proxy.delay_s
                if status is not None:
                    self._answer(status, b'{"error": "injected"}', {"retry-after": "0"} if status == 429 else {})
                    return
                time.sleep(delay)
                request = urllib.request.Request(proxy.upstream + self.path, data=body, method="POST",
                                                 headers={"content-type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=120) as response:
                        self._answer(response.status, response.read(), {})
                except urllib.error.HTTPError as err:
                    self._answer(err.code, err.read(), {})
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _answer(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    for key, value in {"content-type": "application/json", **headers}.items():
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.arrivals)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
