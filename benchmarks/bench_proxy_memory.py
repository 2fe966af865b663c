"""Peak memory of `swarmgpu docker-proxy` under a hostile daemon's maximal requests.

The stack gives the proxy 128 MiB (stacks/swarmgpu.yml); an OOM kill restarts it and
empties its surge book (swarmgpu/swarm/surges.py), one more replica per restart. Here
the proxy runs as its own process (its RSS is its own) in front of the tests' stand-in
engine (tests/support/engine_stub.py), and ``--clients`` connections at once (default:
the proxy's MAX_CONNECTIONS) each send one request built to take the most memory:

- ``dicts``, ``lists``, ``keys``, ``floats``: a swarm update whose body, just under
  MAX_BODY_BYTES, is a spec with one more key holding ``[{},{},...]``, ``[[],[],...]``,
  ``{"k0":0,"k1":0,...}`` or ``[0.5,0.5,...]`` (what expands most once parsed, and
  once more in the write check's deep copy); ``load_json`` refuses these from their
  text (more than MAX_JSON_VALUES values and keys);
- ``dicts-at-limit`` and so on: as many of those items as ``load_json`` parses, the
  rest of the body one string that takes 4 bytes a character in Python;
- ``swarm-read``: ``GET /swarm`` (the proxy reads the answer whole and parses it to
  drop the join tokens).

In each, the swarm spec the writes are checked against (and GET /swarm answers) holds
as many short labels under the prefix as one write the proxy lets through can set.

The proxy runs as ``swarmgpu docker-proxy`` does (``serve``); ``--glibc-heaps``: without
its ``few_heaps`` (glibc's default, a malloc heap per thread that allocates while
another does, up to 8 per core), a checkout from before it: as it was.
Each shape runs in a fresh proxy process; printed: its RSS at rest after one request of
each kind (VmRSS), its peak during the attack (VmHWM, from /proc), and the answers'
status codes.

    python benchmarks/bench_proxy_memory.py [--clients 32] [--shapes dicts,keys]
"""

from __future__ import annotations

import argparse
import collections
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout, not an installed one

from support.engine_stub import start_engine  # noqa: E402

from swarmgpu.swarm import dockerproxy, jsonstrict  # noqa: E402
from swarmgpu.swarm.dockerproxy import MAX_CONNECTIONS  # noqa: E402
from swarmgpu.swarm.httpframe import MAX_BODY_BYTES  # noqa: E402

# The same bodies against a checkout from before the bound (git worktree): its figure.
MAX_JSON_VALUES = getattr(jsonstrict, "MAX_JSON_VALUES", 100_000)
load_json = jsonstrict.load_json

_CHILD = """\
import sys
from swarmgpu.manager.engine.proxy_policy import write_checks
from swarmgpu.swarm import dockerproxy
if sys.argv[3] == "glibc":
    dockerproxy.few_heaps = lambda: None
dockerproxy.serve("unix://" + sys.argv[1], "unix://" + sys.argv[2], write_checks("swarmgpu."))
"""
SHAPES = (
    "dicts",
    "lists",
    "keys",
    "floats",
    "dicts-at-limit",
    "lists-at-limit",
    "keys-at-limit",
    "floats-at-limit",
    "swarm-read",
)
_ITEM = {"dicts": "{}", "lists": "[]", "floats": "0.5"}


def _key(i: int) -> str:
    """A short key no other index has (base 62)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ""
    while True:
        i, r = divmod(i, 62)
        out += digits[r]
        if not i:
            return out


def hostile_body(shape: str, limit: int = MAX_BODY_BYTES) -> bytes:
    """A swarm spec with one key more holding items of ``shape``: as many as fill the
    body to ``limit`` bytes, or (``...-at-limit``) as many as ``load_json`` parses
    (MAX_JSON_VALUES), the rest of the body one string that is 4 bytes a character
    in Python (one character outside the BMP)."""
    kind, _, at_limit = shape.partition("-")
    head = b'{"Name": "default", "Labels": {}, "X": '
    room = limit - len(head) - 2
    # Each item opens a container or names a key, and is separated: 2 counted (floats 1).
    budget = (MAX_JSON_VALUES - 20) // (1 if kind == "floats" else 2) if at_limit else room
    parts: list[str] = []
    size = 0
    while len(parts) < budget:
        part = f'"{_key(len(parts))}":0' if kind == "keys" else _ITEM[kind]
        if size + len(part) + 1 > room:
            break
        parts.append(part)
        size += len(part) + 1
    inner = ("{%s}" if kind == "keys" else "[%s]") % ",".join(parts)
    body = head + inner.encode()
    if at_limit:
        pad = limit - len(body) - len(b', "P": ""}') - 4
        body += b', "P": "' + b"a" * pad + "\U0001f600".encode() + b'"'
    body += b"}"
    assert len(body) <= limit, len(body)
    return body


def swarm_labels(limit: int = MAX_BODY_BYTES) -> dict[str, str]:
    """Short labels under the prefix: as many as one write the proxy lets through holds
    (``limit`` bytes, MAX_JSON_VALUES values and keys)."""
    labels: dict[str, str] = {}
    size = 0
    while size < limit - 100 and len(labels) < MAX_JSON_VALUES // 2 - 20:
        key = f"swarmgpu.{_key(len(labels))}"
        labels[key] = ""
        size += len(key) + 7
    load_json(json.dumps({"Name": "default", "Labels": labels}).encode())
    return labels


def _request(path: str, raw: bytes, out: list[bytes]) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(120)
        while True:
            try:
                s.connect(path)
                break
            except BlockingIOError:  # the listen backlog is full: as a client retries
                time.sleep(0.01)
        try:
            s.sendall(raw)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        except OSError as exc:
            got = f"error {exc}".encode()
        out.append(got[:12])


def _status(path: str) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB."""
    fields = dict(line.split(":", 1) for line in Path(path).read_text().splitlines())
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM")}


def write_request(body: bytes) -> bytes:
    return (
        b"POST /v1.43/swarm/update?version=7 HTTP/1.1\r\nHost: d\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


_READ = b"GET /v1.43/swarm HTTP/1.1\r\nHost: d\r\n\r\n"


def _wait_listening(path: str, child: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        if child.poll() is not None:
            raise SystemExit(f"the proxy exited with {child.returncode}")
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(path)
                return
            except OSError:
                time.sleep(0.1)
    raise SystemExit("the proxy did not listen within 30 s")


def run(shape: str, clients: int, heaps: str) -> tuple[dict[str, int], dict[str, int], float, str]:
    """(status at rest, status after the attack, its wall s, the answers) of one shape."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = start_engine(f"{tmp}/engine.sock")
        proxy = f"{tmp}/proxy.sock"
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, proxy, f"{tmp}/engine.sock", heaps],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
        )
        try:
            _wait_listening(proxy, child)
            warm: list[bytes] = []  # every code path the attack takes, loaded
            ok = json.dumps(engine.swarm["Spec"]).encode()
            for raw in (write_request(ok), _READ, write_request(b'{"X": [0.5]}')):
                _request(proxy, raw, warm)
            time.sleep(0.3)
            rest = _status(f"/proc/{child.pid}/status")
            # The spec a write is checked against, and GET /swarm's answer: the largest
            # the daemon can write there.
            engine.swarm["Spec"]["Labels"] = swarm_labels()
            if shape == "swarm-read":
                raw = _READ
            else:
                body = hostile_body(shape)
                if shape.endswith("-at-limit"):
                    load_json(body)  # parsed, not refused: the worst the proxy parses
                raw = write_request(body)
            answers: list[bytes] = []
            threads = [
                threading.Thread(target=_request, args=(proxy, raw, answers))
                for _ in range(clients)
            ]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.perf_counter() - t0
            peak = _status(f"/proc/{child.pid}/status")
        finally:
            child.kill()
            child.wait()
            engine.shutdown()
            engine.server_close()
    codes = collections.Counter(
        a.split(b" ")[1].decode() if a.startswith(b"HTTP/") else "cut" for a in answers
    )
    return rest, peak, took, ", ".join(f"{n}x {c}" for c, n in sorted(codes.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=MAX_CONNECTIONS)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--glibc-heaps", action="store_true", help="without few_heaps")
    args = ap.parse_args()
    few = not args.glibc_heaps and hasattr(dockerproxy, "few_heaps")
    heaps = "few" if few else "glibc"
    print(
        f"{args.clients} clients at once, bodies <= {MAX_BODY_BYTES} bytes, "
        f"{'two' if few else 'glibc default'} malloc heaps; RSS in MiB"
    )
    for shape in args.shapes.split(","):
        rest, peak, took, codes = run(shape, args.clients, heaps)
        print(
            f"{shape:15s}: at rest {rest['VmRSS'] / 1024:6.1f}, peak {peak['VmHWM'] / 1024:6.1f}"
            f" ({took:5.1f} s; answers {codes})",
            flush=True,
        )


if __name__ == "__main__":
    main()
