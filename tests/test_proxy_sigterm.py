"""`swarmgpu docker-proxy` on SIGTERM (docker stack rm, systemctl stop): the turn in
flight finishes, its answer reaches the daemon, and the process exits 0.

Before: the proxy had no handler; the signal ended it (exit 143) mid-write, the engine's
answer lost. The engine here is a fake on a unix socket that answers when told, after the
proxy has said it is stopping: no timing is asserted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.paths import REPO


def _start_proxy(tmp_path: Path, upstream: Path) -> tuple[subprocess.Popen[str], Path]:
    listen = tmp_path / "proxy.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmgpu.cli", "docker-proxy", "--listen",
         f"unix://{listen}", "--upstream", f"unix://{upstream}"],
        cwd=REPO, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # bound: the test run's timeout; EOF if it ended
        if "docker-proxy on" in line:
            return proc, listen
    raise AssertionError(f"the proxy ended before it listened (exit {proc.wait()})")


def _read_stderr_until(proc: subprocess.Popen[str], words: str) -> str:
    assert proc.stderr is not None
    seen = ""
    for line in proc.stderr:
        seen += line
        if words in line:
            return seen
    return seen


def test_sigterm_with_nothing_in_flight_exits_0(tmp_path: Path) -> None:
    proc, _ = _start_proxy(tmp_path, tmp_path / "no-engine.sock")
    proc.send_signal(signal.SIGTERM)
    rest = _read_stderr_until(proc, "docker-proxy stopped")
    assert proc.wait(timeout=60) == 0, rest  # before: -15 (ended by the signal)


def test_sigterm_lets_the_turn_in_flight_finish(tmp_path: Path) -> None:
    engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    engine.bind(str(tmp_path / "engine.sock"))
    engine.listen(1)
    asked, answer = threading.Event(), threading.Event()

    def _engine() -> None:
        conn, _ = engine.accept()
        with conn, contextlib.suppress(OSError):  # before the fix: the proxy was gone
            conn.recv(65536)  # GET /swarm (no body)
            asked.set()
            answer.wait()
            body = json.dumps({"ID": "swarm1", "JoinTokens": {"Worker": "x"}}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    threading.Thread(target=_engine, daemon=True).start()
    proc, listen = _start_proxy(tmp_path, tmp_path / "engine.sock")
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(listen))
        client.sendall(b"GET /swarm HTTP/1.1\r\nHost: docker\r\n\r\n")
        assert asked.wait(60), "the proxy never asked the engine"
        proc.send_signal(signal.SIGTERM)
        said = _read_stderr_until(proc, "docker-proxy stopping")
        assert "docker-proxy stopping" in said, said
        answer.set()  # the engine answers only now, the proxy told to stop
        got = b""
        client.settimeout(60)
        while chunk := client.recv(65536):
            got += chunk
        client.close()
    finally:
        answer.set()
    assert got.startswith(b"HTTP/1.1 200 "), got  # before: b"" (the proxy was gone)
    assert b'"ID": "swarm1"' in got and b"JoinTokens" not in got, got
    rest = _read_stderr_until(proc, "docker-proxy stopped")
    assert proc.wait(timeout=60) == 0, said + rest
    engine.close()


def test_the_signal_handlers_are_set_before_the_socket_exists(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM once the proxy listens exits 0: the handlers were set after the bind and
    the "docker-proxy on" line, so a stop in between (``docker stack rm`` just after a
    deploy; the test above under load) ended it by the signal, -15. The bind is stood in
    for, and what SIGTERM would do at that moment read."""
    from swarmgpu.swarm import dockerproxy

    seen: list[object] = []

    class _Stop(Exception):
        pass

    def bind(*_args: object, **_kw: object) -> None:
        seen.append(signal.getsignal(signal.SIGTERM))
        raise _Stop

    monkeypatch.setattr(dockerproxy, "build_proxy", bind)
    monkeypatch.setattr(dockerproxy, "few_heaps", lambda: None)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(_Stop):
            dockerproxy.serve("unix:///nonexistent/p.sock", "unix:///nonexistent/e.sock", {})
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert seen and seen[0] not in (signal.SIG_DFL, handlers[signal.SIGTERM]), seen
