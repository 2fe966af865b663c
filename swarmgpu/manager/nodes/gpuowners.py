"""Which node speaks for which GPU: each node only for the GPUs its own facts list.

A GPU UUID is meant to be unique in the world, but an agent's answer is written by
someone else: a copied GFD file or facts profile, a cloned VM, or a forged agent can
name another node's GPU. Metric series are therefore keyed by (node, UUID), never by
UUID alone, and a UUID is owned by the node whose facts list it:

* listed by exactly one node's facts: that node owns it; a metrics page of any other
  node that reports it is not read for it (``strays``);
* listed by the facts of two or more nodes: the node that owned it before (``previous``,
  the daemon's memory of earlier cycles) keeps it, and the newcomer is ignored for it:
  a node that starts naming another node's GPU changes nothing for that GPU. With no
  such memory (a new leader, or both at once) nobody owns it: every claimant's readings
  are ignored, so the GPU is UNKNOWN to the rebalancer (no move starts from or lands on
  it because of them). Which is honest cannot be told from their answers; doing
  nothing is the safe side. ``swarmgpu audit`` and the log name the nodes either way;
* a node that left the swarm and joined again gets a new node ID, and Swarm lists its
  old entry, down, until ``docker node rm``; its facts may still list the GPUs (an
  agent reached by its address answers for both with ``agents.identity: none``, or the
  old entry's last facts stand in). Such an entry (``rejoined``: down, beside a node of
  its hostname that is not) owns no GPU that node lists too, whoever owned it before; a
  node of another hostname gains nothing by it.

Pure: facts (and pages) in, ownership out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.core.model import NodeFacts
from swarmgpu.swarm.client import SwarmNode


def uuids_of(facts: NodeFacts) -> list[str]:
    """The GPU and MIG device UUIDs a node's facts list (each once)."""
    out = [g.uuid for g in facts.gpus]
    out += [m.uuid for g in facts.gpus for m in g.mig_devices]
    return list(dict.fromkeys(u for u in out if u))


@dataclass(frozen=True)
class Owners:
    owner: Mapping[str, str]  # uuid -> the node id whose readings of it count
    listed: Mapping[str, tuple[str, ...]]  # uuid -> node ids (sorted), where 2 or more

    def speaks_for(self, node_id: str, uuid: str) -> bool:
        """Whether ``node_id``'s readings of ``uuid`` count."""
        return self.owner.get(uuid) == node_id

    def others(self, node_id: str, uuid: str) -> tuple[str, ...]:
        """The other nodes whose facts list ``uuid`` too (empty: none)."""
        return tuple(n for n in self.listed.get(uuid, ()) if n != node_id)


def rejoined(nodes: Iterable[SwarmNode]) -> dict[str, frozenset[str]]:
    """Old entries of nodes that joined the swarm again: node id -> the ids of the nodes
    of its hostname that are not down, for each node Swarm lists as down beside one."""
    live: dict[str, set[str]] = {}
    for n in nodes:
        if n.state != "down":
            live.setdefault(n.hostname, set()).add(n.id)
    return {n.id: frozenset(live[n.hostname]) for n in nodes
            if n.state == "down" and n.hostname in live}


def owners(facts: Mapping[str, NodeFacts],
           previous: Mapping[str, str] | None = None,
           rejoined: Mapping[str, AbstractSet[str]] | None = None) -> Owners:
    """Ownership from every node's facts (node id -> facts); ``previous``: the owners
    of an earlier cycle (uuid -> node id), which keep a UUID another node starts to list;
    ``rejoined`` (the function's answer): old entries, which keep no UUID their
    re-joined node lists too."""
    listed: dict[str, list[str]] = {}
    for nid, f in facts.items():
        for u in uuids_of(f):
            listed.setdefault(u, []).append(nid)
    owner: dict[str, str] = {}
    many: dict[str, tuple[str, ...]] = {}
    for u, nids in listed.items():
        if len(nids) > 1:
            many[u] = tuple(sorted(nids))
            nids = [n for n in nids if (rejoined or {}).get(n, frozenset()).isdisjoint(nids)]
        if len(nids) == 1:
            owner[u] = nids[0]
            continue
        kept = (previous or {}).get(u)
        if kept in nids:
            owner[u] = kept
    return Owners(owner, many)


def strays(node_id: str, reported: Iterable[str], own: Owners) -> list[tuple[str, str]]:
    """(uuid, owner node id) for each UUID in ``node_id``'s metrics page that another
    node's facts own: never read for that GPU, and flagged."""
    return [(u, own.owner[u]) for u in reported
            if u in own.owner and own.owner[u] != node_id]


@dataclass(frozen=True)
class Conflict:
    """One node that reports a GPU UUID another node's facts own or also list."""

    node_id: str
    uuid: str
    others: tuple[str, ...]  # the other node ids
    where: str  # "facts" (both list it) | "metrics" (a page reports another's GPU)

    def message(self, host: Mapping[str, str]) -> str:
        who = ", ".join(host.get(n, n[:12]) for n in self.others)
        if self.where == "facts":
            return (f"lists GPU {self.uuid[:64]} in its facts, as {who} does: the daemon "
                    "reads it only from the node that listed it first, and from neither "
                    "when it cannot tell (a new leader): UNKNOWN to the rebalancer; a "
                    "copied GFD file or facts profile, a cloned machine, or a forged agent")
        return (f"reports GPU {self.uuid[:64]} of {who} on its metrics page: ignored for "
                "that GPU (each node speaks only for the GPUs its own facts list)")


def conflicts(facts: Mapping[str, NodeFacts],
              pages: Mapping[str, Iterable[str]] | None = None) -> list[Conflict]:
    """Every conflict: UUIDs in several nodes' facts, and UUIDs on a node's metrics page
    (node id -> the UUIDs it reports) that another node's facts own. Sorted."""
    own = owners(facts)
    out = [Conflict(nid, u, own.others(nid, u), "facts")
           for u, nids in own.listed.items() for nid in nids]
    for nid, reported in (pages or {}).items():
        out += [Conflict(nid, u, (o,), "metrics") for u, o in strays(nid, reported, own)]
    return sorted(out, key=lambda c: (c.where, c.uuid, c.node_id))
