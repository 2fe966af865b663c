"""Per-GPU and per-node time windows over scraped metrics, kept across cycles.

Each cycle records one point per GPU (utilisation, or ``None`` when the node's page was
unusable or the GPU missing from it) and one per node (allocation fragmentation from
the ledger); the trackers of :mod:`swarmgpu.manager.rebalance.windows` turn them into TRUE / FALSE /
UNKNOWN with hysteresis. Broken, late or missing metrics make a GPU UNKNOWN, and a node
with any UNKNOWN GPU is not "known": no move starts from or lands on it because of them.

Each node speaks only for its own GPUs (:mod:`swarmgpu.manager.nodes.gpuowners`): series and
signals are keyed by (node id, UUID), a node's page is read only for the GPUs its facts
list, and a UUID that two nodes' facts list is read only from the node that owned it
before (this daemon's memory), else from neither (UNKNOWN); both are flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.nodes.gpuowners import Owners, owners, strays
from swarmgpu.manager.placement import Holding
from swarmgpu.manager.rebalance.scrape import NodeScrape
from swarmgpu.manager.rebalance.windows import (
    Condition,
    ConditionTracker,
    SeriesStore,
    State,
    coverage_problem,
)

UTIL = "util_pct"
FRAG = "frag_pct"

GpuKey = tuple[str, str]  # (node id, GPU UUID): a node speaks only for its own GPUs


def series_key(node_id: str, uuid: str) -> str:
    """The store's key of one node's GPU (a node's own key is its id alone)."""
    return f"{node_id}/{uuid}"


@dataclass(frozen=True)
class GpuSignal:
    uuid: str
    node_id: str
    index: int
    util_pct: float | None  # last reading; None: unknown
    hot: State
    idle: State
    why_unknown: str | None = None


@dataclass(frozen=True)
class NodeSignal:
    node_id: str
    hostname: str
    known: bool
    why_unknown: str | None
    frag_pct: float
    frag: State


def conditions(cfg: RebalanceConfig) -> tuple[Condition, Condition, Condition]:
    """The three windows every GPU and node is judged by: hot (the hotspot policy's
    thresholds), idle and fragmented (consolidation's)."""
    hs, cs = cfg.hotspot, cfg.consolidation
    hot = Condition(UTIL, ">", hs.util_pct, hs.window_s,
                    clear_threshold=hs.clear_pct, max_gap_s=cfg.max_gap_s,
                    min_samples=cfg.min_samples)
    idle = Condition(UTIL, "<", cs.idle_util_pct, cs.idle_window_s,
                     clear_threshold=cs.idle_clear_pct, max_gap_s=cfg.max_gap_s,
                     min_samples=cfg.min_samples)
    frag = Condition(FRAG, ">", cs.frag_pct, cs.frag_window_s, max_gap_s=cfg.max_gap_s,
                     min_samples=cfg.min_samples)
    return hot, idle, frag


def fragmentation_pct(node_facts: NodeFacts, holdings: Mapping[str, Holding]) -> float:
    """Share of the node's free GPU capacity that lies on partly used GPUs (0-100)."""
    used: dict[str, int] = {}
    for h in holdings.values():
        for u, m in zip(h.uuids, h.milli, strict=True):
            used[u] = used.get(u, 0) + m
    free_total = partial = 0
    for g in node_facts.gpus:
        if g.mig_enabled or not g.healthy:
            continue
        free = max(0, 1000 - used.get(g.uuid, 0))
        free_total += free
        if 0 < free < 1000:
            partial += free
    return 100.0 * partial / free_total if free_total else 0.0


def _shared(nid: str, uuid: str, shared: tuple[str, ...], own: Owners,
            hostnames: Mapping[str, str], rejoined: Mapping[str, AbstractSet[str]]) -> str:
    """What is said of ``nid``'s GPU ``uuid`` that the facts of ``shared`` list too: from
    which node it is read, and why that one."""
    keeper = own.owner.get(uuid)
    again = [o for o in (nid, *shared) if keeper in rejoined.get(o, ())]
    first = (f", where its node joined again (the old entry {again[0]} is down: docker "
             f"node rm {again[0]})" if again else ", where it was first")
    read = (f"here{first}" if keeper == nid else
            f"on {hostnames.get(keeper, keeper[:12])}{first}" if keeper else "on neither")
    names = ", ".join(hostnames.get(o, o[:12]) for o in shared)
    return f"its UUID is in the facts of {names} too: read {read}"


class Signals:
    """The windows of one daemon (the leader's memory; a new leader starts UNKNOWN)."""

    def __init__(self, cfg: RebalanceConfig) -> None:
        self.cfg = cfg
        self.hot_c, self.idle_c, self.frag_c = conditions(cfg)
        longest = max(self.hot_c.window_s, self.idle_c.window_s, self.frag_c.window_s)
        self.store = SeriesStore(longest + 2 * cfg.max_gap_s)
        self.hot = ConditionTracker(self.hot_c, self.store)
        self.idle = ConditionTracker(self.idle_c, self.store)
        self.frag = ConditionTracker(self.frag_c, self.store)
        self.gpus: dict[GpuKey, GpuSignal] = {}
        self.nodes: dict[str, NodeSignal] = {}
        self.uuid_owner: dict[str, str] = {}  # uuid -> node id, as of the last cycle

    def observe(self, scrapes: Mapping[str, NodeScrape], facts: Mapping[str, NodeFacts],
                hostnames: Mapping[str, str],
                ledger: Mapping[str, Mapping[str, Holding]], now: float,
                rejoined: Mapping[str, AbstractSet[str]] | None = None) -> list[str]:
        """Record this cycle's readings and re-judge every window. Returns warnings.
        ``rejoined``: ``gpuowners.rejoined`` of Swarm's node list (old entries of nodes
        that joined again own none of their GPUs)."""
        warnings: list[str] = []
        per_node: dict[str, dict[str, Holding]] = {}
        for svc, by_node in ledger.items():
            for nid, h in by_node.items():
                per_node.setdefault(nid, {})[svc] = h
        gpus: dict[GpuKey, GpuSignal] = {}
        nodes: dict[str, NodeSignal] = {}
        own = owners(facts, self.uuid_owner, rejoined)
        self.uuid_owner = dict(own.owner)
        for nid, f in facts.items():
            if not f.gpus:
                continue
            host = hostnames.get(nid, nid[:12])
            sc = scrapes.get(nid)
            res = sc.result if sc is not None else None
            node_why: str | None = None
            if sc is None:
                node_why = "no metrics scraped (node not ready?)"
            elif res is None:
                node_why = sc.error or "metrics unusable"
            if node_why is not None:
                warnings.append(f"{host}: {node_why}; node is UNKNOWN, no move from or to it")
            elif sc is not None and sc.error:
                warnings.append(f"{host}: {sc.error}")
            if res is not None:
                for u, other in strays(nid, res.samples_by_uuid, own):
                    warnings.append(f"{host}: its metrics page reports GPU {u[:64]} of "
                                    f"{hostnames.get(other, other[:12])}: ignored for that "
                                    "GPU (a node speaks only for its own)")
            for g in f.gpus:
                if g.mig_enabled:
                    continue  # MIG GPUs report per instance; they are never moved
                ours = own.speaks_for(nid, g.uuid)
                m = res.samples_by_uuid.get(g.uuid) if res is not None and ours else None
                util = m.util_pct if m is not None else None
                key = series_key(nid, g.uuid)
                self.store.add(key, UTIL, now, util)
                hot = self.hot.update(key, now)
                idle = self.idle.update(key, now)
                why = None
                if shared := own.others(nid, g.uuid):
                    said = _shared(nid, g.uuid, shared, own, hostnames, rejoined or {})
                    warnings.append(f"{host}: GPU {g.index} {g.uuid[:64]}: {said} (swarmgpu "
                                    "audit: gpu-uuid-conflict)")
                    if not ours:
                        why = said
                if ours and hot is State.UNKNOWN:
                    why = node_why or coverage_problem(
                        self.store.points(key, UTIL), now, self.hot_c) or "unknown"
                gpus[(nid, g.uuid)] = GpuSignal(g.uuid, nid, g.index, util, hot, idle, why)
            frag = fragmentation_pct(f, per_node.get(nid, {}))
            self.store.add(nid, FRAG, now, frag)
            fst = self.frag.update(nid, now)
            unknown = [s for s in gpus.values() if s.node_id == nid and s.hot is State.UNKNOWN]
            why_n = node_why or (f"GPU {unknown[0].index}: {unknown[0].why_unknown}"
                                 if unknown else None)
            nodes[nid] = NodeSignal(nid, host, node_why is None and not unknown, why_n, frag, fst)
        self.gpus, self.nodes = gpus, nodes
        live = {series_key(n, u) for n, u in gpus} | set(nodes)
        for key in self.store.keys() - live:
            self.store.forget(key)  # GPUs and nodes that left, their windows' states too
            for tracker in (self.hot, self.idle, self.frag):
                tracker.forget(key)
        return warnings
