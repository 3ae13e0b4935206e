"""End-to-end tests of subscriptions and webhooks in a region: three real
`origin` processes with object durability on one SeaweedFS bucket, three
partitions, so every stream below lies on a partition that one origin
owns and the others follow (decision 0024, "In a region").

Covered: a subscription declared through any origin sees the creates and
appends of every partition; one JWK Set, the same through every origin,
rotating in step; a pull-wake subscription whose wake stream lies in a
partition another origin owns; and a `kill -9` of the origin running the
subscriptions with its disk deleted while writers go on through the
others: every acknowledged append is covered by a verified delivery, no
acked offset moves back, the same keys sign after the takeover, and a
token of a wake before the kill is fenced after it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import procs
from test_client import REPO, Server, binary, wait_for
from webhooks import AckedPoller, Receiver, assert_covered

DEV = ["--webhook-allow-http", "true", "--webhook-allow", "127.0.0.0/8"]
ROOT = "/v1/stream"
PARTITIONS = 3
# A takeover within a few seconds: the lease 3 s, renewed every second.
FAST = ["--lease", "3s", "--lease-renew", "1s"]


def partition(path: str) -> int:
    """The partition of a stream's full path: FNV-1a (64 bit) modulo the
    count, as `shared::partition::of_stream` computes it."""
    h = 0xCBF29CE484222325
    for b in path.encode():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % PARTITIONS


def spread(prefix: str, count: int) -> list[str]:
    """`count` root-relative names under `prefix` covering every partition."""
    names: list[str] = []
    seen: set[int] = set()
    n = 0
    while len(names) < count or len(seen) < PARTITIONS:
        name = f"{prefix}/s{n}"
        n += 1
        p = partition(f"{ROOT}/{name}")
        if len(names) < count or p not in seen:
            names.append(name)
            seen.add(p)
    return names


def on_partition(prefix: str, wanted: set[int]) -> str:
    """A root-relative name under `prefix` whose partition is in `wanted`."""
    for n in range(1000):
        name = f"{prefix}/x{n}"
        if partition(f"{ROOT}/{name}") in wanted:
            return name
    raise AssertionError("no name found")


class Region:
    """SeaweedFS and three origins on one bucket and prefix."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.tmp = tmp
        self.extra = list(extra)
        out = subprocess.run([str(REPO / "scripts" / "weed-mini"), str(tmp / "weed"), "region"],
                             check=True, capture_output=True, text=True, timeout=120).stdout.split()
        self.weed_endpoint, self.weed_pid = out[0], int(out[1])
        self.env = {"AWS_ENDPOINT_URL": self.weed_endpoint, "AWS_ACCESS_KEY_ID": "any", "AWS_SECRET_ACCESS_KEY": "any",
                    "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
        self.origins: dict[str, Server] = {}
        for node in "abc":
            self.start(node)
        wait_for(self.settled, "each origin to serve one partition and follow two", timeout=60)

    def start(self, node: str) -> Server:
        data = self.tmp / node
        data.mkdir(exist_ok=True)
        saved = dict(os.environ)
        os.environ.update(self.env)
        try:
            s = Server(f"origin-{node}", [binary("origin"), "--listen", "127.0.0.1:0", "--data", str(data),
                                          "--object-store", "s3://region/webhooks", "--durability", "object",
                                          "--node-id", node, "--region-partitions", str(PARTITIONS),
                                          *FAST, *DEV, *self.extra])
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.origins[node] = s
        return s

    def metric(self, node: str, name: str) -> float | None:
        try:
            text = httpx.get(f"{self.origins[node].url}/metrics", timeout=5).text
        except httpx.HTTPError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def settled(self) -> bool:
        return all(self.metric(n, "ds_origin_region_serving") == 1 and self.metric(n, "ds_origin_region_following") == 2
                   for n in self.origins)

    def runner(self) -> str | None:
        """The origin that runs the subscriptions (owns partition 0)."""
        running = [n for n in self.origins if self.metric(n, "ds_origin_subscriptions") is not None]
        return running[0] if len(running) == 1 else None

    def others(self, node: str) -> list[str]:
        return [n for n in self.origins if n != node]

    def kill(self, node: str) -> None:
        """kill -9, and its disk deleted."""
        procs.kill(self.origins.pop(node).proc)
        shutil.rmtree(self.tmp / node)

    def close(self) -> None:
        codes = {n: s.stop() for n, s in self.origins.items()}
        subprocess.run(["kill", "-9", str(self.weed_pid)], check=False)
        assert all(c == 0 for c in codes.values()), codes


def sub_url(base: str, sid: str) -> str:
    return f"{base}{ROOT}/__ds/subscriptions/{sid}"


def acked(base: str, sid: str) -> dict[str, str]:
    r = httpx.get(sub_url(base, sid), timeout=10)
    assert r.status_code == 200, r.text
    return {s["path"]: s["acked_offset"] for s in r.json()["streams"]}


def append(base: str, path: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{base}{ROOT}/{path}", content=body, headers={"content-type": "text/plain"}, timeout=15)


def retried(send: Any, ok: int, within: float = 30) -> httpx.Response:
    """`send()` again while the region answers 503 (a partition being
    taken over) or the connection fails, until it answers `ok`."""
    deadline = time.monotonic() + within
    while True:
        try:
            r = send()
            if r.status_code == ok:
                return r
            assert r.status_code == 503, r.text
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"not answered {ok} within {within} s"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Region]:
    r = Region(tmp_path_factory.mktemp("region"), "--webhook-key-rotation", "4s", "--webhook-key-publish-ahead", "2s",
               "--webhook-key-retired-for", "1h")
    yield r
    r.close()


def test_every_partition_wakes_one_key_set_through_every_origin(region: Region) -> None:
    runner = region.runner()
    assert runner is not None, "no origin runs the subscriptions"
    via = region.others(runner)[0]
    base = region.origins[via].url
    jwks: list[str] = []
    receiver = Receiver(lambda: jwks[0])
    try:
        created = httpx.put(sub_url(base, "spread"), json={"type": "webhook", "pattern": "spread/*", "lease_ttl_ms": 2000,
                                                         "webhook": {"url": receiver.url}}, timeout=10)
        assert created.status_code == 201, created.text
        jwks.append(created.json()["webhook"]["signing"]["jwks_url"])
        # The callback and key set name the origin the subscription was
        # made through, not the one that runs it.
        assert jwks[0] == f"{base}{ROOT}/__ds/jwks.json"
        names = spread("spread", 6)
        urls = [s.url for s in region.origins.values()]
        tails: dict[str, str] = {}
        for i, name in enumerate(names):
            u = urls[i % len(urls)]
            assert httpx.put(f"{u}{ROOT}/{name}", content=b"first", headers={"content-type": "text/plain"}, timeout=10).status_code == 201
            for n in range(3):
                r = append(urls[(i + n) % len(urls)], name, f"m{n}".encode())
                assert r.status_code == 204, r.text
                tails[name] = r.headers["stream-next-offset"]
        wait_for(lambda: acked(base, "spread") == tails, lambda: f"acked {acked(base, 'spread')} != tails {tails}", timeout=20)
        got = receiver.snapshot()
        assert got and all(d.verified for d in got), [d.why for d in got if not d.verified]
        delivered = {s["path"] for d in got for s in d.body["streams"] if s["tail_offset"] != s["acked_offset"]}
        assert delivered == set(names), delivered
        # One key set, rotating: every origin publishes the same keys, and
        # a key is published before it signs (the receiver verified all).
        wait_for(lambda: len(httpx.get(jwks[0], timeout=5).json()["keys"]) >= 2, "a rotation", timeout=15)
        sets = [httpx.get(f"{u}{ROOT}/__ds/jwks.json", timeout=5).json() for u in urls]
        assert all(s == sets[0] for s in sets), sets
        assert append(urls[0], names[0], b"after the rotation").status_code == 204
        wait_for(lambda: len(receiver.snapshot()) > len(got), "a delivery after the rotation")
        assert all(d.verified for d in receiver.snapshot())
    finally:
        httpx.delete(sub_url(base, "spread"), timeout=10)
        receiver.close()


def test_pull_wake_events_reach_a_wake_stream_another_origin_owns(region: Region) -> None:
    runner = region.runner()
    assert runner is not None
    base = region.origins[region.others(runner)[1]].url
    # Partition 0 is the runner's: the wake stream and the linked stream
    # lie in the others', so the runner appends through their owners.
    wakes = on_partition("pull/wakes", {1, 2})
    linked = on_partition("pull/linked", {1, 2})
    assert httpx.put(f"{base}{ROOT}/{wakes}", headers={"content-type": "application/json"}, timeout=10).status_code == 201
    r = httpx.put(sub_url(base, "pull"), json={"type": "pull-wake", "streams": [linked], "wake_stream": wakes, "lease_ttl_ms": 5000}, timeout=10)
    assert r.status_code == 201, r.text
    assert httpx.put(f"{base}{ROOT}/{linked}", content=b"x", headers={"content-type": "text/plain"}, timeout=10).status_code == 201
    wait_for(lambda: '"type":"wake"' in httpx.get(f"{base}{ROOT}/{wakes}?offset=-1", timeout=5).text, "a wake event")
    events = httpx.get(f"{base}{ROOT}/{wakes}?offset=-1", headers={"accept": "application/json"}, timeout=5).json()
    assert any(e["subscription_id"] == "pull" and e["stream"] == linked for e in events), events
    claim = httpx.post(f"{sub_url(base, 'pull')}/claim", json={"worker": "w"}, timeout=10)
    assert claim.status_code == 200, claim.text
    c = claim.json()
    tail = httpx.head(f"{base}{ROOT}/{linked}", timeout=5).headers["stream-next-offset"]
    done = httpx.post(f"{sub_url(base, 'pull')}/ack", json={"wake_id": c["wake_id"], "generation": c["generation"],
                                                          "acks": [{"stream": linked, "offset": tail}], "done": True},
                      headers={"authorization": f"Bearer {c['token']}"}, timeout=10)
    assert done.status_code == 200, done.text
    assert acked(base, "pull")[linked] == tail


def test_kill_9_of_the_origin_running_subscriptions(tmp_path: Any) -> None:
    """Writers append through two origins to streams on every partition
    while the origin running the subscriptions is killed with SIGKILL and
    its disk deleted: another origin takes partition 0 over with the
    journal, and every acknowledged append ends up in a delivered wake."""
    region = Region(tmp_path)
    try:
        runner = region.runner()
        assert runner is not None
        survivors = region.others(runner)
        via = region.origins[survivors[0]].url
        receiver = Receiver(lambda: f"{via}{ROOT}/__ds/jwks.json")
        paths = spread("crash", 6)
        acknowledged: dict[str, str] = {}

        r = httpx.put(sub_url(via, "crash"), json={"type": "webhook", "pattern": "crash/*", "lease_ttl_ms": 2000,
                                                   "webhook": {"url": receiver.url}}, timeout=10)
        assert r.status_code == 201, r.text
        for p in paths:
            retried(lambda: httpx.put(f"{via}{ROOT}/{p}", headers={"content-type": "text/plain"}, timeout=10), 201)
        poller = AckedPoller(lambda: sub_url(via, "crash"), paths)
        urls = [region.origins[n].url for n in survivors]
        before_kill: dict[str, Any] = {}
        for round_ in range(2):
            for n in range(120):
                p = paths[n % len(paths)]
                body = f"r{round_}m{n}".encode()
                u = urls[n % len(urls)]
                r = retried(lambda: append(u, p, body), 204)
                acknowledged[p] = r.headers["stream-next-offset"]
            if round_ == 0:
                wait_for(lambda: bool(receiver.snapshot()), "a delivery before the kill")
                before_kill = receiver.snapshot()[-1].body
                kid = receiver.snapshot()[-1].kid
                region.kill(runner)
        wait_for(lambda: region.runner() in survivors, "another origin to run the subscriptions", timeout=30)
        wait_for(lambda: all(acked(via, "crash").get(p) == acknowledged[p] for p in paths),
                 lambda: f"acked {acked(via, 'crash')} != acknowledged {acknowledged}", timeout=30)
        poller.stop()
        assert_covered(receiver, acknowledged, poller.seen)
        # The journal carried the keys: the same key signs, the old token
        # still verifies (the same secret), and its wake is fenced.
        assert receiver.snapshot()[-1].kid == kid
        stale = httpx.post(before_kill["callback_url"], json={"wake_id": before_kill["wake_id"],
                                                               "generation": before_kill["generation"], "done": True},
                           headers={"authorization": f"Bearer {before_kill['callback_token']}"}, timeout=10)
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "FENCED", stale.text
        receiver.close()
    finally:
        region.close()
