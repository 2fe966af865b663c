"""Large answers gzipped for a client that takes it (``Accept-Encoding``).

At 5,000 nodes the whole cluster document is about 25 MB of JSON, which the page polls
every 2.5 s and gives up on after 4 s (app.js TIMEOUT_MS), and which the daemon stops
writing after 10 s (httpguard.WRITE_DEADLINE_S): a link slower than 50 Mbit/s never drew
the map. Gzipped it is about a tenth. A body is compressed once however many pages poll
it: the routes hand out the same bytes object while the document is the same
(webmap's memo), and the last few are kept here by identity.

The documents hold no secret a chosen text beside it could reveal through the
compressed length (BREACH): no token, no session; the cookie is never in an answer.
"""

from __future__ import annotations

import gzip
import re
import threading

# Below this, headers and the gzip frame cost about what they save.
MIN_BYTES = 16 * 1024
LEVEL = 6
KEPT = 3  # bodies remembered: the whole document, the light one, one more
_CODING = re.compile(r"\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*(?:;\s*q\s*=\s*([0-9.]{1,5})\s*)?")


def _q(text: str | None) -> float | None:
    """A qvalue (RFC 9110 12.4.2: 0 to 1, three decimals at most); None if malformed."""
    if text is None:
        return 1.0
    if not re.fullmatch(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?", text):
        return None
    return float(text)


def accepts_gzip(header: str | None) -> bool:
    """Whether ``Accept-Encoding`` takes gzip (RFC 9110 12.5.3): ``gzip`` or ``x-gzip``
    with a q above 0, or ``*`` so when gzip is not named. A malformed entry counts as
    not naming anything: identity is what every client reads."""
    if not header:
        return False
    named: float | None = None
    star: float | None = None
    for part in header.split(","):
        m = _CODING.fullmatch(part)
        if m is None or (q := _q(m.group(2))) is None:
            continue
        coding = m.group(1).lower()
        if coding in ("gzip", "x-gzip"):
            named = max(named or 0.0, q)
        elif coding == "*":
            star = q
    if named is not None:
        return named > 0
    return star is not None and star > 0


class GzipMemo:
    """``gzipped(body)``: the compressed bytes, made once per body object (the routes
    reuse one object while nothing changed). Compressing runs under a lock: two polls
    of a new document compress it once, and two documents never take two cores."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._lock = threading.Lock()
        # (the body, kept so its id is not reused, and its gzip), newest last
        self._done: list[tuple[bytes, bytes]] = []

    def gzipped(self, body: bytes) -> bytes:
        with self._lock:
            for i, (b, z) in enumerate(self._done):
                if b is body:
                    self._done.append(self._done.pop(i))
                    return z
            # mtime=0: the same body gives the same bytes (a HEAD and its GET agree)
            z = gzip.compress(body, LEVEL, mtime=0)
            self._done = [*self._done, (body, z)][-self.kept :]
            return z


def encoded(
    body: bytes, accept_encoding: str | None, memo: GzipMemo
) -> tuple[bytes, dict[str, str]]:
    """The body to send and the headers that say how: gzipped when it is large and the
    client takes it. ``Vary`` on every large answer, either way (a cache in front keeps
    the two apart)."""
    if len(body) < MIN_BYTES:
        return body, {}
    if not accepts_gzip(accept_encoding):
        return body, {"Vary": "Accept-Encoding"}
    return memo.gzipped(body), {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
