"""The cluster at a glance: one document for `swarmgpu status --json`, the GPU map
(`/api/v1/cluster`) and scripts. Pure over a snapshot, a placement plan and metrics.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from swarmgpu.core.config import Config
from swarmgpu.core.health import xid_info
from swarmgpu.core.metrics_in import GPU_TEMP, POWER, GpuMetrics
from swarmgpu.core.model import NodeFacts, is_nvlink
from swarmgpu.core.peertext import ID_WIDTH, cell, cut_alike, text_line
from swarmgpu.manager.commands.audit import Finding
from swarmgpu.manager.commands.movenames import move_names, node_list
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import PlacementPlan, read_ledger
from swarmgpu.manager.placement.cpunodes import gpu_hint
from swarmgpu.manager.placement.keys import MEANT_STATES
from swarmgpu.manager.rebalance.attribution import service_states
from swarmgpu.manager.rebalance.record import moving
from swarmgpu.manager.rebalance.scrape import scrape_all
from swarmgpu.manager.services.startfirst import STALLED
from swarmgpu.manager.web.factsage import GRACE_S, answered
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.identity import scrape_auth
from swarmgpu.swarm.labels import (
    GPUS_UNREAD_FIX,
    desired_labels,
    gpus_unread_why,
    label_sync_labels,
)

SCHEMA = "swarmgpu.cluster/v1"

# dcgm-exporter health fields (the agent's /metrics uses the same names)
XID = "DCGM_FI_DEV_XID_ERRORS"  # value of the last XID error; 0 = none
ECC_SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"  # single-bit (corrected) since the driver loaded
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"  # double-bit (uncorrectable)
FB_USED = "DCGM_FI_DEV_FB_USED"


def _num(gm: GpuMetrics | None, metric: str, digits: int | None = None) -> float | int | None:
    if gm is None:
        return None
    v = gm.values.get(metric)
    if v is None:  # a MIG GPU: dcgm-exporter repeats device values on each GPU instance
        parts = [m.values[metric] for m in gm.mig.values() if metric in m.values]
        v = max(parts) if parts else None
    if v is None:
        return None
    return round(v) if digits is None else round(v, digits)


def health_fields(gm: GpuMetrics | None) -> dict[str, float | int | None]:
    """Temperature, power, last XID and ECC counts of one GPU; None = not reported."""
    return {"temp_c": _num(gm, GPU_TEMP), "power_w": _num(gm, POWER, 1),
            "xid": _num(gm, XID), "ecc_sbe": _num(gm, ECC_SBE), "ecc_dbe": _num(gm, ECC_DBE)}


def xid_effect(gm: GpuMetrics | None) -> str | None:
    """What the last XID means (core.health's table): none (the application's error),
    degrade or fail; None when no XID is reported."""
    x = _num(gm, XID)
    return str(xid_info(int(x)).effect) if x else None


def mig_used(gm: GpuMetrics | None, gi_id: int | None) -> int | None:
    """A MIG slice's memory in use, from dcgm-exporter's per-GPU-instance samples."""
    if gm is None or gi_id is None or gi_id not in gm.mig:
        return None
    v = gm.mig[gi_id].values.get(FB_USED)
    return round(v) if v is not None else None


def gpu_metrics(nodes: Sequence[SwarmNode], cfg: Config) -> dict[str, dict[str, GpuMetrics]]:
    """node id -> GPU UUID -> metrics, scraped the way the rebalancer scrapes them
    (``rebalance.metrics_url_template``); unusable pages are left out, and under
    ``agents.identity: none`` a node of no hostname is not read, as the daemon's scrape
    (its facts are refused: its page would match no GPU)."""
    auth = scrape_auth(cfg)
    if cfg.agents.identity == "none":
        nodes = [n for n in nodes if n.hostname]
    scrapes = scrape_all(nodes, cfg.rebalance.metrics_url_template,
                         cfg.rebalance.scrape_timeout_s, cfg.agents.parallel, auth.tls, auth.token)
    return {nid: sc.result.samples_by_uuid for nid, sc in scrapes.items() if sc.result}


def _groups(facts: NodeFacts) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    n = len(facts.gpus)
    if facts.links:
        seen: set[int] = set()
        k = 0
        for i in range(n):
            if i in seen:
                continue
            grp = [i] + [j for j in range(n) if j != i and is_nvlink(facts.link(i, j))]
            if len(grp) > 1:
                k += 1
                seen.update(grp)
                out.append({"kind": "nvlink", "name": f"NVLink group {k}", "gpus": sorted(grp)})
        if not out:  # PCIe switch groups (PIX) when there is no NVLink
            k = 0
            for i in range(n):
                if i in seen:
                    continue
                grp = [i] + [j for j in range(n) if j != i and facts.link(i, j) == "PIX"]
                if len(grp) > 1:
                    k += 1
                    seen.update(grp)
                    out.append({"kind": "pcie", "name": f"PCIe switch {k}", "gpus": sorted(grp)})
    numa: dict[int, list[int]] = {}
    for i, g in enumerate(facts.gpus):
        if g.numa_node is not None:
            numa.setdefault(g.numa_node, []).append(i)
    for node_id, gpus in sorted(numa.items()):
        out.append({"kind": "numa", "name": f"NUMA node {node_id}", "gpus": gpus})
    return out


def build_cluster(
    snap: Snapshot,
    plan: PlacementPlan | None,
    *,
    prefix: str = "swarmgpu.",
    metrics: Mapping[str, Mapping[str, GpuMetrics]] | None = None,
    saved_agents: Mapping[str, Mapping[str, Any]] | None = None,
    findings: Sequence[Finding] = (),
    moves: Mapping[str, Any] | None = None,
    leader: bool = True,
    zone_label: str = "topology.zone",
    ungranted: Sequence[Mapping[str, Any]] = (),
    generic_resource_kind: str = "",
    agent_service: str = "",
    node_lost_grace_s: float = GRACE_S,
) -> dict[str, Any]:
    """``findings``: the audit's (``commands.audit.audit``); each node's own (its ID in
    ``Finding.node``) are listed on it, so the map marks it with their text.
    ``ungranted``: the services that see GPUs without a grant (``cycle.grants.rows``);
    ``generic_resource_kind``: ``placement.generic_resource_kind``, ``agent_service``:
    ``agents.service`` (a node advertising it, or running a task of that service, is a
    GPU node, as label sync reads it: ``gpu_hint``); ``node_lost_grace_s``:
    ``health.node_lost_grace_s``, from which an agent's facts are stale (``factsage``)."""
    metrics = metrics or {}
    saved_agents = saved_agents or {}
    agents = snap.agent_nodes(agent_service)
    holders = _Holders(snap, plan, prefix)
    on_node: dict[str, list[dict[str, str]]] = {}  # node ID -> its findings, as the map marks it
    for f in findings:
        if f.node is not None:
            on_node.setdefault(f.node, []).append(
                {"kind": f.kind, "message": f.message, "severity": f.severity})
    nodes_out = []
    for n in sorted(snap.nodes, key=lambda n: n.hostname):
        res = snap.facts.get(n.id)
        facts = res.facts if res else None
        agent, labels_state, drift = _agent_and_labels(n, res, saved_agents.get(n.id, {}),
                                                       prefix, generic_resource_kind, agents,
                                                       node_lost_grace_s)
        labels_state = "kept" if n.unread else labels_state  # none written (swarmnode)
        gpus_out = (_gpu_rows(facts, metrics.get(n.id, {}), *holders.on(n.id))
                    if facts is not None else [])
        nodes_out.append({
            "id": n.id, "hostname": n.hostname, "role": n.role, "state": n.state,
            "availability": n.availability, "addr": n.addr, "agent": agent,
            "unread": n.unread or None,  # a part of the engine's answer (swarmnode)
            "zone": n.labels.get(zone_label) or None,
            "labels_state": labels_state, "drift": drift,
            # what its GPUs cannot be read against: label sync's labels as they stand
            **({"labels_kept": _ours(n, prefix)} if labels_state == "gpus-unread" else {}),
            "driver_version": facts.driver_version if facts else None,
            "cuda_driver_version": facts.cuda_driver_version if facts else None,
            "product": facts.gpus[0].product if facts and facts.gpus else None,
            # unknown (None) when the agent cannot list them: not "0 GPUs"
            "gpu_count": None if facts and facts.gpus_unread else len(facts.gpus) if facts
            else 0,
            "gpus": gpus_out,
            "links": [list(r) for r in facts.links] if facts else [],
            "groups": _groups(facts) if facts else [],
            "findings": on_node.get(n.id, []),  # the audit's, node-failing among them
        })
    services_out = _services(snap, plan, moves, prefix)
    pending = [{"service": sp.name, "request": sp.request_text, "reason": sp.reason}
               for sp in (plan.services if plan else []) if sp.status == "pending"]
    return {
        # built from what the engine said: it was reachable (the daemon's document says
        # "unreachable" while its engine cannot be asked, observe.current)
        "schema": SCHEMA, "generated_at": time.time(), "leader": leader, "engine": "reachable",
        "nodes": nodes_out, "services": services_out, "pending": pending,
        "moves": dict(moves) if moves else {"proposed": [], "recent": []},
        "workload": dict(plan.workload) if plan else {},
        "queues": list(plan.queues) if plan else [],  # use against quota (placement.queues)
        "ungranted": [dict(u) for u in ungranted],  # GPU access without a grant
        # the nodes and services the engine listed without an ID, left out (swarm.unkeyed)
        "unkeyed": list(snap.unkeyed.said()),
    }


def _agent_and_labels(n: SwarmNode, res: FactsResult | None, saved: Mapping[str, Any],
                      prefix: str, kind: str, agents: AbstractSet[str],
                      grace_s: float = GRACE_S) -> tuple[dict[str, Any], str, list[str]]:
    """A node's agent as the map shows it, and its labels' state with the drift."""
    facts = res.facts if res else None
    ours = label_sync_labels(n.labels, prefix)
    if facts is not None and facts.gpus_unread:
        # The agent answers but cannot list the GPUs: label sync keeps the labels
        # (swarm.labels), so they are not drift against 0 GPUs; the error is the news.
        why = gpus_unread_why(facts)
        return ({"status": "gpus-unread", "error": why,
                 "last_ok": res.fetched_at if res else None, "failing_since": None,
                 "url": res.url if res else "", "cause": why, "fix": GPUS_UNREAD_FIX},
                "gpus-unread", [])
    if facts is not None and res is not None:
        agent = answered(res, grace_s)  # ok, or stale: facts read that long ago
        want = desired_labels(facts, prefix)
        drift = [f"{k}: want {v}, have {ours.get(k)}" for k, v in sorted(want.items())
                 if ours.get(k) != v]
        drift += [f"{k}: stale" for k in sorted(set(ours) - set(want))]
        return agent, "drifted" if drift else "in-sync", drift
    if ours or saved.get("last_ok"):
        return ({"status": "unreachable", "error": res.error if res else None,
                 "last_ok": saved.get("last_ok"), "failing_since": saved.get("failing_since"),
                 **_why(res)}, "agent-stale", [])
    if res is not None and (res.listening or gpu_hint(n, prefix, kind, agents)):
        # An agent the daemon cannot read (or a GPU node Swarm knows without one):
        # never "none", which reads as "not a GPU node".
        return ({"status": "unreadable" if res.listening else "unreachable",
                 "error": res.error, "last_ok": None,
                 "failing_since": saved.get("failing_since"), **_why(res)},
                "agent-unreadable", [])
    return ({"status": "none", "error": None, "last_ok": None, "failing_since": None},
            "no-agent", [])


def _ours(n: SwarmNode, prefix: str) -> list[str]:
    """Label sync's labels on a node, as ``key=value``."""
    return [f"{k}={v}" for k, v in sorted(label_sync_labels(n.labels, prefix).items())]


class _Holders:
    """Who holds each GPU of a node, from the ledger, with their tasks and requests. An
    entry placement read as a removed service's (``PlacementPlan.dropped``: one created
    under its name is listed) is shown as a removed service's: the ledger keys by name,
    and read so it was the new service's holding (its ID, its request)."""

    def __init__(self, snap: Snapshot, plan: PlacementPlan | None, prefix: str) -> None:
        self.ledger = read_ledger(snap.nodes, prefix)
        self.dropped = plan.dropped if plan is not None else frozenset()
        self.services = {s.name: s for s in snap.services}
        self.plans = {sp.name: sp for sp in (plan.services if plan else [])}
        self.tasks: dict[tuple[str, str], list[str]] = {}  # (service id, node id) -> tasks
        self.running: set[str] = set()  # of those, the tasks Swarm says run
        for t in snap.tasks:
            # desired running or ready (a restart's in its delay); on no node: nowhere
            if t.desired_state in MEANT_STATES and t.node_id:
                self.tasks.setdefault((t.service_id, t.node_id), []).append(t.id)
                if t.state == "running":
                    self.running.add(t.id)

    def on(self, node_id: str) -> tuple[dict[str, list[dict[str, Any]]],
                                        dict[str, dict[str, Any]]]:
        """(GPU UUID -> its holders, MIG device UUID -> its holder) on one node."""
        holders: dict[str, list[dict[str, Any]]] = {}
        mig_holder: dict[str, dict[str, Any]] = {}
        for svc_name, per_node in self.ledger.items():
            h = per_node.get(node_id)
            if h is None:
                continue
            gone = (svc_name, node_id) in self.dropped
            svc = None if gone else self.services.get(svc_name)
            sp = None if gone else self.plans.get(svc_name)
            tasks = self.tasks.get((svc.id, node_id), []) if svc else []
            # a slice names one task: the running one before a start-first update's new
            # task (not started yet), whatever Swarm's list order
            shown = next((t for t in tasks if t in self.running), tasks[0] if tasks else None)
            slot_of = dict(zip(h.uuids, h.slots, strict=True)) if h.packed else {}
            for u, m in zip(h.uuids, h.milli, strict=True):
                entry = {"service": svc_name, "service_id": svc.id if svc else None,
                         "tasks": tasks, "share_milli": m,
                         "request": sp.request_text if sp else ""}
                if u in slot_of:  # replicas packed on one node: whose GPU this is
                    entry["slot"] = slot_of[u]
                holders.setdefault(u, []).append(entry)
                mig_holder[u] = {"service": svc_name, "task": shown}
        return holders, mig_holder


def _gpu_rows(facts: NodeFacts, node_metrics: Mapping[str, GpuMetrics],
              holders: Mapping[str, list[dict[str, Any]]],
              mig_holder: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One node's GPUs for the map: facts, metrics, health fields, MIG slices, holders."""
    out: list[dict[str, Any]] = []
    for g in facts.gpus:
        gm = node_metrics.get(g.uuid)
        out.append({
            "index": g.index, "uuid": g.uuid, "product": g.product,
            "memory_mib": g.memory_mib,
            "memory_used_mib": gm.fb_used_mib if gm else None,
            "util_pct": gm.util_pct if gm else None,
            **health_fields(gm), "xid_effect": xid_effect(gm),
            "numa_node": g.numa_node, "healthy": g.healthy, "error": g.error,
            "mig": [{"profile": m.profile, "uuid": m.uuid, "memory_mib": m.memory_mib,
                     "memory_used_mib": mig_used(gm, m.gi_id),
                     "holder": mig_holder.get(m.uuid)} for m in g.mig_devices],
            "holders": holders.get(g.uuid, []),
        })
    return out


def _services(snap: Snapshot, plan: PlacementPlan | None, moves: Mapping[str, Any] | None,
              prefix: str) -> list[dict[str, Any]]:
    """Each service's plan; a move in flight, or a proposed idle clean-up, as its state."""
    services_out: list[dict[str, Any]] = [sp.to_dict() for sp in (plan.services if plan else [])]
    if plan is not None:
        idle = [m.get("service") for m in (moves or {}).get("proposed", [])
                if m.get("trigger") == "consolidation"]
        states = service_states(plan.services, moving(snap.services, snap.swarm_labels, prefix),
                                [str(x) for x in idle if x])
        for entry in services_out:
            entry["state"] = states.get(str(entry["name"]), entry["state"])
    return services_out


def workload_lines(w: Mapping[str, Any]) -> list[str]:
    """The workload model placement uses, in a few lines (``status`` and ``plan``)."""
    out = [f"workload model: {w.get('source')}, {w.get('tasks_seen', 0)} tasks seen, "
           f"window {w.get('window')}" + (" (pinned)" if w.get("pinned") else "")]
    for t in w.get("top", []):
        prods = f" [{'|'.join(t['products'])}]" if t.get("products") else ""
        out.append(f"  {t['weight'] * 100:5.1f}%  {t['ask']}, {t['cpu_milli'] / 1000:g} CPU"
                   f"{prods}")
    return out


_MEM_RE = re.compile(r">= (\d+) (GiB|MiB)")
_MIG_RE = re.compile(r"(?:^|\d )MIG (\S+)")


def document_problems(doc: Mapping[str, Any]) -> list[str]:
    """States a cluster document must never show, each as a sentence.

    The planner cannot produce them, so a hand-written or generated sample that does
    would let the map's tests pass on an impossible cluster: a held GPU smaller than
    its request, a MIG slice held by a whole-GPU request, a proposed move onto an
    unhealthy or taken GPU, a holder the services list does not place there.
    """
    out: list[str] = []
    nodes = {n["hostname"]: n for n in doc.get("nodes", [])}
    services = {s["name"]: s for s in doc.get("services", [])}
    for host, n in nodes.items():
        if n.get("gpus") and (n.get("agent") or {}).get("status") != "ok":
            out.append(f"{host}: GPUs drawn without an agent's facts")
        for g in n.get("gpus", []):
            out += _gpu_problems(host, g, services)
    for svc in services.values():
        if svc.get("status") != "placed" and svc.get("placements"):
            out.append(f"service {svc['name']} is {svc.get('status')} but has placements")
        for p in svc.get("placements") or []:
            node = nodes.get(p.get("node"))
            have = {g["index"] for g in node.get("gpus", [])} if node else set()
            if node is None or not set(p.get("gpus") or []) <= have:
                out.append(f"service {svc['name']}: placed on {p.get('node')} GPU "
                           f"{p.get('gpus')}, which that node does not have")
    for p in doc.get("pending", []):
        if services.get(p.get("service"), {}).get("status") != "pending":
            out.append(f"pending request {p.get('service')} is not a pending service")
    for mv in (doc.get("moves") or {}).get("proposed", []):
        out += _move_problems(mv, nodes, services)
    return out


def _placed_on(svc: Mapping[str, Any], host: str, index: int) -> bool:
    return any(p.get("node") == host and index in (p.get("gpus") or [])
               for p in svc.get("placements") or [])


def _gpu_problems(host: str, g: Mapping[str, Any],
                  services: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One GPU's holders and MIG slices against the services that hold them."""
    out: list[str] = []
    where = f"{host} GPU {g['index']}"
    holders = g.get("holders") or []
    total = sum(int(h.get("share_milli", 1000)) for h in holders)
    if total > 1000 and not any(h.get("over_share") for h in holders):
        out.append(f"{where}: holders' shares add up to {total / 10:g} %")
    if holders and g.get("mig"):
        out.append(f"{where}: held as a whole GPU while split into MIG slices")
    for h in holders:
        svc = services.get(h["service"])
        if svc is None:
            out.append(f"{where}: held by {h['service']}, which is not a service")
            continue
        if not _placed_on(svc, host, g["index"]):
            out.append(f"{where}: held by {svc['name']}, whose placements omit it")
        req = str(svc.get("request") or "")
        if _MIG_RE.search(req):
            out.append(f"{where}: whole GPU held by {svc['name']} ({req})")
        mem = _MEM_RE.search(req)
        if mem:
            need = int(mem.group(1)) * (1024 if mem.group(2) == "GiB" else 1)
            if int(g.get("memory_mib") or 0) < need:
                out.append(f"{where}: {g.get('memory_mib')} MiB is less than "
                           f"{svc['name']}'s request ({req})")
    for m in g.get("mig") or []:
        holder = m.get("holder")
        if not holder:
            continue
        svc = services.get(holder["service"])
        if svc is None:
            out.append(f"{where} {m['profile']}: held by {holder['service']}, "
                       "which is not a service")
            continue
        req = str(svc.get("request") or "")
        want = _MIG_RE.search(req)
        if want is None or want.group(1) != m["profile"]:
            out.append(f"{where}: MIG {m['profile']} held by {svc['name']}, "
                       f"whose request is '{req}'")
        if not _placed_on(svc, host, g["index"]):
            out.append(f"{where}: MIG slice held by {svc['name']}, "
                       "whose placements omit it")
    return out


def _move_problems(mv: Mapping[str, Any], nodes: Mapping[Any, Mapping[str, Any]],
                   services: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A proposed move onto a GPU that does not exist, is unhealthy or is taken."""
    out: list[str] = []
    name = mv.get("service")
    target = nodes.get(mv.get("to"))
    if name not in services:
        out.append(f"proposed move of {name}: no such service")
    if target is None:
        return [*out, f"proposed move of {name}: no node {mv.get('to')}"]
    by_index = {g["index"]: g for g in target.get("gpus", [])}
    for i in mv.get("gpus") or []:
        g = by_index.get(i)
        if g is None:
            out.append(f"proposed move of {name} to {mv.get('to')} GPU {i}: no such GPU")
        elif g.get("healthy") is False:
            out.append(f"proposed move of {name} to {mv.get('to')} GPU {i}, "
                       "which is unhealthy")
        elif g.get("mig") or any(h["service"] != name for h in g.get("holders") or []):
            out.append(f"proposed move of {name} to {mv.get('to')} GPU {i}, "
                       "which is taken")
    return out


def ungranted_lines(found: Sequence[Mapping[str, Any]],
                    nodes: Iterable[tuple[object, object]] = ()) -> list[str]:
    """`plan` and `status`: each service that sees GPUs without a grant, why, the fix;
    its nodes named as ``node_list`` names them (``nodes``: the (hostname, ID) pairs)."""
    out = []
    nodes = list(nodes)
    for u in found:
        tag = " (exempt)" if u.get("exempt") else ""
        on = node_list(((h, None) for h in u["nodes"]), nodes)
        out.append(f"  {u['service']}{tag} on {on}: {u['reason']}")
        out.append(f"    fix: {u['fix']}")
    return ["ungranted GPU access:", *out] if out else []


def _modes_lines(services: Sequence[Mapping[str, Any]],
                 nodes: Sequence[tuple[object, object]] = ()) -> list[str]:
    """Global services per node (which wait, and why) and jobs' runs (done, or n of m);
    nodes named as ``node_list`` names them (``nodes``: the (hostname, ID) pairs)."""
    out: list[str] = []
    for sv in services:
        mode = sv.get("mode")
        if not mode or mode == "replicated":
            continue
        on = node_list(sorted((p["node"], p.get("node_id") or "") for p in sv.get("placements")
                              or []), nodes) or "no node"
        text = f"  {sv['name']} ({mode}): "
        text += ("done, " if sv.get("status") == "done" else f"on {on}")
        if sv.get("progress"):
            text += ("" if sv.get("status") == "done" else "; ") + str(sv["progress"])
        out.append(text)
        for host, why in sorted((sv.get("nodes_waiting") or {}).items()):
            out.append(f"    {node_list([(host, None)], nodes)}: waiting, gate closed: {why}")
    return ["", "global services and jobs:", *out] if out else []


def _why(res: Any) -> dict[str, str]:
    """What answered instead of an agent's facts, and the fix (agent_client)."""
    if res is None:
        return {}
    return {"url": res.url, "cause": res.cause, "fix": res.fix}


def _pending_lines(doc: Mapping[str, Any]) -> list[str]:
    """`status`: the pending requests, each with what failed in its own preemption
    (its plan's notes that say "preemption: ...")."""
    if not doc["pending"]:
        return []
    notes = {sv.get("name"): [w for w in sv.get("warnings") or []
                              if str(w).startswith("preemption: ")]
             for sv in doc.get("services", [])}
    out = ["", "pending GPU requests:"]
    for p in doc["pending"]:
        out.append(f"  {p['service']}: {p['request']} - {p['reason']}")
        out += [f"    {w}" for w in notes.get(p["service"], [])]
    return out


def _holder_lines(doc: Mapping[str, Any]) -> list[str]:
    """`status`: what preemption says of services that are not pending (a holder it
    passes over as a victim while its spec cannot be read: ``preempt_notes.unread_note``)."""
    pending = {p["service"] for p in doc.get("pending") or []}
    out = [f"  {w}" for sv in doc.get("services", []) if sv.get("name") not in pending
           for w in sv.get("warnings") or [] if str(w).startswith("preemption: ")]
    return ["", "preemption, of services not pending:", *out] if out else []


def _stalled_lines(doc: Mapping[str, Any]) -> list[str]:
    """`status`: the services placed whose gate never opens (start-first: its plan's
    note, ``services.startfirst``); placed, so no pending line names them."""
    out = [f"  {sv.get('name')}: {w}" for sv in doc.get("services", [])
           for w in sv.get("warnings") or [] if str(w).startswith(STALLED)]
    return ["", "never placed (update_config.order: start-first):", *out] if out else []


def _failed_lines(doc: Mapping[str, Any]) -> list[str]:
    """`status`: the services whose planning raised (placement.isolate): no pending
    request, no placement, so no other part of the text names them."""
    failed = [sv for sv in doc.get("services", []) if sv.get("status") == "failed"]
    out: list[str] = []
    # a spec that cannot be read is its owner's to fix, not a fault to report (ServicePlan)
    for head, group in (
            ("not planned, a spec that cannot be read (fix the field named):",
             [sv for sv in failed if sv.get("unread")]),
            ("planning failed (a swarmgpu fault: report it with the daemon's log):",
             [sv for sv in failed if not sv.get("unread")])):
        if group:
            out += ["", head, *(f"  {sv['name'] or 'service ' + str(sv.get('id'))}: "
                                f"{sv.get('reason') or ''}" for sv in group)]
    return out


def _node_head(n: Mapping[str, Any], alike: AbstractSet[str] = frozenset()) -> str:
    """A node's first line in `status`: its hostname and product cut (``peertext.cell``),
    the node's ID beside a cut name another node's reads as (``alike``)."""
    agent = n["agent"]
    name = cell(n["hostname"])
    name += f" [{cell(n.get('id', '?'), ID_WIDTH)}]" if name in alike else ""
    head = (f"{name} ({n['role']}, {n['state']}) agent {agent['status']}"
            + (f" ({agent['cause']})" if agent.get("cause") else "")
            + f", labels {n['labels_state']}")
    if n["gpu_count"]:
        head += (f" - {n['gpu_count']}x {cell(n['product'])}, "
                 f"driver {n['driver_version'] or '?'}, CUDA {n['cuda_driver_version'] or '?'}")
    return head


def render_status(doc: Mapping[str, Any], silent: Sequence[Mapping[str, Any]] = ()) -> str:
    """`swarmgpu status`: nodes x GPUs, memory, holders, pending requests. Hostnames,
    service names and agents' errors are others' text: each line shows them escaped, a
    hostname and a product cut to ``peertext.CELL_WIDTH``, each line to
    ``peertext.LINE_WIDTH`` columns (``text_line``; ``--json`` has them whole).
    ``silent``: ``commands.plan.silent_rows``: the age of a silent agent's last good facts
    and what it means (their ``facts``), said under its node as plan says it."""
    said = {r["node"]: r["facts"] for r in silent}
    lines: list[str] = []
    # names cut alike: else a node joined under another's long name passed as it
    alike = cut_alike(n["hostname"] for n in doc["nodes"])
    for n in doc["nodes"]:
        agent = n["agent"]
        lines.append(_node_head(n, alike))
        lines += [f"  {n['unread']}"] if n.get("unread") else []  # (swarmnode)
        if agent.get("status") in ("unreachable", "unreadable") and agent.get("url"):
            lines.append(f"  agent at {agent['url']}: {agent.get('cause') or agent['status']}")
            if agent.get("fix"):
                lines.append(f"  fix: {agent['fix']}")
        elif agent.get("status") == "stale" and agent.get("fix"):  # (its cause: the head)
            lines.append(f"  fix: {agent['fix']}")
        if n.get("id") in said:
            lines.append(f"  {said[n['id']]}")
        if agent.get("status") == "gpus-unread":
            kept = ", ".join(n.get("labels_kept") or []) or "none yet"
            lines.append(f"  labels kept as they are: {kept}")
            lines.append(f"  fix: {agent.get('fix')}")
        for g in n["gpus"]:
            used = g["memory_used_mib"]
            mem = f"{used if used is not None else '?'}/{g['memory_mib']} MiB"
            util = f"{g['util_pct']:.0f}%" if g["util_pct"] is not None else "-"
            who = ", ".join(
                f"{h['service']}" + (f" ({h['share_milli'] / 10:.0f}%)"
                                      if h["share_milli"] < 1000 else "")
                + (f" slot {h['slot']}" if "slot" in h else "")
                for h in g["holders"]
            )
            migs = [f"{m['profile']}->{m['holder']['service'] if m['holder'] else 'free'}"
                    for m in g["mig"]]
            if migs:
                who = (who + " " if who else "") + "MIG[" + ", ".join(migs) + "]"
            health = "" if g["healthy"] else " UNHEALTHY"
            lines.append(f"  GPU{g['index']:<2} {mem:>17} util {util:>4}{health}  "
                         f"{who or 'free'}")
    if doc.get("unkeyed"):  # in no node's lines nor the services' (swarm.unkeyed)
        lines += ["", "left out of the engine's lists:", *(f"  {m}" for m in doc["unkeyed"])]
    packed = [sv for sv in doc.get("services", []) if sv.get("packed")]
    if packed:
        lines += ["", "replicas packed on one node:"]
        for sv in packed:
            lines.append(f"  {sv['name']}: {sv['packed']}")
    pairs = [(n["hostname"], n.get("id")) for n in doc["nodes"]]
    lines.extend(_modes_lines(doc.get("services", []), pairs))
    limited = [sv for sv in doc.get("services", []) if sv.get("limits")]
    if limited:  # config tenants: what a stack's labels asked beyond its tenant's limits
        lines.append("")
        lines.append("tenant limits (the labels asked for more):")
        for sv in limited:
            for why in sv["limits"]:
                lines.append(f"  {sv['name']}: {why}")
    if doc.get("ungranted"):
        lines.append("")
        lines.extend(ungranted_lines(doc["ungranted"], pairs))
    lines.extend(_pending_lines(doc))
    lines.extend(_holder_lines(doc))
    lines.extend(_stalled_lines(doc))
    lines.extend(_failed_lines(doc))
    lines.extend(_queue_lines(doc))
    if doc.get("workload"):
        lines.append("")
        lines.extend(workload_lines(doc["workload"]))
    proposed = doc.get("moves", {}).get("proposed", [])
    if proposed:
        lines.append("")
        lines.append("proposed moves:")
        name = move_names(proposed, pairs)
        for m in proposed:
            lines.append(f"  {m.get('service')}: {name(m, 'from')} -> {name(m, 'to')} "
                         f"({m.get('trigger')}): {m.get('reason')}")
    return "\n".join(text_line(line) for line in lines)


def _queue_lines(doc: Mapping[str, Any]) -> list[str]:
    """`status`'s queues: GPUs used, guaranteed and max of each (none: no lines)."""
    if not doc.get("queues"):
        return []
    lines = ["", "queues (GPUs used / guaranteed / max):"]
    for q in doc["queues"]:
        top = "-" if q["max_gpus"] is None else f"{q['max_gpus']:g}"
        note = "" if q["configured"] else " (not in the config: no quota)"
        held = f"; held at max: {', '.join(q['blocked'])}" if q["blocked"] else ""
        # (a use not counted this cycle is said unknown, never the undercount)
        used = (f"used unknown this cycle ({q['used_unknown']})" if q.get("used_unknown")
                else f"{q['used_gpus']:g}")
        lines.append(f"  {q['queue']}: {used} / {q['guaranteed_gpus']:g} / "
                     f"{top}{note}{held}")
    return lines
