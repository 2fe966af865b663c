"""The host part of a listen address or URL the operator gives, checked by one rule.

A host that ends in a number but is no dotted-decimal IPv4 address (``0:9402``,
``127.1``, ``010.0.0.1``) is two places (``core.numerichost``): Python's bind and
connect, curl and a browser read it as the IPv4 address ``inet_aton`` makes of it (``0``
is 0.0.0.0, every interface), Go's resolver and ``ipaddress`` send it to DNS as a name.
So the daemon might listen on every interface where the operator read a host name, and
a probe reach another address. Refused where it is given, naming the dotted form.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from swarmgpu.core.httpguard import HOST_NAME
from swarmgpu.core.numerichost import ambiguous_number
from swarmgpu.core.peertext import quoted


def idna_form(name: str) -> str | None:
    """The ``xn--`` (IDNA) form of a Unicode host ``name``, which a browser sends as Host
    and DNS knows it by; None for an ASCII name or one with no such form."""
    if name.isascii():
        return None
    try:
        ascii_name = name.encode("idna").decode("ascii")
    except UnicodeError:  # (no IDNA form: an empty label, one too long, a surrogate)
        return None
    return ascii_name if HOST_NAME.fullmatch(ascii_name) else None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_problem(host: str, port: str = "") -> str | None:
    """Why ``host`` (no brackets; "" is every interface) is no IP address or ASCII host
    name, or is read apart by two readers, and the fix (with ``:port`` after it, where
    given), or None."""
    if host and not _is_ip(host) and not HOST_NAME.fullmatch(host.removesuffix(".")):
        # (a bind raised on it at start: UnicodeError, or the resolver's "not known")
        ascii_name = idna_form(host)
        fix = f"; write {ascii_name}{':' + port if port else ''}" if ascii_name else ""
        return (f"the host {host!r} is no IP address or host name (ASCII letters, digits, "
                f"'-' and '_' in dot-separated labels){fix}")
    if not ambiguous_number(host):
        return None
    try:  # what the C resolver and Python make of it
        dotted = socket.inet_ntoa(socket.inet_aton(host))
    except OSError:  # (none to them either: 1.2.3.4.5, 0x)
        fix = "a name or a dotted-decimal IPv4 address"
    else:
        fix = f"{dotted}:{port}" if port else dotted
    return (f"the host {host!r} ends in a number but is no dotted-decimal IPv4 address: "
            "Python and the C resolver read it as an address, Go's resolver as a name "
            f"for DNS; write {fix}")


def no_port_v6(listen: str, port: str) -> str | None:
    """Why ``listen`` is an IPv6 address with no port, naming the form with ``port``, or
    None: split at its last ':', ``::1`` read as the host ':' and the port 1."""
    if ":" in listen and _is_ip(listen):
        return (f"{quoted(listen)} is an IPv6 address with no port; write it in brackets "
                f"with one: [{listen}]:{port}")
    return None


def listen_problem(where: str, listen: str, example: str) -> str | None:
    """Why ``listen`` (``HOST:PORT``, ``[V6]:PORT``) is no address to listen on, naming
    ``where`` and ``example``, or None."""
    if bad := no_port_v6(listen, example.rpartition(":")[2]):
        return f"{where}: {bad}"
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not port.isascii():  # '²' is a digit to isdigit
        return f"{where}: {quoted(listen)}; use HOST:PORT, e.g. {example}"
    if len(port) > 5 or int(port) > 65535:  # 99999 raised at bind (0: any free port)
        return f"{where}: {port} is not a TCP port (0-65535); use HOST:PORT, e.g. {example}"
    if bad := host_problem(host.strip("[]"), port):
        return f"{where}: {quoted(listen)}: {bad}"
    return None


def url_host_problem(url: str) -> str | None:
    """``host_problem`` of an http(s) URL's host as written, or None; a placeholder
    (``{addr}``) is filled per node, and checked there (``nodeurl``)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:  # (a bad IPv6 literal: the URL's own check says it)
        return None
    return None if "{" in host else host_problem(host)
