"""A slow-connection flood (slowloris) against one loopback port, for tests and benchmarks.

Each source address holds ``per_source`` connections; each sends half a request head and
then nothing. With ``--complete PATH`` each sends a whole request instead (with any
``--header``) and never reads the answer, its receive buffer shrunk (``--rcvbuf``): slow
readers, whose answers wait in the server's send buffer. A connection the server closes
is opened again at once, as a real attacker would, so the server stays as full as the
attacker can make it. It runs in its own process (a flood in the server's process would
fight it for the GIL, which no real attacker does) and ends by itself after ``--for-s``
seconds.

    python tests/support/slowflood.py PORT --sources 127.0.0.20-29 --per-source 40 [--for-s 60]

Prints ``ready N`` once each connection was tried once (N of them open), then, at the
end, ``reopened N failed N`` (connects that did not go through within a second).
"""

from __future__ import annotations

import argparse
import contextlib
import select
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HALF_HEAD = b"GET /facts HTTP/1.1\r\nHost: x\r\nX-a: "


def sources(spec: str) -> list[str]:
    """``127.0.0.20-29`` -> ten addresses; ``127.0.0.1`` -> one; comma-separated lists."""
    out: list[str] = []
    for part in spec.split(","):
        base, _, last = part.rpartition(".")
        lo, _, hi = last.partition("-")
        out += [f"{base}.{n}" for n in range(int(lo), int(hi or lo) + 1)]
    return out


def _open(target: str, port: int, src: str, head: bytes = HALF_HEAD, rcvbuf: int = 0
          ) -> socket.socket | None:
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:  # before connect: the window the server sees
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(1.0)
        s.bind((src, 0))
        s.connect((target, port))
        s.sendall(head)
        s.setblocking(False)
        return s
    except OSError:
        with contextlib.suppress(Exception):
            s.close()
        return None


def complete_head(path: str, headers: list[str], host: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", *headers, "", ""]
    return "\r\n".join(lines).encode()


# The peer closed (an answer and FIN read into the small buffer, an eviction, a reset):
# seen without reading, so an answer that is not read stays unread.
_GONE = select.POLLRDHUP | select.POLLHUP | select.POLLERR


def flood_unread(target: str, port: int, srcs: list[str], per_source: int, for_s: float,
                 head: bytes, rcvbuf: int, renew_s: float = 0.0) -> tuple[int, int]:
    """Complete requests whose answers are never read; a connection the server closes
    is opened again at once, and with ``renew_s`` every connection is replaced by a new
    one after that long (a server that drops a stuck answer sends no FIN while the
    answer waits: this keeps the pressure on). (reopened, failed connects)."""
    poll = select.poll()
    end = time.monotonic() + for_s
    missing = [src for src in srcs for _ in range(per_source)]
    conns: dict[int, tuple[socket.socket, str]] = {}
    born: dict[int, float] = {}
    reopened = failed = 0
    announced = False
    while time.monotonic() < end:
        still: list[str] = []
        for src in missing:
            s = _open(target, port, src, head, rcvbuf)
            if s is None:
                failed += 1
                still.append(src)
                continue
            conns[s.fileno()] = (s, src)
            born[s.fileno()] = time.monotonic()
            poll.register(s, _GONE)
        missing = still
        if not announced:
            print(f"ready {len(conns)}", flush=True)
            announced = True
        gone = [fd for fd, _ in poll.poll(50 if missing else 100)]
        if renew_s:
            old = time.monotonic() - renew_s
            gone += [fd for fd, t in born.items() if t < old and fd not in gone]
        for fd in gone:
            s, src = conns.pop(fd)
            born.pop(fd, None)
            poll.unregister(fd)
            s.close()
            reopened += 1
            missing.append(src)
    for s, _ in conns.values():
        s.close()
    return reopened, failed


def flood(target: str, port: int, srcs: list[str], per_source: int, for_s: float
          ) -> tuple[int, int]:
    """Hold the connections until ``for_s`` has passed; (reopened, failed connects)."""
    sel = selectors.DefaultSelector()
    end = time.monotonic() + for_s
    missing = [src for src in srcs for _ in range(per_source)]
    held = 0
    reopened = failed = 0
    announced = False
    while time.monotonic() < end:
        still: list[str] = []
        for src in missing:
            s = _open(target, port, src)
            if s is None:
                failed += 1
                still.append(src)
                continue
            sel.register(s, selectors.EVENT_READ, src)
            held += 1
        missing = still
        if not announced:
            print(f"ready {held}", flush=True)
            announced = True
        for key, _ in sel.select(timeout=0.05 if missing else 0.2):
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            with contextlib.suppress(OSError):
                if conn.recv(4096):
                    continue  # an answer (431, 503...): the server closes next
            sel.unregister(conn)
            conn.close()
            held -= 1
            reopened += 1
            missing.append(key.data)
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    return reopened, failed


def start(port: int, srcs: str, per_source: int, for_s: float = 60.0,
          target: str = "127.0.0.1", complete: str | None = None,
          headers: tuple[str, ...] = (), rcvbuf: int = 0, renew_s: float = 0.0,
          launch: Callable[..., subprocess.Popen[str]] | None = None
          ) -> subprocess.Popen[str]:
    """The flood in a child process, returned once every connection is open (or after
    10 s, when the server would not take them all). ``launch(argv, **popen_kwargs)``
    starts it elsewhere (another network namespace); default: here."""
    extra = ["--complete", complete] if complete else []
    for h in headers:
        extra += ["--header", h]
    if rcvbuf:
        extra += ["--rcvbuf", str(rcvbuf)]
    if renew_s:
        extra += ["--renew-s", str(renew_s)]
    proc = (launch or subprocess.Popen)(
        [sys.executable, str(Path(__file__).resolve()), str(port), "--sources", srcs,
         "--per-source", str(per_source), "--for-s", str(for_s), "--target", target,
         *extra], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.select(timeout=10.0)  # "ready N" or nothing yet; the flood runs either way
    sel.close()
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--sources", default="127.0.0.2")
    ap.add_argument("--per-source", type=int, default=40)
    ap.add_argument("--for-s", type=float, default=60.0)
    ap.add_argument("--target", default="127.0.0.1")
    ap.add_argument("--complete", metavar="PATH", help="whole requests, answers never read")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--rcvbuf", type=int, default=0)
    ap.add_argument("--renew-s", type=float, default=0.0)
    args = ap.parse_args()
    if args.complete:
        reopened, failed = flood_unread(args.target, args.port, sources(args.sources),
                                        args.per_source, args.for_s,
                                        complete_head(args.complete, args.header, args.target),
                                        args.rcvbuf, args.renew_s)
    else:
        reopened, failed = flood(args.target, args.port, sources(args.sources),
                                 args.per_source, args.for_s)
    print(f"reopened {reopened} failed {failed}", flush=True)


if __name__ == "__main__":
    main()
