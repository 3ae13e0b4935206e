"""End-to-end tests of subscriptions and webhooks (protocol §6–7) against
real `origin` and `edge` processes on loopback, with a webhook receiver
that verifies every signature with the `cryptography` library against the
JWK Set the server publishes (webhooks.py).

Covered: signed deliveries and their acks (at the origin and through the
edge), asynchronous callbacks and generation fencing, retries backing off
from 1 s with jitter, signing-key rotation with the old key still
published, a kill -9 of the origin with subscriptions active (every
acknowledged append covered by a delivered wake, acked offsets never
moving back), pull-wake leases that run out, the SSRF refusals, and the
bounds (subscriptions, linked streams, a receiver that hangs or answers
too much).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import procs
from test_client import Server, binary, wait_for
from webhooks import AckedPoller, Receiver, assert_covered

DEV = ["--webhook-allow-http", "true", "--webhook-allow", "127.0.0.0/8"]
ROOT = "/v1/stream"


def start_origin(tmp_path: Any, *extra: str, data: Any = None) -> Server:
    data = data or tmp_path / "origin"
    data.mkdir(exist_ok=True)
    return Server("origin", [binary("origin"), "--listen", "127.0.0.1:0", "--data", str(data), *DEV, *extra])


@pytest.fixture
def origin(tmp_path: Any) -> Iterator[Server]:
    o = start_origin(tmp_path)
    yield o
    assert o.stop() == 0, o.log[-20:]


@pytest.fixture(params=["origin", "edge"])
def base(request: pytest.FixtureRequest, origin: Server) -> Iterator[str]:
    """The URL the client and the receiver talk to: the origin, or an edge
    in front of it."""
    if request.param == "origin":
        yield origin.url
        return
    edge = Server("edge", [binary("edge"), "--listen", "127.0.0.1:0", "--origin", origin.url, "--cache", "64MiB"])
    yield edge.url
    assert edge.stop() == 0, edge.log[-20:]


def sub_url(base: str, sid: str) -> str:
    return f"{base}{ROOT}/__ds/subscriptions/{sid}"


def declare(base: str, sid: str, receiver: Receiver | None = None, **fields: Any) -> httpx.Response:
    body: dict[str, Any] = {"type": "webhook", "lease_ttl_ms": 1000, **fields}
    if receiver is not None:
        body["webhook"] = {"url": receiver.url}
    return httpx.put(sub_url(base, sid), json=body, timeout=10)


def tail(base: str, path: str) -> str:
    r = httpx.head(f"{base}{ROOT}/{path}", timeout=10)
    assert r.status_code == 200, r
    return r.headers["stream-next-offset"]


def acked(base: str, sid: str) -> dict[str, str]:
    r = httpx.get(sub_url(base, sid), timeout=10)
    assert r.status_code == 200, r.text
    return {s["path"]: s["acked_offset"] for s in r.json()["streams"]}


def jwks_of(created: httpx.Response) -> str:
    return created.json()["webhook"]["signing"]["jwks_url"]


def test_deliveries_are_signed_verified_and_acked(base: str) -> None:
    jwks: list[str] = []
    receiver = Receiver(lambda: jwks[0])
    try:
        created = declare(base, "signed", receiver, pattern="hooks/*")
        assert created.status_code == 201, created.text
        jwks.append(jwks_of(created))
        assert jwks[0] == f"{base}{ROOT}/__ds/jwks.json"
        keys = httpx.get(jwks[0], timeout=5)
        assert keys.headers["content-type"].startswith("application/jwk-set+json")
        assert "max-age=300" in keys.headers["cache-control"]
        paths = [f"hooks/s{i}" for i in range(3)]
        for p in paths:
            r = httpx.put(f"{base}{ROOT}/{p}", content=b"first", headers={"content-type": "text/plain"}, timeout=10)
            assert r.status_code == 201
            for n in range(5):
                assert httpx.post(f"{base}{ROOT}/{p}", content=f"m{n}".encode(), headers={"content-type": "text/plain"}, timeout=10).status_code == 204
        tails = {p: tail(base, p) for p in paths}
        wait_for(lambda: acked(base, "signed") == tails, lambda: f"acked {acked(base, 'signed')} != tails {tails}")
        got = receiver.snapshot()
        assert got, "no delivery"
        assert all(d.verified for d in got), [d.why for d in got if not d.verified]
        gens = [d.body["generation"] for d in got]
        assert gens == sorted(gens) and len(set(gens)) == len(gens), gens
        for d in got:
            assert d.body["subscription_id"] == "signed"
            assert d.body["callback_url"] == f"{base}{ROOT}/__ds/subscriptions/signed/callback"
    finally:
        httpx.delete(sub_url(base, "signed"), timeout=10)
        receiver.close()


def test_callbacks_ack_and_stale_wakes_are_fenced(origin: Server) -> None:
    receiver = Receiver(answer=lambda body, attempt: (200, {}))
    try:
        assert declare(origin.url, "cb", receiver, streams=["cb/a"], lease_ttl_ms=60_000).status_code == 201
        httpx.put(f"{origin.url}{ROOT}/cb/a", content=b"x", headers={"content-type": "text/plain"}, timeout=10)
        wait_for(lambda: len(receiver.snapshot()) == 1, "a delivery")
        body = receiver.snapshot()[0].body
        stream = next(s for s in body["streams"] if s["path"] == "cb/a")
        assert stream["has_pending"] is True
        ack = {"wake_id": body["wake_id"], "generation": body["generation"], "acks": [{"stream": "cb/a", "offset": stream["tail_offset"]}], "done": True}
        auth = {"authorization": f"Bearer {body['callback_token']}"}
        forged = {"authorization": "Bearer " + body["callback_token"][:-4] + "AAAA"}
        r = httpx.post(body["callback_url"], json=ack, headers=forged, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "TOKEN_INVALID"
        r = httpx.post(body["callback_url"], json=ack, headers=auth, timeout=10)
        assert r.status_code == 200 and r.json() == {"ok": True, "next_wake": False}
        r = httpx.post(body["callback_url"], json=ack, headers=auth, timeout=10)
        assert r.status_code == 409 and r.json()["error"]["code"] == "FENCED"
        assert acked(origin.url, "cb") == {"cb/a": stream["tail_offset"]}
    finally:
        receiver.close()


def test_failed_deliveries_are_retried_with_backoff(origin: Server) -> None:
    jwks: list[str] = []
    receiver = Receiver(lambda: jwks[0], answer=lambda body, attempt: (500, {}) if attempt < 3 else (200, {"done": True}))
    try:
        created = declare(origin.url, "retry", receiver, streams=["retry/a"])
        jwks.append(jwks_of(created))
        httpx.put(f"{origin.url}{ROOT}/retry/a", content=b"x", headers={"content-type": "text/plain"}, timeout=10)
        wait_for(lambda: len(receiver.snapshot()) >= 2, "a retry", timeout=10)
        assert httpx.get(sub_url(origin.url, "retry"), timeout=5).json()["status"] == "failed"
        wait_for(lambda: acked(origin.url, "retry") == {"retry/a": tail(origin.url, "retry/a")}, "the ack after the retries", timeout=20)
        got = receiver.snapshot()[:4]
        assert len({(d.body["wake_id"], d.body["generation"]) for d in got}) == 1, "retries resend the same wake"
        assert all(d.verified for d in got)
        gaps = [b.at - a.at for a, b in zip(got, got[1:])]
        # 1 s, 2 s, 4 s, each ±20 %, plus the sweep's tick and scheduling.
        for gap, want in zip(gaps, [1.0, 2.0, 4.0]):
            assert want * 0.8 - 0.05 <= gap <= want * 1.2 + 0.5, gaps
        assert httpx.get(sub_url(origin.url, "retry"), timeout=5).json()["status"] == "active"
    finally:
        receiver.close()


def test_rotated_keys_sign_and_old_ones_stay_published(tmp_path: Any) -> None:
    o = start_origin(tmp_path, "--webhook-key-rotation", "3s", "--webhook-key-publish-ahead", "2s", "--webhook-key-retired-for", "1h")
    jwks: list[str] = []
    receiver = Receiver(lambda: jwks[0])
    try:
        created = declare(o.url, "rot", receiver, streams=["rot/a"])
        jwks.append(jwks_of(created))
        first = httpx.get(jwks[0], timeout=5).json()["keys"]
        assert len(first) == 1
        httpx.put(f"{o.url}{ROOT}/rot/a", content=b"x", headers={"content-type": "text/plain"}, timeout=10)
        wait_for(lambda: len(receiver.snapshot()) == 1, "the first delivery")
        wait_for(lambda: len(httpx.get(jwks[0], timeout=5).json()["keys"]) == 2, "a rotation", timeout=10)
        # The new key is published before it signs: the subscription names
        # the signer, which changes once the key was published for 2 s.
        wait_for(lambda: httpx.get(sub_url(o.url, "rot"), timeout=5).json()["webhook"]["signing"]["kid"] != first[0]["kid"],
                 "the new key to sign", timeout=10)
        httpx.post(f"{o.url}{ROOT}/rot/a", content=b"y", headers={"content-type": "text/plain"}, timeout=10)
        wait_for(lambda: len(receiver.snapshot()) == 2, "the second delivery")
        a, b = receiver.snapshot()
        assert a.verified and b.verified, (a.why, b.why)
        assert a.kid == first[0]["kid"] and b.kid != a.kid
        assert a.kid in {k["kid"] for k in httpx.get(jwks[0], timeout=5).json()["keys"]}
        assert httpx.get(sub_url(o.url, "rot"), timeout=5).json()["webhook"]["signing"]["kid"] == b.kid
    finally:
        receiver.close()
        assert o.stop() == 0


def test_kill_9_loses_no_wake_and_acks_never_move_back(tmp_path: Any) -> None:
    """Writers append to four streams while the origin is killed with
    SIGKILL and restarted on its data: every acknowledged append ends up
    covered by a delivered wake, and no acked offset ever moves back."""
    data = tmp_path / "crash"
    data.mkdir()
    o = start_origin(tmp_path, data=data)
    current = {"url": o.url}
    # The key set of whichever process runs now (the keys persist).
    receiver = Receiver(lambda: f"{current['url']}{ROOT}/__ds/jwks.json")
    paths = [f"crash/s{i}" for i in range(4)]
    acknowledged: dict[str, str] = {}
    poller = AckedPoller(lambda: sub_url(current["url"], "crash"), paths)
    try:
        assert declare(o.url, "crash", receiver, pattern="crash/*").status_code == 201
        for p in paths:
            httpx.put(f"{o.url}{ROOT}/{p}", headers={"content-type": "text/plain"}, timeout=10)
        for round_ in range(2):
            for n in range(150):
                p = paths[n % len(paths)]
                r = httpx.post(f"{current['url']}{ROOT}/{p}", content=f"r{round_}m{n}".encode(), headers={"content-type": "text/plain"}, timeout=10)
                assert r.status_code == 204, r.text
                acknowledged[p] = r.headers["stream-next-offset"]
            if round_ == 0:
                procs.kill(o.proc)
                o = start_origin(tmp_path, data=data)
                current["url"] = o.url
        wait_for(lambda: all(acked(o.url, "crash").get(p) == acknowledged[p] for p in paths),
                 lambda: f"acked {acked(o.url, 'crash')} != acknowledged {acknowledged}", timeout=20)
        poller.stop()
        assert_covered(receiver, acknowledged, poller.seen)
    finally:
        poller.stopping.set()
        receiver.close()
        assert o.stop() == 0


def test_pull_wake_leases_run_out(origin: Server) -> None:
    u = origin.url
    httpx.put(f"{u}{ROOT}/pw/wakes", headers={"content-type": "application/json"}, timeout=10)
    r = httpx.put(sub_url(u, "pw"), json={"type": "pull-wake", "streams": ["pw/a"], "wake_stream": "pw/wakes", "lease_ttl_ms": 1000}, timeout=10)
    assert r.status_code == 201, r.text
    assert httpx.post(f"{sub_url(u, 'pw')}/claim", json={"worker": "w1"}, timeout=5).json()["error"]["code"] == "NO_PENDING_WORK"
    httpx.put(f"{u}{ROOT}/pw/a", content=b"x", headers={"content-type": "text/plain"}, timeout=10)
    wait_for(lambda: httpx.get(f"{u}{ROOT}/pw/wakes?offset=-1", timeout=5).text.count('"type":"wake"') >= 1, "a wake event")
    first = httpx.post(f"{sub_url(u, 'pw')}/claim", json={"worker": "w1"}, timeout=5)
    assert first.status_code == 200, first.text
    busy = httpx.post(f"{sub_url(u, 'pw')}/claim", json={"worker": "w2"}, timeout=5)
    assert busy.status_code == 409 and busy.json()["error"]["current_holder"] == "w1"
    # w1 never acks: its lease runs out and w2 claims the next generation.
    wait_for(lambda: httpx.post(f"{sub_url(u, 'pw')}/claim", json={"worker": "w2"}, timeout=5).status_code == 200, "the lease to run out", timeout=5)
    got = httpx.get(sub_url(u, "pw"), timeout=5).json()
    assert got["generation"] > first.json()["generation"]
    stale = httpx.post(f"{sub_url(u, 'pw')}/ack", json={"wake_id": first.json()["wake_id"], "generation": first.json()["generation"], "done": True},
                       headers={"authorization": f"Bearer {first.json()['token']}"}, timeout=5)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "FENCED"


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An origin with the production defaults: https only, public
    addresses only."""
    s = Server("origin", [binary("origin"), "--listen", "127.0.0.1:0", "--data", str(tmp_path_factory.mktemp("strict"))])
    yield s
    assert s.stop() == 0


@pytest.mark.parametrize("url", [
    "http://10.0.0.1/hook", "https://192.168.1.10/x", "https://169.254.169.254/latest/meta-data",
    "https://[::1]/x", "https://[fd00::1]/x", "https://localhost/x", "https://metadata.internal/x",
    "ftp://example.com/x", "https://user:pw@example.com/x",
])
def test_unsafe_webhook_urls_are_refused(strict: Server, url: str) -> None:
    r = httpx.put(sub_url(strict.url, "ssrf"), json={"type": "webhook", "pattern": "a/*", "webhook": {"url": url}}, timeout=5)
    assert r.status_code == 400 and r.json()["error"]["code"] == "WEBHOOK_URL_REJECTED", r.text
    assert httpx.get(sub_url(strict.url, "ssrf"), timeout=5).status_code == 404
    # Plain http is refused too, unless the development flag allows it.
    r = httpx.put(sub_url(strict.url, "ssrf"), json={"type": "webhook", "pattern": "a/*", "webhook": {"url": "http://example.com/x"}}, timeout=5)
    assert r.json()["error"]["code"] == "WEBHOOK_URL_REJECTED"


def test_bounds_and_a_receiver_that_hangs_stall_nothing_else(tmp_path: Any) -> None:
    o = start_origin(tmp_path, "--max-subscriptions", "3", "--max-subscription-streams", "3", "--max-subscription-links", "5",
                     "--webhook-timeout", "1s", "--webhook-answer-max", "1KiB")
    hanging = Receiver(hang=30)
    prompt = Receiver()
    talkative = Receiver(answer=lambda body, attempt: (200, b'{"pad":"' + b"x" * 4096 + b'","done":true}'))
    try:
        assert declare(o.url, "hangs", hanging, streams=["b/h"]).status_code == 201
        assert declare(o.url, "prompt", prompt, streams=["b/p"]).status_code == 201
        assert declare(o.url, "talks", talkative, streams=["b/t"]).status_code == 201
        r = declare(o.url, "fourth", prompt, streams=["b/x"])
        assert r.status_code == 409 and r.json()["error"]["code"] == "SUBSCRIPTION_LIMIT"
        r = httpx.post(f"{sub_url(o.url, 'prompt')}/streams", json={"streams": ["b/1", "b/2", "b/3"]}, timeout=5)
        assert r.status_code == 409 and r.json()["error"]["code"] == "SUBSCRIPTION_LIMIT", "streams per subscription"
        r = declare(o.url, "many", None, streams=["b/1", "b/2", "b/3", "b/4"], webhook={"url": prompt.url})
        assert r.status_code == 409 and r.json()["error"]["code"] == "SUBSCRIPTION_LIMIT", r.text
        # Links of all subscriptions: 3 now, at most 5.
        assert httpx.post(f"{sub_url(o.url, 'prompt')}/streams", json={"streams": ["b/1"]}, timeout=5).status_code == 204
        assert httpx.post(f"{sub_url(o.url, 'talks')}/streams", json={"streams": ["b/2"]}, timeout=5).status_code == 204
        r = httpx.post(f"{sub_url(o.url, 'hangs')}/streams", json={"streams": ["b/3"]}, timeout=5)
        assert r.status_code == 409 and r.json()["error"]["code"] == "SUBSCRIPTION_LIMIT", "links of all subscriptions"
        for p in ["b/h", "b/t"]:
            httpx.put(f"{o.url}{ROOT}/{p}", content=b"x", headers={"content-type": "text/plain"}, timeout=10)
        wait_for(lambda: len(hanging.snapshot()) >= 1, "the hanging receiver's delivery")
        started = time.monotonic()
        httpx.put(f"{o.url}{ROOT}/b/p", content=b"x", headers={"content-type": "text/plain"}, timeout=10)
        for n in range(20):
            assert httpx.post(f"{o.url}{ROOT}/b/p", content=f"{n}".encode(), headers={"content-type": "text/plain"}, timeout=2).status_code == 204
        wait_for(lambda: acked(o.url, "prompt")["b/p"] == tail(o.url, "b/p"), "the prompt receiver's acks")
        assert time.monotonic() - started < 5, "a hanging receiver slowed another subscription"
        # An answer past the bound is taken, not done: nothing is acked,
        # and once the lease (1 s) runs out the next wake comes.
        wait_for(lambda: len({d.body["generation"] for d in talkative.snapshot()}) >= 2, "a second wake of the talkative receiver")
        assert acked(o.url, "talks")["b/t"] == "0000000000000000"
        assert httpx.get(sub_url(o.url, "hangs"), timeout=5).json()["status"] in ("active", "failed")
    finally:
        for r in (hanging, prompt, talkative):
            r.close()
        assert o.stop() == 0
