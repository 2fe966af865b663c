"""Numbers written with a leading zero, refused in the files swarmgpu alone reads.

``parallel: 010`` is 8 to swarmgpu's reader, as to go-yaml v3 (``strconv.ParseInt``
with base 0) and YAML 1.1 (PyYAML's octal), and 10 to a YAML 1.2 reader (its core
schema has no such octal: ruamel.yaml, an editor's or a linter's schema check): the
operator and the daemon may read two numbers. ``08`` is 8 to YAML 1.2, the float 8.0 to
go-yaml and text to YAML 1.1. So a plain number with a leading zero is refused in the
config, a pinned workload file and the agent's facts and metrics profile files (the
readers ask for it, ``sole``), naming its key, its line and both readings. ``0o10`` and
``0b10`` stay: one number to every reader that reads them as one (YAML 1.1 has no
``0o``, YAML 1.2 no ``0b``: text there, which no number key takes). A stack is docker's
file: docker stack deploy (go-yaml v3; v2 before docker 28) and docker compose
(compose-go: ``mode: 0440`` is 0o440) all read a leading 0 as octal, as `render` does.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from swarmgpu.core.andmore import and_more
from swarmgpu.core.goscalar import FLOAT, INT

SHOWN = 3  # the ones named after the first, said whole; the rest are counted

# A sign, a 0, more digits ('_' dropped, as go-yaml and YAML 1.1 drop it).
_LEADING_ZERO = re.compile(r"[-+]?0[0-9]+", re.ASCII)


def _named(path: tuple[Any, ...]) -> str:
    """``agents.parallel``, ``[1].gpus``: a value's keys and list indices."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _readings(text: str) -> str:
    """What ``text`` (a sign, 0 and digits) is to each reader, and the fix."""
    digits = text.replace("_", "").lstrip("+-")
    sign = "-" if text.startswith("-") else ""
    decimal = f"{sign}{int(digits, 10)}"
    if re.fullmatch("[0-7]+", digits) is None:  # 08: no octal number
        return (f"{decimal} to a YAML 1.2 reader, the float {decimal}.0 to swarmgpu "
                f"(go-yaml) and text to YAML 1.1; write {decimal}")
    octal = f"{sign}{int(digits, 8)}"
    if octal == decimal:  # 07: one number, but 017 would not be
        return (f"octal to swarmgpu (go-yaml, YAML 1.1), decimal to a YAML 1.2 reader, "
                f"{decimal} either way here but not in 017; write {decimal}")
    return (f"{octal} to swarmgpu (octal, as go-yaml and YAML 1.1 read it) and {decimal} "
            f"to a YAML 1.2 reader; write {octal} or {decimal}")


def refuse_leading_zeros(root: yaml.Node, what: str, error: type[Exception]) -> None:
    """Refuse the number values under ``root`` written plain with a leading zero
    (``!!int 010`` too): the first said whole, the next ``SHOWN`` by key, line and text,
    the rest counted (one fix per number was one check per number). Keys are names, said
    by their own readers. The tree is bounded already (``yamlfile._check_tree``), and
    each node is looked at once."""
    found = _leading_zeros(root)
    if not found:
        return
    node, where = found[0]
    also = "".join(
        f"{', ' if i else '; also '}{w} at line {n.start_mark.line + 1} ({n.value})"
        for i, (n, w) in enumerate(found[1:SHOWN + 1]))
    tail = f"{and_more(len(found) - 1, SHOWN)}: the same for each" if also else ""
    raise error(f"{what}: {where} at line {node.start_mark.line + 1}: {node.value} "
                f"has a leading 0: {_readings(node.value)} (quote it if it is text)"
                f"{also}{tail}")


def _leading_zeros(root: yaml.Node) -> list[tuple[yaml.ScalarNode, str]]:
    """Each number under ``root`` written with a leading zero, in the file's order,
    with its key path (``agents.parallel``)."""
    out: list[tuple[yaml.ScalarNode, str]] = []
    todo: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    seen: set[int] = set()
    while todo:
        node, path = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo += [(v, (*path, k.value if isinstance(k, yaml.ScalarNode) else "?"))
                     for k, v in reversed(node.value)]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(v, (*path, i)) for i, v in reversed(list(enumerate(node.value)))]
        elif isinstance(node, yaml.ScalarNode) and node.style is None \
                and node.tag in (INT, FLOAT) \
                and _LEADING_ZERO.fullmatch(node.value.replace("_", "")):
            out.append((node, _named(path) or "the value"))
    return out
