"""Swarm placement constraints: parsing, and evaluation against labels (the key rule
itself is :mod:`swarmgpu.core.labelkeys`).

Mirrors swarmkit's ``manager/constraint/constraint.go``: only ``==`` and ``!=``,
whole-string and case-insensitive on the value, a missing label compares as ``""``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from swarmgpu.core.labelkeys import KEY_RE

_OP_RE = re.compile(r"(==|!=)")


@dataclass(frozen=True)
class Constraint:
    field: str  # e.g. "node.labels.swarmgpu.gpu.count"
    op: str  # "==" or "!="
    value: str

    @property
    def node_label(self) -> str | None:
        """The node label key this constraint reads, if any."""
        if self.field.lower().startswith("node.labels."):
            return self.field[len("node.labels.") :]
        return None

    def text(self) -> str:
        return f"{self.field}{self.op}{self.value}"


class ConstraintError(ValueError):
    pass


def parse_constraint(expr: str) -> Constraint:
    parts = _OP_RE.split(expr, maxsplit=1)
    if len(parts) != 3:
        raise ConstraintError(f"constraint {expr!r}: expected KEY==VALUE or KEY!=VALUE")
    key, op, value = (p.strip() for p in parts)
    if not KEY_RE.fullmatch(key):
        raise ConstraintError(
            f"constraint {expr!r}: key {key!r} is invalid for Swarm "
            "(letters, digits, '-', '_', '.' only; no '/')"
        )
    return Constraint(key, op, value)


def node_labels_satisfy(
    constraints: Iterable[Constraint], node_labels: Mapping[str, str]
) -> bool:
    """Evaluate only the ``node.labels.*`` constraints against ``node_labels``.

    Other fields (hostname, role, engine labels) are not affected by label writes,
    so they are treated as satisfied.
    """
    for c in constraints:
        key = c.node_label
        if key is None:
            continue
        actual = node_labels.get(key, "")
        equal = actual.lower() == c.value.lower()
        if (c.op == "==") != equal:
            return False
    return True


def parse_all(exprs: Iterable[str]) -> tuple[list[Constraint], list[str]]:
    """Parse every constraint; return the good ones and an error per bad one."""
    good: list[Constraint] = []
    errors: list[str] = []
    for e in exprs:
        try:
            good.append(parse_constraint(e))
        except ConstraintError as exc:
            errors.append(str(exc))
    return good, errors


def node_field(c: Constraint, node: NodeLike) -> str | None:
    """The node's value for a constraint's field, as swarmkit reads it (None: a field
    that is no plain value -- ``node.ip``, a key swarmkit does not read -- or a
    platform the node did not report; ``node_matches`` judges those)."""
    f = c.field.lower()
    if f == "node.id":
        return node.id
    if f == "node.hostname":
        return node.hostname
    if f == "node.role":
        return node.role
    if f == "node.platform.os":
        return node.os or None
    if f == "node.platform.arch":
        return node.arch or None
    if f.startswith(_NODE_LABELS) and len(f) > len(_NODE_LABELS):
        return node.labels.get(c.field[len(_NODE_LABELS):], "")
    if f.startswith(_ENGINE_LABELS) and len(f) > len(_ENGINE_LABELS):
        return node.engine_labels.get(c.field[len(_ENGINE_LABELS):], "")
    return None


_NODE_LABELS, _ENGINE_LABELS = "node.labels.", "engine.labels."
_PLATFORM = frozenset(("node.platform.os", "node.platform.arch"))


def node_matches(c: Constraint, node: NodeLike) -> bool:
    """swarmkit's NodeMatches for one constraint: a key it does not read (a typo such as
    ``node.platform``, ``node.labels.`` with no label) matches no node, with either
    operator; a platform the node did not report never refuses (swarmgpu's fixtures and
    a node not yet described; a ready node always reports one)."""
    f = c.field.lower()
    if f == "node.ip":
        return _ip_matches(c, node.addr)
    actual = node_field(c, node)
    if actual is None:
        return f in _PLATFORM
    return (c.op == "==") == (actual.lower() == c.value.lower())


def _ip_matches(c: Constraint, addr: str) -> bool:
    """``node.ip`` against the node's Status.Addr: one address, or a CIDR subnet; a value
    that is neither matches no node, with either operator (as swarmkit)."""
    ip = _parse_ip(c.value)
    node_ip = _parse_ip(addr)
    if ip is not None:
        return (c.op == "==") == (node_ip is not None and ip == node_ip)
    net = _parse_cidr(c.value)
    if net is None:
        return False
    return (c.op == "==") == (node_ip is not None and node_ip in net)


_Ip = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse_ip(text: str) -> _Ip | None:
    """Go's net.ParseIP: no zone; an IPv4-mapped IPv6 address equals its IPv4 one."""
    if "%" in text:
        return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _parse_cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """Go's net.ParseCIDR: ADDRESS/BITS (no netmask form), host bits allowed."""
    addr, slash, bits = text.partition("/")
    if not slash or not bits.isascii() or not bits.isdigit() or _parse_ip(addr) is None:
        return None
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    mapped = (net.network_address.ipv4_mapped
              if isinstance(net, ipaddress.IPv6Network) else None)
    if mapped is not None and net.prefixlen >= 96:  # Go reads it as the IPv4 subnet
        return ipaddress.IPv4Network(f"{mapped}/{net.prefixlen - 96}")
    return net


def node_satisfies(constraints: Iterable[Constraint], node: NodeLike) -> bool:
    """swarmkit's constraint.NodeMatches: every constraint holds (``node_matches``)."""
    return all(node_matches(c, node) for c in constraints)


def platform_ok(node: NodeLike, os: str, arch: str) -> bool:
    """swarmkit's PlatformFilter for one listed platform (empty = any; an unknown node
    platform never refuses)."""
    if os and node.os and os.lower() != node.os.lower():
        return False
    arch_n = _ARCH.get(arch.lower(), arch.lower())
    node_arch = _ARCH.get(node.arch.lower(), node.arch.lower())
    return not (arch and node.arch and arch_n != node_arch)


_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


class NodeLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def hostname(self) -> str: ...
    @property
    def addr(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def os(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def engine_labels(self) -> Mapping[str, str]: ...
