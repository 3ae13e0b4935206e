"""Varnish (deploy/varnish/edge.vcl) in front of an edge, as a real process
on loopback, for the Python client tests: the Python equivalent of
e2e/lib/varnish.mjs.

It runs deploy/varnish/run (the start script the project ships), which
renders the shipped VCL with the edge's address and becomes
``varnishd -F -a 127.0.0.1:PORT -f VCL -n WORKDIR -s malloc,64m``. PORT is a
free port found by binding port 0 first (a start that loses the port to
another process is retried). The start returns once ``GET /healthz`` through
Varnish answers 200 (passed to the edge: the whole chain is up); it polls
with a deadline. ``stop()`` sends SIGTERM and returns varnishd's exit code
(-9 if it had to be killed).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

import procs

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "deploy" / "varnish" / "run"
SBIN = ["/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"]

START_TIMEOUT = 20.0  # seconds for /healthz to answer 200 through Varnish
STOP_TIMEOUT = 15.0  # seconds for varnishd to exit after SIGTERM
LOST_PORT = re.compile(r"Could not get socket|Address already in use|bind", re.IGNORECASE)


def _tool_path() -> str:
    dirs = [d for d in os.environ.get("PATH", "").split(":") if d]
    return ":".join(dict.fromkeys(dirs + SBIN))


def varnishd_path() -> str | None:
    """The varnishd binary, or None when Varnish is not installed."""
    for d in _tool_path().split(":"):
        f = Path(d) / "varnishd"
        if f.is_file() and os.access(f, os.X_OK):
            return str(f)
    return None


def free_port() -> int:
    """A port that was free a moment ago (bound to 127.0.0.1:0, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VarnishStartError(RuntimeError):
    def __init__(self, message: str, log: str) -> None:
        super().__init__(f"{message}\n{log}")
        self.log = log


class Varnish:
    """varnishd in front of the edge at `edge_url` ("http://host:port")."""

    def __init__(self, edge_url: str, *, storage: str = "malloc,64m") -> None:
        if varnishd_path() is None:
            raise RuntimeError("varnishd not found: apt-get install varnish")
        edge = urlsplit(edge_url).netloc
        # varnishd's worker process drops root for its own user: it must be
        # able to walk into the working directory (pytest's tmp dirs are 0700).
        self.base = tempfile.mkdtemp(prefix="ds-varnish-")
        os.chmod(self.base, 0o755)
        self.workdir = os.path.join(self.base, "work")
        self.log: list[str] = []
        last: VarnishStartError | None = None
        try:
            for _ in range(3):
                try:
                    self._start(edge, free_port(), storage)
                    return
                except VarnishStartError as err:
                    last = err
                    # Only a lost port is worth another try.
                    if not LOST_PORT.search(err.log):
                        raise
            assert last is not None
            raise last
        except BaseException:
            shutil.rmtree(self.base, ignore_errors=True)
            raise

    def _start(self, edge: str, port: int, storage: str) -> None:
        env = dict(
            os.environ,
            PATH=_tool_path(),
            EDGE=edge,
            LISTEN=f"127.0.0.1:{port}",
            VARNISH_WORKDIR=self.workdir,
            VARNISH_STORAGE=storage,
        )
        env.pop("VARNISH_VCL_EXTRA", None)
        self.proc, self.log, self._drain = procs.start("varnish", [str(RUN)], env)
        self.addr = f"127.0.0.1:{port}"
        self.url = f"http://{self.addr}"

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            code = self.proc.poll()
            if code is not None:
                self._drain.join(timeout=2)
                raise VarnishStartError(f"varnishd exited {code} before it answered", "\n".join(self.log))
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                procs.kill(self.proc)
                self._drain.join(timeout=2)
                raise VarnishStartError(
                    f"varnishd on {self.url} did not pass /healthz to the edge within {START_TIMEOUT}s",
                    "\n".join(self.log),
                )
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed and -9 if it does not stop)."""
        try:
            return procs.stop(self.proc, STOP_TIMEOUT)
        finally:
            self._drain.join(timeout=2)
            shutil.rmtree(self.base, ignore_errors=True)
