"""`swarmgpu audit`: what is wrong with GPU labels and GPU constraints, right now.

Pure over a snapshot (plus what the daemon saved about agents); the CLI renders it.
Each finding either needs action (drifted labels, an unreachable agent, a request that
cannot be placed...) or is advisory (a setting worth knowing about that nothing here
depends on). Scripts gate on ``exit_code``: advisories alone exit 0 unless strict.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from swarmgpu.core.config import HealthConfig
from swarmgpu.core.labelkeys import usable_label_key
from swarmgpu.core.peertext import escaped
from swarmgpu.manager.nodes.gpuhealth import failing_why
from swarmgpu.manager.nodes.gpuowners import conflicts as uuid_conflicts
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement.cpunodes import expects_agent
from swarmgpu.manager.placement.generic import generic_reservations
from swarmgpu.manager.placement.keys import (
    ASSIGN,
    GATE,
    OWNED_LABEL_RISK,
    gate_constraint,
    gate_of,
    is_hold,
    is_renew,
    owned_label_read,
)
from swarmgpu.manager.placement.ledger import Holding, parse_holding
from swarmgpu.manager.services.requests import parse_all as parse_request_labels
from swarmgpu.swarm.agentservice import missing_agent_service
from swarmgpu.swarm.client import SwarmNode, SwarmService
from swarmgpu.swarm.constraints import Constraint, node_field, node_satisfies, parse_all
from swarmgpu.swarm.labels import (
    GPUS_UNREAD_FIX,
    desired_labels,
    gpus_unread_why,
    label_sync_labels,
)
from swarmgpu.swarm.specread import UnreadSpec
from swarmgpu.swarm.swarmnode import GPU_RESOURCE_KINDS, gpu_kinds

__all__ = ["GPU_RESOURCE_KINDS", "Finding", "audit", "exit_code"]


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


def exit_code(findings: Sequence[Finding], *, strict: bool = False) -> int:
    """0: clean or advisories only; 1: a finding needs action (strict: any finding)."""
    if any(not f.advisory for f in findings):
        return 1
    return 1 if strict and findings else 0


ServiceCheck = Callable[[Snapshot], list[Finding]]


def _when(ts: float | None) -> str:
    if ts is None:
        return "unknown"
    ago = max(0, int(time.time() - ts))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    return f"{stamp} ({ago}s ago)"


def audit(
    snap: Snapshot,
    *,
    prefix: str = "swarmgpu.",
    saved_agents: Mapping[str, Mapping[str, Any]] | None = None,
    extra_checks: Sequence[ServiceCheck] = (),
    generic_resource_kind: str = "",
    node_lost_grace_s: float = HealthConfig().node_lost_grace_s,
    metrics: Mapping[str, Mapping[str, Any]] | None = None,
    agent_service: str = "",
) -> list[Finding]:
    """``generic_resource_kind``: placement's reservation kind (config); when set, a GPU
    node that does not advertise it needs action, else its absence is only advisory.
    ``node_lost_grace_s``: ``health.node_lost_grace_s``; a GPU node whose agent has been
    lost that long is ``node-failing`` (the health policy's rule). ``metrics``: each
    node's scraped samples by UUID (the daemon's; the CLI has none): a page reporting
    another node's GPU is flagged too. ``agent_service``: ``agents.service``; a node its
    tasks run on is a GPU node (``gpu_hint``), and a name no service has is said."""
    saved_agents = saved_agents or {}
    agents = snap.agent_nodes(agent_service)
    out: list[Finding] = []
    any_gpu = False
    for node in snap.nodes:
        saved = saved_agents.get(node.id, {})
        gpu = expects_agent(node, saved.get("last_ok") is not None, prefix,
                            generic_resource_kind, agents)  # as label sync's
        any_gpu |= gpu or getattr(snap.facts.get(node.id), "facts", None) is not None
        if (new := _rejoined(snap, node, prefix, gpu)) is not None:
            found = [_replaced(node, new, prefix)]  # its labels and ledger go with it
        else:
            found = (_node_findings(snap, node, prefix, saved, generic_resource_kind,
                                    node_lost_grace_s, gpu)
                     + _ledger_findings(snap, node, prefix))
        out += [replace(f, node=node.id) for f in found]
    if any_gpu and (note := missing_agent_service(snap.services, agent_service)):
        out.append(Finding("agents-service-missing", "agents", note,
                           key=agent_service, advisory=True))
    fields = _NodeFields(snap.nodes)
    for svc in (s for s in snap.services if not s.unread):  # (unread: placement says it)
        out += _service_findings(svc, prefix, generic_resource_kind, fields)
    out.extend(_uuid_findings(snap, metrics))
    for check in extra_checks:
        out.extend(check(snap))
    return out


def _node_findings(snap: Snapshot, node: SwarmNode, prefix: str, saved: Mapping[str, Any],
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
            good = (f"last good facts {_when(last)}" if last is not None else
                    "no good facts on record (the daemon's state_dir holds none for this "
                    "node)")
            out.append(Finding(
                "unreachable", h,
                f"{state}{when}; {good}; labels kept as they are "
                f"({res.error if res else 'not fetched'}){down}",
            ))
            last_ok = saved.get("last_ok")
            lost = (max(0.0, snap.taken_at - float(last_ok))
                    if isinstance(last_ok, (int, float)) else None)
            why = failing_why(0, 0, lost, node_lost_grace_s)
            if why is not None:
                out.append(_failing(h, why))
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


def _ledger_findings(snap: Snapshot, node: SwarmNode, prefix: str) -> list[Finding]:
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


def _rejoined(snap: Snapshot, node: SwarmNode, prefix: str,
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


def _replaced(old: SwarmNode, new: tuple[SwarmNode, str], prefix: str) -> Finding:
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


def _gpus_unread(host: str, facts: Any, ours: Mapping[str, str], prefix: str) -> Finding:
    """A node whose agent cannot list its GPUs, with the labels it keeps."""
    shown = [f"{k}={ours[k]}" for k in (f"{prefix}gpu.count", f"{prefix}gpu.product")
             if k in ours]
    kept = (f"labels kept as they are ({', '.join(shown)})" if shown
            else "labels kept as they are" if ours
            else "no swarmgpu label yet; none is written until it lists its GPUs")
    return Finding("gpus-unread", host, f"{gpus_unread_why(facts)}; {kept}; fix: {GPUS_UNREAD_FIX}",
                   actual=facts.errors[0])


def _service_findings(svc: SwarmService, prefix: str, generic_resource_kind: str,
                      fields: _NodeFields) -> list[Finding]:
    """One service: its own GPU reservation, and constraints no node can meet."""
    out = list(_swarm_gpu_reservation(svc, prefix, generic_resource_kind))
    good, errors = parse_all(svc.constraints)
    for e in errors:
        out.append(Finding("unusable-constraint", svc.name, e))
    asks = parse_request_labels(svc.labels, prefix=prefix) is not None
    rest: list[Constraint] = []
    for c in good:
        text, label_key = c.text(), str(c.node_label)
        gated, held = gate_of(text, prefix), is_hold(text, prefix)
        if is_renew(text, prefix):
            continue  # swarmgpu's renewal (placement.keys.RENEW_STATE): every node meets it
        if asks and (gated is not None or held):
            continue  # a placement gate (no node has it until swarmgpu opens it), or the
            # hold of a stack deployed as written (swarmgpu replaces it), or another
            # service's gate (swarmgpu replaces it, and says so)
        if gated == svc.name or held:
            # Without a request neither ever opens; the daemon takes its own gate and the
            # hold out of such a service's spec (placement.ungate). A gate naming another
            # service is the owner's: it is met where that service's gate is open.
            out.append(_gate_without_request(svc.name, text, label_key, prefix))
            continue
        if (key := owned_label_read(text, prefix)) is not None:  # kept, and judged below
            out.append(Finding("owned-label-constraint", svc.name, f"constraint {text} "
                               f"reads {key}, " + OWNED_LABEL_RISK.format(
                                   gate=gate_constraint(prefix, "<service>")),
                               key=key, advisory=True))
        rest.append(c)
    dangling = [c for c in rest if not fields.met(c)]
    out += [_dangling(svc.name, c, fields) for c in dangling]
    if rest and not dangling and not any(node_satisfies(rest, n) for n in fields.nodes):
        out.append(Finding(
            "unplaceable-constraints", svc.name,
            f"no node meets its constraints {', '.join(c.text() for c in rest)} together "
            "(each alone is met by some node); the service can never be placed: fix the "
            "constraints or the nodes' labels"))
    return out


class _NodeFields:
    """Each constraint field's values over every node of the swarm (any state: a node
    that is down may come back), read once per field; Swarm compares values
    case-insensitively, a missing label as ""."""

    def __init__(self, nodes: Sequence[SwarmNode]) -> None:
        self.nodes = nodes
        self._values: dict[str, dict[str, str] | None] = {}

    def values(self, c: Constraint) -> dict[str, str] | None:
        """lower-cased value -> as written, over the nodes; None when some node's value
        is one swarmgpu does not model (``node_field``: taken as met)."""
        if c.field not in self._values:
            got: dict[str, str] = {}
            for n in self.nodes:
                v = node_field(c, n)
                if v is None:
                    self._values[c.field] = None
                    return None
                got.setdefault(v.lower(), v)
            self._values[c.field] = got
        return self._values[c.field]

    def met(self, c: Constraint) -> bool:
        """Some node meets ``c`` alone."""
        got = self.values(c)
        if got is None:
            return True
        v = c.value.lower()
        return v in got if c.op == "==" else bool(got.keys() - {v})


SHOWN_VALUES = 5  # of the values nodes have, in a dangling constraint's finding


def _dangling(service: str, c: Constraint, fields: _NodeFields) -> Finding:
    """A constraint no node of the swarm meets, with what the nodes have."""
    have = sorted(v for v in (fields.values(c) or {}).values() if v)
    shown = ", ".join(v[:64] for v in have[:SHOWN_VALUES]) + (
        f" and {len(have) - SHOWN_VALUES} more" if len(have) > SHOWN_VALUES else "")
    label = c.node_label
    field = c.field.lower()
    if label is not None and not have:
        why = "names a label no node has"
    elif c.op == "!=":
        why = f"is met by no node: every node has {c.field}={c.value}"
    elif field in ("node.hostname", "node.id"):
        why = ("names no node in the swarm (a node that left it or was re-joined "
               f"under a new ID? `docker node ls` lists them: {shown})")
    else:
        why = f"is met by no node: no node has it with that value (nodes have: {shown})"
    return Finding("dangling-constraint", service,
                   f"constraint {c.text()} {why}; the service can never be placed",
                   key=label if label is not None else field)


def _gate_without_request(service: str, text: str, key: str, prefix: str) -> Finding:
    """Its own gate or the hold on a service with no request: placement releases its
    gates (the request labels removed) and opens none. The daemon takes both out of the
    spec on its next cycle, so the finding lasts only while no daemon runs (or its
    write fails): meanwhile its tasks cannot be placed."""
    return Finding(
        "gate-without-request", service,
        f"constraint {text} waits for swarmgpu, but the service asks it for no GPU (no "
        f"{prefix}gpus or other request label): no node will carry {key}, so its tasks "
        "cannot be placed; the swarmgpu daemon takes it out of the spec (with its device "
        "lines) on its next cycle: still here, the daemon is not running or its write "
        f"failed (see its log); remove it yourself (docker service update --constraint-rm "
        f"'{text}' {service}) or put the request labels back",
        key=key,
    )


def _uuid_findings(snap: Snapshot, metrics: Mapping[str, Mapping[str, Any]] | None
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


def _swarm_gpu_reservation(svc: Any, prefix: str, kind: str) -> list[Finding]:
    """A service that reserves GPUs as Swarm generic resources but asks swarmgpu for
    nothing: Swarm picks its GPUs by count alone, and swarmgpu, which does not know of
    them, can hand the same GPUs to its own services. With a request, Swarm's pick is
    read instead of the grant under grants as env: ``ungranted-gpu-access`` names it."""
    try:  # (a part no object: placement's plan says it, ``unread-spec``)
        reserved = [(k, v) for k, v in generic_reservations(svc.spec) if k in gpu_kinds(kind)]
    except UnreadSpec:
        return []
    if not reserved or parse_request_labels(svc.labels, prefix=prefix) is not None:
        return []
    k, v = reserved[0]
    return [Finding(
        "swarm-gpu-reservation", svc.name,
        f"reserves {v} {k} through Swarm only: Swarm picks its GPUs by count (no topology, "
        "memory or product), and swarmgpu, which does not place it, can hand the same GPUs "
        f"to its own services; add {prefix}gpus: \"{v}\" (`swarmgpu render` reads the "
        "reservation as that request and keeps it)",
        key=str(k),
    )]


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


UNLABELLED = "*"  # a GPUS or PRODUCT value the agent answers, the node not labelled yet


def render_table(findings: Sequence[Finding], snap: Snapshot, prefix: str) -> str:
    """The table and findings ``audit`` prints. Hostnames, labels, constraints and agents'
    errors are others' text: every line shows their control characters escaped. GPUS
    and PRODUCT are the node's labels; of a node whose agent answers and that has
    neither label yet, the agent's values, marked ``UNLABELLED``."""
    lines = []
    nodes = sorted(snap.nodes, key=lambda n: (n.hostname, n.id))
    lines.append(f"{'NODE':<16} {'ROLE':<8} {'AGENT':<12} {'GPUS':<5} {'LABELS':<10} PRODUCT")
    # Findings join rows by node ID: a hostname may be two nodes' (one re-joined under
    # a new ID, its old entry down), which are then shown with their IDs.
    shared = {h for h, c in Counter(n.hostname for n in nodes).items() if c > 1}
    unlabelled = False
    by_node: dict[str, list[Finding]] = {}
    for f in findings:
        if f.node is not None:
            by_node.setdefault(f.node, []).append(f)
    for n in nodes:
        res = snap.facts.get(n.id)
        kinds = {f.kind for f in by_node.get(n.id, [])}
        agent = "gpus-unread" if "gpus-unread" in kinds else "ok" if res and res.facts \
            else "replaced" if "replaced-node" in kinds \
            else "none" if not kinds & {"unreachable", "unreadable"} \
            else "unreadable" if res and res.listening else "unreachable"
        label_state = "kept" if agent == "gpus-unread" else "drifted" if kinds & {
            "missing", "wrong", "stale"} else ("in-sync" if res and res.facts else "-")
        gpus, product = (n.labels.get(f"{prefix}{k}") for k in ("gpu.count", "gpu.product"))
        if gpus is None and product is None and agent == "ok" and res and res.facts:
            # Not labelled yet: the agent's word, marked; a blank said nothing.
            want = desired_labels(res.facts, prefix)
            gpus, product = (f"{want.get(prefix + k, '-')}{UNLABELLED}"
                             for k in ("gpu.count", "gpu.product"))
            unlabelled = True
        name = f"{n.hostname} ({n.id})" if n.hostname in shared else n.hostname
        lines.append(f"{name:<16} {n.role:<8} {agent:<12} {gpus or '-':<5} "
                     f"{label_state:<10} {product or '-'}")
    if unlabelled:
        lines.append(f"{UNLABELLED} not labelled yet: what the node's agent answers; the "
                     "daemon writes its labels on its next cycle (is `swarmgpu run` "
                     "running?)")
    lines.append("")
    action = [f for f in findings if not f.advisory]
    advisory = [f for f in findings if f.advisory]
    if not findings and not any(r.facts is not None and r.facts.gpus
                                for r in snap.facts.values()):
        # Nothing to match: "labels match the facts" said all was well where no GPU
        # node was ever found (no agent running yet, the first thing to set up).
        lines.append(
            "No findings, and no GPU node: no agent answered with GPUs, no node carries swarmgpu "
            "labels, gpu=true or GPU generic resources or runs agents.service; run the agent on "
            'each GPU node (README, "Run the manager and the agents"), then audit again.')
    elif not findings:  # every node Swarm calls a GPU node, or whose agent answers, was read
        lines.append("No findings: labels match the facts.")
    if action:
        lines.append(f"{len(action)} finding(s) needing action:")
        lines.extend(f"  [{f.kind}] {_who(f, shared)}: {f.message}" for f in action)
    if advisory:
        if action:
            lines.append("")
        lines.append(f"{len(advisory)} advisory (exit 0 unless --strict):")
        lines.extend(f"  [{f.kind}] {_who(f, shared)}: {f.message}" for f in advisory)
    return "\n".join(escaped(line) for line in lines)


def _who(f: Finding, shared: set[str]) -> str:
    """A finding's subject, with the node's ID when its hostname is not one node's."""
    return f"{f.subject} ({f.node})" if f.node is not None and f.subject in shared \
        else f.subject


def identity_check(identity: str, token_file: str) -> ServiceCheck:
    """Agents read without a checked identity (agents.identity: none) need action: any
    process on a node's port can answer for it, and anyone can read the agents."""
    def check(snap: Snapshot) -> list[Finding]:
        if identity == "swarm-pki":
            return []
        how = "a shared token only (it proves 'one of ours', not which node)" if token_file \
            else "plain HTTP: anything that binds port 9401 on a node can answer for it"
        return [Finding(
            "agent-identity", "agents",
            f"agents are read over {how}; remove agents.identity: none (swarm-pki is the "
            "default) and run each agent on its Swarm member, where it serves its node's "
            "Swarm certificate (docs/security.md)")]

    return check
