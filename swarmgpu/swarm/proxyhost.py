"""The Host a client of the docker-proxy's loopback TCP listener may name.

A page whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own name, and
neither the proxy nor the engine authenticates anyone, so over TCP only a loopback
name is served. It is read as the agent's and the daemon's Host checks read a Host
(``httpguard.host_of``: lower case, the port and one trailing dot aside, an empty port
the host alone, RFC 3986 3.2.2-3): ``localhost.`` names what ``localhost`` does, and
``localhost:`` is ``localhost``; a Host that is no ``host[:port]`` is none
(``httphead.host_fault``). ``tcp_listen`` reads where that listener binds: loopback
only (``::1`` on an IPv6 socket; ``localhost`` binds 127.0.0.1, ``core.loopbackbind``).
"""

from __future__ import annotations

from swarmgpu.core.httpguard import host_of
from swarmgpu.core.httphead import host_fault
from swarmgpu.core.loopbackbind import bound_host

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def loopback_host(header: str | None) -> bool:
    """Whether a request's ``Host`` names this loopback listener (None: no Host)."""
    if header is None or host_fault(header) is not None:
        return False
    # host_of strips every trailing dot; an empty label (``localhost..``) names nothing
    return ".." not in header and host_of(header) in LOOPBACK_NAMES


def tcp_listen(listen: str) -> tuple[str, int]:
    """(host, port) of ``tcp://HOST:PORT`` where HOST is loopback (``127.0.0.1``,
    ``localhost``, ``::1`` or ``[::1]``; any case, one root dot), or ValueError saying
    the fix."""
    written, _, port = listen.removeprefix("tcp://").rpartition(":")
    # a name read as loopback_host reads a Host (lower case, one root dot): one rule
    host = written.lower().removesuffix(".")
    if host == "[::1]":  # as a URL writes it
        host = "::1"
    # ASCII digits: '²' and '٢' are digits to isdigit (int() raised, or read them)
    if host not in LOOPBACK_NAMES or not (port.isascii() and port.isdigit()):
        raise ValueError(
            f"listen {listen!r}: TCP only on loopback, e.g. tcp://127.0.0.1:2375 or "
            "tcp://[::1]:2375 (the proxy has no authentication)"
        )
    if int(port) > 65535:  # bind() raised OverflowError: a traceback
        raise ValueError(
            f"listen {listen!r}: port {port} is above 65535, e.g. tcp://127.0.0.1:2375"
        )
    return bound_host(host), int(port)  # localhost: 127.0.0.1, not the resolver's
