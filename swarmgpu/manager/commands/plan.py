"""`swarmgpu plan`: what placement would do for each annotated service, as text.

Pure over the plan and what the leader daemon said of its moves; the CLI gathers them.
Service names, labels, hostnames and agents' errors are others' text: every line shows
their control characters escaped (``peertext.escaped``), so none rewrites the terminal,
a hostname is cut to ``peertext.CELL_WIDTH`` (``cell``) and each line to
``peertext.LINE_WIDTH`` columns (``text_line``); ``--json`` has them whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from swarmgpu.core.peertext import ID_WIDTH, cell, text_line
from swarmgpu.manager.commands.movenames import failing_entry, move_names, node_list
from swarmgpu.manager.nodes.agentbook import facts_age_said, saved_age
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import ServicePlan
from swarmgpu.manager.placement.records import failed_names, unread_names
from swarmgpu.manager.web.cluster_view import ungranted_lines, workload_lines


def render_plan(
    services: Sequence[ServicePlan],
    *,
    ungranted: Sequence[Mapping[str, Any]],
    workload: Mapping[str, Any],
    health: Sequence[Mapping[str, Any]],
    moves: Mapping[str, Any] | None,
    listen: str,
    unread: Sequence[str] = (),
    nodes: Sequence[tuple[str, str]] = (),
    silent: Sequence[Mapping[str, Any]] = (),
    moves_unread: str | None = None,
) -> str:
    """``health``: ``gpuhealth.health_rows``; ``moves``: the daemon's move document, or
    None when it cannot be reached (at ``listen``); ``unread``: the nodes placed on and
    written to by none (``SwarmNode.unread``), and the nodes and services the lists left
    out (``swarm.unkeyed``), each its message; ``nodes``: the swarm's (hostname, ID)
    pairs, which name a move's or failing node whose cut hostname another's reads as;
    ``silent``: ``silent_rows``; ``moves_unread``: why ``moves`` is None, where said."""
    lines = [] if services else ["no service carries a swarmgpu GPU request"]
    # hostnames cut alike on nodes of their own: each placement there names its node
    ids: dict[str, set[str]] = {}
    for pl in (pl for sp in services for pl in sp.placements):
        ids.setdefault(cell(pl.hostname), set()).add(pl.node_id)
    alike = {c for c, nodes in ids.items() if len(nodes) > 1}
    known = [*nodes, *((pl.hostname, pl.node_id) for sp in services for pl in sp.placements)]
    for sp in services:
        lines += _service_lines(sp, alike, known)
    lines += ungranted_lines(ungranted, known)  # GPUs seen without a grant (docs/security.md)
    lines += workload_lines(workload)
    lines += [
        f"GPU health: {cell(r['node'])} GPU {r['gpu']} {r['uuid']}: {r['health']}" for r in health
    ]  # failed GPUs are given to nothing (docs/health.md)
    lines += list(unread)
    lines += [f"{cell(r['hostname'])}: {r['said']}" for r in silent]
    lines += _move_lines(moves, moves_unread or f"the daemon is not reachable on {listen}",
                         known)
    unread_specs = unread_names(services)
    faults = failed_names(services) - unread_specs  # (once, not per service)
    # in the plan's order; said last, where a reader ends (placement.isolate)
    failed = [sp.name for sp in services if sp.name in faults]
    if unreadable := [sp.name or f"service {sp.id}" for sp in services
                      if sp.name in unread_specs]:
        lines.append(f"not planned, a spec that cannot be read: {', '.join(unreadable)}: fix "
                     "the field each one's reason names (exit 1)")
    if failed:  # a swarmgpu fault
        lines.append(f"planning failed for {', '.join(failed)}: a swarmgpu fault, "
                     "report it with the daemon's log (exit 1)")
    return "\n".join(text_line(line) for line in lines)


def silent_rows(snap: Snapshot, saved: Mapping[str, Any], max_age_s: float,
                reader: str = "this plan") -> list[dict[str, Any]]:
    """The nodes whose agent did not answer this read and whose last good facts the
    daemon's saved record (``agentbook.load_saved``) dates: node, hostname, last_ok, age_s,
    stale (``health.node_lost_grace_s``, ``max_age_s``, or more: the daemon places nothing
    new there), facts (what their age means) and said (the agent's silence and facts).
    Within the bound the daemon places on those facts, which it does not save: ``reader``
    (this plan, or status), with none, places nothing there, and says so."""
    rows: list[dict[str, Any]] = []
    for n in snap.nodes:
        res, rec = snap.facts.get(n.id), saved.get(n.id)
        if res is None or res.facts is not None or not isinstance(rec, Mapping):
            continue
        age = saved_age(rec, snap.taken_at)
        if age is None:
            continue
        facts = facts_age_said(age, max_age_s)
        if age < max_age_s:
            facts += f"; {reader} has none of them (not saved) and places nothing there"
        rows.append({"node": n.id, "hostname": n.hostname, "last_ok": rec["last_ok"],
                     "age_s": round(age, 1), "stale": age >= max_age_s, "facts": facts,
                     "said": f"agent silent ({res.cause or 'no facts'}); {facts}"})
    return rows


def plan_exit(services: Sequence[ServicePlan]) -> int:
    """``plan``'s exit status: 1 when planning a service raised (``Status.FAILED``),
    a fault to report; pending and invalid requests are the plan's answer, not one."""
    return 1 if failed_names(services) else 0


def _service_lines(sp: ServicePlan, alike: AbstractSet[str] = frozenset(),
                   nodes: Sequence[tuple[str, str]] = ()) -> list[str]:
    """``sp``'s lines; a placement on a node whose cut hostname is in ``alike`` names the
    node's ID too, a waiting node as ``node_list`` names it (``nodes``: (hostname, ID))."""
    out = [f"{sp.name}: {sp.status} ({sp.state}) {sp.request_text}"]
    for pl in sp.placements:
        slot = f" (slot {pl.slot})" if pl.slot is not None else ""
        # a holding of no GPU (gpus: "0") is a place, not a GPU list
        held = (f"GPU {','.join(map(str, pl.gpus))} {','.join(pl.uuids)}" if pl.uuids
                else "no GPU")
        host = cell(pl.hostname)
        host += f" [{cell(pl.node_id, ID_WIDTH)}]" if host in alike else ""
        out.append(f"  {host}{slot}: {held}")
    if sp.packed:
        out.append(f"  replicas {sp.packed}")
    if sp.mode != "replicated":  # global: per node; a job: its run's progress
        for host, why in sorted(sp.nodes_waiting.items()):
            out.append(f"  {node_list([(host, None)], nodes)}: waiting, gate closed: {why}")
        if sp.progress and sp.progress != sp.reason:
            out.append(f"  {sp.mode}: {sp.progress}")
    if sp.reason:
        out.append(f"  why: {sp.reason}")
    if sp.request is not None and sp.request.tenant:  # config tenants (services.tenants)
        out.append(f"  tenant: {sp.request.tenant}")
        out += [f"  limited: {why}" for why in sp.request.limits]
    out += [f"  note: {w}" for w in sp.warnings]
    return out


def entries(moves: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The answer's list under ``key``, its mappings only: whatever answers on the
    daemon's port (another program, an older daemon) is read, not trusted."""
    got = moves.get(key)
    return [m for m in got if isinstance(m, Mapping)] if isinstance(got, list) else []


def _move_lines(moves: Mapping[str, Any] | None, unread: str,
                nodes: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The daemon's proposed and recent moves and its health policy's failing nodes;
    ``unread``: why ``moves`` is None; ``nodes``: the (hostname, ID) pairs of the plan's
    placements (``move_names``)."""
    if moves is None:
        return [f"moves: {unread}; move proposals need its metric windows"]
    out = []
    proposed, recent = entries(moves, "proposed"), entries(moves, "recent")
    health = moves.get("health")  # the health policy (docs/health.md)
    failing = health.get("failing_nodes") if isinstance(health, Mapping) else None
    failed = sorted((failing if isinstance(failing, Mapping) else {}).items(),
                    key=lambda kv: str(kv[0]))
    # of those, the ones failing by their agent's loss alone: their GPUs not known bad
    # (an older daemon says none: all read "failing", as it said them)
    lost = health.get("agent_lost_nodes") if isinstance(health, Mapping) else None
    lost = lost if isinstance(lost, Mapping) else {}
    # a failing node named as a move's node is: two cut alike are told apart by ID
    sick = [failing_entry(host, nodes) for host, _ in failed]
    name = move_names([*proposed, *recent[-5:], *sick], nodes)
    if not proposed:
        # (the rebalancer's dry run, on by default: not the daemon's, which writes placements)
        out.append("moves: none proposed" + (" (rebalance.dry_run, or dry_run: moves are "
                                             "proposed, never made)"
                                             if moves.get("dry_run") else ""))
    for m in proposed:
        out.append(
            f"move {m.get('service')}: {name(m, 'from')} -> {name(m, 'to')} "
            f"GPUs {m.get('gpus')} "
            f"[{m.get('trigger')}, window {m.get('window')}] {m.get('reason')}; "
            f"gain: {m.get('gain')}"
        )
    for m in recent[-5:]:
        out.append(f"recent {m.get('service')}: {name(m, 'from')} -> {name(m, 'to')}: "
                   f"{m.get('outcome')} ({m.get('reason')})")
    for entry, (key, why) in zip(sick, failed, strict=True):
        state = "agent lost" if key in lost else "failing"
        out.append(f"node {state}: {name(entry, 'from')}: {why}")
    notes = moves.get("notes")
    for n in notes if isinstance(notes, list) else []:
        if "health:" in str(n):
            out.append(str(n) if str(n).startswith("health:") else f"health: {n}")
    return out
