"""Wrong tokens per client: a token bucket per address, in bounded memory.

The bearer token (``Authorization``) and the sign-in form's token open the map and the
API from anywhere, so a client may not try them without end:

* each client (an IPv4 address; an IPv6 /64, what one host is handed) may try BURST
  tokens at once, then one more every REFILL_S seconds. A try is taken from its bucket
  before the token is compared (a client's parallel connections cannot all slip in
  while the first wrong answers are still being counted) and given back when the token
  was right: only wrong tokens use the bucket up;
* once it is empty, a request of that client that carries a token is answered 429 with
  ``Retry-After`` and its token is not compared: the right one neither, or the answer
  would tell a guesser which guess was right. Its session cookie, a manager
  certificate and ``/healthz`` still answer, and other clients are not touched;
* at most MAX_CLIENTS buckets are kept: a full one is forgotten (it holds nothing a
  fresh one would not), and while that many are still filling, further clients share
  one bucket: a guesser with many addresses is limited together, in bounded memory;
* the log names a client once when it runs out, and again only after its bucket
  filled up (at most one line per 10 s, with a count: a flood from many addresses is
  a line, not a line each).
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from swarmgpu.core.httpguard import Throttle

BURST = 10  # wrong tokens a client may send at once (a few typos, a stale Prometheus)
REFILL_S = 6.0  # then one more every this many seconds: ten a minute
MAX_CLIENTS = 4096  # buckets kept; past them new clients share OTHERS
OTHERS = "other addresses"
PURGE_EVERY_S = 1.0  # a full table is swept for full buckets at most this often


def client_key(ip: str) -> str:
    """The client a bucket is kept for: the IPv4 address (an IPv4-mapped IPv6 one as
    IPv4), the /64 of an IPv6 address (one host gets a whole /64), else the text."""
    try:
        addr = ipaddress.ip_address(ip.strip("[]"))
    except ValueError:
        return ip[:64]
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)


@dataclass
class _Bucket:
    level: float  # tries left (BURST when full)
    at: float  # when ``level`` was last brought up to date
    limited: bool = False  # ran out, said in the log; cleared once it is full again


@dataclass(frozen=True)
class Try:
    """A token try: taken (``wait_s`` 0; ``give_back`` when the token was right, or
    none was compared), or refused for ``wait_s`` seconds (nothing taken)."""

    key: str
    wait_s: int


class GuessLimit:
    """The buckets of every client that sent a token lately (thread-safe)."""

    def __init__(self, burst: int = BURST, refill_s: float = REFILL_S,
                 max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.refill_s = refill_s
        self.max_clients = max_clients
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._swept_at = -math.inf
        self._said = Throttle()
        self.refused_total = 0  # tries answered 429

    def take(self, ip: str) -> Try:
        """One token try for the client at ``ip``, or how long it must wait."""
        now = self._clock()
        with self._lock:
            key, b = self._bucket(client_key(ip), now)
            if b.level >= 1:
                b.level -= 1
                return Try(key, 0)
            self.refused_total += 1
            wait = max(1, math.ceil((1 - b.level) * self.refill_s))
            newly, b.limited = not b.limited, True
        if newly and (n := self._said.due()):
            logger.warning(
                "HTTP: {} sent {} wrong tokens: its tokens are answered 429 for {} s, then "
                "one try every {:g} s (a session cookie or a manager certificate still "
                "answer); {} client(s) ran out since the last such line", key, self.burst,
                wait, self.refill_s, n)
        return Try(key, wait)

    def give_back(self, t: Try) -> None:
        """The token of ``t`` was right (or none was compared): its try is returned."""
        now = self._clock()
        with self._lock:
            b = self._buckets.get(t.key)
            if b is not None:
                self._fill(b, now)
                b.level = min(float(self.burst), b.level + 1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._buckets)

    def _fill(self, b: _Bucket, now: float) -> None:
        b.level = min(float(self.burst), b.level + max(0.0, now - b.at) / self.refill_s)
        b.at = now
        if b.level >= self.burst:
            b.limited = False

    def _bucket(self, key: str, now: float) -> tuple[str, _Bucket]:
        """The bucket of ``key``, brought up to date (lock held): a new one while there
        is room, else the one all further clients share."""
        b = self._buckets.get(key)
        if b is None and len(self._buckets) >= self.max_clients:
            self._sweep(now)
            if len(self._buckets) >= self.max_clients:
                key = OTHERS
                b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(float(self.burst), now)
        self._fill(b, now)
        return key, b

    def _sweep(self, now: float) -> None:
        """Forget the full buckets, at most every PURGE_EVERY_S (lock held): a table
        of buckets still filling is not walked for every request of a flood."""
        if now - self._swept_at < PURGE_EVERY_S:
            return
        self._swept_at = now
        for key, b in list(self._buckets.items()):
            if key != OTHERS:
                self._fill(b, now)
                if b.level >= self.burst:
                    del self._buckets[key]
