"""Holdings where Swarm will not run the task: dropped and re-placed, or kept with a
reason; spread tasks Swarm runs together on one node: replaced once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from swarmgpu.allocator.values import Unplaceable
from swarmgpu.core.migprofile import MigProfileError
from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.manager.placement.backoff import Backoff
from swarmgpu.manager.placement.cycle import Cycle
from swarmgpu.manager.placement.keys import REPLACED_STATE, RESPREAD_STATE, gate_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.records import ReplicaPlacement
from swarmgpu.manager.placement.specs import demand_of, schedulable
from swarmgpu.manager.placement.tasks import Waiting
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmService

GATE_GRACE_S = 5.0  # a gate must have been open this long before Swarm's refusal counts
_SAYS = ", Swarm says: "


@dataclass(frozen=True, slots=True)
class Convergence:
    """The converge step's answer: the holdings the service keeps, and either why it
    waits where it is (``stuck``) or the nodes it is moved off (``dropped``: their
    ledger entry and gate go) and why (``replaced``), with the back-off's new record."""

    holdings: Mapping[str, Holding]
    stuck: str = ""
    dropped: tuple[str, ...] = ()
    replaced: str = ""
    backoff_label: str = ""  # ``<p>state.replaced``, written with the device map
    renew: bool = False  # its waiting task is replaced where it is (``service``)
    # The clause of ``stuck`` that moves while nothing else does: the back-off's countdown,
    # or the renewal that ends it. The daemon's log says the rest once while it lasts.
    transient: str = ""


def converge(
    s: SwarmService,
    r: GpuRequest,
    holdings: Mapping[str, Holding],
    running_on: Mapping[str, int],
    waiting: Waiting,
    res: tuple[int, int],
    cyc: Cycle,
) -> Convergence | None:
    """Holdings where Swarm will not run the service's task -- its node drained, down
    or paused, its constraints no longer allowing the node, the node without the CPU or
    memory the task reserves, or Swarm's scheduler refusing it there -- are dropped
    when another node can take the replica (it is placed anew in this cycle, off those
    nodes). Otherwise, or while the service's back-off runs, they stay and ``stuck``
    says why the service is pending. None: nothing is stuck."""
    if not waiting:
        return None
    stuck: dict[str, str] = {}
    told = True  # only the scheduler's message says so, nothing Swarm's state shows
    for nid, h in holdings.items():
        if h.packed or running_on.get(nid):
            continue  # a task runs there: Swarm does run it
        why = _stuck_on(s, nid, waiting, res, cyc)
        if why:
            stuck[nid] = why
            told = told and why.endswith(_SAYS + waiting.refused)
    if not stuck:
        return None
    # A service of no GPU (gpus: "0") holds none: say where it is placed instead.
    where = "swarmgpu placed it" if r.cpu_only else "its GPUs are"
    what = f"Swarm cannot run its task where {where} (" + "; ".join(stuck.values()) + ")"
    b = cyc.backoff.setdefault(s.id, Backoff())
    b.adopt(s.labels.get(cyc.prefix + REPLACED_STATE))
    if b.since is not None and b.since > cyc.now + MAX_SKEW_S:
        b.since = cyc.now  # a recorded time no clock wrote (core.stamps): count from now
    if (left := b.wait_left(cyc.now)) > 0:
        passing = f"; re-placing it is backed off for {left:.0f} s more ({b.describe()})"
        return Convergence(holdings, what + passing, transient=passing)
    cluster = cyc.cluster
    for nid in stuck:
        cluster.release_holding(s.name, nid)
    exclude = cyc.exclude(s) | set(holdings)
    try:
        probe = cluster.place(demand_of(r, *res), exclude=exclude)
    except MigProfileError as exc:
        probe = Unplaceable(str(exc))
    if isinstance(probe, Unplaceable):  # nowhere better: it keeps its GPUs and waits
        for nid in stuck:
            cluster.commit_holding(
                s.name, nid, holdings[nid], cluster.holding_reservation(s.id, nid, res)
            )
        nowhere = f"; no other node can take it: {cluster.hostnames(probe.reason)}"
        if told:
            # The message may be one Swarm gave before the gate opened and never again:
            # a write of the service since (anyone's) left its waiting task of an older
            # revision, which Swarm's scheduler never tries again (swarmkit 807f25e,
            # noSuitableNode). Replacing it where it is lets Swarm try a new one: with
            # nothing running, a ForceUpdate; beside a running replica, a change of
            # placement alone that its node meets (``service``: it keeps running).
            b.replaced(cyc.now)
            running = sum(running_on.values())
            kept = (f" (a change of placement alone: its {running} running replica(s) "
                    "keep running)" if running else "")
            # Swarm's message is the same whether its node truly refuses the task or
            # Swarm stopped trying it: renewed after each back-off, said once (``transient``).
            passing = f"{nowhere}; its waiting task is replaced where it is{kept}"
            return Convergence(holdings, what + passing, backoff_label=b.label(), renew=True,
                               transient=passing)
        return Convergence(holdings, what + nowhere)
    cyc.avoid[s.id] = frozenset(stuck)
    b.replaced(cyc.now)
    return Convergence(
        {nid: h for nid, h in holdings.items() if nid not in stuck},
        dropped=tuple(stuck),
        replaced=what,
        backoff_label=b.label(),
    )


def _stuck_on(s: SwarmService, nid: str, waiting: Waiting, res: tuple[int, int], cyc: Cycle) -> str:
    """Why Swarm will not run the service's waiting task on ``nid``, its held node
    ("" when nothing says so). Read from Swarm's own state: the node's status, the
    service's constraints against the node, the reservations of the node's tasks, and
    the scheduler's message once the gate has been open ``GATE_GRACE_S`` (a message
    written before the gate opened is no refusal)."""
    node = cyc.by_id.get(nid)
    if node is None:
        return ""
    host = node.hostname
    if node.unread:  # what Swarm makes of it is not known: its holding kept, never moved
        return ""
    if not schedulable(node):
        return f"{host} is {node.availability if node.availability != 'active' else node.state}"
    port = cyc.ports.refused(s).get(nid)
    if port:
        return f"on {host}, {port}"
    if nid in cyc.exclude(s):
        return cyc.plugins_why(s, node) or (
            f"its constraints, platform or generic resources exclude {host}")
    ns = cyc.cluster.node_state(nid)  # a GPU node, or a CPU-only one
    if (
        ns is not None
        and (s.id, nid) not in cyc.cluster.tasks_on
        and (
            (res[0] and ns.cpu_left is not None and ns.cpu_left < 0)
            or (res[1] and ns.mem_left is not None and ns.mem_left < 0)
        )
    ):
        return f"{host} has not the CPU or memory its task reserves left"
    key = (s.id, nid)
    if node.labels.get(gate_key(cyc.prefix, s.name)) == "true":
        since = cyc.open_since.get(key, cyc.now)
        cyc.open_seen[key] = since
        if waiting.refused and cyc.now - since >= GATE_GRACE_S:
            return f"on {host}{_SAYS}{waiting.refused}"
    return ""


@dataclass(frozen=True, slots=True)
class Crowding:
    """Spread tasks Swarm runs together on a node: why the service waits, and whether
    they are replaced now (``force``, recorded as ``label``) or already being replaced."""

    why: str
    force: bool
    label: str  # ``<p>state.respread``: the ForceUpdate that replaces them


def crowding(
    s: SwarmService,
    placements: Sequence[ReplicaPlacement],
    running_on: Mapping[str, int],
    cyc: Cycle,
    no_gpu: bool = False,
) -> Crowding | None:
    """A spread replica holds one device list per node, and MaxReplicas 1 keeps Swarm to
    one task there -- but only for the tasks it schedules while the spec says so. Once
    the owner raised or removed it (``--replicas-max-per-node 0``, a re-deploy without
    it), and before swarmgpu sets 1 back, Swarm may run a second task on a gated node
    (the other node down, a task failing on its own: swarmkit's scheduler then prefers
    any other node), and both read the same list: two model servers on one GPU set.
    Setting 1 back moves no task (a change of placement alone restarts none), so the
    service's tasks are replaced once (ForceUpdate: the new ones carry MaxReplicas 1);
    not again while that rolling update runs, unless MaxReplicas was changed since.
    ``no_gpu``: a service of ``gpus: "0"``, whose place holds its CPU and memory once."""
    over = sorted(
        (cyc.by_id[p.node_id].hostname, running_on[p.node_id])
        for p in placements
        if p.slot is None and p.node_id in cyc.by_id and running_on.get(p.node_id, 0) > 1
    )
    if not over:
        return None
    held = ("where swarmgpu placed for one replica: its CPU and memory are counted once"
            if no_gpu else
            "whose GPUs are held for one replica: they share its device list")
    what = "; ".join(f"{n} tasks run on {host}, {held}" for host, n in over)
    rolling = (
        s.labels.get(cyc.prefix + RESPREAD_STATE) == str(s.force_update)
        and s.max_replicas_per_node == 1
    )
    if rolling:
        return Crowding(
            f"{what}; its tasks are being replaced (rolling) to run one per node",
            False,
            str(s.force_update),
        )
    return Crowding(
        f"{what}; its tasks restart once (rolling) with max_replicas_per_node 1 "
        f"so that Swarm runs one per node",
        True,
        str(s.force_update + 1),
    )
