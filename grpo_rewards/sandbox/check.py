"""`grpo-rewards sandbox-check`: which isolation layers the local sandbox has on this host.

Starts one sandbox worker (which probes every layer by applying it), prints one row per layer with
what it protects, or what its absence means, and runs a few live checks through the sandbox.
Always exits 0: a missing layer is information, not an error (`LocalSandbox(require=[...])`
is how a deployment insists on one).
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from grpo_rewards.sandbox.base import Job, Limits
from grpo_rewards.sandbox.local import LAYERS, LocalSandbox

# Live checks: a program and the status that shows the layer holding.
LIVE_CHECKS = [
    ("runs a program", "print('ok')", "ok"),
    ("no network", "import socket; socket.create_connection(('127.0.0.1', 22), timeout=1)", "error"),
    ("cannot write outside its dir", "open('/etc/grpo-sandbox-check', 'w')", "error"),
    ("no new namespaces", "import ctypes; assert ctypes.CDLL(None).unshare(0x10000000) == 0", "error"),
    ("wall clock enforced", "while True: pass", "timeout"),
    ("memory capped", "x = bytearray(1 << 30)", "memory"),
]


def layer_rows(layers: dict[str, str]) -> list[tuple[str, str, str]]:
    """(layer, state, meaning) for every known layer."""
    rows = []
    for name, protects in LAYERS.items():
        why = layers.get(name, "not reported by the sandbox worker")
        if why == "":
            rows.append((name, "active", protects))
        elif why.startswith("n/a"):
            rows.append((name, "not needed", why[4:].strip(": ")))
        else:
            rows.append((name, "MISSING", f"without it: NOT ({protects}); reason: {why}"))
    return rows


def live_checks(sandbox: LocalSandbox) -> list[tuple[str, str, str]]:
    limits = Limits(wall_s=2.0, memory_mb=256, processes=8)
    results = sandbox.run_many([Job(code, "", limits) for _, code, _ in LIVE_CHECKS])
    return [(what, expected, got.status) for (what, _, expected), got in zip(LIVE_CHECKS, results)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="grpo-rewards sandbox-check", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    ap.add_argument("--no-live", action="store_true", help="only probe the layers, run no checks")
    args = ap.parse_args(argv or [])
    sandbox = LocalSandbox(workers=1)
    try:
        rows = layer_rows(sandbox.layers())
        live = [] if args.no_live else live_checks(sandbox)
    finally:
        sandbox.close()
    if args.json:
        print(json.dumps({"layers": [dict(zip(("layer", "state", "meaning"), r)) for r in rows],
                          "live": [dict(zip(("check", "expected", "got"), r)) for r in live]}, indent=2))
        return 0
    console = Console()
    table = Table(title="Local sandbox layers on this host")
    for column in ("layer", "state", "what it means"):
        table.add_column(column, overflow="fold")
    style = {"active": "green", "not needed": "cyan", "MISSING": "bold red"}
    for name, state, meaning in rows:
        table.add_row(name, f"[{style[state]}]{state}[/]", meaning)
    console.print(table)
    if live:
        checks = Table(title="Live checks")
        for column in ("check", "expected", "got"):
            checks.add_column(column)
        for what, expected, got in live:
            checks.add_row(what, expected, f"[{'green' if got == expected else 'bold red'}]{got}[/]")
        console.print(checks)
    missing = [r[0] for r in rows if r[1] == "MISSING"]
    console.print(f"{len(missing)} layer(s) missing" + (f": {', '.join(missing)}" if missing else ""))
    return 0
