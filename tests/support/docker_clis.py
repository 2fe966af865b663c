"""Every docker CLI on this machine, and what each deploys from a stack file.

Users deploy with whatever docker CLI they have: Debian 12's 20.10 reads stacks with
go-yaml v2, docker 28 and later with v3, and 20.10 has no ``docker stack config``. So
the oracle is ``docker stack deploy`` itself, against a stand-in engine on a Unix socket
(``Engine``) that says it is a swarm manager and records the service specs, configs
and secrets the CLI creates: what Swarm would be given, from either CLI, with no daemon.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socketserver
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from support.serving import served

# Where Debian's docker.io and Docker's static CLI install; PATH is looked at too.
PLACES = ("/usr/bin/docker", "/usr/local/bin/docker")


def docker_clis() -> list[tuple[str, str]]:
    """(path, version) of each docker CLI found in PLACES or on PATH, one per resolved
    path and version."""
    found: dict[tuple[str, str], str] = {}
    for place in (*PLACES, shutil.which("docker")):
        if not place or not os.access(place, os.X_OK):
            continue
        res = subprocess.run(
            [place, "--version"], capture_output=True, text=True, check=False, timeout=30
        )
        if res.returncode != 0:
            continue
        version = res.stdout.split("version", 1)[-1].split(",", 1)[0].strip()
        found.setdefault((os.path.realpath(place), version), place)
    return [(path, version) for (_, version), path in found.items()]


def major(version: str) -> int:
    return int(version.split(".", 1)[0])


class Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    created: list[dict[str, Any]]  # each POST /services/create body
    objects: list[tuple[str, dict[str, Any]]]  # ("configs" or "secrets", each create's body)


class _Handler(BaseHTTPRequestHandler):
    """Answers as a swarm manager with no networks and no services; records creates."""

    server: Engine
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, code: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Api-Version", "1.41")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith("/_ping"):
            self._answer(200, b"OK")
        elif re.search(r"/(configs|secrets)/[^/]+$", path):
            self._answer(404, {"message": "not found"})  # none yet: the CLI creates it
        elif path.endswith("/info"):
            self._answer(
                200,
                {"Swarm": {"ControlAvailable": True, "NodeID": "n1", "LocalNodeState": "active"}},
            )
        elif m := re.search(r"/(configs|secrets)$", path):
            # the ones created, which the CLI then looks up by name
            made = [o for kind, o in self.server.objects if kind == m.group(1)]
            self._answer(200, [{"ID": o["Name"], "Spec": o} for o in made])
        else:
            self._answer(200, [])  # networks, services: none yet

    do_HEAD = do_GET

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        if path.endswith("/services/create"):
            self.server.created.append(json.loads(body))
        elif m := re.search(r"/(configs|secrets)/create$", path):
            self.server.objects.append((m.group(1), json.loads(body)))
        self._answer(201, {"ID": "x", "Id": "x"})


@contextmanager
def engine() -> Iterator[Engine]:
    """A stand-in engine serving in a thread (its socket in a short /tmp path: a Unix
    socket's path is at most 107 bytes)."""
    folder = tempfile.mkdtemp(prefix="sgdk")
    server = Engine(os.path.join(folder, "d.sock"), _Handler)
    server.created = []
    server.objects = []
    try:
        with served(server):
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def deployed(
    cli: str, server: Engine, text: str, tmp_path: Path, *, stdin_in: Path | None = None
) -> tuple[Any, str]:
    """The spec ``cli`` creates for the stack ``text``'s one service (stack ``t``), or
    None and the CLI's error. ``stdin_in``: read with ``-c -`` from stdin, docker run in
    that folder (``swarmgpu render | docker stack deploy -c -``); else the file
    tmp_path/s.yml."""
    path = tmp_path / "s.yml"
    if stdin_in is None:
        path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["DOCKER_CONFIG"] = str(tmp_path)  # never the user's contexts
    server.created.clear()
    server.objects.clear()
    res = subprocess.run(
        [
            cli,
            "-H",
            f"unix://{server.server_address}",
            "stack",
            "deploy",
            "--resolve-image",
            "never",
            "-c",
            str(path) if stdin_in is None else "-",
            "t",
        ],
        input=None if stdin_in is None else text,
        cwd=stdin_in,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if res.returncode != 0:
        return None, res.stderr.strip()
    (spec,) = server.created
    return spec, ""
