"""A node's agent or metrics URL: the operator's template filled with what Swarm says.

``{hostname}`` is the node's ``Description.Hostname``, which that node's engine reports
and root on that node sets: a name such as ``127.0.0.1:2375/#`` made
``http://{hostname}:{port}`` the URL of another host and port (the manager's own
loopback too), where the daemon's GET then went. The name is filled in only where it
is a host name: letters, digits, ``-`` and ``_`` in dot-separated labels, the last no
number unless the whole is a dotted-decimal IPv4 address (``core.numerichost``).

``{addr}`` is the node's ``Status.Addr``: the host part of the address its connection
came from (swarmkit's ``net.SplitHostPort``), so an IPv6 node's is bare
(``2001:db8::7``). It is filled in brackets (RFC 3986 IP-literal), or bare where the
template brackets it itself (``[{addr}]``).
"""

from __future__ import annotations

import ipaddress
import re
import string

from swarmgpu.core.httpguard import HOST_NAME
from swarmgpu.core.numerichost import ambiguous_number
from swarmgpu.core.peertext import peer_text
from swarmgpu.swarm.client import SwarmNode

_USERINFO = re.compile(r"(?<=//)[^/@]*@")


def shown_template(template: str) -> str:
    """The template as a result may show it: without ``user:password@``."""
    return _USERINFO.sub("", template, count=1)


def is_host_name(name: str) -> bool:
    """Whether ``name`` is a host name (``httpguard.HOST_NAME``), a trailing dot allowed,
    of 254 characters at most with it, not ending in a number unless it is a
    dotted-decimal IPv4 address (``numerichost``: ``010.0.0.1`` went to 8.0.0.1)."""
    return 0 < len(name) <= 254 and HOST_NAME.fullmatch(name.removesuffix(".")) is not None \
        and not ambiguous_number(name)


class UnusableHostname(ValueError):
    """The template names ``{hostname}`` and the node's is no host name."""


def node_url(template: str, node: SwarmNode, key: str, **more: object) -> str:
    """``template`` filled with the node's ``addr`` and ``hostname`` (and ``more``);
    UnusableHostname, naming the node and ``key`` (the template's config key), where
    ``{hostname}`` is used and the node's is not a host name."""
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    if "hostname" in fields and not is_host_name(node.hostname):
        raise UnusableHostname(
            f"node {node.id[:12]}'s hostname {peer_text(node.hostname, 80)!r} (as its engine "
            f"reports it) is not a host name, and {key} fills it into the URL: not "
            f"fetched; give the node a host name, or use {{addr}} in {key}")
    return template.replace("[{addr}]", "{addr}").format(
        addr=url_host(node.addr), hostname=node.hostname, **more)


def url_host(addr: str) -> str:
    """``addr`` as a URL's host: an IPv6 address in brackets (a zone too: Python's
    resolver reads ``fe80::1%eth0``), anything else as it is."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    return f"[{addr}]" if ip.version == 6 else addr
