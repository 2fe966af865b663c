"""What `swarmgpu audit` finds wrong with each node: its labels against its agent's facts,
its agent lost, its ledger, its engine's GPU resources, its GPUs' health, an entry a
re-joined node left; and ``Finding``, what every check returns.

``commands.audit`` runs these over a snapshot, with the services' findings.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from swarmgpu.core.labelkeys import usable_label_key
from swarmgpu.manager.nodes.agentbook import facts_age_said, saved_age, saved_silence
from swarmgpu.manager.nodes.gpuhealth import failing_why
from swarmgpu.manager.nodes.gpuowners import conflicts as uuid_conflicts
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement.keys import ASSIGN, GATE
from swarmgpu.manager.placement.ledger import Holding, parse_holding
from swarmgpu.manager.rebalance.swarmkeeps import kept_said
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.labels import (
    GPUS_UNREAD_FIX,
    desired_labels,
    gpus_unread_why,
    label_sync_labels,
)
from swarmgpu.swarm.swarmnode import gpu_kinds, swarm_moves

SHOWN_VALUES = 5  # of the names or values a finding lists, the rest counted


@dataclass(frozen=True)
class Finding:
    kind: str  # missing | wrong | stale | unreachable | gpus-unread | unusable-key ...
    subject: str  # node hostname or service name
    message: str
    key: str | None = None
    expected: str | None = None
    actual: str | None = None
    advisory: bool = False  # worth knowing, but nothing swarmgpu does is wrong without it
    node: str | None = None  # a node's finding: its ID (two nodes may share a hostname)

    @property
    def severity(self) -> str:
        return "advisory" if self.advisory else "action"

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v is not None and k != "advisory"}
        out["severity"] = self.severity
        return out


def _when(ts: float | None) -> str:
    if ts is None:
        return "unknown"
    ago = max(0, int(time.time() - ts))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    return f"{stamp} ({ago}s ago)"


def node_findings(snap: Snapshot, node: SwarmNode, prefix: str, saved: Mapping[str, Any],
                   generic_resource_kind: str, node_lost_grace_s: float,
                   gpu: bool) -> list[Finding]:
    """One node (``gpu``: a GPU node, its agent read or not): unusable label keys, its
    agent lost, its labels against its facts, its resources and GPU health."""
    out: list[Finding] = []
    h = node.hostname
    ours = label_sync_labels(node.labels, prefix)
    for key in node.labels:
        if not usable_label_key(key):
            out.append(Finding(
                "unusable-key", h,
                f"label {key!r} cannot be used in a Swarm constraint (keys allow letters, "
                "digits, '-', '_', '.'; no '/'); use the swarmgpu.* labels instead",
                key=key, advisory=True,
            ))
    res = snap.facts.get(node.id)
    if res is None or res.facts is None:
        if gpu:
            state = (f"agent answers but cannot be read ({res.cause})"
                     if res is not None and res.listening else "agent unreachable")
            down = ("; Swarm reports the node down: bring its engine back, or remove it "
                    f"if it left for good (docker node rm {node.id})"
                    if node.state == "down" else "")
            if down and (twin := _namesake(snap, node)) is not None:
                down += (f" (node {twin.id}, ready, has its hostname: nothing says it is "
                         "this machine joined again under a new ID; if it is, remove this "
                         "entry)")
            # What the daemon's record says; none ("since unknown") where it kept none.
            since = saved.get("failing_since")
            when = f" since {_when(since)}" if since is not None else ""
            last = saved.get("last_ok")
            lost = saved_age(saved, snap.taken_at)
            good = (f"last good facts {_when(last)}" if last is not None else
                    "no good facts on record (the daemon's state_dir holds none for this "
                    "node)")
            if lost is not None:  # what placement makes of them (agentbook.stale_nodes)
                good += f", {facts_age_said(lost, node_lost_grace_s)}"
            out.append(Finding(
                "unreachable", h,
                f"{state}{when}; {good}; labels kept as they are "
                f"({res.error if res else 'not fetched'}){down}",
            ))
            # (lost from its last answer: facts it read long before are only stale)
            why = failing_why(0, 0, saved_silence(saved, snap.taken_at), node_lost_grace_s)
            if why is not None:
                out.append(_lost(h, why, node, snap, prefix))
        elif res is not None and res.listening:
            # A first agent the daemon cannot read: no label yet, so nothing else
            # would say it (its labels will never come).
            out.append(Finding(
                "unreadable", h,
                f"an agent answers on {res.url or 'the agent port'} but its facts cannot "
                f"be read: {res.cause}; no GPU label is written until it can; "
                f"fix: {res.fix}", actual=res.cause,
            ))
        return out
    if res.facts.gpus_unread:
        # Facts that list no GPU and say why tell nothing of the node's GPUs: label
        # sync keeps its labels (swarm.labels), so they are not drift; the agent's
        # error is what needs action, as an unreachable agent's would.
        out.append(_gpus_unread(h, res.facts, ours, prefix))
        return out
    out += _stale_facts(h, res.facts_age_s, node_lost_grace_s)  # (its source hangs)
    want = desired_labels(res.facts, prefix)
    for k, v in sorted(want.items()):
        if k not in ours:
            out.append(Finding("missing", h, f"label {k} missing (want {v!r})", k, v, None))
        elif ours[k] != v:
            out.append(Finding(
                "wrong", h, f"label {k} is {ours[k]!r}, facts say {v!r}", k, v, ours[k]
            ))
    for k in sorted(set(ours) - set(want)):
        out.append(Finding(
            "stale", h, f"label {k}={ours[k]!r} no longer matches any fact", k, None, ours[k]
        ))
    out.extend(_resource_findings(node.hostname, node.generic_resources,
                                  node.discrete_resources, res.facts, generic_resource_kind))
    out.extend(_health_findings(h, res.facts, node_lost_grace_s))
    return out


def ledger_findings(snap: Snapshot, node: SwarmNode, prefix: str) -> list[Finding]:
    """The node's ledger (``<p>assign.<service>`` labels): a GPU held beyond its capacity,
    a GPU its facts no longer list, an entry that cannot be read. The daemon re-places
    the first two (plan warnings only) and cannot see the third (``read_ledger`` drops
    it): with no daemon running, nobody else says so."""
    ak = prefix + ASSIGN
    held: list[Holding] = []
    out: list[Finding] = []
    for key, value in sorted(node.labels.items()):
        if not key.startswith(ak):
            continue
        h = parse_holding(key[len(ak):], node.id, value)
        if h is None:
            out.append(_unreadable_holding(node, key, value))
        else:
            held.append(h)
    res = snap.facts.get(node.id)
    facts = res.facts if res is not None else None
    gone: list[Finding] = []
    if facts is not None and not facts.gpus_unread:  # else nothing says what is gone
        listed = {g.uuid for g in facts.gpus} | {m.uuid for g in facts.gpus
                                                 for m in g.mig_devices}
        for h in held:
            if missing := [u for u in h.uuids if u not in listed]:
                gone.append(_held_gpu_gone(node, h, missing, prefix))
    return _held_twice(node, held, prefix) + gone + out


def _release_cmd(node: SwarmNode, service: str, prefix: str) -> str:
    """The daemon's own release of a holding (its entry and its gate), by hand."""
    return (f"docker node update --label-rm {prefix}{ASSIGN}{service} "
            f"--label-rm {prefix}{GATE}{service} {node.id}")


def _held_twice(node: SwarmNode, held: Sequence[Holding], prefix: str) -> list[Finding]:
    """Each GPU (or MIG device) whose holders' shares sum over its 1000 milli."""
    by_uuid: dict[str, list[tuple[str, int]]] = {}
    for h in held:
        for u, m in zip(h.uuids, h.milli, strict=True):
            by_uuid.setdefault(u, []).append((h.service, m))
    out = []
    for u, holders in sorted(by_uuid.items()):
        total = sum(m for _, m in holders)
        if total <= 1000:
            continue
        names = " and ".join(f"{s} ({m} milli)" for s, m in holders)
        keep, *rest = sorted({s for s, _ in holders})
        cmds = "; ".join(_release_cmd(node, s, prefix) for s in rest)
        out.append(Finding(
            "gpu-held-twice", node.hostname,
            f"GPU {u} is held by {names}: {total} milli of 1000; the swarmgpu daemon, on "
            "its next cycle that reads this node's GPUs, keeps one holder and releases the "
            "others' ledger entries and gates (their tasks here stop; each is placed anew "
            "on a free GPU, or waits pending); still here, the daemon is not running or its "
            f"write failed (see its log): keep one (e.g. {keep}) and release the others "
            f"({cmds}); the daemon places them anew when it runs",
            key=u[:64],
        ))
    return out


def _held_gpu_gone(node: SwarmNode, h: Holding, missing: Sequence[str],
                   prefix: str) -> Finding:
    """A holding naming a GPU the node's facts no longer list (reset, replaced, gone)."""
    return Finding(
        "held-gpu-gone", node.hostname,
        f"{h.service} holds {', '.join(missing)}, which this node's facts no longer list "
        "(the GPU fell off the bus, was replaced or its UUID changed); the swarmgpu daemon "
        "releases its ledger entry and gate on its next cycle (its tasks here stop) and "
        "places it anew on a free GPU, or it waits pending; still here, the daemon is not "
        f"running or its write failed (see its log): {_release_cmd(node, h.service, prefix)}"
        ", and the daemon places it anew when it runs",
        key=f"{prefix}{ASSIGN}{h.service}",
    )


UNREADABLE_SHOWN = 80  # characters of an unreadable ledger value, in its finding


def _unreadable_holding(node: SwarmNode, key: str, value: str) -> Finding:
    """An ``assign.*`` label the ledger cannot parse: read as holding nothing, so its
    GPUs may be given to another service, and never released (nothing reads it)."""
    shown = repr(value[:UNREADABLE_SHOWN]) + (
        f" (cut, {len(value)} characters)" if len(value) > UNREADABLE_SHOWN else "")
    return Finding(
        "unreadable-holding", node.hostname,
        f"ledger label {key}={shown} cannot be read (a list of GPU UUIDs, each GPU once "
        "with an optional @milli, or s<slot>= groups of them separated by ';'): swarmgpu "
        "counts nothing held by it, so the GPUs it names may be given to another service, and "
        "it is never released (the daemon overwrites it only if it places that service "
        f"on this node again); remove it: docker node update --label-rm {key} {node.id}",
        key=key,
    )


def _namesake(snap: Snapshot, node: SwarmNode) -> SwarmNode | None:
    """A ready node, another ID, with this node's hostname."""
    return next((n for n in snap.nodes if n.hostname == node.hostname and n.id != node.id
                 and n.state == "ready"), None)


def _gpu_ids(snap: Snapshot, node: SwarmNode, prefix: str) -> set[str]:
    """The GPU UUIDs that name this node: its facts', its engine's resources', its
    ledger's."""
    res = snap.facts.get(node.id)
    f = res.facts if res is not None else None
    out = {u for g in (f.gpus if f is not None else ()) for u in
           (g.uuid, *(m.uuid for m in g.mig_devices))}
    out.update(u for v in node.generic_resources.values() for u in v)
    ak = prefix + ASSIGN
    for key, value in node.labels.items():
        if key.startswith(ak) and (h := parse_holding(key[len(ak):], node.id, value)):
            out.update(h.uuids)
    return out


def rejoined(snap: Snapshot, node: SwarmNode, prefix: str,
              gpu: bool) -> tuple[SwarmNode, str] | None:
    """For a down GPU node (``gpu``) with no facts: the ready node it is the old ID of (the
    machine re-imaged or joined again under a new ID; Swarm keeps the old entry, down,
    until removed), with what says so. A hostname alone does not (two nodes may share
    one): the same address does, or a GPU UUID of the old entry that the other has."""
    res = snap.facts.get(node.id)
    if (node.state != "down" or (res is not None and res.facts is not None)
            or not gpu):
        return None
    mine = _gpu_ids(snap, node, prefix)
    for n in snap.nodes:
        if n.id == node.id or n.state != "ready" or n.hostname != node.hostname:
            continue
        # (0.0.0.0: Swarm reports some managers so; it names no machine)
        if node.addr not in ("", "0.0.0.0") and node.addr == n.addr:  # noqa: S104
            return n, f"its address ({node.addr})"
        if common := sorted(mine & _gpu_ids(snap, n, prefix)):
            return n, f"its GPU {common[0][:64]}"
    return None


def replaced(old: SwarmNode, new: tuple[SwarmNode, str], prefix: str) -> Finding:
    """A down entry a re-joined node left: its labels and ledger entries are the old
    entry's, and draining it moves nothing; removing it takes them with it. Its ledger
    entries are said here, not as the node's findings: the fix is the same."""
    node, why = new
    ak = prefix + ASSIGN
    held = sorted(k[len(ak):] for k in old.labels if k.startswith(ak))
    shown = ", ".join(held[:SHOWN_VALUES]) + (
        f" and {len(held) - SHOWN_VALUES} more" if len(held) > SHOWN_VALUES else "")
    ledger = (f"; its ledger holds GPUs for {shown}, whose tasks cannot run there"
              if held else "")
    return Finding(
        "replaced-node", old.hostname,
        f"node {old.id} is down and node {node.id}, ready, has its hostname and {why}: "
        "the entry the node left when it re-joined the swarm (re-imaged, or left and "
        f"joined again) under a new ID; its labels are the old node's{ledger}; remove it "
        f"(docker node rm {old.id}): its labels and ledger entries go with it, and the "
        "swarmgpu daemon places what it held anew",
        key=old.id,
    )


def _stale_facts(host: str, age_s: float, grace_s: float) -> list[Finding]:
    """An agent that answers with facts it read ``age_s`` ago, ``grace_s``
    (``health.node_lost_grace_s``) or more: the daemon places nothing new on the node
    (``agentbook.stale_nodes``), as the map says (``web.factsage``); none if fresher."""
    if age_s < grace_s:
        return []
    return [Finding("stale-facts", host,
                   f"its agent answers with facts read {age_s:.0f}s ago, "
                   f"health.node_lost_grace_s ({grace_s:g}s) or more: the daemon places "
                   "nothing new on it; its GPU source (NVML) hangs: run swarmgpu doctor on "
                   "the node, and restart the agent once the driver answers")]


def _gpus_unread(host: str, facts: Any, ours: Mapping[str, str], prefix: str) -> Finding:
    """A node whose agent cannot list its GPUs, with the labels it keeps."""
    shown = [f"{k}={ours[k]}" for k in (f"{prefix}gpu.count", f"{prefix}gpu.product")
             if k in ours]
    kept = (f"labels kept as they are ({', '.join(shown)})" if shown
            else "labels kept as they are" if ours
            else "no swarmgpu label yet; none is written until it lists its GPUs")
    return Finding("gpus-unread", host, f"{gpus_unread_why(facts)}; {kept}; fix: {GPUS_UNREAD_FIX}",
                   actual=facts.errors[0])


def uuid_findings(snap: Snapshot, metrics: Mapping[str, Mapping[str, Any]] | None
                   ) -> list[Finding]:
    """Each node speaks only for its own GPUs (``gpuowners``): a UUID in two nodes'
    facts, or on a node's metrics page while another node's facts own it."""
    host = {n.id: n.hostname for n in snap.nodes}
    facts = {nid: r.facts for nid, r in snap.facts.items() if r.facts is not None}
    pages = {nid: list(m) for nid, m in (metrics or {}).items()}
    return [Finding("gpu-uuid-conflict" if c.where == "facts" else "gpu-uuid-stray",
                    host.get(c.node_id, c.node_id[:12]), c.message(host), key=c.uuid[:64],
                    node=c.node_id)
            for c in uuid_conflicts(facts, pages)]


def _health_findings(host: str, facts: Any, grace_s: float) -> list[Finding]:
    """GPUs the health state machine holds failed (action) or degraded (advisory), with
    reason and suggested action; present once the daemon's states are applied
    (manager.nodes.gpuhealth.apply_saved), as ``swarmgpu audit`` does."""
    out = []
    for g in facts.gpus:
        text = g.error.split("; ")[0] if g.error else ""
        for level, advisory in (("health: failed: ", False), ("health: degraded: ", True)):
            if text.startswith(level):
                out.append(Finding(f"gpu-{level[8:-2]}", host,
                                   f"GPU {g.index} {g.uuid} {level[8:-2]}: {text[len(level):]}",
                                   advisory=advisory))
    failed = sum(f.kind == "gpu-failed" for f in out)
    why = failing_why(failed, len(facts.gpus), None, grace_s)
    if why is not None:  # several at once: the node (board, power, fabric), not one GPU
        out.append(_failing(host, why))
    return out


def _failing(host: str, why: str) -> Finding:
    """A node failing as a whole (``gpuhealth.failing_why``), as the health policy says."""
    return Finding("node-failing", host,
                   f"{why}; check the node as a whole, and drain it (docker node update "
                   "--availability drain) to move all its GPU services off")


def _lost(host: str, why: str, node: SwarmNode, snap: Snapshot, prefix: str) -> Finding:
    """A node whose agent is lost (``agent-lost``, never ``node-failing``, read as broken
    GPUs): nothing says its GPUs or tasks are bad, and the daemon moves none of them for
    it (docs/health.md): the fix is the agent's, not a drain that restarts every model
    server on it. Where Swarm moves tasks off it, the GPU services it does not move are
    named (``swarmkeeps``)."""
    if by_swarm := swarm_moves(node):
        ak = prefix + ASSIGN
        held = [k[len(ak):] for k in node.labels if k.startswith(ak)]
        then = f"{by_swarm}: Swarm moves its tasks itself" + kept_said(
            node.id, held, {s.name: s for s in snap.services}, snap.nodes, prefix)
    else:
        then = ("the daemon moves nothing off it for this alone: Swarm does not report it "
                "down, so its tasks run")
    return Finding("agent-lost", host, f"{why}; {then}; bring the agent back (its "
                   "unreachable finding says what answered, and the fix)")


def _resource_findings(
    hostname: str,
    named: Mapping[str, tuple[str, ...]],
    discrete: Mapping[str, int],
    facts: Any,
    reserved_kind: str = "",
) -> list[Finding]:
    if not facts.gpus:
        return []
    known = gpu_kinds(reserved_kind)
    kinds = [k for k in named if k in known] + [k for k in discrete if k in known]
    if reserved_kind and reserved_kind not in kinds:
        # placement reserves this kind for whole-GPU services: Swarm cannot place them here.
        return [Finding(
            "no-generic-resources", hostname,
            f"engine does not advertise {reserved_kind} (placement.generic_resource_kind) "
            f"though the node has {len(facts.gpus)} GPU(s): whole-GPU services that reserve "
            "it can never run here; add node-generic-resources to daemon.json "
            "(`swarmgpu node-config` prints it) and restart dockerd",
            key=reserved_kind,
        )]
    if not kinds:
        return [Finding(
            "no-generic-resources", hostname,
            f"engine advertises no GPU generic resources though the node has "
            f"{len(facts.gpus)} GPU(s); swarmgpu's placement does not need them "
            "(placement.generic_resource_kind is empty), but services that reserve GPUs "
            "through Swarm cannot use this node; `swarmgpu node-config` prints the "
            "daemon.json lines",
            advisory=True,
        )]
    out: list[Finding] = []
    facts_uuids = {g.uuid for g in facts.gpus} | {
        m.uuid for g in facts.gpus for m in g.mig_devices
    }
    for kind in kinds:
        adv = set(named.get(kind, ()))
        unknown = sorted(adv - facts_uuids)
        missing = sorted({g.uuid for g in facts.gpus} - adv) if adv else []
        if unknown or missing:
            out.append(Finding(
                "resource-mismatch", hostname,
                f"generic resource {kind} advertises {sorted(adv)} but the GPUs are "
                f"{sorted(g.uuid for g in facts.gpus)}: unknown {unknown}, missing {missing}; "
                "fix node-generic-resources and restart dockerd",
                key=kind,
            ))
    return out
