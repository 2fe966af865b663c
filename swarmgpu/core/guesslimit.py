"""Wrong tokens per client: a token bucket per address, in bounded memory.

A bearer token opens what a server keeps from strangers (the daemon's map and API, its
sign-in form; an agent's ``/metrics``, or all of it in token mode), so a client may not
try tokens without end. Both HTTP servers use this one limit:

* each client (an IPv4 address; an IPv6 /64, what one host is handed) may try BURST
  tokens at once, then one more every REFILL_S seconds. A try is taken from its bucket
  before the token is compared (a client's parallel connections cannot all slip in
  while the first wrong answers are still being counted) and given back when the token
  was right: only wrong tokens use the bucket up;
* once it is empty, a request of that client that carries a token is answered 429 with
  ``Retry-After`` and its token is not compared: the right one neither, or the answer
  would tell a guesser which guess was right. Its other proof (a manager certificate,
  the daemon's session cookie) still answers, and other clients are not touched;
* at most MAX_CLIENTS buckets are kept: a full one is forgotten (it holds nothing a
  fresh one would not), and while that many are still filling, further clients share
  one bucket: a guesser with many addresses is limited together, in bounded memory;
* a client that sent the right token (``give_back(.., proved=True)``) is remembered,
  at most MAX_PROVED of them, the longest unproved forgotten first: it keeps a bucket of
  its own even while the table is full, so a guesser's addresses never push the daemon
  scraping an agent, or Prometheus, into the shared bucket they empty (only a guess
  from its own address counts against it);
* the log names a client once when it runs out, and again only after its bucket
  filled up (at most one line per 10 s, with a count: a flood from many addresses is
  a line, not a line each).
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from swarmgpu.core.httpguard import Throttle

BURST = 10  # wrong tokens a client may send at once (a few typos, a stale Prometheus)
REFILL_S = 6.0  # then one more every this many seconds: ten a minute
MAX_CLIENTS = 4096  # buckets kept; past them new clients share OTHERS
MAX_PROVED = 64  # clients remembered for a right token: a bucket of their own always
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
    """The buckets of every client that sent a token lately (thread-safe). ``server``
    names the server in its log line (the daemon's "HTTP", "agent")."""

    def __init__(self, burst: int = BURST, refill_s: float = REFILL_S,
                 max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic, *,
                 server: str = "HTTP", max_proved: int = MAX_PROVED) -> None:
        self.burst = burst
        self.refill_s = refill_s
        self.max_clients = max_clients
        self.max_proved = max_proved
        self.server = server
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        # Clients that sent the right token, the last to do so last: never in OTHERS.
        self._proved: OrderedDict[str, None] = OrderedDict()
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
                "{}: {} sent {} wrong tokens: its tokens are answered 429 for {} s, then "
                "one try every {:g} s (its other proof, a certificate or a session, still "
                "answers); {} client(s) ran out since the last such line", self.server,
                key, self.burst, wait, self.refill_s, n)
        return Try(key, wait)

    def give_back(self, t: Try, proved: bool = False) -> None:
        """The token of ``t`` was right (or none was compared): its try is returned.
        ``proved``: it was compared and right, so its client keeps a bucket of its own
        from now on (see the module docstring)."""
        now = self._clock()
        with self._lock:
            b = self._buckets.get(t.key)
            if b is not None:
                self._fill(b, now)
                b.level = min(float(self.burst), b.level + 1)
            if proved and t.key != OTHERS:
                self._proved[t.key] = None
                self._proved.move_to_end(t.key)
                while len(self._proved) > self.max_proved:
                    self._proved.popitem(last=False)

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
        is room or the client proved itself, else the one all further clients share."""
        b = self._buckets.get(key)
        if b is None and len(self._buckets) >= self.max_clients and key not in self._proved:
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
