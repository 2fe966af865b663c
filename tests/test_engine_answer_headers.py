"""Each request to the engine, its answer's headers included, ends within the deadline
its body has (``answerjson.ANSWER_DEADLINE_TIMEOUTS`` times the client's timeout):
docker-py's timeout bounds each read of the socket and http.client the headers' size,
not their time, so an engine (or a proxy in front of it) that sent its headers a byte at
a time, each within that timeout, held its reader (the daemon's cycle) without end. Past
the deadline the connection's socket is shut down and the request refused
(``AnswerTooSlow``) naming the read, the deadline and the fix; that connection is not
used again, one answered in time goes back to the pool. A streamed request (events) is
bounded so up to its headers only. Real docker-py clients against an engine on loopback
(tcp, and a unix socket) sending headers slowly, deadlines cut short for the test."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import docker
import pytest

from swarmgpu.swarm import answerjson
from swarmgpu.swarm.answerjson import AnswerTooSlow, strict_api
from tests.support.loop_engine import (
    SlowHeaders,
    Trickled,
    loop_engine,
    refused_in_time,
    tasks_refused,
)

# (some 260 header bytes at 20 ms: 5 s whole, where the deadline set below is 0.5 s)
SLOW = SlowHeaders(b"[]", 0.02)
HEADER_BYTES = 250  # (fewer than its headers' bytes)


def api_at(base_url: str, timeout: float = 1) -> Any:
    return strict_api(partial(docker.APIClient, base_url=base_url, timeout=timeout))


def test_headers_trickled_past_the_deadline_are_refused_naming_the_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    # (cut at the deadline, not after its 5 s of headers: fewer bytes sent than them)
    tasks_refused(SLOW, r"answer to GET /tasks was not read whole within 0.5 s \(its "
                  r"headers did not come whole", HEADER_BYTES)


def test_a_connection_cut_at_its_deadline_is_not_used_again_one_in_time_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    with loop_engine({"/tasks": SLOW}) as engine:
        api = api_at(f"tcp://127.0.0.1:{engine.server_port}")  # (GET /version: one)
        api.info()
        assert engine.connections == 1  # (back in the pool, used again)
        with pytest.raises(AnswerTooSlow, match=r"GET /tasks .* within 0.5 s"):
            api.tasks()
        api.info()
        api.info()
        assert engine.connections == 2  # (the cut one not used again; the new one is)


def test_a_unix_socket_engines_headers_trickled_are_refused_too(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    path = str(tmp_path / "docker.sock")
    with loop_engine({"/info": SLOW}, unix=path) as engine:
        refused_in_time(engine, api_at(f"unix://{path}").info, AnswerTooSlow,
                        r"GET /info was not read whole within 0.5 s", HEADER_BYTES)


def test_a_tls_engines_headers_trickled_are_refused_too(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make the test's certificate")
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # (requests takes them first)
        monkeypatch.delenv(name, raising=False)
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                    "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with loop_engine({"/info": SLOW}, tls=context) as engine:
        api = strict_api(partial(docker.APIClient, timeout=1, tls=docker.tls.TLSConfig(
                                     ca_cert=str(cert), verify=True),
                                 base_url=f"https://127.0.0.1:{engine.server_port}"))
        refused_in_time(engine, api.info, AnswerTooSlow,
                        r"GET /info was not read whole within 0.5 s", HEADER_BYTES)


def test_a_stream_is_bounded_to_its_headers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.2)
    lines = b'{"Type": "node", "Action": "update"}\n' * 2  # (some 1.5 s, past 0.2 s)
    with loop_engine({"/events": Trickled(lines, 0.02)}) as engine:
        api = api_at(f"tcp://127.0.0.1:{engine.server_port}")
        # (as docker-py's own calls stream, within the client's timeout: its events() asks
        # none, so a stream's deadline is 120 s)
        response = api._get(api._url("/events"), stream=True)
        assert b"".join(api._stream_helper(response)) == lines  # (whole: not cut)


def test_a_streams_headers_trickled_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.5)
    with loop_engine({"/events": SLOW}) as engine:
        api = api_at(f"tcp://127.0.0.1:{engine.server_port}")
        with pytest.raises(AnswerTooSlow, match=r"GET /events .* headers did not come"):
            api._get(api._url("/events"), stream=True)


def test_a_deadline_passing_after_the_answer_was_read_whole_cuts_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its connection is back in the pool once the body is read: another request (another
    # thread's) may hold it by then, so a timer firing late must leave its socket alone.
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 0.2)
    with loop_engine({"/info": b'{"ID": "x"}'}) as engine:
        api = api_at(f"tcp://127.0.0.1:{engine.server_port}")
        api.hooks["response"].append(lambda response, **_: time.sleep(0.5))  # (past it)
        assert api.info() == {"ID": "x"}  # (read whole in time: not refused)
        api.hooks["response"].pop()
        api.info()
        assert engine.connections == 1  # (its connection left open, used again)


def test_a_late_deadline_leaves_the_next_request_on_its_connection_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A's answer read whole by 1.5 s, its deadline 4 s; B takes A's connection back from
    # the pool at 1.5 s and reads till 4.5 s, its own deadline 5.5 s: A's must not cut B.
    monkeypatch.setattr(answerjson, "ANSWER_DEADLINE_TIMEOUTS", 2.0)
    with loop_engine({"/info": Trickled(b'"' + b"a" * 28 + b'"', 0.05),
                      "/tasks": Trickled(b"[" + b" " * 58 + b"]", 0.05)}) as engine:
        api = api_at(f"tcp://127.0.0.1:{engine.server_port}", timeout=2)
        read = threading.Event()

        def slow_after(response: Any, **_: Any) -> None:
            if threading.current_thread().name == "A":
                read.set()
                time.sleep(4.5)  # (past A's deadline, its connection in B's hands)

        api.hooks["response"].append(slow_after)
        got: dict[str, Any] = {}
        a = threading.Thread(target=lambda: got.update(a=api.info()), name="A")
        a.start()
        assert read.wait(5)
        assert api.tasks() == []  # (B: not cut by A's timer)
        a.join(10)
        assert got == {"a": "a" * 28}
        assert engine.connections == 1  # (one connection, A's then B's)
