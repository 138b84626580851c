"""Load test of `grpo-rewards serve` on loopback, next to the same rows scored in-process.

    flock /tmp/bench.lock python bench/serve_bench.py [--clients 32] [--requests 50] [--samples 8]

32 clients x 50 requests x 8 samples (math_accuracy + think_format, every row different, so no
cache hit flatters anyone). The reference is `grpo-rewards score` on the same rows; every server
answer must equal it, or the run fails. Peers, measured in this one invocation:
  - in-process, one `CompositeReward.score` call per request of 8 (what each client would do alone),
  - in-process, batches of 256 (the CLI's default),
  - the server, 32 clients at once, each on one keep-alive connection.
Prints a markdown table (throughput, p50/p99 latency per request) for docs/benchmarks.md.
Loopback only; it stops by itself (every call has a timeout).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from grpo_rewards.compose import build
from grpo_rewards.registry import load_registry
from grpo_rewards.scorer import Sample

SPEC = ("scorers:\n"
        "  - scorer: math_accuracy\n    name: correct\n    params: {timeout_s: 5}\n"
        "  - scorer: think_format\n    name: format\n    weight: 0.2\n")
BIN = Path(sys.executable).with_name("grpo-rewards")


def rows(n: int) -> list[dict]:
    """`n` different rows: right, wrong, unformatted answers, and some LaTeX fractions."""
    out = []
    for i in range(n):
        a, b = i // 97 + 2, i % 97 + 3
        kind = i % 5
        if kind == 4:
            body, gold = f"<think>halve</think>\n<answer>$\\frac{{{a}}}{{{2 * b}}}$</answer>", f"{a}/{2 * b}"
        else:
            answer = a * b + (kind == 1)
            body = f"<think>{a} * {b}</think>\n<answer>{answer}</answer>" if kind != 2 else f"So {answer}."
            gold = str(a * b)
        out.append({"prompt": f"Compute {a} and {b}.", "completion": body, "answer": gold})
    return out


def cli_reference(spec: Path, data: list[dict], tmp: Path) -> tuple[list[dict], float]:
    inp, out = tmp / "rows.jsonl", tmp / "cli.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in data))
    start = time.perf_counter()
    subprocess.run([str(BIN), "score", "--spec", str(spec), "--input", str(inp), "--output", str(out),
                    "--no-progress"], check=True, capture_output=True, timeout=1200)
    seconds = time.perf_counter() - start
    return [{k: r[k] for k in ("total", "scores")} for r in map(json.loads, out.read_text().splitlines())], seconds


def in_process(spec: Path, data: list[dict], batch: int) -> tuple[float, list[float], list[dict]]:
    """(wall seconds, per-call latencies, results) scoring `data` in calls of `batch`."""
    with build(str(spec), load_registry()) as reward:
        reward.score([Sample.from_record(r) for r in rows(4)])  # start the math workers off the clock
        latencies, results = [], []
        start = time.perf_counter()
        for i in range(0, len(data), batch):
            t = time.perf_counter()
            scored = reward.score([Sample.from_record(r) for r in data[i:i + batch]])
            latencies.append(time.perf_counter() - t)
            results.extend({"total": scored.totals[j], "scores": {a: v[j] for a, v in scored.values.items()}}
                           for j in range(len(scored)))
        return time.perf_counter() - start, latencies, results


def start_server(spec: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([str(BIN), "serve", "--spec", str(spec), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    port = int(re.search(r":(\d+) \(", proc.stdout.readline()).group(1))
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def load(port: int, data: list[dict], clients: int, requests: int, samples: int) -> tuple[float, list[float], dict]:
    """(wall seconds, per-request latencies, {row index: result}) with `clients` threads at once."""
    latencies: list[float] = []
    answers: dict[int, dict] = {}
    lock = threading.Lock()

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for r in range(requests):
            first = (c * requests + r) * samples
            body = json.dumps({"samples": data[first:first + samples]})
            t = time.perf_counter()
            conn.request("POST", "/score", body, {"content-type": "application/json"})
            response = conn.getresponse()
            payload = json.loads(response.read())
            elapsed = time.perf_counter() - t
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {payload}")
            with lock:
                latencies.append(elapsed)
                answers.update((first + j, res) for j, res in enumerate(payload["results"]))
        conn.close()

    # Warm the server's math workers off the clock, as the in-process peers are.
    warm = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    warm.request("POST", "/score", json.dumps({"samples": rows(4)}), {"content-type": "application/json"})
    warm.getresponse().read()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(1200)
    return time.perf_counter() - start, latencies, answers


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    n = args.clients * args.requests * args.samples
    data = rows(n)
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(SPEC)
        expected, cli_s = cli_reference(spec, data, Path(tmp))
        table = [("`grpo-rewards score` (CLI, batches of 256, incl. start-up)", cli_s, None)]
        for batch in (args.samples, 256):
            wall, lat, results = in_process(spec, data, batch)
            assert results == expected, "in-process results differ from the CLI"
            table.append((f"in-process, one call per {batch} samples", wall, lat))
        proc, port = start_server(spec)
        try:
            wall, lat, answers = load(port, data, args.clients, args.requests, args.samples)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        wrong = [i for i in range(n) if answers.get(i) != expected[i]]
        if wrong:
            raise SystemExit(f"{len(wrong)} of {n} server answers differ from the CLI (first: row {wrong[0]})")
        table.append((f"server, {args.clients} clients x {args.requests} requests x {args.samples}", wall, lat))
    print(f"{n} samples; every server answer equal to `grpo-rewards score`; load average "
          f"{os.getloadavg()[0]:.1f} at the end\n")
    print("| how | samples/s | p50 per call (ms) | p99 per call (ms) |\n|---|---|---|---|")
    for name, wall, lat in table:
        p50 = f"{1000 * pct(lat, 50):.0f}" if lat else "-"
        p99 = f"{1000 * pct(lat, 99):.0f}" if lat else "-"
        print(f"| {name} | {n / wall:,.0f} | {p50} | {p99} |")


if __name__ == "__main__":
    main()
