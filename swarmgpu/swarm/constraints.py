"""Swarm placement constraints: parsing, and evaluation against nodes.

Mirrors swarmkit's ``manager/constraint/constraint.go`` as Go runs it: only ``==`` and
``!=``, its key and value rules, whole-string and case-insensitive (``strings.EqualFold``)
on the value, a missing label compares as ``""``, a key it does not read matches no node.
(The stricter ASCII rule for what swarmgpu writes itself is :mod:`swarmgpu.core.labelkeys`.)
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


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


# swarmkit's alphaNumeric and valuePattern as Go reads them: (?i)[a-z] is [A-Za-z\u017f\u212a]
# (case folding adds the long s and the Kelvin sign), \s is [\t\n\f\r ] (Python's ASCII \s
# adds \v). Stricter than swarmkit, a constraint Swarm runs under would be dropped as
# unparsable and the planner would ignore it.
_GO_FOLDED = "\u017f\u212a"
_KEY_RE = re.compile(rf"[a-z_{_GO_FOLDED}][a-z0-9\-_.{_GO_FOLDED}]+", re.IGNORECASE | re.ASCII)
_VALUE_RE = re.compile(rf"[a-z0-9:\-_\t\n\f\r \.\*\(\)\?\+\[\]\\\^\$\|\/{_GO_FOLDED}]+",
                       re.IGNORECASE | re.ASCII)


class ConstraintError(ValueError):
    pass


def parse_constraint(expr: str) -> Constraint:
    """swarmkit's constraint.Parse: ``==`` is looked for first, then ``!=``; the text is
    split at the first one, each side trimmed of Go's white space, the key and the value
    checked by swarmkit's rules (so a constraint Swarm runs under parses, and one Swarm
    refuses does not)."""
    op = "==" if "==" in expr else "!=" if "!=" in expr else ""
    if not op:
        raise ConstraintError(f"constraint {expr!r}: expected KEY==VALUE or KEY!=VALUE")
    key, _, value = (_go_trim(p) for p in expr.partition(op))
    if not _KEY_RE.fullmatch(key):
        raise ConstraintError(
            f"constraint {expr!r}: key {key!r} is invalid for Swarm "
            "(letters, digits, '-', '_', '.' only; no '/')"
        )
    if not _VALUE_RE.fullmatch(value):
        raise ConstraintError(
            f"constraint {expr!r}: value {value!r} is invalid for Swarm (not empty; letters, "
            "digits, spaces and : - _ . * ( ) ? + [ ] \\ ^ $ | / only; no '=', '!', '<')"
        )
    return Constraint(key, op, value)


# Go's unicode.IsSpace, which strings.TrimSpace trims (str.strip also drops U+001C-U+001F)
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007" \
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def _go_trim(text: str) -> str:
    return text.strip(_GO_SPACE)


def equal_fold(a: str, b: str) -> bool:
    """Go's strings.EqualFold for a value ``parse_constraint`` lets through (ASCII, the
    long s, the Kelvin sign) against any text: those two fold to s and k, ASCII letters
    to lower case, and no other character folds to one of them."""
    return a.translate(_FOLD) == b.translate(_FOLD)


_FOLD = {**{ord(c): ord(c.lower()) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
         0x17F: ord("s"), 0x212A: ord("k")}


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
        equal = equal_fold(node_labels.get(key, ""), c.value)
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
    return (c.op == "==") == equal_fold(actual, c.value)


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
