"""The Host a client of the docker-proxy's loopback TCP listener may name.

A page whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own name, and
neither the proxy nor the engine authenticates anyone, so over TCP only a loopback
name is served. It is read as the agent's and the daemon's Host checks read a Host
(``httpguard.host_of``: lower case, the port and one trailing dot aside, an empty port
the host alone, RFC 3986 3.2.2-3): ``localhost.`` names what ``localhost`` does, and
``localhost:`` is ``localhost``; a Host that is no ``host[:port]`` is none
(``httphead.host_fault``).
"""

from __future__ import annotations

from swarmgpu.core.httpguard import host_of
from swarmgpu.core.httphead import host_fault

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def loopback_host(header: str | None) -> bool:
    """Whether a request's ``Host`` names this loopback listener (None: no Host)."""
    if header is None or host_fault(header) is not None:
        return False
    # host_of strips every trailing dot; an empty label (``localhost..``) names nothing
    return ".." not in header and host_of(header) in LOOPBACK_NAMES
