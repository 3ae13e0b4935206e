"""A webhook receiver for the end-to-end tests of subscriptions: a real
HTTP server on loopback that verifies every delivery's signature against
the server's published JWK Set with the `cryptography` library (not the
project's code), as a receiver in production would, and answers as the
test asks.

``Receiver(answer)``: `answer(body, attempt)` returns ``(status, json)``
for the attempt-th delivery (0-based) of that wake id; default ``{"done":
true}``. ``deliveries`` lists every request with its verification.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

SIGNATURE = re.compile(r"t=(\d+),kid=([^,]+),ed25519=([A-Za-z0-9_-]+)")
REPLAY_WINDOW = 300  # seconds, as the protocol suggests


def b64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


@dataclass
class Delivery:
    body: dict[str, Any]
    raw: bytes
    kid: str
    verified: bool
    why: str
    at: float


class Receiver:
    def __init__(self, jwks_url: Callable[[], str] | None = None,
                 answer: Callable[[dict[str, Any], int], tuple[int, Any]] | None = None,
                 hang: float = 0.0) -> None:
        self.jwks_url = jwks_url
        self.answer = answer or (lambda body, attempt: (200, {"done": True}))
        self.hang = hang
        self.deliveries: list[Delivery] = []
        self.attempts: dict[str, int] = {}
        self.keys: dict[str, Ed25519PublicKey] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                status, answer = receiver.take(raw, self.headers.get("webhook-signature", ""))
                if receiver.hang:
                    time.sleep(receiver.hang)
                payload = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def key(self, kid: str) -> Ed25519PublicKey | None:
        if kid not in self.keys and self.jwks_url is not None:
            # A kid not seen yet: the key set is fetched again (rotation).
            jwks = httpx.get(self.jwks_url(), timeout=5).json()
            for k in jwks["keys"]:
                if k.get("kty") == "OKP" and k.get("crv") == "Ed25519":
                    self.keys[k["kid"]] = Ed25519PublicKey.from_public_bytes(b64url(k["x"]))
        return self.keys.get(kid)

    def verify(self, raw: bytes, header: str) -> tuple[bool, str, str]:
        m = SIGNATURE.fullmatch(header)
        if m is None:
            return False, "", f"malformed signature header {header!r}"
        t, kid, sig = m.groups()
        if abs(time.time() - int(t)) > REPLAY_WINDOW:
            return False, kid, "timestamp outside the replay window"
        key = self.key(kid)
        if key is None:
            return False, kid, f"kid {kid} is not in the JWK Set"
        try:
            key.verify(b64url(sig), t.encode() + b"." + raw)
        except InvalidSignature:
            return False, kid, "the signature does not verify"
        return True, kid, ""

    def take(self, raw: bytes, header: str) -> tuple[int, Any]:
        verified, kid, why = self.verify(raw, header)
        body = json.loads(raw)
        with self.lock:
            self.deliveries.append(Delivery(body, raw, kid, verified, why, time.monotonic()))
            attempt = self.attempts.get(body["wake_id"], 0)
            self.attempts[body["wake_id"]] = attempt + 1
        return self.answer(body, attempt)

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def assert_covered(receiver: Receiver, acknowledged: dict[str, str], seen: dict[str, list[str]]) -> None:
    """Every delivery verified; each stream's acknowledged end covered by
    a delivered wake; no acked offset seen moving back."""
    delivered: dict[str, str] = {}
    for d in receiver.snapshot():
        assert d.verified, d.why
        for s in d.body["streams"]:
            delivered[s["path"]] = max(delivered.get(s["path"], ""), s["tail_offset"])
    for p, end in acknowledged.items():
        assert delivered[p] >= end, (p, delivered[p], end)
        assert seen[p] == sorted(seen[p]), f"{p}'s acked offset moved back"


class AckedPoller:
    """Reads a subscription's acked offsets every 20 ms on a thread of its
    own (`url()`: the subscription's URL now), keeping each stream's in
    `seen` in the order read; `stop()` ends it."""

    def __init__(self, url: Callable[[], str], paths: list[str]) -> None:
        self.url = url
        self.seen: dict[str, list[str]] = {p: [] for p in paths}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self) -> None:
        while not self.stopping.is_set():
            try:
                r = httpx.get(self.url(), timeout=10)
                if r.status_code == 200:
                    for s in r.json()["streams"]:
                        self.seen.setdefault(s["path"], []).append(s["acked_offset"])
            except httpx.HTTPError:
                pass
            time.sleep(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
