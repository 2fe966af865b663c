"""The docker-proxy reads a head that trickles in, a byte a read, in time linear in it.

Each read searched the whole head so far again for a bare CR or LF (and its end):
a 32 KiB head sent a byte at a time over the unix socket cost some 2.6 ms a read, the
request's whole 10 s deadline of CPU for one connection's few hundred bytes a second,
and 32 of them held the proxy's GIL. The regex's own count of the bytes it was given to
search is what the test reads (no timing): at most a few per byte of head now; before,
the sum of every prefix (n^2 / 2)."""

from __future__ import annotations

from typing import Any

import pytest

from swarmgpu.swarm import httpframe
from swarmgpu.swarm.httpframe import Refused, RequestReader

HEAD = b"GET /v1.41/nodes HTTP/1.1\r\nHost: d\r\nX-Pad: " + b"a" * 4000 + b"\r\n\r\n"


class _Counting:
    """``_BARE`` with a count of the bytes each search was given."""

    def __init__(self, pattern: Any) -> None:
        self.pattern = pattern
        self.scanned = 0

    def search(self, buf: Any, pos: int = 0, endpos: int | None = None) -> Any:
        stop = len(buf) if endpos is None else min(endpos, len(buf))
        self.scanned += max(0, stop - pos)
        return self.pattern.search(buf, pos, stop)


def _feed_bytewise(raw: bytes) -> Any:
    reader = RequestReader()
    got = None
    for i in range(len(raw)):
        got = reader.feed(raw[i : i + 1])
    return got


def test_a_head_sent_a_byte_a_read_is_scanned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _Counting(httpframe._BARE)
    monkeypatch.setattr(httpframe, "_BARE", counting)
    req = _feed_bytewise(HEAD)
    assert req is not None and req.header("x-pad") == "a" * 4000
    # before: 8,191,124 bytes searched for a head of 4,047
    assert counting.scanned <= 3 * len(HEAD), counting.scanned


@pytest.mark.parametrize("bare", [b"\n", b"\r"])
@pytest.mark.parametrize("at", [5, 30, 2000, len(HEAD) - 5])
def test_a_bare_cr_or_lf_is_still_refused_wherever_it_trickles_in(bare: bytes, at: int) -> None:
    raw = HEAD[:at] + bare + b"x" + HEAD[at:]
    with pytest.raises(Refused) as exc:
        _feed_bytewise(raw)
    assert exc.value.status == 400
