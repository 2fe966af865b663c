"""A write sent through ``swarmgpu docker-proxy`` to the engine stand-in
(tests/support/engine_stub.py): the proxy's answer, and the requests the engine saw.

First written in tests/test_wrong_object_answers.py and
tests/test_id_shaped_references.py."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

from support.engine_stub import start_engine
from swarmgpu.manager.engine.proxy_policy import write_checks
from swarmgpu.swarm.dockerproxy import build_proxy


def proxy_write(tmp_path: Path, path: bytes, body: Any, setup: Any = None,
                own_service: str | None = None) -> tuple[bytes, list[bytes]]:
    """A POST of ``body`` to ``path`` through a proxy whose own service is
    ``own_service``, to the stand-in (``setup`` edits it first): the answer, and the
    requests the engine saw. Its sockets lie in ``tmp_path``."""
    engine = start_engine(str(tmp_path / "engine.sock"))
    if setup is not None:
        setup(engine)
    sock = tmp_path / "proxy.sock"
    srv = build_proxy(f"unix://{sock}", f"unix://{tmp_path / 'engine.sock'}",
                      write_checks("swarmgpu."), own_service)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(sock))
            s.sendall(post(path, body))
            got = b""
            while chunk := s.recv(4096):
                got += chunk
    finally:
        srv.shutdown()
        srv.server_close()
        engine.shutdown()
        engine.server_close()
    return got, engine.seen


def post(path: bytes, body: Any) -> bytes:
    """The POST of ``body`` as JSON to ``path``, at version 3 for a service (the
    stand-in's) and 7 otherwise."""
    data = json.dumps(body).encode()
    return (b"POST /v1.43%s?version=%d HTTP/1.1\r\nHost: d\r\nContent-Type: application/json"
            b"\r\nContent-Length: %d\r\n\r\n%s" % (path, 3 if b"services" in path else 7,
                                                   len(data), data))
