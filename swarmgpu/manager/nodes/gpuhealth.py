"""The daemon's GPU health book: runs ``core.health.step`` over each cycle's facts.

The state machine is pure; this keeps its states across cycles, reads the operator's
``<prefix>gpu.<uuid>.health`` node label, logs each change once, counts GPUs per level on
the daemon's metrics, and hands the cycle facts in which a *failed* GPU is
``healthy=False`` with the reason in ``error``. That is the path every unhealthy GPU takes
already: the allocator gives it no room, so the planner never gives it out. A degraded GPU
stays healthy (used) with its warning in ``error``. Reads and logs only; writes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from loguru import logger
from prometheus_client import CollectorRegistry, Gauge

from swarmgpu.core.config import HealthConfig
from swarmgpu.core.health import (
    GpuState,
    HealthPolicy,
    HealthSignals,
    Level,
    NodeHealth,
    Observation,
    assess,
    step,
    summarise,
)
from swarmgpu.core.metrics_in import GpuMetrics
from swarmgpu.core.model import MAX_GPUS, Gpu, NodeFacts
from swarmgpu.core.statefile import save_json
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.swarm.client import SwarmNode

_OWN_ERROR = "health: "  # our note in Gpu.error, recognised so it is not stacked
STATE_FILE = "gpu-health.json"
FAILING_NODE_GPUS = 2  # this many failed GPUs on one node: the node is reported failing
# The wall clock moved this much more (or less) than the monotonic one between two cycles:
# stepped (NTP, ``date -s``), not slewed (a slew moves both alike)
CLOCK_STEP_S = 2.0


def failing_why(failed: int, gpus: int, lost_s: float | None, grace_s: float) -> str | None:
    """Why a node is failing as a whole, or None: ``failed`` of its ``gpus`` GPUs failed
    (FAILING_NODE_GPUS or more), or its agent lost for ``lost_s`` seconds, at least
    ``health.node_lost_grace_s`` (``grace_s``). The one rule of the health policy and
    ``audit``."""
    if failed >= FAILING_NODE_GPUS:
        return f"{failed} of {gpus} GPUs failed"
    if lost_s is not None and lost_s >= grace_s:
        return f"its agent has not answered for {lost_s:.0f}s"
    return None


def _key(node_id: str, uuid: str) -> str:
    return f"{node_id}/{uuid}"


def _uuid(key: str) -> str:
    return key.partition("/")[2] or key


def operator_key(prefix: str, uuid: str) -> str:
    """The operator's reset label of one GPU (docs/health.md)."""
    return f"{prefix}gpu.{uuid}.health"


class HealthBook:
    def __init__(
        self, cfg: HealthConfig, prefix: str, registry: CollectorRegistry | None = None
    ) -> None:
        self.policy = HealthPolicy(cfg.clean_window_s, cfg.flap_window_s, cfg.max_backoff)
        self.prefix = prefix
        self.states: dict[str, GpuState] = {}
        # States are keyed "<node id>/<uuid>": an agent speaks for its own node only, so a
        # broken or forged one naming another node's GPU UUID cannot fail that GPU.
        self.where: dict[str, tuple[str, int]] = {}  # key -> (hostname, index)
        # What the last save wrote (states, where): a cycle that changed nothing skips it.
        self._saved: tuple[dict[str, GpuState], dict[str, tuple[str, int]]] | None = None
        # node id -> (hostname, summary): by ID, as Swarm knows a node (two nodes may
        # share a hostname: one re-joined under a new ID, or two machines named alike).
        self.nodes: dict[str, tuple[str, NodeHealth]] = {}
        # node id -> uuid -> signals from a metrics page (dcgm-exporter) for GPUs whose
        # facts carry none (an agent on gfd: or topo:): ``feed_metrics``.
        self.scraped: dict[str, dict[str, HealthSignals]] = {}
        self._clocks: tuple[float, float] | None = None  # (wall, monotonic) of the last cycle
        self.gauge = (
            Gauge(
                "swarmgpu_gpus_by_health",
                "GPUs by health state (healthy, degraded, failed; docs/health.md)",
                ["level"],
                registry=registry,
            )
            if registry is not None
            else None
        )

    def apply(
        self, nodes: Sequence[SwarmNode], facts: Mapping[str, FactsResult], now: float | None = None
    ) -> dict[str, FactsResult]:
        """This cycle's facts with each GPU's health state applied (node id -> result)."""
        now = self._now() if now is None else now
        scraped = self.scraped
        out: dict[str, FactsResult] = {}
        seen: list[tuple[SwarmNode, FactsResult, NodeFacts]] = []
        obs: list[Observation] = []
        for node in nodes:
            res = facts.get(node.id)
            if res is None or res.facts is None:
                continue
            seen.append((node, res, res.facts))
            obs += [
                Observation(
                    _key(node.id, g.uuid),
                    assess(
                        g.health if g.health is not None else scraped.get(node.id, {}).get(g.uuid),
                        lost=None if g.healthy else (g.error or "unreadable"),
                    ),
                    node.labels.get(operator_key(self.prefix, g.uuid), ""),
                    # (an agent serving an old read: no proof of a clean window since)
                    read_at=now - res.facts_age_s if res.facts_age_s > 0 else None,
                )
                for g in res.facts.gpus
            ]
        before = {o.uuid: self.states.get(o.uuid) for o in obs}
        # One step for the cycle: a step per node copied every state once per node
        # (8 s a cycle at 5,000 nodes, benchmarks/bench_scale.py).
        self.states = step(self.states, obs, now, self.policy)
        for node, res, f in seen:
            for g in f.gpus:
                k = _key(node.id, g.uuid)
                self.where[k] = (node.hostname, g.index)
                self._log_change(node.hostname, g, before[k], self.states[k], now)
            was_failed = self.nodes[node.id][1].failed if node.id in self.nodes else 0
            n = summarise(self.states, [_key(node.id, g.uuid) for g in f.gpus])
            self.nodes[node.id] = (node.hostname, n)
            if n.failed >= FAILING_NODE_GPUS > was_failed:  # said once, when it starts
                logger.bind(node=node.hostname).warning(
                    "node {} is failing: {} of {} GPUs failed ({})",
                    node.hostname,
                    n.failed,
                    len(f.gpus),
                    ", ".join(_uuid(k) for k in n.failed_uuids),
                )
            marked = self._marked(node.id, f)
            out[node.id] = res if marked is f else replace(res, facts=marked)
        self._prune({n.id for n in nodes}, seen)
        if self.gauge is not None:
            count = dict.fromkeys(Level, 0)  # one pass over the states, not one per level
            where = self.where
            for u, st in self.states.items():
                if u in where:
                    count[st.level] += 1
            for lv in Level:
                self.gauge.labels(level=str(lv)).set(count[lv])
        return out

    def _now(self) -> float:
        """The wall clock now, the states' times moved by any step of it since the last
        cycle: the clean and flap windows are counted in the daemon's time, as a loss is
        (``agentbook.lost_s``). Unmoved, NTP stepping it an hour ahead brought every failed
        GPU back at once, and an hour back kept them failed an hour longer."""
        wall, mono = time.time(), time.monotonic()
        if self._clocks is not None:
            step = (wall - self._clocks[0]) - (mono - self._clocks[1])
            if abs(step) >= CLOCK_STEP_S:
                logger.info("GPU health: the wall clock stepped {:+.0f}s; the GPUs' clean "
                            "windows keep their length", step)
                self.states = {k: st.shifted(step) for k, st in self.states.items()}
        self._clocks = (wall, mono)
        return wall

    def stand_by(self) -> None:
        """The GPUs-by-health gauge at 0 while the daemon stands by (the leader's
        counts them); the states are kept (a new term goes on from them), the last
        term's metrics pages are not: read however long ago, an old page's XID would
        fail a GPU mended since at the new term's first cycle."""
        self.scraped = {}
        if self.gauge is not None:
            for lv in Level:
                self.gauge.labels(level=str(lv)).set(0)

    def _prune(
        self, live: set[str], seen: Sequence[tuple[SwarmNode, FactsResult, NodeFacts]]
    ) -> None:
        """Forget the states of nodes Swarm no longer lists (a replaced node joins under a
        new ID), and of GPUs a node's agent no longer lists that hold nothing to remember;
        those that do (failed, flapping, XIDs counted: no news is not good news) are kept
        up to MAX_GPUS a node, the latest bad first. Else a month of replaced nodes, or an
        agent listing new UUIDs each cycle, grew the book and its file for good."""
        listed = {_key(node.id, g.uuid) for node, _res, f in seen for g in f.gpus}
        read = {node.id for node, _res, _f in seen}
        drop: set[str] = set()
        remembered: dict[str, list[str]] = {}
        for k, st in self.states.items():
            nid = k.partition("/")[0]
            if nid not in live:
                drop.add(k)
            elif nid in read and k not in listed:
                if (
                    st.level is Level.HEALTHY
                    and not st.failures
                    and not st.xid_seen_until
                    and not st.xid_ahead
                ):
                    drop.add(k)
                else:
                    remembered.setdefault(nid, []).append(k)
        for keys in remembered.values():
            if len(keys) > MAX_GPUS:
                keys.sort(key=lambda k: self.states[k].last_bad_at, reverse=True)
                drop.update(keys[MAX_GPUS:])
        if drop:
            self.states = {k: v for k, v in self.states.items() if k not in drop}
            self.where = {k: v for k, v in self.where.items() if k not in drop}
        if not self.nodes.keys() <= live:
            self.nodes = {nid: v for nid, v in self.nodes.items() if nid in live}

    def feed_metrics(self, pages: Mapping[str, Mapping[str, GpuMetrics]]) -> None:
        """The health fields of this cycle's metrics pages (node id -> uuid -> metrics;
        only pages trusted for moves: ``rebalance.trust_unauthenticated_metrics``), for the
        next ``apply``: a GPU whose facts carry no health signals is judged by them (a node
        that runs dcgm-exporter beside an agent on gfd: or topo:). A page counts for the
        node it was scraped from, and only for the GPUs that node's facts list."""
        self.scraped = {
            nid: got
            for nid, page in pages.items()
            if (got := {u: h for u, m in page.items() if (h := m.health()) is not None})
        }

    def _marked(self, node_id: str, f: NodeFacts) -> NodeFacts:
        if all(self.states[_key(node_id, g.uuid)].level is Level.HEALTHY for g in f.gpus):
            return f  # nothing to mark: the same facts, not a copy
        gpus = []
        for g in f.gpus:
            st = self.states[_key(node_id, g.uuid)]
            raw = g.error if g.error and not g.error.startswith(_OWN_ERROR) else None
            if st.level is Level.HEALTHY:  # (a lost GPU is never healthy: lost fails)
                gpus.append(g)
                continue
            # Hysteresis decides, not this read: a GPU lost a moment ago that reads
            # again stays failed (healthy=False) until its clean window has passed.
            note = f"{_OWN_ERROR}{st.level}: {st.reason} (suggested: {st.action})"
            gpus.append(
                replace(
                    g,
                    healthy=st.level is not Level.FAILED,
                    error="; ".join(x for x in (note, raw) if x),
                )
            )
        return replace(f, gpus=tuple(gpus))

    def _log_change(
        self, host: str, g: Gpu, old: GpuState | None, new: GpuState, now: float
    ) -> None:
        was = old.level if old is not None else Level.HEALTHY
        if new.level is was:
            return
        log = logger.bind(node=host, gpu=g.uuid)
        if new.level is Level.HEALTHY:
            log.info("GPU {} on {} is healthy again: {}", g.index, host, new.reason)
        else:
            log.warning(
                "GPU {} on {} is {}: {} (suggested action: {})",
                g.index,
                host,
                new.level,
                new.reason,
                new.action,
            )

    # --- persistence: the daemon saves each cycle; plan/status/audit read it -------------
    def save(self, state_dir: str) -> None:
        """Atomic write (temp file + rename) of every state and where each GPU is; no
        write when nothing changed since the last one (steady cycles at 40,000 GPUs
        would otherwise spend seconds dumping the same states)."""
        seen = (dict(self.states), dict(self.where))
        if seen == self._saved:
            return
        save_json(
            state_dir,
            STATE_FILE,
            {
                u: {**st.to_saved(), "where": list(self.where.get(u, ("", -1)))}
                for u, st in self.states.items()
            },
        )
        self._saved = seen

    def load(self, state_dir: str) -> None:
        """The states the daemon saved (none when the file is missing or damaged)."""
        try:
            data = json.loads((Path(state_dir) / STATE_FILE).read_text())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        for uuid, d in list(data.items())[:65536]:
            st = GpuState.from_saved(d)
            if st is not None and isinstance(uuid, str) and "/" in uuid:  # "<node>/<uuid>"
                where = d.get("where")
                if isinstance(where, list) and len(where) == 2:
                    if isinstance(where[1], bool) or not isinstance(where[1], int):
                        continue  # damaged: int() raised (a text, inf) from the load
                    self.where[uuid] = (str(where[0]), where[1])
                self.states[uuid] = st

    def view(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every GPU not healthy, for status, plan, audit and the map."""
        now = time.time() if now is None else now
        rows = []
        for uuid, st in sorted(self.states.items()):
            if st.level is Level.HEALTHY or uuid not in self.where:
                continue
            host, index = self.where[uuid]
            rows.append({"node": host, "gpu": index, "uuid": _uuid(uuid), **st.to_dict(now)})
        return rows

    def failing_nodes(self, min_failed: int = FAILING_NODE_GPUS) -> list[str]:
        """Nodes with several failed GPUs: reported as failing as a whole."""
        return sorted(h for h, n in self.nodes.values() if n.failed >= min_failed)


def apply_saved(
    snap_nodes: Sequence[SwarmNode],
    facts: dict[str, FactsResult],
    cfg: HealthConfig,
    prefix: str,
    state_dir: str,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """For plan, status and audit (their own snapshot): the daemon's saved states applied
    to ``facts`` in place, so they show and plan what the daemon does; not saved back.
    Returns the rows of GPUs not healthy."""
    book = HealthBook(cfg, prefix)
    book.load(state_dir)
    facts.update(book.apply(snap_nodes, facts, now))
    return book.view(now)


def level_of(g: Gpu) -> tuple[Level, str]:
    """A GPU's level in a cycle's facts (after ``apply``/``apply_saved``) and its text
    ("failed: <reason> (suggested: <action>)"); a GPU unhealthy without our note (facts
    not run through the book) counts as failed with the agent's error."""
    if g.error and g.error.startswith(_OWN_ERROR):
        text = g.error.split("; ")[0][len(_OWN_ERROR) :]
        name = text.partition(":")[0]
        if name in {str(lv) for lv in Level}:
            return Level(name), text
    if not g.healthy:
        return Level.FAILED, f"failed: {g.error or 'unhealthy'}"
    return Level.HEALTHY, ""


def health_rows(facts: Mapping[str, FactsResult]) -> list[dict[str, Any]]:
    """GPUs whose facts carry a health state (after ``apply``/``apply_saved``): node,
    GPU, UUID and the text (level, reason, suggested action), for plan's output."""
    rows = []
    for res in facts.values():
        for g in res.facts.gpus if res.facts is not None else ():
            if g.error and g.error.startswith(_OWN_ERROR):
                rows.append(
                    {
                        "node": res.hostname,
                        "gpu": g.index,
                        "uuid": g.uuid,
                        "health": g.error.split("; ")[0][len(_OWN_ERROR) :],
                    }
                )
    return sorted(rows, key=lambda r: (str(r["node"]), int(r["gpu"])))
