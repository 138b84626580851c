"""ASGI middleware in front of every route: the bearer token and the request size limit.

Both are checked before a body is parsed: an unauthorised or oversized request costs the
server nothing but reading (at most `max_body_bytes` of) it.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
OPEN_PATHS = frozenset({"/health"})  # liveness probes carry no token
DRAIN_FACTOR = 4  # bodies up to this many times the limit are read to the end before the 413


async def _send_error(send: Any, status: int, message: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app: Any, max_body_bytes: int, token: str | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.token = token

    def _authorised(self, scope: Scope) -> bool:
        if self.token is None or scope.get("path") in OPEN_PATHS:
            return True
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self._authorised(scope):
            await _send_error(send, 401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                              [(b"www-authenticate", b"Bearer")])
            return
        limit = self.max_body_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > DRAIN_FACTOR * limit:
            await _send_error(send, 413, f"request body of {int(declared)} bytes is over the limit of {limit}")
            return
        # Read the whole body here (it is needed anyway), so an oversized body (chunked ones too) is
        # refused before any route sees it. A body a little over the limit is read to its end and
        # dropped, so the client, still sending, gets the 413 rather than a broken pipe.
        chunks, received, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nothing to answer
                return
            received += len(message.get("body", b""))
            more = message.get("more_body", False)
            if received <= limit:
                chunks.append(message.get("body", b""))
            elif not more or received > DRAIN_FACTOR * limit:
                await _send_error(send, 413, f"request body is over the limit of {limit} bytes")
                return
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)
