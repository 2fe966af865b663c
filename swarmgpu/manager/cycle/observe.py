"""The daemon's view for people: the cluster document behind the GPU map and
`/api/v1/cluster`, and per-service GPU use as Prometheus gauges."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from loguru import logger
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.commands.auditmemo import ServerMemo
from swarmgpu.manager.cycle.grants import rows
from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.nodes.sync import facts_by_node
from swarmgpu.manager.nodes.termlooks import TermLooks, as_counted
from swarmgpu.manager.services import overshare
from swarmgpu.manager.web import webmap
from swarmgpu.manager.web.cluster_view import SCHEMA, build_cluster
from swarmgpu.manager.web.history import History

MovesView = Callable[[], dict[str, Any]]
# ``node`` is the hostname, for people; ``node_id`` tells two nodes of one hostname apart.
SERVICE_LABELS = ("service", "node", "node_id", "gpu")


class ObserveStep(Step):
    """Build the cluster document from this cycle (plan, metrics, findings, moves),
    judge each holder's GPU memory against its share (the over-share watch), record the
    history, set the per-service gauges, and serve the map."""

    name = "observe"
    provides = frozenset({Slot.OVERSHARE})

    def __init__(self, host: CycleHost, *, placement: bool,
                 moves: MovesView | None = None, looks: TermLooks | None = None) -> None:
        """``placement``: the placement step runs before this one; ``moves``: the
        rebalancer's view (its proposal and recent moves), when it runs before this;
        ``looks``: its first looks, when it runs (shared, not one each)."""
        self.host = host
        self.cfg = cfg = host.cfg
        self.placement = placement
        self.moves = moves
        self.requires = frozenset({Slot.SNAPSHOT, Slot.FACTS, Slot.METRICS, Slot.UNGRANTED,
                                   *([Slot.PLACEMENT] if placement else []),
                                   *([Slot.MOVES] if moves is not None else [])})
        self.lock = threading.Lock()
        self.doc = _no_cluster()
        self.history = History(cfg.history)  # bounded: history.samples x history.max_gpus
        self.watch = overshare.Watch()  # holders over their GPU share, since when
        self.gauges = ServiceGauges(host.metrics.registry)
        self.servers = ServerMemo()  # audit's model-server findings, read once a spec
        # Each node's first look this term: an agent's loss counted as the health policy
        # counts it (``termlooks``), on the monotonic clock (the tests step it); the
        # rebalancer's own, so that a cycle cut between the two steps leaves one first
        # look (one each: the map's began a cycle after the gauge's)
        self.looks = looks if looks is not None else TermLooks()
        self.clock: Callable[[], float] = time.monotonic
        self.primed = webmap.register(host.http_routes, self.current,
                                      query_routes=host.http_query_routes,
                                      history=self.history)
        logger.debug("GPU map at / and {} ({} bytes of assets)", webmap.CLUSTER_PATH,
                     len(json.dumps(self.current())))

    def stand_by(self) -> None:
        """Not the leader: a new term opens each over-share window again (another leader
        read the holders meanwhile; a window of the last term would restart a holder
        on one reading). Its per-service gauges are the new leader's to export: kept,
        they were this term's last values, frozen, beside the leader's. So is a
        follower's cluster document: kept, the map and /api/v1/cluster served the last
        term's cluster as current; while who leads is unknown (the engine away) it
        stays, said so (``current``)."""
        self.watch = overshare.Watch(clock=self.watch.clock)
        self.gauges.clear()
        self.looks.clear()
        if not self.host.leader and self.host.engine_error is None and self.doc["generated_at"]:
            with self.lock:
                self.doc = _no_cluster()  # (as a daemon's that never led)
            self.primed()

    def run(self, session: CycleSession) -> None:
        cfg, host = self.cfg, self.host
        snap = session.snapshot
        # This cycle's pages (the rebalancer's too): one scrape per node per cycle.
        metrics = session.gpu_metrics
        # Live facts only (health states applied), no stand-ins: a process is tied to a
        # GPU its node's agent lists now.
        att = overshare.attribution_now(snap, facts_by_node(snap), metrics, cfg.sync.prefix)
        uses = att.uses
        self.watch.update(uses, att.unattributed)
        session.overshare = self.watch
        now = self.clock()  # (the agents' records dated as the health policy counts them)
        saved = as_counted(host.book, self.looks.look((n.id for n in snap.nodes), now),
                           snap.taken_at, now)
        doc = build_cluster(
            snap, session.placement if self.placement else None, prefix=cfg.sync.prefix,
            metrics=metrics, saved_agents=saved,
            # The same audit as `swarmgpu audit`/`status`: with the agents' records, a node
            # whose agent is lost past the grace is agent-lost on the map too.
            findings=audit(snap, prefix=cfg.sync.prefix, saved_agents=saved,
                           generic_resource_kind=cfg.placement.generic_resource_kind,
                           node_lost_grace_s=cfg.health.node_lost_grace_s, metrics=metrics,
                           agent_service=cfg.agents.service, servers=self.servers,
                           classes=cfg.preemption.classes)
            + overshare.findings(uses, att.unattributed),
            moves=self.moves() if self.moves else None, leader=host.leader,
            zone_label=cfg.placement.zone_label, ungranted=rows(session.ungranted),
            generic_resource_kind=cfg.placement.generic_resource_kind,
            agent_service=cfg.agents.service,
            node_lost_grace_s=cfg.health.node_lost_grace_s,
        )
        overshare.annotate(doc, uses, att.unattributed)
        self.history.record(doc)
        self.gauges.set(doc, att.unattributed)
        with self.lock:
            self.doc = doc
        self.primed()  # the light map document, encoded now rather than at a page's first poll

    def current(self) -> dict[str, Any]:
        """The last cluster document, with leadership as of now: while the engine cannot
        be asked, ``engine`` says "unreachable", or "locked", "error" or "inactive" where
        it answers with its swarm node stalled (``host.engine_state``; who leads is
        unknown, as /healthz says), and ``leader`` false (no write goes out; a reader of
        ``leader`` alone sees a daemon that does not act). ``last_cycle``: how the
        daemon's last cycle ended, /healthz's word ("over_budget", "stopped", "aborted",
        "ok"; None before one), ``last_cycle_at`` when (Unix time): a cycle cut short
        builds no document, and the map would draw the last whole one's as current."""
        with self.lock:
            doc = dict(self.doc)
        reachable = self.host.engine_error is None
        doc["leader"] = self.host.leader and reachable
        doc["engine"] = "reachable" if reachable else self.host.engine_state
        doc["last_cycle"] = self.host.last_cycle
        doc["last_cycle_at"] = self.host.last_cycle_ended
        return doc


def _no_cluster() -> dict[str, Any]:
    """The cluster document of a daemon that has not led (none built yet)."""
    return {"schema": SCHEMA, "generated_at": 0.0, "leader": False, "engine": "reachable",
            "nodes": [], "services": [], "pending": [],
            "moves": {"proposed": [], "recent": []}}


# (name, help, label names) of each family ServiceGauges serves, in the order served.
_FAMILIES = (
    ("swarmgpu_service_gpu_util", "GPU utilisation (%) of GPUs a service holds",
     SERVICE_LABELS),
    ("swarmgpu_service_gpu_memory_used_mib",
     "GPU memory used (MiB) by a service's processes on a GPU it holds "
     "(where the agent lists processes; elsewhere the GPU's used memory)", SERVICE_LABELS),
    ("swarmgpu_service_gpu_memory_share_mib",
     "GPU memory (MiB) a service's share of a GPU is worth (share x memory)", SERVICE_LABELS),
    ("swarmgpu_unattributed_gpu_memory_mib",
     "GPU memory (MiB) used by processes no task Swarm runs on that node accounts for "
     "(counted for no service)", SERVICE_LABELS[1:]),
)
Rows = dict[tuple[str, ...], float]  # label values -> value, for one family


class ServiceGauges(Collector):
    """Per-service GPU use and unattributed memory, set from each cluster document.

    Each series names its node by hostname (``node``, for people) and by Swarm's node ID
    (``node_id``): two nodes may share a hostname (one re-joined under a new ID, or two
    machines named alike), and by hostname alone one's series overwrote the other's.

    A collector, not four Gauges: /metrics is served from another thread, and Gauges
    cleared then set one by one showed a scrape in between some or all series missing
    (absent() alerts and rate/avg panels flapped). A cycle's rows are built aside and
    swapped in whole (prometheus_client's custom collector)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.rows: tuple[Rows, ...] = tuple({} for _ in _FAMILIES)
        r.register(self)

    def set(self, doc: dict[str, Any], unattributed: Iterable[overshare.Unattributed]) -> None:
        util: Rows = {}
        mem: Rows = {}
        share_mem: Rows = {}
        stray: Rows = {}
        for x in unattributed:  # summed: several processes on one GPU
            k = (str(x.hostname), str(x.node_id), str(x.gpu))
            stray[k] = stray.get(k, 0.0) + float(x.used_mib)
        for n in doc["nodes"]:
            for g in n["gpus"]:
                for h in g["holders"]:
                    # A key seen again keeps its first place and takes the last value, as
                    # a Gauge's child did.
                    labels = (str(h["service"]), str(n["hostname"]), str(n["id"]),
                              str(g["index"]))
                    if g["util_pct"] is not None:
                        util[labels] = float(g["util_pct"])
                    own = h.get("memory_used_mib", g["memory_used_mib"])
                    if own is not None:
                        mem[labels] = float(own)
                    if "memory_share_mib" in h:
                        share_mem[labels] = float(h["memory_share_mib"])
                    elif g.get("memory_mib"):
                        share_mem[labels] = float(g["memory_mib"] * h["share_milli"] // 1000)
        # One reference assignment, atomic in CPython (the GIL): a scrape reads the whole
        # last cycle or the whole new one, never one half-built.
        self.rows = (util, mem, share_mem, stray)

    def clear(self) -> None:
        """No series (the daemon stands by: the leader's daemon exports them)."""
        self.rows = tuple({} for _ in _FAMILIES)

    def collect(self) -> Iterator[Metric]:
        rows = self.rows  # read once: every family from the same cycle
        for (name, text, labels), part in zip(_FAMILIES, rows, strict=True):
            fam = GaugeMetricFamily(name, text, labels=labels)
            for k, v in part.items():
                fam.add_metric(k, v)
            yield fam

    def describe(self) -> Iterator[Metric]:
        """The names, for the registry's check of duplicates (as a Gauge's were)."""
        for name, text, labels in _FAMILIES:
            yield GaugeMetricFamily(name, text, labels=labels)
