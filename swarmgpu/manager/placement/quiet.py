"""Which services a cycle need not visit (``QuietServices``): the change-driven cycle.

A settled service's plan is kept while its settled key (``Planner._settled_key``) is
unchanged; computing that key, and committing the service's holdings from the ledger
to find it, is a pass over every service each cycle. A service is *quiet* when what the
key is made of provably did not change since the cycle that settled it:

* its spec version (its request, constraints, replicas);
* every label placement owns that names it (its ledger entries and gates), found by
  diffing only the nodes whose spec version moved;
* each node it holds on: its content (``NodeContent``), its generation (facts) and its
  presence on the allocator;
* its tasks (``TaskBook`` says whose changed): where they run, which wait, their slots
  and nodes;
* and it held then exactly its ledger entries, is replicated, holds something, and has
  no back-off.

Its holdings then stay committed as they are (a full pass keeps such holdings first,
before committing any other), and its last plan is the one a full pass would reuse.
What every service reads -- the node set, the largest node, queues, holdings on failed
GPUs, a declared list to adopt -- sends the cycle down the full pass instead
(``Planner.plan``). tests/test_quiet.py runs both on the same inputs and compares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from swarmgpu.manager.placement.keys import ASSIGN, GATE, owned_prefixes
from swarmgpu.swarm.client import SwarmNode


@dataclass(frozen=True)
class Quiet:
    """A settled service as of the cycle that settled it: its spec version, and how
    many holdings it had committed (all of its ledger entries, as they are)."""

    version: int
    held: int


class QuietServices:
    """Per node, the labels placement owns and what a holding there reads; per service,
    its ``Quiet`` record. ``changed`` is called every cycle, full or not, so the node
    records always describe the last cycle's snapshot."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.gk, self.ak = prefix, prefix + GATE, prefix + ASSIGN
        # node id -> (spec version, content number, generation, on the allocator,
        #             its placement-owned labels)
        self._nodes: dict[str, tuple[int, int, int, bool, dict[str, str]]] = {}
        self.records: dict[str, Quiet] = {}  # service id -> as of its settled cycle

    def _owned(self, n: SwarmNode) -> dict[str, str]:
        owned = owned_prefixes(self.prefix)
        return {k: v for k, v in n.labels.items() if k.startswith(owned)}

    def _name(self, key: str) -> str:
        return key[len(self.gk):] if key.startswith(self.gk) else key[len(self.ak):]

    def changed(self, nodes: Sequence[SwarmNode], content: Mapping[str, int],
                gen: Mapping[str, int], on_alloc: Mapping[str, object]) -> set[str]:
        """Names of the services some node's change may concern since the last call:
        those named by a placement label that changed, and every one named on a node
        whose content, generation or presence changed (or that left)."""
        names: set[str] = set()
        seen = self._nodes
        now: dict[str, tuple[int, int, int, bool, dict[str, str]]] = {}
        for n in nodes:
            nid = n.id
            old = seen.get(nid)
            c, g, a = content.get(nid, 0), gen.get(nid, 0), nid in on_alloc
            if old is not None and old[0] == n.version:
                if old[1:4] == (c, g, a):
                    now[nid] = old
                    continue
                owned = old[4]
                now[nid] = (n.version, c, g, a, owned)
                names.update(self._name(k) for k in owned)
                continue
            owned = self._owned(n)
            now[nid] = (n.version, c, g, a, owned)
            if old is None:
                names.update(self._name(k) for k in owned)
            elif old[1:4] != (c, g, a):
                names.update(self._name(k) for k in (*old[4], *owned))
            elif old[4] != owned:
                before = old[4]
                names.update(self._name(k) for k in before.keys() | owned.keys()
                             if before.get(k) != owned.get(k))
        for nid, old in seen.items():
            if nid not in now:  # a node that left
                names.update(self._name(k) for k in old[4])
        self._nodes = now
        return names
