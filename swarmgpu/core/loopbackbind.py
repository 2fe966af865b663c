"""The address a listener binds for the host it was given: ``localhost`` is 127.0.0.1.

Every check that a listener stays on loopback reads ``localhost`` by its name (the
docker-proxy's TCP listen; the daemon's ``http.auth: auto``, which asks no proof
there), and the bind then handed the name to the system's resolver, which
``/etc/hosts``, DNS (a search domain tried first: ``localhost.corp.example``) or an NSS
module may answer with a network address. The name binds what the checks read.
"""

from __future__ import annotations

LOOPBACK_V4 = "127.0.0.1"


def bound_host(host: str) -> str:
    """The host to bind for ``host``: ``localhost`` (any case, one root dot) as
    127.0.0.1, any other as written."""
    return LOOPBACK_V4 if host.lower().removesuffix(".") == "localhost" else host
