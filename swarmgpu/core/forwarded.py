"""The client a trusted reverse proxy names (``X-Forwarded-For``), for the token limit.

Behind a reverse proxy every request comes from the proxy's address, so the wrong-token
limit (``core.guesslimit``) kept one bucket for all: one guesser emptied it and every
user's token sign-in got 429. The operator names the proxies (the daemon's
``http.trusted_proxies``, an agent's ``--trusted-proxies``: addresses or networks,
parsed strictly at load); only a request whose peer is one
of them has its ``X-Forwarded-For`` read, and its client is the right-most entry that is
no trusted proxy (each proxy appends the address it got the request from, so entries to
the left of that one are the client's own to write). Anyone else's header is never read.

A trusted proxy's request with two ``X-Forwarded-For`` lines, or an entry that is not a
bare IP address (empty, a port, ``unknown``, a name, an IPv6 zone), is refused
(``BadForwarded``, 400): which client it names is a guess two parsers may make apart.
So is one that carries RFC 7239 ``Forwarded``: a proxy that writes that header passes
the client's own ``X-Forwarded-For`` on untouched, and reading it would let a guesser
pick its bucket. The address read counts tokens and names the client in the log; who
may read what (a loopback peer under ``http.auth: auto``) is still judged by the
connection's peer, so a proxy that may be a loopback peer is a config error under the
daemon's ``auto`` (``check_auth``): every client through it would read everything.

Addresses are matched as nginx's realip and Go's netip do: an IPv4-mapped IPv6 peer
or entry (``::ffff:10.0.0.5``, a dual-stack listener's IPv4 peer) as its IPv4 address,
and a proxy named that way as the IPv4 one; an address with a zone (a link-local peer,
``fe80::1%eth0``) matches no network, and a link-local proxy is refused at load: such an
address names a host on one link only, and on another link anyone may take it. That holds
for IPv4's link-local ``169.254.0.0/16`` (RFC 3927: self-assigned, any host of any link
may take one, ``::ffff:169.254.x.y`` too) as much as for ``fe80::/10``, so both are
refused; an IPv4 one has no zone and would match, which makes it worse, not better.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Protocol

from swarmgpu.core.commalist import comma_list

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_TRUSTED = 64  # networks named; a list longer is a mistake, not a topology
MAX_HOPS = 32  # entries of one X-Forwarded-For; a longer chain is refused
HEADER = "X-Forwarded-For"
RFC7239 = "Forwarded"
LINK_LOCAL = ipaddress.IPv6Network("fe80::/10")
LINK_LOCAL_V4 = ipaddress.IPv4Network("169.254.0.0/16")
LOOPBACK = (ipaddress.IPv4Network("127.0.0.0/8"), ipaddress.IPv6Network("::1/128"))


class BadForwarded(ValueError):
    """A trusted proxy's X-Forwarded-For that names no one client (the message says why)."""


def parse_trusted(text: str) -> tuple[Network, ...]:
    """``http.trusted_proxies``: comma-separated IP addresses or networks (CIDR), ""
    for none (``commalist``). ValueError naming the entry and the fix: a name (never
    resolved), a network with host bits set (``10.0.0.1/8``: which was meant?)."""
    out: list[Network] = []
    for entry in comma_list(text):
        if "%" in entry:
            raise ValueError(f"{entry!r}: an IPv6 zone is a link-local address, one host "
                             "per link, never trusted; give the proxy's global or "
                             "unique-local address")
        try:
            net = ipaddress.ip_network(entry, strict=True)
        except ValueError as exc:
            raise ValueError(f"{entry!r} is not an IP address or network ({exc}); names "
                             "are not resolved: give the proxy's address, e.g. 10.0.0.5 "
                             "or 10.1.0.0/24") from None
        net = _unmapped(net)
        if net.subnet_of(LINK_LOCAL) if isinstance(net, ipaddress.IPv6Network) \
                else net.subnet_of(LINK_LOCAL_V4):
            # One host per link: on another link anyone may take it (an IPv6 one would
            # also match nothing, its peers having a zone).
            raise ValueError(f"{entry!r} is link-local, one host per link, never "
                             "trusted; give the proxy's global, private or unique-local "
                             "address")
        out.append(net)
    if len(out) > MAX_TRUSTED:
        raise ValueError(f"{len(out)} entries; at most {MAX_TRUSTED}: name networks")
    return tuple(out)


def check_auth(proxies: Sequence[Network], auth: str) -> None:
    """ValueError when a proxy named may be a loopback peer under the daemon's
    ``http.auth: auto``: a loopback peer reads everything there without proof, and so
    would every client of a proxy on the manager (the agent has no such rule)."""
    for net in proxies if auth == "auto" else ():
        if any(net.version == lo.version and net.overlaps(lo) for lo in LOOPBACK):
            raise ValueError(f"{net} holds loopback addresses, and under http.auth: auto a "
                             "loopback peer reads everything without proof: so would every "
                             "client of a proxy there; set http.auth: required, which asks "
                             "every client but a manager certificate for the token")


def trusted(ip: str, proxies: Sequence[Network]) -> bool:
    """Whether ``ip`` (a peer address; an IPv4-mapped IPv6 one as IPv4) is a proxy named;
    never one with a zone (see the module docstring)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.scope_id is not None:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr in net for net in proxies)


class Headers(Protocol):
    """A request's header fields (``http.client.HTTPMessage``), names read in any case."""

    def get_all(self, name: str) -> list[str] | None: ...


def request_client(peer_ip: str, headers: Headers, proxies: Sequence[Network]) -> str:
    """``client_ip`` of a request: BadForwarded also when a trusted proxy's request
    carries ``Forwarded`` (RFC 7239; see the module docstring)."""
    if proxies and trusted(peer_ip, proxies) and headers.get_all(RFC7239):
        raise BadForwarded(f"{RFC7239} is not read, only {HEADER}: a proxy that writes "
                           f"{RFC7239} passes the client's own {HEADER} on; have the "
                           f"proxy append to {HEADER} and drop {RFC7239}")
    return client_ip(peer_ip, headers.get_all(HEADER) or [], proxies)


def client_ip(peer_ip: str, values: Sequence[str], proxies: Sequence[Network]) -> str:
    """The address a request's tokens count against: ``peer_ip``, unless it is a
    trusted proxy that sent ``X-Forwarded-For`` (``values``: each line of it); then the
    right-most entry that is no trusted proxy (the left-most when all are).
    BadForwarded when the header is repeated or an entry is not a bare IP address."""
    if not proxies or not values or not trusted(peer_ip, proxies):
        return peer_ip
    if len(values) > 1:
        raise BadForwarded(f"send one {HEADER} line, not {len(values)}")
    entries = [e.strip(" \t") for e in values[0].split(",")]
    if len(entries) > MAX_HOPS:
        raise BadForwarded(f"{HEADER} names {len(entries)} addresses; at most {MAX_HOPS}")
    for e in entries:
        if not e or "%" in e or not is_ip(e):
            raise BadForwarded(f"{HEADER} entry {e[:60]!r} is not an IP address")
    for e in reversed(entries):
        if not trusted(e, proxies):
            return e
    return entries[0]


def _unmapped(net: Network) -> Network:
    """An IPv4-mapped network (``::ffff:10.0.0.0/104``) as the IPv4 one it names:
    peers and entries are matched as IPv4 (trusted), so it would match none."""
    if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96 \
            and (v4 := net.network_address.ipv4_mapped) is not None:
        return ipaddress.IPv4Network((v4, net.prefixlen - 96))
    return net


def is_ip(text: str) -> bool:
    """Whether ``text`` is an IPv4 or IPv6 address as written (no brackets, no port)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
