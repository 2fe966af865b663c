"""What a settled service's plan reads of a node, by content (``NodeContent``), and
the key it will have once its own gates are open (``key_after_gates_open``).

Only a plan whose writes are its gates opening is kept across its own writes. A plan
that chose new placements, or writes the service's spec, is planned again the cycle
after they landed: a planner says of a holding it finds in the ledger something other
than it said when it chose it (state Allocated, not Bound; no score; no adoption
warning), so that plan is no answer to the next cycle's inputs
(tests/test_memo.py::test_a_plan_that_places_is_planned_again_once_its_writes_landed).
The daemon writes all of it in one cycle (``cycle.placement.apply_plan``), so its first
cycle without writes plans each such service once more; the two-cycle order did that
in its second, gate-opening, cycle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

from swarmgpu.manager.placement.keys import assign_key, gate_key, owned_prefixes
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import EMPTY, ServicePlan, Status
from swarmgpu.swarm.client import SwarmNode, SwarmService


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


# SwarmNode's fields but the version (``dataclasses.fields`` builds its answer per call)
_CONTENT_FIELDS = tuple(f.name for f in fields(SwarmNode) if f.name != "version")


def _content(n: SwarmNode, prefix: str) -> tuple[object, ...]:
    """Every field but the version, the labels without any gate or ledger entry."""
    out: list[object] = []
    owned = owned_prefixes(prefix)
    for name in _CONTENT_FIELDS:
        v = getattr(n, name)
        if name == "labels":
            v = {k: x for k, x in v.items() if not k.startswith(owned)}
        out.append(tuple(sorted(v.items())) if isinstance(v, Mapping) else v)
    return tuple(out)


def key_after_gates_open(key: tuple[object, ...], sp: ServicePlan, s: SwarmService,
                         old: Mapping[str, Holding], prefix: str) -> tuple[object, ...] | None:
    """The settled key (``Planner._settled_key``: its second part is the nodes, each
    ``(id, holding, content, ledger entry, gate)`` then more) that the service's next
    cycle reads once this plan's writes for it landed, when those writes are only its
    gates opening on the nodes it keeps: that cycle's plan is this one without the
    writes, so the cycle after the daemon's own writes does not plan it again. None
    otherwise. A write that did not land leaves the gate as it was: planned again."""
    if (s.mode != "replicated" or sp.status != Status.PLACED or not sp.node_writes or sp.new
            or sp.gates_deferred or sp.needs_service_write):
        return None
    held = {p.node_id for p in sp.placements}
    if held != set(old):
        return None
    ak, gk = assign_key(prefix, s.name), gate_key(prefix, s.name)
    opened: set[str] = set()
    for nid in held:
        sets = sp.node_set.get(nid, EMPTY)
        if ak in sets or any(k in (ak, gk) for k in sp.node_remove.get(nid, ())):
            return None
        if sets.get(gk) == "true":
            opened.add(nid)
    nodes = key[1]
    if not isinstance(nodes, tuple) or not opened or {n[0] for n in nodes} != held:
        return None
    after = tuple((*n[:4], "true" if n[0] in opened else n[4], *n[5:]) for n in nodes)
    return (key[0], after, *key[2:])
