"""`swarmgpu audit`: what is wrong with GPU labels and GPU constraints, right now.

Pure over a snapshot (plus what the daemon saved about agents); the CLI renders it.
The nodes' findings (and ``Finding``) are ``auditnodes``'; the services' are here.
Each finding either needs action (drifted labels, an unreachable agent, a request that
cannot be placed...) or is advisory (a setting worth knowing about that nothing here
depends on). Scripts gate on ``exit_code``: advisories alone exit 0 unless strict.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from swarmgpu.core.config import HealthConfig
from swarmgpu.core.peertext import (
    ID_WIDTH,
    cell,
    cut_alike,
    escaped,
    padded,
    shortened,
    text_width,
)
from swarmgpu.manager.commands.auditmemo import ServerMemo
from swarmgpu.manager.commands.auditnodes import (
    SHOWN_VALUES,
    Finding,
    ledger_findings,
    node_findings,
    rejoined,
    replaced,
    uuid_findings,
)
from swarmgpu.manager.commands.auditservers import server_findings
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement.cpunodes import expects_agent
from swarmgpu.manager.placement.generic import generic_reservations
from swarmgpu.manager.placement.keys import (
    OWNED_LABEL_RISK,
    gate_constraint,
    gate_of,
    is_hold,
    is_renew,
    owned_label_read,
)
from swarmgpu.manager.services.requests import parse_all as parse_request_labels
from swarmgpu.swarm.agentservice import claimed_agent_service, missing_agent_service
from swarmgpu.swarm.client import SwarmNode, SwarmService
from swarmgpu.swarm.constraints import Constraint, node_field, node_satisfies, parse_all
from swarmgpu.swarm.labels import desired_labels
from swarmgpu.swarm.specread import UnreadSpec
from swarmgpu.swarm.swarmnode import GPU_RESOURCE_KINDS, gpu_kinds

__all__ = ["GPU_RESOURCE_KINDS", "Finding", "audit", "exit_code", "plan_basis"]


def exit_code(findings: Sequence[Finding], *, strict: bool = False) -> int:
    """0: clean or advisories only; 1: a finding needs action (strict: any finding)."""
    if any(not f.advisory for f in findings):
        return 1
    return 1 if strict and findings else 0


def plan_basis(workload: Mapping[str, Any], holds: int, prefix: str) -> dict[str, Any]:
    """Where the plan audit's placement findings come from took its workload model and
    its preemptors' holds (``workload``: the plan's model summary): a one-shot reads them
    from Swarm as the daemon keeps them there, and writes nothing; ``said``: in words."""
    source = str(workload.get("source", "prior"))
    model = (f"stored in Swarm (the swarm's label {prefix}state.workload)"
             if source == "learned" else f"pinned: {source} (placement.workload)"
             if source.startswith("file ") else
             "the prior (none stored in Swarm, or it could not be read)")
    said = (f"placement findings from one plan made as the daemon would, written nowhere: "
            f"workload model {model}; {holds} GPU hold(s) for preemptors, read from their "
            f"victims' records ({prefix}state.preempted)")
    return {"workload_model": source, "holds": holds, "said": said}


ServiceCheck = Callable[[Snapshot], list[Finding]]


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
    servers: ServerMemo | None = None,
    classes: Mapping[str, int] | None = None,
) -> list[Finding]:
    """``generic_resource_kind``: placement's reservation kind (config); when set, a GPU
    node that does not advertise it needs action, else its absence is only advisory.
    ``node_lost_grace_s``: ``health.node_lost_grace_s``; a GPU node whose agent has been
    lost that long is ``agent-lost`` (the health policy's rule). ``metrics``: each
    node's scraped samples by UUID (the daemon's; the CLI has none): a page reporting
    another node's GPU is flagged too. ``agent_service``: ``agents.service``; a node its
    tasks run on is a GPU node (``gpu_hint``), and a name no service has is said, as is
    a tenant's service so named (``snap.tenants``), which marks no node. ``servers``: the
    model-server findings kept from earlier audits (the daemon's, ``auditmemo``), each
    service's read again only where a field they read changed; None: all read now."""
    saved_agents = saved_agents or {}
    agents = snap.agent_nodes(agent_service)
    out: list[Finding] = []
    any_gpu = False
    for node in snap.nodes:
        saved = saved_agents.get(node.id, {})
        gpu = expects_agent(node, saved.get("last_ok") is not None, prefix,
                            generic_resource_kind, agents)  # as label sync's
        any_gpu |= gpu or getattr(snap.facts.get(node.id), "facts", None) is not None
        if node.unread:  # its labels and resources may not be Swarm's: the part unread said
            found = [Finding("node-unread", node.hostname, node.unread)]
        elif (new := rejoined(snap, node, prefix, gpu)) is not None:
            found = [replaced(node, new, prefix)]  # its labels and ledger go with it
        else:
            found = (node_findings(snap, node, prefix, saved, generic_resource_kind,
                                    node_lost_grace_s, gpu)
                     + ledger_findings(snap, node, prefix))
        out += [replace(f, node=node.id) for f in found]
    # listed without an ID: left out of the lists, nothing read of them (swarm.unkeyed)
    out += [Finding("node-unkeyed", "node", m) for m in snap.unkeyed.nodes]
    out += [Finding("service-unkeyed", "service", m) for m in snap.unkeyed.services]
    if any_gpu and (note := missing_agent_service(snap.services, agent_service)):
        out.append(Finding("agents-service-missing", "agents", note,
                           key=agent_service, advisory=True))
    if note := claimed_agent_service(snap.services, agent_service, snap.tenants):
        out.append(Finding("agents-service-tenant", agent_service, note, key=agent_service))
    fields = _NodeFields(snap.nodes)
    for svc in (s for s in snap.services if not s.unread):  # (placement's plan says those)
        out += _service_findings(svc, prefix, generic_resource_kind, fields)
        # render's model-server warnings, adopted too
        out += (servers.findings(svc, prefix, classes) if servers  # (classes: the config's)
                else server_findings(svc, prefix, classes))
    if servers is not None:
        servers.keep_only(s.id for s in snap.services if not s.unread)
    out.extend(uuid_findings(snap, metrics))
    for check in extra_checks:
        out.extend(check(snap))
    return out


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


def _swarm_gpu_reservation(svc: Any, prefix: str, kind: str) -> list[Finding]:
    """A service that reserves GPUs as Swarm generic resources but asks swarmgpu for
    nothing: Swarm picks its GPUs by count alone, and swarmgpu, which does not know of
    them, can hand the same GPUs to its own services. With a request, Swarm's pick is
    read instead of the grant under grants as env: ``ungranted-gpu-access`` names it.
    A reservation that cannot be read is that service's finding alone."""
    try:
        listed = generic_reservations(svc.spec)
    except UnreadSpec as exc:
        return [Finding("unreadable-spec", svc.name,
                        f"its GPU reservation cannot be read: {exc}")]
    kinds = gpu_kinds(kind)
    reserved = [(k, v) for k, v in listed if k in kinds]
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


UNLABELLED = "*"  # a GPUS or PRODUCT value the agent answers, the node not labelled yet


def render_table(findings: Sequence[Finding], snap: Snapshot, prefix: str) -> str:
    """The table and findings ``audit`` prints. Hostnames, labels, constraints and agents'
    errors are others' text: every line shows their control characters escaped. GPUS
    and PRODUCT are the node's labels; of a node whose agent answers and that has
    neither label yet, the agent's values, marked ``UNLABELLED``."""
    lines = []
    nodes = sorted(snap.nodes, key=lambda n: (n.hostname, n.id))
    # Findings join rows by node ID: a hostname may be two nodes' (one re-joined under
    # a new ID, its old entry down), which are then shown with their IDs.
    shared = {h for h, c in Counter(n.hostname for n in nodes).items() if c > 1}
    # and so are names cut alike (``cell``): else one joined under another's long name
    # and a character more passed as it in the table
    cut_shared = cut_alike(n.hostname for n in nodes)
    unlabelled = False
    rows: list[tuple[str, str, str, str, str, str]] = []
    by_node: dict[str, list[Finding]] = {}
    for f in findings:
        if f.node is not None:
            by_node.setdefault(f.node, []).append(f)
    for n in nodes:
        res = snap.facts.get(n.id)
        kinds = {f.kind for f in by_node.get(n.id, [])}
        agent = "gpus-unread" if "gpus-unread" in kinds else "stale" if "stale-facts" in \
            kinds else "ok" if res and res.facts \
            else "replaced" if "replaced-node" in kinds \
            else "none" if not kinds & {"unreachable", "unreadable"} \
            else "unreadable" if res and res.listening else "unreachable"
        label_state = "kept" if kinds & {"gpus-unread", "node-unread"} else "drifted" if kinds & {
            "missing", "wrong", "stale"} else ("in-sync" if res and res.facts else "-")
        gpus, product = (n.labels.get(f"{prefix}{k}") for k in ("gpu.count", "gpu.product"))
        if gpus is None and product is None and agent == "ok" and res and res.facts:
            # Not labelled yet: the agent's word, marked; a blank said nothing.
            want = desired_labels(res.facts, prefix)
            gpus, product = (f"{want.get(prefix + k, '-')}{UNLABELLED}"
                             for k in ("gpu.count", "gpu.product"))
            unlabelled = True
        name = cell(n.hostname)
        name += f" ({cell(n.id, ID_WIDTH)})" if name in cut_shared else ""
        rows.append((name, cell(n.role, 8), agent, cell(gpus or "-", 5), label_state,
                     cell(product or "-")))
    # NODE as wide as its longest name (each cut at CELL_WIDTH), at least as before
    # (in columns, ``text_width``: a CJK name takes two a character)
    wide = max([16, *(text_width(r[0]) for r in rows)])
    lines.append(f"{'NODE':<{wide}} {'ROLE':<8} {'AGENT':<12} {'GPUS':<5} {'LABELS':<10} "
                 "PRODUCT")
    lines += [f"{padded(r[0], wide)} {padded(r[1], 8)} {r[2]:<12} {padded(r[3], 5)} "
              f"{r[4]:<10} {r[5]}" for r in rows]
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
        lines.extend(_finding_line(f, shared | cut_shared) for f in action)
    if advisory:
        if action:
            lines.append("")
        lines.append(f"{len(advisory)} advisory (exit 0 unless --strict):")
        lines.extend(_finding_line(f, shared | cut_shared) for f in advisory)
    return "\n".join(escaped(line) for line in lines)


FINDING_WIDTH = 600  # columns of a finding's message in the text: the longest fit whole


def _finding_line(f: Finding, shared: AbstractSet[str]) -> str:
    """A finding's line: its subject cut (``cell``), with the node's ID when its hostname,
    or its cut, is not one node's (``shared``); its message with the subject cut there
    too and at most ``FINDING_WIDTH`` columns (a tenant's 500-character service name
    flooded the terminal). ``--json`` has both whole."""
    who = cell(f.subject)
    if f.node is not None and (f.subject in shared or who in shared):
        who += f" ({cell(f.node, ID_WIDTH)})"
    said = f.message
    # (cut unescaped: the message's cut and escape then never part one of its escapes)
    if (cut := shortened(f.subject)) != f.subject:  # (a name that fits: as written)
        said = _whole_name(f.subject).sub(lambda _: cut, said)
    return f"  [{cell(f.kind)}] {who}: {cell(said, FINDING_WIDTH)}"


def _whole_name(name: str) -> re.Pattern[str]:
    """``name`` where the message names it whole: not the start of a longer name
    (``name-2``, ``name.b``) the message names too, which its cut would have garbled.
    A name's own characters are a hostname's and a service's (letters, digits, ``-``,
    ``_``, ``.``); a sentence's full stop after it still ends it."""
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.[\w-])")


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
