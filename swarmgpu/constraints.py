"""Swarm placement constraints: the key rule, parsing, and evaluation against labels.

Mirrors swarmkit's ``manager/constraint/constraint.go``: only ``==`` and ``!=``,
whole-string and case-insensitive on the value, a missing label compares as ``""``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# swarmkit: alphaNumeric key rule and value rule.
_KEY_RE = re.compile(r"^[a-z_][a-z0-9\-_.]+$", re.IGNORECASE)
_VALUE_RE = re.compile(r"^[a-z0-9:\-_\s\.\*\(\)\?\+\[\]\\\^\$\|\/]+$", re.IGNORECASE)
_OP_RE = re.compile(r"(==|!=)")


def usable_label_key(key: str) -> bool:
    """True when ``node.labels.<key>`` can appear in a Swarm constraint."""
    return bool(_KEY_RE.match(key))


def usable_label_value(value: str) -> bool:
    return bool(_VALUE_RE.match(value))


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
    if not _KEY_RE.match(key):
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
