"""End-to-end tests of the official Python client (`durable-streams` 0.1.0
on PyPI) against real `origin` and `edge` processes on loopback.

Every test runs against each target (the origin directly, an edge in front
of it, and a real Varnish with deploy/varnish/edge.vcl in front of that
edge) and in each of two modes:

* ``array``: the origin runs with ``--json-reads array`` and the client is
  used exactly as it ships.
* ``negotiated``: the origin runs in its default mode (JSON streams read as
  NDJSON) and the client sends ``Accept: application/json`` through its
  ``headers=`` option, so reads, long-polls and SSE of JSON streams answer
  JSON arrays.

What the client has no API for (idempotent producers, closing a stream) is
driven through its ``headers=`` option, which takes callables evaluated per
request; those tests say so.

Through Varnish, answers are stored per their Cache-Control and concurrent
requests for one URL are coalesced, so every test also checks that a shared
cache never gives a client stale, mixed-up or reordered contents. The
Varnish target is skipped only when varnishd is not installed. Varnish
refuses /metrics (404): the gauges are read from the edge behind it, which
every request Varnish passes on reaches.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_streams import (
    AsyncDurableStream,
    DurableStream,
    DurableStreamError,
    SeqConflictError,
    StreamExistsError,
    StreamNotFoundError,
)
import procs
from varnish_proc import Varnish, varnishd_path

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("DS_BIN_DIR", REPO / "target" / "release"))

START_TIMEOUT = 15.0  # seconds for a process to print its address
STOP_TIMEOUT = 15.0  # seconds for a process to exit after SIGTERM
WAIT_TIMEOUT = 10.0  # seconds for any awaited condition in a test
CLIENT_TIMEOUT = 20.0  # the client's HTTP timeout (above the long-poll wait)
LONG_POLL_MS = "5000"  # the server-side long-poll wait the tests ask for

ACCEPT_JSON = {"Accept": "application/json"}


# --------------------------------------------------------------------------
# Processes


class Server:
    """A real server process: started, its address parsed from the first log
    line, its output drained (kept for failure messages), stopped with
    SIGTERM."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        lines: queue.Queue[str | None] = queue.Queue()
        self.proc, self.log, _ = procs.start(
            name, argv, dict(os.environ, RUST_LOG="info", NO_COLOR="1"), on_line=lines.put
        )
        try:
            first = lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            procs.kill(self.proc)
            raise RuntimeError(f"{name} printed nothing within {START_TIMEOUT}s: {argv}")
        match = re.search(r"addr=(\S+)", first or "")
        if match is None:
            procs.kill(self.proc)
            raise RuntimeError(f"{name}: no addr= in the first line {first!r}; log: {self.log}")
        self.addr = match.group(1)
        self.url = f"http://{self.addr}"

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed and -9 if it does not stop)."""
        return procs.stop(self.proc, STOP_TIMEOUT)


@dataclass
class Deployment:
    mode: str  # "array" or "negotiated"
    origin: Server
    edge: Server
    varnish: Varnish | None  # None when varnishd is not installed

    @property
    def headers(self) -> dict[str, str]:
        """What the client sends on every request in this mode."""
        return dict(ACCEPT_JSON) if self.mode == "negotiated" else {}


def binary(name: str) -> str:
    path = BIN_DIR / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: build it (cargo build --release) or set DS_BIN_DIR")
    return str(path)


@pytest.fixture(scope="module", params=["array", "negotiated"])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    mode = request.param
    data = tmp_path_factory.mktemp(f"origin-{mode}")
    argv = [binary("origin"), "--listen", "127.0.0.1:0", "--data", str(data)]
    if mode == "array":
        argv += ["--json-reads", "array"]
    origin = Server("origin", argv)
    try:
        edge = Server(
            "edge",
            [binary("edge"), "--listen", "127.0.0.1:0", "--origin", origin.url, "--cache", "256MiB"],
        )
    except BaseException:
        origin.stop()
        raise
    varnish = None
    if varnishd_path() is not None:
        try:
            varnish = Varnish(edge.url)
        except BaseException:
            edge.stop()
            origin.stop()
            raise
    yield Deployment(mode, origin, edge, varnish)
    # Front to back: Varnish forwards to the edge, the edge to the origin.
    varnish_code = varnish.stop() if varnish is not None else 0
    edge_code = edge.stop()
    origin_code = origin.stop()
    assert varnish_code == 0, f"varnishd exited {varnish_code}; log tail: {varnish.log[-20:] if varnish else []}"
    assert edge_code == 0, f"edge exited {edge_code}; log tail: {edge.log[-20:]}"
    assert origin_code == 0, f"origin exited {origin_code}; log tail: {origin.log[-20:]}"


@dataclass
class Target:
    deployment: Deployment
    kind: str  # "origin", "edge" or "varnish"
    base: str
    prefix: str

    @property
    def headers(self) -> dict[str, str]:
        return self.deployment.headers

    @property
    def negotiated(self) -> bool:
        return self.deployment.mode == "negotiated"

    def url(self, name: str) -> str:
        return f"{self.base}/v1/stream/{self.prefix}-{name}"

    def handle(self, url: str, *, headers: dict[str, Any] | None = None, **kw: Any) -> DurableStream:
        """A client handle for `url` with this mode's headers (plus `headers`)."""
        return DurableStream(url, headers={**self.headers, **(headers or {})}, timeout=CLIENT_TIMEOUT, **kw)

    def create(self, name: str, content_type: str, **kw: Any) -> DurableStream:
        return DurableStream.create(
            self.url(name),
            content_type=content_type,
            headers=dict(self.headers),
            timeout=CLIENT_TIMEOUT,
            **kw,
        )

    def gauge(self, what: str) -> int:
        """A gauge of long_polls_waiting or sse_open, from the /metrics of the
        server that holds this target's readers: the origin, or the edge
        (directly, or behind Varnish, whose VCL refuses /metrics; Varnish
        passes every waiting reader's request on to the edge)."""
        if self.kind == "origin":
            name, base = "ds_origin_" + what, self.deployment.origin.url
        else:
            name, base = "ds_edge_" + what, self.deployment.edge.url
        res = httpx.get(f"{base}/metrics", timeout=5)
        assert res.status_code == 200, f"GET {base}/metrics answered {res.status_code}"
        match = re.search(rf"^{name} (\d+)$", res.text, re.MULTILINE)
        assert match, f"{name} not in {base}/metrics"
        return int(match.group(1))


@pytest.fixture(params=["origin", "edge", "varnish"])
def target(request: pytest.FixtureRequest, deployment: Deployment) -> Target:
    if request.param == "origin":
        base = deployment.origin.url
    elif request.param == "edge":
        base = deployment.edge.url
    elif deployment.varnish is None:
        pytest.skip("varnishd is not installed (apt-get install varnish): no Varnish target")
    else:
        base = deployment.varnish.url
    test = re.sub(r"[^a-z0-9]+", "-", request.node.originalname.lower()).strip("-")
    return Target(deployment, request.param, base, f"py-{deployment.mode}-{request.param}-{test}")


# --------------------------------------------------------------------------
# Helpers


def wait_for(cond: Callable[[], bool], what: str | Callable[[], str], timeout: float = WAIT_TIMEOUT) -> None:
    """Poll `cond` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(0.01)


def offset(n: int) -> str:
    return f"{n:016x}"


def stored_len(messages: list[Any]) -> int:
    """Bytes that JSON messages take in the log: what the client sends
    (json.dumps, so non-ASCII as \\u escapes) without insignificant
    whitespace, plus a newline each."""
    return len(ndjson(messages).encode())


def ndjson(messages: list[Any]) -> str:
    """The NDJSON read of messages the client appended."""
    return "".join(json.dumps(m, separators=(",", ":")) + "\n" for m in messages)


class Reader:
    """Consumes a live subscription on a thread, collecting what it yields;
    stops by itself once `done(items)` holds."""

    def __init__(
        self,
        start: Callable[[], Any],
        consume: Callable[[Any], Iterator[Any]],
        done: Callable[[list[Any]], bool],
    ) -> None:
        self.items: list[Any] = []
        self.error: BaseException | None = None
        self.content_type: str | None = None
        self._lock = threading.Lock()

        def run() -> None:
            try:
                with start() as res:
                    self.content_type = res.content_type
                    for item in consume(res):
                        with self._lock:
                            self.items.append(item)
                            finished = done(self.items)
                        if finished:
                            break
            except BaseException as e:  # reported by wait()
                self.error = e

        self.thread = threading.Thread(target=run, name="reader", daemon=True)
        self.thread.start()

    def snapshot(self) -> list[Any]:
        with self._lock:
            return list(self.items)

    def wait_until(self, cond: Callable[[list[Any]], bool], what: str) -> list[Any]:
        """Poll until what the subscription yielded satisfies `cond`."""

        def ready() -> bool:
            if self.error is not None:
                raise AssertionError(f"reader failed: {self.error!r}") from self.error
            return cond(self.snapshot())

        wait_for(ready, lambda: f"{what} (have {self.snapshot()!r})")
        return self.snapshot()

    def wait(self, n: int) -> list[Any]:
        return self.wait_until(lambda items: len(items) >= n, f"{n} items from the subscription")

    def join(self) -> None:
        self.thread.join(timeout=WAIT_TIMEOUT)
        assert not self.thread.is_alive(), "the reader did not finish"
        assert self.error is None, f"reader failed: {self.error!r}"


# --------------------------------------------------------------------------
# Create, HEAD, delete


def test_create_head_and_delete(target: Target) -> None:
    url = target.url("s")
    with pytest.raises(StreamNotFoundError):
        DurableStream.connect(url, headers=dict(target.headers), timeout=CLIENT_TIMEOUT)

    with target.create("s", "application/json", ttl_seconds=3600) as h:
        head = h.head()
        assert head.exists is True
        assert head.content_type is not None
        assert head.content_type.split(";")[0].strip() == "application/json"
        assert head.offset == offset(0)
        assert head.cache_control is not None and "no-store" in head.cache_control

        # the same configuration again is fine; another one is a conflict
        h.create_stream(content_type="application/json", ttl_seconds=3600)
        with pytest.raises(StreamExistsError):
            h.create_stream(content_type="text/plain", ttl_seconds=3600)

        # connect() validates with HEAD and learns the content type
        with DurableStream.connect(url, headers=dict(target.headers), timeout=CLIENT_TIMEOUT) as c:
            assert c.content_type is not None
            assert c.content_type.split(";")[0].strip() == "application/json"

        h.delete()
        with pytest.raises(StreamNotFoundError):
            h.head()
        with pytest.raises(StreamNotFoundError):
            h.delete()


def test_create_with_initial_body(target: Target) -> None:
    with target.create("s", "text/plain", body="first line\n") as h:
        assert h.head().offset == offset(len(b"first line\n"))
        with h.stream(live=False) as res:
            assert res.read_text() == "first line\n"


# --------------------------------------------------------------------------
# JSON: appends and catch-up reads


MESSAGES: list[Any] = [
    {"n": 0},
    [1, 2, {"nested": True}],
    "a string",
    42,
    None,
    {"unicode": "zürich ✓", "n": 5},
]


def test_json_appends_and_catch_up_reads(target: Target) -> None:
    with target.create("s", "application/json", batching=False) as h:
        ends = []
        for i, m in enumerate(MESSAGES):
            r = h.append(m)
            # every append answers the new end, a byte position in the log
            assert r.next_offset == offset(stored_len(MESSAGES[: i + 1])), (i, m)
            ends.append(r.next_offset)
        assert h.head().offset == ends[-1]

        # catch-up from the start, exactly what was appended, in order
        with h.stream(live=False) as res:
            assert res.read_json() == MESSAGES
            assert res.up_to_date
            assert res.offset == ends[-1]
            assert res.content_type is not None
            assert res.content_type.split(";")[0].strip() == "application/json"

        # from an offset between two messages
        with h.stream(offset=ends[1], live=False) as res:
            assert res.read_json() == MESSAGES[2:]

        # iterating yields the same items
        with h.stream(offset="-1", live=False) as res:
            assert list(res.iter_json()) == MESSAGES

        # at the end: nothing, up to date
        with h.stream(offset=ends[-1], live=False) as res:
            assert res.read_json() == []
            assert res.up_to_date


def test_events_carry_offsets_to_resume_from(target: Target) -> None:
    """iter_events() gives each answer's next offset; a reader that keeps it
    as a checkpoint resumes exactly after what it saw."""
    with target.create("s", "application/json", batching=False) as h:
        first = [{"i": 0}, {"i": 1}]
        for m in first:
            h.append(m)
        with h.stream(live=False) as res:
            events = list(res.iter_events(mode="json"))
        assert [item for e in events for item in e.data] == first
        checkpoint = events[-1].next_offset
        assert checkpoint == offset(stored_len(first))
        assert events[-1].up_to_date

        h.append({"i": 2})
        with h.stream(offset=checkpoint, live=False) as res:
            assert res.read_json() == [{"i": 2}]
            assert res.offset == offset(stored_len(first + [{"i": 2}]))


def test_batched_concurrent_appends_arrive_once_each(target: Target) -> None:
    """The client batches concurrent append() calls into one POST; every
    caller is answered and every message is stored exactly once."""
    with target.create("s", "application/json") as h:
        values = [{"worker": w, "i": i} for w in range(4) for i in range(10)]
        errors: list[BaseException] = []

        def work(w: int) -> None:
            try:
                for i in range(10):
                    h.append({"worker": w, "i": i})
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=WAIT_TIMEOUT)
            assert not t.is_alive()
        assert errors == []

        with h.stream(live=False) as res:
            got = res.read_json()
        assert sorted(got, key=lambda v: (v["worker"], v["i"])) == values
        # each worker's own appends keep their order
        for w in range(4):
            assert [v["i"] for v in got if v["worker"] == w] == list(range(10))
        assert h.head().offset == offset(stored_len(values))


def test_catch_up_sees_later_appends(target: Target) -> None:
    """A second read from the start sees what was appended after the first
    (no stale answer from the edge: its cache keeps only immutable chunks).

    Through Varnish, a shared cache, the first answer is Varnish's to keep:
    a read with bytes is ``public, max-age=60, stale-while-revalidate=300``
    (the protocol's advice, its section 8.1; docs/guides/protocol.md, "Caching"), so the same
    URL is answered from the cache with exactly the first answer: a
    consistent snapshot of the stream that ends where it says
    (``Stream-Next-Offset``). On every target, a client that goes on from the
    offset an answer gave it (as the protocol says a client must) gets
    exactly the rest: nothing lost, nothing twice."""
    first = [{"k": 1}]
    both = first + [{"k": 2}]
    first_end = offset(stored_len(first))
    with target.create("s", "application/json", batching=False) as h:
        h.append(first[0])
        with h.stream(offset="-1", live=False) as res:
            assert res.read_json() == first
            assert res.offset == first_end
            first_etag = res.headers.get("etag")
        end = h.append(both[1]).next_offset
        assert end == offset(stored_len(both))
        with h.stream(offset="-1", live=False) as res:
            again = res.read_json()
            again_end = res.offset
            headers = res.headers
        if target.kind == "varnish":
            # served by Varnish from the first answer, unchanged
            assert headers.get("x-cache") == "hit", dict(headers)
            assert (again, again_end, headers.get("etag")) == (first, first_end, first_etag)
            assert "max-age=60" in (headers.get("cache-control") or ""), dict(headers)
        else:
            assert (again, again_end) == (both, end)
        # going on from where that answer ended: exactly the rest, in order
        with h.stream(offset=again_end, live=False) as res:
            assert again + res.read_json() == both
            assert res.offset == end
            assert res.up_to_date
        # and from the end of the first read, by its offset
        with h.stream(offset=first_end, live=False) as res:
            assert res.read_json() == both[1:]
            assert res.offset == end


def test_json_read_format_per_mode(target: Target) -> None:
    """What a JSON stream's read looks like without the client's JSON parsing:
    an array in `array` mode; NDJSON without Accept and an array with
    `Accept: application/json` in the default mode. Reading the same range
    each way in turn also checks that the edge's cache keeps them apart."""
    msgs = [{"a": 1}, {"b": [2, 3]}, "x"]
    with target.create("s", "application/json") as h:
        h.append(msgs[0])
        h.append(msgs[1])
        h.append(msgs[2])

    def read(accept: dict[str, str]) -> tuple[str, str]:
        with DurableStream(target.url("s"), headers=accept, timeout=CLIENT_TIMEOUT) as plain:
            with plain.stream(live=False) as res:
                return res.read_text(), (res.content_type or "").split(";")[0].strip()

    if target.negotiated:
        for _ in range(2):
            text, ct = read({})
            assert (text, ct) == (ndjson(msgs), "application/x-ndjson")
            text, ct = read(ACCEPT_JSON)
            assert json.loads(text) == msgs
            assert ct == "application/json"
    else:
        text, ct = read({})
        assert json.loads(text) == msgs
        assert ct == "application/json"


# --------------------------------------------------------------------------
# Text streams


def test_text_appends_and_reads(target: Target) -> None:
    parts = ["hello ", "wörld\n", "line two\n"]
    with target.create("s", "text/plain; charset=utf-8", batching=False) as h:
        ends = [h.append(p).next_offset for p in parts]
        total = "".join(parts).encode()
        assert ends[-1] == offset(len(total))
        assert h.append(b"\x00bytes\xff").next_offset == offset(len(total) + 7)

        with h.stream(live=False) as res:
            assert res.read_bytes() == total + b"\x00bytes\xff"
            assert res.content_type is not None and res.content_type.startswith("text/plain")
        with h.stream(offset=ends[0], live=False) as res:
            assert res.read_bytes() == ("".join(parts[1:])).encode() + b"\x00bytes\xff"
        # text reads decode UTF-8 across chunk boundaries
        with h.stream(offset="-1", live=False) as res:
            assert "".join(res.iter_text()) == "".join(parts) + "\x00bytes\ufffd"


def test_stream_seq_orders_writers(target: Target) -> None:
    with target.create("s", "text/plain", batching=False) as h:
        h.append("one ", seq="a")
        h.append("two ", seq="b")
        with pytest.raises(SeqConflictError):
            h.append("stale ", seq="a")
        with pytest.raises(SeqConflictError):
            h.append("same ", seq="b")
        h.append("three", seq="c")
        with h.stream(live=False) as res:
            assert res.read_text() == "one two three"


# --------------------------------------------------------------------------
# Idempotent producer (no client API: its headers, as callables)


def test_idempotent_producer_retries_and_duplicates(target: Target) -> None:
    """The client has no producer API; its per-request header callables carry
    Producer-Id/Epoch/Seq. A retry of an accepted append answers that append's
    own end again and stores nothing; a gap and a stale epoch are refused."""
    state = {"epoch": 0, "seq": 0}
    producer = {
        "Producer-Id": "py-job",
        "Producer-Epoch": lambda: str(state["epoch"]),
        "Producer-Seq": lambda: str(state["seq"]),
    }
    target.create("s", "application/json").close()
    with target.handle(target.url("s"), headers=producer, content_type="application/json", batching=False) as p:
        msgs = [{"p": i} for i in range(3)]
        ends = []
        for i, m in enumerate(msgs):
            state["seq"] = i
            ends.append(p.append(m).next_offset)
            assert ends[-1] == offset(stored_len(msgs[: i + 1]))

        # retries of seq 2 and of the older seq 0 (a lost answer): the receipts
        # of those appends, nothing stored
        state["seq"] = 2
        assert p.append(msgs[2]).next_offset == ends[2]
        state["seq"] = 0
        assert p.append(msgs[0]).next_offset == ends[0]

        # a gap is refused (the client calls every 409 of an append a seq conflict)
        state["seq"] = 5
        with pytest.raises(SeqConflictError):
            p.append({"p": 5})

        # a new epoch starts again at 0; the old epoch is then stale (403)
        state.update(epoch=1, seq=0)
        end = p.append({"p": "e1"}).next_offset
        state.update(epoch=0, seq=3)
        with pytest.raises(DurableStreamError) as err:
            p.append({"p": "zombie"})
        assert err.value.status == 403

    with target.handle(target.url("s"), content_type="application/json") as h:
        assert h.head().offset == end
        with h.stream(live=False) as res:
            assert res.read_json() == msgs + [{"p": "e1"}]


# --------------------------------------------------------------------------
# Close (no client API: the Stream-Closed header)


def test_close_with_a_last_message(target: Target) -> None:
    with target.create("s", "application/json", batching=False) as h:
        h.append({"n": 1})
        with target.handle(
            target.url("s"), headers={"Stream-Closed": "true"}, content_type="application/json", batching=False
        ) as closer:
            end = closer.append({"last": True}).next_offset
        assert end == offset(stored_len([{"n": 1}, {"last": True}]))

        # appends after the close are refused with 409 (the client names every
        # 409 of an append a seq conflict)
        with pytest.raises(SeqConflictError):
            h.append({"n": 2})

        with h.stream(live=False) as res:
            assert res.read_json() == [{"n": 1}, {"last": True}]
            assert res.headers.get("stream-closed") == "true"
        assert h.head().offset == end


def test_long_poll_at_the_end_of_a_closed_stream_returns_at_once(target: Target) -> None:
    """A long-poll at the end of a closed stream answers 204 at once with
    Stream-Closed and Stream-Up-To-Date (the protocol's closure rule), so
    read_json(live="long-poll") ends instead of waiting out the timeout."""
    with target.create("s", "text/plain", batching=False) as h:
        h.append("only")
        with target.handle(
            target.url("s"), headers={"Stream-Closed": "true"}, content_type="text/plain", batching=False
        ) as closer:
            end = closer.append("!").next_offset
        started = time.monotonic()
        # a server-side wait far longer than the deadline below
        with h.stream(offset=end, live="long-poll", params={"timeout_ms": "60000"}) as res:
            assert res.read_text() == ""
            assert (res.status, res.headers.get("stream-closed")) == (204, "true")
            assert res.headers.get("stream-next-offset") == end
            assert res.headers.get("stream-up-to-date") == "true", res.headers
        assert time.monotonic() - started < WAIT_TIMEOUT


# --------------------------------------------------------------------------
# Live: long-poll and SSE


def test_long_poll_receives_later_appends(target: Target) -> None:
    with target.create("s", "application/json", batching=False) as h:
        h.append({"before": 0})
        h.append({"before": 1})
        waiting_before = target.gauge("long_polls_waiting")
        later = [{"later": i} for i in range(3)]
        reader = Reader(
            lambda: h.stream(offset="-1", live="long-poll", params={"timeout_ms": LONG_POLL_MS}),
            lambda res: res.iter_json(),
            done=lambda items: len(items) >= 2 + len(later),
        )
        assert reader.wait(2) == [{"before": 0}, {"before": 1}]
        for i, m in enumerate(later):
            # append while the reader's long-poll waits at the end
            wait_for(lambda: target.gauge("long_polls_waiting") > waiting_before, "a waiting long-poll")
            h.append(m)
            assert reader.wait(3 + i)[2:] == later[: i + 1]
        reader.join()
        assert reader.snapshot() == [{"before": 0}, {"before": 1}] + later


def test_long_poll_text_from_the_end(target: Target) -> None:
    with target.create("s", "text/plain", batching=False) as h:
        tail = h.append("old ").next_offset
        waiting_before = target.gauge("long_polls_waiting")

        def start() -> Any:
            return h.stream(offset=tail, live="long-poll", params={"timeout_ms": LONG_POLL_MS})

        reader = Reader(start, lambda res: iter(res), done=lambda chunks: b"".join(chunks) == b"new")
        wait_for(lambda: target.gauge("long_polls_waiting") > waiting_before, "a waiting long-poll")
        h.append("new")
        reader.wait_until(lambda chunks: b"".join(chunks) == b"new", "the append through the long-poll")
        reader.join()


def test_sse_receives_later_appends(target: Target) -> None:
    with target.create("s", "application/json", batching=False) as h:
        h.append({"before": 0})
        h.append([{"in": "array"}])
        later = [{"later": i} for i in range(3)]
        reader = Reader(
            lambda: h.stream(offset="-1", live="sse"),
            lambda res: res.iter_json(),
            done=lambda items: len(items) >= 2 + len(later),
        )
        # the catch-up arrives on the open SSE connection; the later appends
        # must come on the same one (the client does not reconnect)
        assert reader.wait(2) == [{"before": 0}, [{"in": "array"}]]
        assert target.gauge("sse_open") >= 1
        for i, m in enumerate(later):
            h.append(m)
            assert reader.wait(3 + i)[2:] == later[: i + 1]
        reader.join()
        assert reader.snapshot() == [{"before": 0}, [{"in": "array"}]] + later


def test_sse_text_stream(target: Target) -> None:
    with target.create("s", "text/plain", batching=False) as h:
        h.append("line one\n")
        want = "line one\nline two\nünïcode"
        reader = Reader(
            lambda: h.stream(offset="-1", live="sse"),
            lambda res: res.iter_text(),
            done=lambda parts: "".join(parts) == want,
        )
        reader.wait_until(lambda parts: "".join(parts) == "line one\n", "the first line over SSE")
        h.append("line two\n")
        reader.wait_until(lambda parts: "".join(parts) == "line one\nline two\n", "the second line over SSE")
        h.append("ünïcode")
        reader.wait_until(lambda parts: "".join(parts) == want, "the third part over SSE")
        reader.join()


def test_readers_across_a_rollback(target: Target) -> None:
    """A rollback (docs/guides/restore.md) as the client meets it, needing no
    change: an SSE reader of the replaced incarnation ends (the server's
    error event ends the client's iteration without an exception), a
    long-poll waiting on it raises 412, and reads afterwards see the kept
    prefix and what follows it."""
    with target.create("s", "text/plain", batching=False) as h:
        h.append("keep ")
        h.append("drop")
        sse = Reader(lambda: h.stream(offset="-1", live="sse"), lambda res: res.iter_text(), done=lambda _: False)
        sse.wait_until(lambda parts: "".join(parts) == "keep drop", "the stream over SSE")
        waiting_before = target.gauge("long_polls_waiting")
        poll = Reader(
            lambda: h.stream(offset=offset(9), live="long-poll", params={"timeout_ms": LONG_POLL_MS}),
            lambda res: res.iter_text(),
            done=lambda _: False,
        )
        wait_for(lambda: target.gauge("long_polls_waiting") > waiting_before, "a waiting long-poll")
        token = httpx.head(h.url, headers=target.headers, timeout=5).headers["stream-incarnation"]
        r = httpx.post(
            f"{h.url}/incarnation/{token}/restore",
            headers={**target.headers, "Stream-Restore-Offset": offset(5)},
            timeout=5,
        )
        assert r.status_code == 200, r.text
        assert r.headers["stream-previous-incarnation"] == token

        sse.thread.join(timeout=WAIT_TIMEOUT)
        assert not sse.thread.is_alive(), "the SSE reader of the replaced incarnation did not end"
        assert sse.error is None, f"the SSE reader failed: {sse.error!r}"
        poll.thread.join(timeout=WAIT_TIMEOUT)
        assert not poll.thread.is_alive(), "the long-poll on the replaced incarnation did not end"
        assert isinstance(poll.error, DurableStreamError) and poll.error.status == 412, repr(poll.error)
        h.append("new")
        with h.stream(offset="-1", live=False) as res:
            assert res.read_bytes() == b"keep new"
        with h.stream(offset=offset(5), live=False) as res:
            assert res.read_bytes() == b"new"


def test_sse_events_carry_the_offsets_of_the_control_events(target: Target) -> None:
    with target.create("s", "application/json", batching=False) as h:
        end0 = h.append({"e": 0}).next_offset
        reader = Reader(
            lambda: h.stream(offset="-1", live="sse"),
            lambda res: res.iter_events(mode="json"),
            done=lambda events: len(events) >= 2,
        )
        (e0,) = reader.wait(1)
        assert (e0.data, e0.next_offset, e0.up_to_date) == ([{"e": 0}], end0, True)
        end1 = h.append({"e": 1}).next_offset
        e1 = reader.wait(2)[1]
        assert (e1.data, e1.next_offset, e1.up_to_date) == ([{"e": 1}], end1, True)
        reader.join()


# --------------------------------------------------------------------------
# The asyncio client


def test_async_client_round_trip(target: Target) -> None:
    """AsyncDurableStream: create, concurrent (batched) appends, a catch-up
    read, and an SSE subscription at the end receiving a later append."""

    async def main() -> None:
        h = await AsyncDurableStream.create(
            target.url("s"), content_type="application/json", headers=dict(target.headers), timeout=CLIENT_TIMEOUT
        )
        async with h:
            values = [{"i": i} for i in range(20)]
            results = await asyncio.gather(*(h.append(v) for v in values))
            end = offset(stored_len(values))
            # a batch's callers all get the end of their batch; the last is the end
            assert max(r.next_offset for r in results) == end
            assert (await h.head()).offset == end

            async with h.stream(live=False) as res:
                got = await res.read_json()
            assert sorted(got, key=lambda v: v["i"]) == values

            open_before = await asyncio.to_thread(target.gauge, "sse_open")

            async def first_live_item() -> Any:
                async with h.stream(offset=end, live="sse") as res:
                    async for item in res.iter_json():
                        return item
                return None

            task = asyncio.create_task(first_live_item())
            deadline = time.monotonic() + WAIT_TIMEOUT
            while await asyncio.to_thread(target.gauge, "sse_open") <= open_before:
                assert not task.done(), task
                assert time.monotonic() < deadline, "the SSE subscription did not open"
                await asyncio.sleep(0.01)
            await h.append({"live": True})
            assert await asyncio.wait_for(task, WAIT_TIMEOUT) == {"live": True}

    asyncio.run(main())
