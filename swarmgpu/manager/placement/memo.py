"""What a settled service's plan reads of a node, by content (``NodeContent``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

from swarmgpu.manager.placement.keys import owned_by_placement
from swarmgpu.swarm.client import SwarmNode


class NodeContent:
    """A number per node that changes only when the node changes in something other
    than other services' gates and ledger entries. A node's spec version moves with
    every label write, and the daemon writes a gate or a ledger entry for each service
    it places: keyed on the version, one placement re-planned every settled service
    sharing its nodes. A service's own gate and ledger entry are keyed beside it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        # node id -> (spec version, content, its number)
        self._seen: dict[str, tuple[int, tuple[object, ...], int]] = {}
        self._gen = 0
        self.of: dict[str, int] = {}  # node id -> this cycle's number

    def new_cycle(self, nodes: Sequence[SwarmNode]) -> None:
        seen, prefix = self._seen, self.prefix
        of: dict[str, int] = {}
        for n in nodes:
            got = seen.get(n.id)
            if got is None or got[0] != n.version:
                content = _content(n, prefix)
                if got is None or got[1] != content:
                    self._gen += 1
                    got = (n.version, content, self._gen)
                else:
                    got = (n.version, content, got[2])
                seen[n.id] = got
            of[n.id] = got[2]
        if len(seen) > 2 * len(nodes) + 100:  # nodes that left
            for nid in [k for k in seen if k not in of]:
                del seen[nid]
        self.of = of


def _content(n: SwarmNode, prefix: str) -> tuple[object, ...]:
    """Every field but the version, the labels without any gate or ledger entry."""
    out: list[object] = []
    for f in fields(n):
        if f.name == "version":
            continue
        v = getattr(n, f.name)
        if f.name == "labels":
            v = {k: x for k, x in v.items() if not owned_by_placement(k, prefix)}
        out.append(tuple(sorted(v.items())) if isinstance(v, Mapping) else v)
    return tuple(out)
