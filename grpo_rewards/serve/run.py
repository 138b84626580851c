"""`grpo-rewards serve`: check what the user asked for, bind the socket, run uvicorn.

Every user mistake (a bad spec, a missing token beyond loopback, a port in use) is found here,
before the server starts, and raised as a `UserError` (exit 2, no traceback).
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.supervisors import Multiprocess

from grpo_rewards.compose import build
from grpo_rewards.errors import UserError
from grpo_rewards.registry import Registry, load_registry
from grpo_rewards.serve.app import ServerSettings, create_app

CONFIG_ENV = "GRPO_REWARDS_SERVE_CONFIG"  # how `--workers N` hands the spec to each worker process


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def read_token(token_file: str | None, host: str) -> str | None:
    """The bearer token; required whenever the server is reachable from beyond this machine."""
    if token_file is None:
        if not is_loopback(host):
            raise UserError(f"--host {host} listens beyond loopback: a bearer token is required "
                            "(--token-file FILE, one line holding the token)")
        return None
    path = Path(token_file)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise UserError(f"--token-file {token_file}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--token-file {token_file}: cannot read it: {exc}") from None
    if not token or any(c.isspace() for c in token):
        raise UserError(f"--token-file {token_file}: must hold one token (no spaces), found "
                        f"{'nothing' if not token else 'whitespace inside'}")
    return token


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a port in use is a clear error, not a log line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is in use (another server?); choose another with --port") from None
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _app_from_env() -> FastAPI:
    """Factory run in each `--workers` process: its own registry, composite and batcher."""
    config = json.loads(os.environ[CONFIG_ENV])
    reward = build(config["spec"], load_registry())
    return create_app(reward, ServerSettings(**config["settings"]))


def serve(spec: str, host: str = "127.0.0.1", port: int = 8000, token_file: str | None = None,
          workers: int = 1, settings: ServerSettings | None = None, registry: Registry | None = None,
          log_level: str = "warning") -> None:
    """Validate, bind and serve until SIGTERM/SIGINT; in-flight requests are answered first."""
    settings = settings or ServerSettings()
    settings.token = read_token(token_file, host)
    reward = build(spec, registry or load_registry())  # validated once, before anything listens
    sock = bind(host, port)
    common: dict[str, Any] = {"log_level": log_level, "timeout_graceful_shutdown": None, "lifespan": "on"}
    print(f"grpo-rewards serve: {len(reward.aliases)} scorers ({', '.join(reward.aliases)}) on "
          f"http://{host}:{sock.getsockname()[1]} ({workers} worker{'s' if workers > 1 else ''})", flush=True)
    if workers == 1:
        server = uvicorn.Server(uvicorn.Config(create_app(reward, settings), **common))
        server.run(sockets=[sock])
        return
    reward.close()  # each worker process builds its own
    os.environ[CONFIG_ENV] = json.dumps({"spec": str(Path(spec).resolve()), "settings": asdict(settings)})
    config = uvicorn.Config("grpo_rewards.serve.run:_app_from_env", factory=True, workers=workers, **common)
    Multiprocess(config, sockets=[sock]).run()
