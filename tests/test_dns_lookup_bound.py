"""A host name whose lookup hangs holds one lookup thread, however many fetches ask.

``boundedhttp`` runs ``getaddrinfo`` in a thread the GET stops waiting for at its
deadline (stop 82); the thread itself ends only when the resolver gives up. Every fetch
of that name started another (the GET, and the probes that tell a TLS server from a
plain one, each cycle, every node on that domain), so a resolver that hangs (an NSS
module, a name server that never answers) left threads piling up across cycles without
bound. Now a fetch of a name whose lookup is still running waits for that lookup.
The lookup here hangs until the test releases it; no timing is asserted."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from swarmgpu.manager.nodes import boundedhttp


def test_fetches_of_a_name_whose_lookup_hangs_share_one_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release, calls = threading.Event(), []

    def lookup(host: Any, *args: Any, **kw: Any) -> Any:
        calls.append(host)
        release.wait(60)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    try:
        for _ in range(5):  # five cycles' fetches of the one node
            with pytest.raises(boundedhttp.Deadline):
                boundedhttp.get(
                    "http://slow.example.org:9401/facts", timeout_s=0.05, max_bytes=1024
                )
        in_flight = len(calls)
    finally:
        release.set()
    _lookups_end()
    assert in_flight == 1, calls  # before: 5, one thread each, all still waiting

    # Once it ended, the next fetch asks the resolver again (nothing is cached).
    with pytest.raises(boundedhttp.FetchError, match="resolve"):
        boundedhttp.get("http://slow.example.org:9401/facts", timeout_s=5, max_bytes=1024)
    _lookups_end()
    assert len(calls) == in_flight + 1


def _lookups_end() -> None:
    """Join the lookup threads (released: each ends at once)."""
    for t in threading.enumerate():
        if t.name == "agent-dns":
            t.join(60)
