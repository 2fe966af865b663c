"""The planning context every policy shares: inputs, a working ledger, target search.

Pure. Targets come from the one allocator (:class:`swarmgpu.manager.placement.ClusterAllocator`)
over the ledger as it will be once the moves already proposed are made; a GPU is a
possible target only when its metrics are known and it is not (and would not become)
hot: its utilisation, the load the moves proposed before in the pass put on it (its
metrics do not show them yet: ``Context.load``) and the moving share's own load stay
below ``hotspot.clear_pct``. Sources stay reserved until their move ends
(make-before-break needs both). No GPU held for a preemptor (``Inputs.held``:
``placement.nominated``) is a target of any policy's move: the Context marks them on the
allocator a move's target is searched on (``block_targets``), and counts them used as
placement does where a policy checks a pending request's room (``count_held``). A GPU
held for stopping tasks alone is held by their share (``Inputs.held_shares``), as
placement counts it: the rest of it is free to a move, under the usual sharing rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

from swarmgpu.allocator.fragmentation import TaskShape, TypicalTask, typical_tasks
from swarmgpu.allocator.values import Choice, NodeState
from swarmgpu.core import stamps
from swarmgpu.core.config import RebalanceConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import (
    ClusterAllocator,
    Holding,
    demand_of,
    is_gate_of,
)
from swarmgpu.manager.placement.heldchoice import held_choice, share_choice
from swarmgpu.manager.placement.keys import MEANT_STATES
from swarmgpu.manager.placement.specs import schedulable
from swarmgpu.manager.rebalance.attribution import Share, estimated_util, holders_by_gpu
from swarmgpu.manager.rebalance.heldgpus import held_from
from swarmgpu.manager.rebalance.moves import HealthInputs, HealthResult, Move, Trigger
from swarmgpu.manager.rebalance.signals import GpuSignal, NodeSignal
from swarmgpu.manager.rebalance.targets import SwarmTargets
from swarmgpu.manager.rebalance.trial import Trial
from swarmgpu.manager.rebalance.windows import State
from swarmgpu.manager.services.requests import GpuRequest, Rebalance, parse_all
from swarmgpu.manager.services.sharing import share_labels
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.constraints import ConstraintError, node_matches, parse_constraint
from swarmgpu.swarm.swarmnode import unread_source

MOVED_AT = "state.moved-at"  # service label: epoch seconds of its last finished move
OPT_OUT = "rebalance"  # <prefix>rebalance=never


Load = dict[tuple[str, str], float]  # (node id, GPU UUID) -> utilisation points
# A policy's own rule for a GPU that is no target: (its node, index, UUID, signals)
Blocked = Callable[[NodeState, int, str, GpuSignal | None], bool]


def hold(ledger: dict[str, dict[str, Holding]], m: Move, load: Load | None = None,
         util: float = 0.0) -> None:
    """Reserve a planned move's target GPUs in ``ledger``: later choices of the pass see
    them taken; and add the moving share's ``util`` to each in ``load``: later choices
    see them that much busier."""
    ledger.setdefault(m.service, {})[m.target_node] = Holding(
        m.service, m.target_node, m.target_uuids, m.target_milli)
    if load is not None and util > 0:
        for u in m.target_uuids:
            load[(m.target_node, u)] = load.get((m.target_node, u), 0.0) + util


@dataclass(frozen=True)
class Inputs:
    """Everything a planning pass reads: one snapshot plus this cycle's windows."""

    nodes: Sequence[SwarmNode]
    services: Sequence[SwarmService]
    tasks: Sequence[SwarmTask]
    facts: Mapping[str, NodeFacts]
    # The ledger as this cycle's placement writes left it, those that landed (the
    # daemon's step: ``cycle.rebalance.ledger_after``), so GPUs placement just gave away
    # are taken, and those a release held back or failed still holds
    ledger: Mapping[str, Mapping[str, Holding]]
    gpus: Mapping[tuple[str, str], GpuSignal]  # (node id, UUID): signals.GpuKey
    node_signals: Mapping[str, NodeSignal]
    cfg: RebalanceConfig
    now: float
    pending: Sequence[str] = ()  # services placement could not place
    prefix: str = "swarmgpu."
    # The mix of tasks to expect, for the fragmentation measure: placement's workload
    # model (placement.workload). None: the typical tasks of the services annotated now
    # (``workload_now``).
    workload: tuple[TypicalTask, ...] | None = None
    # Services with a move in flight by the daemon's records (``record.moving``), those
    # whose record cannot be read too; a move label alone is a stack's claim and
    # protects nothing.
    moving: AbstractSet[str] = frozenset()
    # Services whose own move record cannot be read, each with why no move of it starts
    # (``record.unreadable_of``): such a move may be under way, so none is proposed.
    unreadable: Mapping[str, str] = field(default_factory=dict)
    # Services whose planning raised this cycle (placement's plan: status ``failed``,
    # ``placement.isolate``): nothing is written for them, a move included (it would
    # restart their task on a plan no one could make), so none is proposed.
    failed: AbstractSet[str] = frozenset()
    # (service name, node id) of the entries placement read as a removed service's
    # (``PlacementPlan.dropped``): not in ``ledger``, but a move's start reads them by
    # name as its holdings (unconverged: their gate open to its surge), so none is proposed
    dropped: AbstractSet[tuple[str, str]] = frozenset()
    # This cycle's placement decisions, made after the snapshot (its writes are not in
    # it): service name -> the node of each replica placed. Their CPU, memory and
    # host-mode ports count against a move's target (``SwarmTargets``).
    placed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The ledger the metrics were read under (the snapshot's: ``ledger`` less what
    # placement wrote since): a GPU's reading is the load of these holders' tasks, split
    # among them by share; a holding placed after it carries none of it yet. None:
    # ``ledger``.
    measured: Mapping[str, Mapping[str, Holding]] | None = None
    # The nodes Swarm runs the agents' service on (``cpunodes.agent_nodes`` of
    # ``agents.service``): GPU nodes though their agent has not answered, never CPU-only
    # ones, as placement's allocator sees them; ``generic_kind`` too
    # (``placement.generic_resource_kind``: a node advertising it has GPUs).
    agents: AbstractSet[str] = frozenset()
    generic_kind: str = ""
    # ``preemption.priority_classes``, as placement reads a label's class (None: the
    # built-in ones): read with those alone, a service labelled with a class of the
    # config's was "no valid GPU request" here, never moved, not even off a failed GPU.
    classes: Mapping[str, int] | None = None
    # The GPUs preemptions freed, held for their preemptors while they settle
    # (``placement.nominated.held_gpus`` of the daemon's ``Preempter.nominated``): (node
    # id, GPU UUID) -> (the preemptor, its priority). No move lands on them
    # (``Context.held_for_other``).
    held: Mapping[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    # Of those, (node id, GPU UUID) -> the share (milli) tasks Swarm is stopping hold of
    # it, where no preemptor's hold names it (``nominated.stopping_shares``): judged by
    # share, as placement counts it (``Context.held_share``); the rest of it free.
    held_shares: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Tasks Swarm is stopping that still use their node (``placement.keys.stopping``):
    # their CPU and memory count where they are; none of them is a task of its service.
    stopping: Sequence[SwarmTask] = ()
    # Nodes whose agent's last facts are stale (``agentbook.stale_nodes``): no move's
    # target, as placement adds nothing there; still a source (the health policy moves
    # holders off a lost node).
    stale: AbstractSet[str] = frozenset()


FAILED_WHY = ("its placement failed this cycle (plan status failed): nothing is written "
              "for it, a move included, until its planning works; fix: see its plan's "
              "reason (swarmgpu plan) and the daemon's log")

REPLICAS_COUNTED = 8  # replicas of one service that workload_now counts


def workload_now(services: Sequence[SwarmService], prefix: str,
                 classes: Mapping[str, int] | None = None) -> tuple[TypicalTask, ...]:
    """The typical tasks of the GPU requests annotated now, one per replica up to
    ``REPLICAS_COUNTED`` a service (MIG requests left out: they are handed out by
    profile, not by share). The cap keeps one service's replica count, which its stack
    author writes, from outweighing every other service (and the list linear in
    services, not replicas)."""
    shapes: list[TaskShape] = []
    for s in services:
        r = parse_all(s.labels, prefix=prefix, classes=classes)
        if isinstance(r, GpuRequest) and not r.mig_profile:
            shapes += [demand_of(r).shape()] * min(REPLICAS_COUNTED, max(1, s.replicas or 1))
    return typical_tasks(shapes)


def by_service(tasks: Sequence[SwarmTask]) -> dict[str, tuple[SwarmTask, ...]]:
    """``tasks`` by service ID, each service's in their order: what ``why_not_movable``
    is given when many services are asked of one snapshot (one walk, not one each)."""
    by: dict[str, list[SwarmTask]] = {}
    for t in tasks:
        by.setdefault(t.service_id, []).append(t)
    return {sid: tuple(ts) for sid, ts in by.items()}


def why_not_movable(s: SwarmService, req: GpuRequest | None, tasks: Sequence[SwarmTask],
                    holdings: Mapping[str, Holding], prefix: str, now: float,
                    cooldown_s: float, *, same_node: bool = False,
                    moving: bool = False) -> str | None:
    """None when one replica of ``s`` may be moved now; else the reason it may not.
    ``moving``: the daemon's record says a move of ``s`` is in flight (``record.moving``,
    or the mover's own records); its move label alone is never asked.

    ``same_node``: the move stays on its node, between its GPUs (``repin``). A global
    service moves only so (each node's task is that node's; Swarm never runs it
    elsewhere). A replicated one moves so only when its replacement task cannot land on
    another gated node: one replica, or at most one per node (MaxReplicas 1)."""
    if s.mode == "global" and not same_node:
        return "global service: moved only between GPUs of its own node"
    if s.mode not in ("replicated", "global"):
        return f"{s.mode} service: never moved"
    if (same_node and s.mode == "replicated" and (s.replicas or 0) > 1
            and s.max_replicas_per_node != 1):
        return ("several replicas without MaxReplicas 1: the stopped task's replacement "
                "could start on another node")
    if s.labels.get(prefix + OPT_OUT, "").lower() == "never" or (
            req is not None and req.rebalance is Rebalance.NEVER):
        return f"opted out ({prefix}{OPT_OUT}=never)"
    if req is None:
        return "no valid GPU request"
    if req.mig_profile:
        return "MIG devices are not moved"
    if req.cpu_only:
        return f"no GPU ({prefix}gpus=0): placed once, never moved"
    if moving:
        return "a move is already in progress"
    if any(h.packed for h in holdings.values()):
        # A move (or a restart through the gate) takes one node's task away; packed
        # replicas all run behind one gate, so it would stop every one of them.
        return "replicas packed on one node: never moved"
    try:
        # A time no clock wrote (far ahead, inf: a stack writes this label too) is none,
        # or it would cool the service for ever; one a little ahead counts from now.
        last = stamps.passed(float(s.labels[prefix + MOVED_AT]), now)
    except (KeyError, ValueError):
        last = None  # never moved (or unreadable): no cooldown
    if last is not None and now - last < cooldown_s:
        return f"cooling down ({cooldown_s - (now - last):.0f}s left of {cooldown_s:g}s)"
    # a global service runs one task on each node it holds
    replicas = len(holdings) if s.mode == "global" else s.replicas or 0
    # a task desired ready (a restart's in its delay, an update's) is one more: not settled
    mine = [t for t in tasks if t.service_id == s.id and t.desired_state in MEANT_STATES]
    running = [t for t in mine if t.desired_state == "running" and t.state == "running"]
    if len(running) != replicas or len(mine) != replicas or len(holdings) != replicas:
        return (f"not converged ({len(running)} running of {replicas}, {len(holdings)} "
                "placed); moved only once stable")
    if any(t.node_id not in holdings for t in running):
        return "a task runs on a node without its placement; not converged"
    return None


def constraints_allow(s: SwarmService, node: SwarmNode, prefix: str) -> bool:
    """The service's own constraints (not its gate, which the move opens) on ``node``, as
    Swarm judges them (``swarm.constraints.node_matches``: every field it reads, a key it
    does not read matching no node); one that does not parse means no."""
    for text in s.constraints:
        if is_gate_of(text, prefix, s.name):
            continue
        try:
            c = parse_constraint(text)
        except ConstraintError:
            return False
        if not node_matches(c, node):
            return False
    return True


@dataclass
class Context:
    inp: Inputs
    ledger: dict[str, dict[str, Holding]] = field(default_factory=dict)
    requests: dict[str, GpuRequest] = field(default_factory=dict)
    by_name: dict[str, SwarmService] = field(default_factory=dict)
    nodes: dict[str, SwarmNode] = field(default_factory=dict)
    moved: set[str] = field(default_factory=set)  # services with a proposed move
    moves: list[Move] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The health policy's inputs (its switch, budget, lost nodes; default: report only)
    # and what it found beside its moves (None: it did not run).
    health_in: HealthInputs = field(default_factory=lambda: HealthInputs(evacuate=False))
    health_found: HealthResult | None = None
    # The utilisation the moves proposed in this pass put on their target GPUs: the
    # metrics show none of it yet, so two moves each judged alone against a GPU's
    # reading could together make it hot (``gpu_ok_as_target`` adds it).
    load: Load = field(default_factory=dict)
    # the measured ledger's holders per GPU (``share_util``), read once
    _by_gpu: dict[str, list[Share]] | None = field(default=None, init=False, repr=False)
    # Swarm's filters for a move's target (``refused``), built once per pass
    _targets: SwarmTargets | None = field(default=None, init=False, repr=False)
    # the snapshot's tasks by service ID (``tasks_of``), indexed once per pass
    _tasks_by: dict[str, tuple[SwarmTask, ...]] | None = field(default=None, init=False,
                                                               repr=False)
    # ``allocator(None, ())``, built once and kept in step by ``accept``: a statement's
    # search counts its moves on it and takes them back (``find_target``), where a new
    # allocator each search cost a pass over every holding (stop 77: 40 s of 42 at 200
    # nodes). None: not built, or dropped (``roll_back``, a move it cannot follow).
    _shared: ClusterAllocator | None = field(default=None, init=False, repr=False)
    # Each check (``trial``) on an allocator built for it: the code before stop 78, the
    # reference its tests and ``benchmarks/defrag_scale.py`` compare the kept one with.
    fresh_trials: ClassVar[bool] = False

    @classmethod
    def build(cls, inp: Inputs, health: HealthInputs | None = None) -> Context:
        ctx = cls(inp, ledger={k: dict(v) for k, v in inp.ledger.items()},
                  health_in=health or HealthInputs(evacuate=False))
        ctx.nodes = {n.id: n for n in inp.nodes}
        # Why, with the fix, once per plan (a policy passing it over says it short).
        ctx.notes += [f"{name} is not moved: {why}"
                      for name, why in sorted(inp.unreadable.items())]
        ctx.notes += [f"{name} is not moved: {FAILED_WHY}" for name in sorted(inp.failed)]
        for s in inp.services:
            ctx.by_name[s.name] = s
            r = parse_all(s.labels, prefix=inp.prefix, classes=inp.classes)
            if isinstance(r, GpuRequest):
                ctx.requests[s.name] = r
        return ctx

    @property
    def cfg(self) -> RebalanceConfig:
        return self.inp.cfg

    def movable(self, svc: str, *, same_node: bool = False) -> str | None:
        """None when ``svc`` may move now (``same_node``: between GPUs of one node)."""
        s = self.by_name.get(svc)
        if s is None:
            return "service gone"
        if svc in self.moved:
            return "already has a proposed move"
        if svc in self.inp.unreadable:  # the fix is the plan's note, said once
            return "its move record cannot be read"
        if svc in self.inp.failed:  # the why is the plan's note, said once
            return "its placement failed this cycle"
        return self.namesake_entry(svc) or why_not_movable(
            s, self.requests.get(svc), self.tasks_of(s.id), self.inp.ledger.get(svc, {}),
            self.inp.prefix, self.inp.now, self.cfg.cooldown_s, same_node=same_node,
            moving=svc in self.inp.moving)

    def tasks_of(self, service_id: str) -> Sequence[SwarmTask]:
        """The snapshot's tasks of service ``service_id``, in its order. Indexed once a
        pass: each service's question scanned every task (5.7 s of a 17.5 s plan on a
        200-node cluster: ``benchmarks/defrag_scale.py``)."""
        if self._tasks_by is None:
            self._tasks_by = by_service(self.inp.tasks)
        return self._tasks_by.get(service_id, ())

    def namesake_entry(self, svc: str) -> str | None:
        """Why ``svc`` may not move while an entry placement read as a removed namesake's
        lasts (``Inputs.dropped``): the mover's admission and a move's (or repin's) start
        read its holdings by name, that entry among them, and refuse it as unconverged."""
        hosts = sorted(self.nodes[nid].hostname if nid in self.nodes else nid
                       for name, nid in self.inp.dropped if name == svc)
        if hosts:
            return (f"a removed service of its name still has an entry on "
                    f"{', '.join(hosts)} (its task stopping): moved once placement "
                    "releases it")
        return None

    def holders(self) -> dict[str, list[Share]]:
        return holders_by_gpu(self.ledger)

    def node_known(self, nid: str) -> bool:
        sig = self.inp.node_signals.get(nid)
        return sig is not None and sig.known

    def held_for_other(self, svc: str | None, nid: str, uuid: str) -> bool:
        """GPU ``uuid`` on ``nid`` is held for a preemptor other than ``svc`` (``Inputs.
        held``): no move's target, whatever the moved service's priority. Placement lets
        a service of higher priority than the preemptor's take it, but the priority read
        here is not placement's (no config priority classes, no tenant caps: ``build``),
        and a move is never needed now: it waits ``preemption.settle_s`` at most (or
        while the victim's move is in flight)."""
        who = self.inp.held.get((nid, uuid))
        return who is not None and who[0] != svc

    def held_share(self, svc: str | None, nid: str, uuid: str) -> int | None:
        """What of GPU ``uuid`` on ``nid`` is held from a move of ``svc`` (None: of any
        service): 0 nothing; the share tasks Swarm is stopping hold of it (``Inputs.
        held_shares``: counted used, as placement counts it, the rest free); None: the
        whole GPU (a preemptor's). The one rule: ``heldgpus.held_from``."""
        return held_from(self.inp.held, self.inp.held_shares, svc, nid, uuid)

    def block_targets(self, alloc: ClusterAllocator, svc: str | None, blocked: Blocked,
                      taken: list[Choice] | None = None) -> None:
        """The GPUs no target of ``svc``'s move (None: of any service's) counted used on
        ``alloc`` (their free share committed, one GPU at a time in the allocator's node
        order): those held for a preemptor other than ``svc`` (``held_for_other``), marked
        here for every policy, and those the policy's own rule ``blocked`` names; of a GPU
        held for stopping tasks alone, their share (``held_share``). ``taken``: gets each
        choice committed, for the caller to release."""
        a = alloc.alloc
        for nid, node in a.nodes.items():
            for i, gpu in enumerate(self.inp.facts[nid].gpus):
                if node.free[i] <= 0:
                    continue  # nothing to take: skip the rules (pure) on a full GPU
                sig = self.inp.gpus.get((nid, gpu.uuid))
                share = None if blocked(node, i, gpu.uuid, sig) else self.held_share(
                    svc, nid, gpu.uuid)
                take = node.free[i] if share is None else min(share, node.free[i])
                if take > 0:
                    c = Choice(nid, (i,), (take,), 0.0, "blocked")
                    a.commit(c)
                    if taken is not None:
                        taken.append(c)

    def count_held(self, alloc: ClusterAllocator, node: str, pending: str,
                   taken: list[Choice] | None = None) -> tuple[int, ...]:
        """The GPUs of ``node`` held for a preemptor other than ``pending`` counted used on
        ``alloc`` (a check's own copy), as placement counts them (``placement/
        nominated.py``: wholly free ones; of one held for stopping tasks alone, as much of
        their share as is free): counted free, the moves made room placement never gives
        the pending service. The priority rule is ``held_for_other``'s. Returns their
        indices; ``taken``: gets each choice committed, for the caller to release."""
        shares: dict[str, int] = {}
        f = self.inp.facts.get(node)
        for g in f.gpus if f is not None else ():
            if share := self.held_share(pending, node, g.uuid):
                shares[g.uuid] = share
        got: tuple[int, ...] = ()
        for choice in (share_choice(alloc, node, shares, "held for tasks Swarm is stopping"),
                       held_choice(alloc, node, lambda uuid: self.held_share(
                           pending, node, uuid) is None, "held for a preemptor")):
            if choice is not None:
                alloc.alloc.commit(choice)
                if taken is not None:
                    taken.append(choice)
                got += choice.gpus
        return tuple(sorted(got))

    def gpu_ok_as_target(self, g: GpuSignal, add_util: float, load: Load | None = None
                         ) -> bool:
        """``g`` may take a share carrying ``add_util`` points: known, not hot, and below
        ``hotspot.clear_pct`` with it and with what the pass's moves put on it (``load``:
        a statement's own; None: the pass's)."""
        if g.hot is not State.FALSE or g.util_pct is None:
            return False  # unknown or hot: not verified free
        planned = (self.load if load is None else load).get((g.node_id, g.uuid), 0.0)
        return g.util_pct + planned + add_util < self.cfg.hotspot.clear_pct

    def share_util(self, svc: str, node_id: str, uuid: str, util: float | None) -> float:
        """``svc``'s part of GPU ``uuid``'s reading ``util`` on ``node_id``: split by share
        among the holders the reading was made under (``Inputs.measured``), so a holding
        placement gave out on that GPU since neither takes part of it nor adds to it
        (before, the share moved was judged to carry half the load it does). 0: unknown,
        or no holder of it then."""
        if self._by_gpu is None:
            measured = self.inp.measured
            self._by_gpu = holders_by_gpu(self.inp.ledger if measured is None else measured)
        on = [s for s in self._by_gpu.get(uuid, []) if s.node_id == node_id]
        mine = next((s for s in on if s.service == svc), None)
        return (estimated_util(mine, util, on) or 0.0) if mine is not None else 0.0

    def load_of(self, svc: str, source: str) -> float:
        """The utilisation points ``svc``'s holding on ``source`` carries on each GPU it
        lands on: its GPUs' readings split by share, the busiest of them (0 unknown)."""
        h = self.inp.ledger.get(svc, {}).get(source)
        if h is None:
            return 0.0
        most = 0.0
        for u in h.uuids:
            sig = self.inp.gpus.get((source, u))
            if sig is not None:
                most = max(most, self.share_util(svc, source, u, sig.util_pct))
        return most

    def workload(self) -> tuple[TypicalTask, ...]:
        if self.inp.workload is not None:
            return self.inp.workload
        return workload_now(self.inp.services, self.inp.prefix, self.inp.classes)

    @property
    def targets(self) -> SwarmTargets:
        if self._targets is None:
            inp = self.inp
            self._targets = SwarmTargets(inp.nodes, inp.services, inp.tasks, inp.prefix,
                                         inp.placed)
        return self._targets

    def refused(self, svc: str, moves: Sequence[Move] = ()) -> AbstractSet[str]:
        """Nodes Swarm would not run a moved task of ``svc`` on (``targets``), the pass's
        moves and ``moves`` (a statement's) counted."""
        s = self.by_name.get(svc)
        if s is None:
            return frozenset()
        return self.targets.refused(s, [*self.moves, *moves] if moves else self.moves)

    def allocator(self, ledger: Mapping[str, Mapping[str, Holding]] | None = None,
                  moves: Sequence[Move] | None = None) -> ClusterAllocator:
        """The allocator over ``ledger`` (None: the pass's). ``moves``: count CPU and
        memory too, what the nodes' tasks reserve, the holdings whose task does not
        exist yet, the tasks Swarm is stopping (``Inputs.stopping``) and the new tasks of
        the pass's moves and of these (``SwarmTargets.reserve``; None: GPUs only)."""
        lg = self.ledger if ledger is None else ledger
        inp = self.inp  # the nodes as placement's allocator sees them (``Inputs.agents``)
        alloc = ClusterAllocator(inp.nodes, inp.facts, lg, prefix=inp.prefix,
                                 tasks=inp.tasks if moves is not None else (),
                                 generic_kind=inp.generic_kind, agents=inp.agents)
        for nid in [n for n in inp.stale if n in alloc.alloc.nodes]:
            alloc.alloc.set_blocked(nid, True)  # its holdings stay committed: a source
        if moves is None:
            return alloc
        for t in inp.stopping:  # used where they are until they stop; no holding's task
            if t.node_id in alloc.alloc.nodes or t.node_id in alloc.cpu.nodes:
                alloc.add_usage(t.node_id, t.cpu_milli, t.memory_mib)
        self.targets.reserve(alloc, [*self.moves, *moves], lg)
        return alloc

    def find_target(self, svc: str, source: str, *, add_util: float | None = None,
                    only_shared: bool = False, only_nodes: set[str] | None = None,
                    st: Statement | None = None) -> Choice | None:
        """Best node and GPUs for one more replica of ``svc``, away from ``source``.
        ``add_util``: the load it brings to its GPU (None: ``load_of``); ``st``: the
        statement it is tried in (its ledger and load; None: the pass's)."""
        req = self.requests.get(svc)
        s = self.by_name.get(svc)
        if req is None or s is None or unread_source(self.nodes, source):
            return None
        lg = self.ledger if st is None else st.ledger
        load = self.load if st is None else st.load
        pending = st.moves if st is not None else ()
        add = self.load_of(svc, source) if add_util is None else add_util

        def blocked(node: NodeState, i: int, _uuid: str, sig: GpuSignal | None) -> bool:
            return (sig is None or not self.gpu_ok_as_target(sig, add, load)  # not verified free
                    or (only_shared and node.free[i] == node.spec.gpus[i].capacity_milli))

        with self.trial(pending, st.evict if st is not None else ()) as t:
            self.block_targets(t.alloc, svc, blocked, t.taken)
            return self._target(t.alloc, svc, req, s, source, lg, pending, only_nodes)

    def _target(self, alloc: ClusterAllocator, svc: str, req: GpuRequest, s: SwarmService,
                source: str, lg: Mapping[str, Mapping[str, Holding]],
                pending: Sequence[Move], only_nodes: set[str] | None) -> Choice | None:
        """``find_target``'s search on ``alloc``, its GPUs blocked."""
        has = set(lg.get(svc, {}))
        no = self.refused(svc, pending)

        def allowed(ns: NodeState) -> bool:
            nid = ns.spec.name
            n = self.nodes.get(nid)
            return (n is not None and nid != source and nid not in has
                    and schedulable(n) and self.node_known(nid)
                    and (only_nodes is None or nid in only_nodes)
                    and nid not in no and constraints_allow(s, n, self.inp.prefix))

        got = alloc.place(demand_of(req, *self.targets.reservation(svc)), allowed)
        return got if isinstance(got, Choice) and got.gpus else None

    def make_move(self, svc: str, source: str, choice: Choice, trigger: Trigger,
                  window_s: float | None, reason: str, gain: str) -> Move:
        s = self.by_name[svc]
        h = self.ledger[svc][source]
        f = self.inp.facts[choice.node]
        return Move(
            service=svc, service_id=s.id, source_node=source,
            source_host=self.nodes[source].hostname, source_uuids=h.uuids,
            source_milli=h.milli, target_node=choice.node,
            target_host=self.nodes[choice.node].hostname, target_gpus=choice.gpus,
            target_uuids=tuple(f.gpus[i].uuid for i in choice.gpus),
            target_milli=choice.milli, trigger=trigger, window_s=window_s, reason=reason,
            gain=gain, target_share=tuple(sorted((share_labels(
                self.inp.prefix, choice.node, [f.gpus[i].uuid for i in choice.gpus],
                choice.milli, f) or {}).items())))

    def accept(self, m: Move) -> None:
        """Count a proposed move: its target is reserved for the rest of the pass."""
        if self._shared is not None:
            if m.target_node in self.ledger.get(m.service, {}):
                self._shared = None  # it replaces a holding: built anew when asked
            else:
                self.count_move(self._shared, m, +1)
        self.moves.append(m)
        self.moved.add(m.service)
        hold(self.ledger, m, self.load, self.load_of(m.service, m.source_node))

    def shared_allocator(self, moves: Sequence[Move]) -> ClusterAllocator:
        """``_shared`` with ``moves`` (a statement's, none of them accepted, each to a
        node its service holds nothing on) counted as ``allocator`` counts them;
        ``put_back`` takes them back."""
        if self._shared is None:
            self._shared = self.allocator(None, ())
        alloc, self._shared = self._shared, None  # none till all is put back
        for m in moves:
            self.count_move(alloc, m, +1)
        return alloc

    @contextmanager
    def trial(self, moves: Sequence[Move] = (), evict: Sequence[tuple[str, str]] = ()
              ) -> Iterator[Trial]:
        """``allocator(ledger_without(evict), moves)`` for a check (``moves``: a
        statement's, none accepted, each to a node its service holds nothing on): the
        kept one (``shared_allocator``) with ``evict``'s holdings and what they reserve
        taken off, all of it and what the check counts on the ``Trial`` taken back
        after (a fault on the way drops it). Built anew where ``fresh_trials``, or where
        a holding on a node of ``evict``'s could not be committed (``problems``: the
        room an evicted one leaves is its own in a new build)."""
        alloc = None if self.fresh_trials else self.shared_allocator(moves)
        if alloc is not None and evict and alloc.problems:
            on = {nid for _svc, nid in evict}
            if any(nid in on and alloc.held_at(svc, nid) is None
                   for svc, per in self.ledger.items() for nid in per):
                self.put_back(alloc, moves, ())
                alloc = None
        if alloc is None:
            lg = self.ledger_without(evict)  # (as a statement's: ``Statement.move``)
            for m in moves:
                hold(lg, m)
            yield Trial(self.allocator(lg, moves))
            return
        t = Trial(alloc)
        for svc, nid in dict.fromkeys(evict):  # (each once, as ``ledger_without``)
            h = self.ledger.get(svc, {}).get(nid)
            if h is not None:
                t.evict(h, self.targets.leaving(alloc, svc, nid, h, [*self.moves, *moves]))
        yield t
        t.undo()
        self.put_back(alloc, moves, ())

    def put_back(self, alloc: ClusterAllocator, moves: Sequence[Move],
                 taken: Sequence[Choice]) -> None:
        """Take back what ``shared_allocator`` and ``block_targets`` counted on it; keep
        it as ``_shared`` again (a fault on the way drops it)."""
        for c in reversed(taken):
            alloc.alloc.release(c)
        for m in reversed(moves):
            self.count_move(alloc, m, -1)
        self._shared = alloc

    def count_move(self, alloc: ClusterAllocator, m: Move, sign: int) -> None:
        """Count (``sign`` 1) or take back (-1) on ``alloc`` a move to a node its service
        holds nothing on: its target holding, and what its new task reserves
        (``SwarmTargets.reserve``)."""
        if sign > 0:
            alloc.commit_holding(m.service, m.target_node, Holding(
                m.service, m.target_node, m.target_uuids, m.target_milli))
        cpu, mem = self.targets.reservation(m.service)
        if (cpu or mem) and m.target_node != m.source_node \
                and m.target_node in alloc.alloc.nodes:
            alloc.add_usage(m.target_node, sign * cpu, sign * mem)
        if sign < 0:
            alloc.release_holding(m.service, m.target_node)

    def ledger_without(self, drop: Sequence[tuple[str, str]]
                       ) -> dict[str, dict[str, Holding]]:
        # A copy of each service's holdings, not of the holdings: they are frozen.
        lg = {k: dict(v) for k, v in self.ledger.items()}
        for svc, nid in drop:
            lg.get(svc, {}).pop(nid, None)
        return lg

    def statement(self, evict: Sequence[tuple[str, str]] = ()) -> Statement:
        """Moves to try together, on a copy of the ledger without ``evict``."""
        return Statement(self, evict)

    def mark(self) -> Mark:
        """What a policy may add to the pass, as it stands now (``roll_back``)."""
        return Mark(len(self.moves), len(self.notes), frozenset(self.moved),
                    {k: dict(v) for k, v in self.ledger.items()}, self.health_found,
                    dict(self.load))

    def roll_back(self, m: Mark) -> None:
        """Take back what was added since ``m`` (a policy that raised): its moves, notes,
        marks and reservations, so the next policy plans on the pass as it was."""
        del self.moves[m.moves:]
        del self.notes[m.notes:]
        self.moved = set(m.moved)
        self.ledger = {k: dict(v) for k, v in m.ledger.items()}
        self.health_found = m.health_found
        self.load = dict(m.load)
        self._shared = None


@dataclass(frozen=True)
class Mark:
    """``Context.mark``: the lengths of its lists, copies of what is edited in place (a
    copy of the ledger per policy run: a few thousand holdings, no deep copy)."""

    moves: int
    notes: int
    moved: frozenset[str]
    ledger: dict[str, dict[str, Holding]]
    health_found: HealthResult | None
    load: Load


class Statement:
    """Moves tried together, kept or dropped as one (after KAI-Scheduler's statements
    on its cycle's session): ``move`` reserves a target in the statement's own ledger,
    a copy of the pass's with ``evict``'s holdings gone, and adds its load to the
    statement's copy of the pass's (``Context.load``); ``commit`` accepts every move
    into the pass; a statement left uncommitted changes nothing. A policy that needs
    several moves at once (consolidation: every holder of a GPU; defragmentation: the
    holdings that make room) tries them here."""

    def __init__(self, ctx: Context, evict: Sequence[tuple[str, str]] = ()) -> None:
        self.ctx = ctx
        self.evict = tuple(evict)
        self.ledger = ctx.ledger_without(evict)
        self.load = dict(ctx.load)
        self.moves: list[Move] = []

    def move(self, m: Move) -> None:
        self.moves.append(m)
        hold(self.ledger, m, self.load, self.ctx.load_of(m.service, m.source_node))

    def commit(self) -> None:
        for m in self.moves:
            self.ctx.accept(m)
