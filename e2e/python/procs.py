"""Process start and stop shared by the Python end-to-end tests
(test_client.py's servers and varnish_proc.py's varnishd).

``start(name, argv, env)`` runs `argv` with exactly `env`, stdin closed and
stderr merged into stdout, and drains that output on a daemon thread into a
list of lines (kept for failure messages). ``stop(proc, timeout)`` sends
SIGTERM and returns the exit code (killed and -9 if it does not exit within
`timeout` seconds).
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable


def start(
    name: str,
    argv: list[str],
    env: dict[str, str],
    on_line: Callable[[str | None], None] | None = None,
) -> tuple[subprocess.Popen[str], list[str], threading.Thread]:
    """Starts `argv`; returns the process, its log (lines without the newline,
    appended as they come) and the thread that drains it. `on_line`, if
    given, is called with each raw line, then with None at the end of the
    output."""
    log: list[str] = []
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        errors="replace",
    )

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.append(line.rstrip("\n"))
            if on_line is not None:
                on_line(line)
        if on_line is not None:
            on_line(None)

    thread = threading.Thread(target=drain, name=f"{name}-log", daemon=True)
    thread.start()
    return proc, log, thread


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL and reap."""
    proc.kill()
    proc.wait()


def stop(proc: subprocess.Popen[str], timeout: float) -> int:
    """SIGTERM, then the exit code (killed and -9 if it does not stop)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        return -9
