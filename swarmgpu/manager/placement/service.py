"""One service's plan (``plan_service``): its steps' results put together, in one order.

Each step returns a frozen value -- what it decided, and what to write -- and writes
nothing to the plan; no step sees another's result but as its input. ``plan_service``
composes them, in this order, into a draft local to this module, and builds the
service's ``ServicePlan`` once from it:

1. the request: a broken one (gated only, step 3 alone), or a mode swarmgpu does not
   place: invalid; one its queue's max holds back (``queues.QueueLimit``) while it
   holds nothing: all pending, gated only (step 3 alone);
2. a rebalancing move owns the service: its holdings as they are, nothing written;
3. ``gating``: its gate, env template, device mount (present, adopted); or it waits;
4. a global service (``globalmode``): one holding per GPU node (and CPU-only node,
   for gpus "0"), the others waiting;
   a replicated one: the holdings it keeps (up to its replicas; the rest released),
   ``converge`` (holdings Swarm will not run: re-placed or reported), ``spread`` and
   ``packing`` (where its missing replicas go; a packed one's env and MaxReplicas);
5. ``devicemap``: device labels, ledger entries and gates, task renewal;
6. the outcome: status and reason, state, warnings;
7. ``jobs``: a job's progress, its gates, the writes a running job must not get;
8. the queue's cap on a scale-up (``queues.QueueLimit``), the generic reservation
   (``generic``), the preemption record (``preempt``), a CUDA_DEVICE_ORDER record whose
   line the owner took out (``gating.stale_order_record``: dropped);
9. ``restarts``: the task spec change decided, or held back; a write that replaces no
   task held while a task of the service waits for a node (``strands_waiting``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from swarmgpu.manager.placement.converge import converge, crowding
from swarmgpu.manager.placement.cycle import Cycle, Released, release_dropped
from swarmgpu.manager.placement.devicemap import (
    DeviceMap,
    all_at_once,
    write_devices_and_gates,
)
from swarmgpu.manager.placement.gating import Gating, gate_service, stale_order_record
from swarmgpu.manager.placement.generic import reserve_generic
from swarmgpu.manager.placement.globalmode import GLOBAL_MODES, place_global
from swarmgpu.manager.placement.jobs import (
    JobProgress,
    JobRun,
    job_busy_nodes,
    job_replicas,
    job_run,
)
from swarmgpu.manager.placement.keys import (
    MAX_STATE,
    PARALLELISM_STATE,
    REPLACED_STATE,
    RESPREAD_STATE,
    assign_key,
    gate_key,
    is_renew,
    next_renewal,
)
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.packing import packed_env
from swarmgpu.manager.placement.preempted import preempted_mark
from swarmgpu.manager.placement.queues import Moving, QueueLimit
from swarmgpu.manager.placement.records import (
    EMPTY,
    NO_WRITES,
    ReplicaPlacement,
    ServicePlan,
    SpecWrites,
    State,
    Status,
)
from swarmgpu.manager.placement.replicas import placement_order, replicas_of
from swarmgpu.manager.placement.restarts import UNGATED, settle_restarts, strands_waiting
from swarmgpu.manager.placement.spread import place_replicas
from swarmgpu.manager.placement.tasks import Waiting
from swarmgpu.manager.services.requests import (
    GpuRequest,
    Rebalance,
    RequestError,
    request_labels,
)
from swarmgpu.swarm.client import SwarmService


def plan_service(
    s: SwarmService,
    r: GpuRequest | RequestError,
    kept: dict[str, Holding],
    old: Mapping[str, Holding],
    running_on: Mapping[str, int],
    waiting: Waiting,
    res: tuple[int, int],
    cyc: Cycle,
    slots: Mapping[int, str] | None = None,
    job: JobProgress | None = None,
    cap: QueueLimit | None = None,
) -> ServicePlan:
    """One service's plan, its steps in the module's order. ``cap``: at most this many
    replicas are placed, and why the others wait (its queue's max, ``placement.queues``)."""
    if isinstance(r, RequestError):
        d = _Draft(s, None, "")
        if request_labels(s.labels, cyc.prefix):  # (its container labels' alone: below)
            return _invalid(d, s, r, running_on, waiting, cyc)
        d.status, d.state, d.reason = Status.INVALID, State.INVALID, str(r)
        return d.build(NO_WRITES)
    d = _Draft(s, r, r.describe())
    if cap is not None and cap.whole:  # its queue's max: all of it waits, only gated
        return _held_at_max(d, s, r, running_on, waiting, cyc, cap)
    d.mode = s.mode
    if s.mode not in _MODES:
        d.status, d.state = Status.INVALID, State.INVALID
        d.reason = f"mode {s.mode} is not one swarmgpu places ({', '.join(sorted(_MODES))})"
    elif s.name in cyc.moving:
        # A rebalancing move owns this service until it ends (swarmgpu.manager.rebalance.mover):
        # its holdings stay reserved (committed above), nothing is written here. Only the
        # daemon's record says so (rebalance.record.move_of): a move label alone is a
        # stack's claim, and such a service is placed like any other.
        d.state = State.REBALANCING
        d.placements = tuple(
            sorted(
                (
                    p
                    for nid, h in kept.items()
                    if nid in cyc.by_id
                    for p in replicas_of(h, cyc.by_id[nid], cyc.facts.get(nid))
                ),
                key=placement_order,
            )
        )
        # A record that cannot be read: its move may be under way (nodes unknown), so the
        # same, with the record and the fix.
        unread = cyc.moving.unread.get(s.name) if isinstance(cyc.moving, Moving) else None
        d.warnings.append(
            "a rebalancing move is in progress; placement waits for it"
            if unread is None
            else f"a rebalancing move may be in progress: {unread}; placement "
            "leaves it as it is until then"
        )
    elif d.gated(gate_service(s, r, cyc)):
        if s.mode in GLOBAL_MODES:  # one holding per GPU node (placement.globalmode)
            _plan_global(d, s, r, kept, old, running_on, waiting, res, cyc, job, cap)
        else:
            _plan_replicated(
                d,
                s,
                r,
                kept,
                old,
                running_on,
                waiting,
                res,
                cyc,
                slots,
                job,
                cap.replicas if cap is not None else None,
            )
    return _finish(d, s, r, running_on, waiting, cyc, cap)


_MODES = frozenset(("replicated", "global", "replicated-job", "global-job"))
RENEW_WHY = ("its waiting task, which Swarm has not tried since a write of its spec, "
             "replaced where it is (nothing of it runs)")


AT_MAX = ("place", "its task runs without a device list (no device env: it may see every "
                   "GPU of its node) while its queue's max keeps it waiting: it restarts "
                   "once behind its gate, which no node opens, so it holds no GPU")


def _held_at_max(d: _Draft, s: SwarmService, r: GpuRequest, running_on: Mapping[str, int],
                 waiting: Waiting, cyc: Cycle, cap: QueueLimit) -> ServicePlan:
    """Step 1's wait at the queue's max, with step 3 alone: its gate and env adopted
    (nothing placed). Without them a stack deployed without render ran its task on with
    every GPU of its node, counted against no quota (a service short of room was gated)."""
    d.mode = s.mode
    gated = d.gated(gate_service(s, r, cyc))
    d.status, d.state = Status.PENDING, State.PENDING
    d.reason = cap.reason if gated else f"{cap.reason}; {d.reason}"
    return _written(d, s, running_on, waiting, cyc, ungated=AT_MAX)


INVALID_UNGATED = ("place", "its task runs without a device list (no device env: it may "
                            "see every GPU of its node) while its request is invalid: it "
                            "restarts once behind its gate, which opens only where it "
                            "holds GPUs (none until its labels are fixed and it is placed)")


def _invalid(d: _Draft, s: SwarmService, r: RequestError, running_on: Mapping[str, int],
             waiting: Waiting, cyc: Cycle) -> ServicePlan:
    """Step 1's invalid request, with step 3 alone: its gate and env adopted as a valid
    request's are (nothing placed; what it holds the planner keeps). Without them a stack
    deployed without render with a broken label ran its task where Swarm put it, with
    every GPU of its node, counted against no quota: the labels are the tenant's, the
    gate the operator's (``placement.adopt_ungated``). A request among its container
    labels alone is left as it is: without it the service were one of no request, which
    runs ungated (and ``audit`` says a gate on it waits for nothing)."""
    d.mode = s.mode
    gated = d.gated(gate_service(s, None, cyc))
    d.status, d.state = Status.INVALID, State.INVALID
    d.reason = str(r) if gated else f"{r}; {d.reason}"
    return _written(d, s, running_on, waiting, cyc, ungated=INVALID_UNGATED)


def _plan_global(
    d: _Draft,
    s: SwarmService,
    r: GpuRequest,
    kept: Mapping[str, Holding],
    old: Mapping[str, Holding],
    running_on: Mapping[str, int],
    waiting: Waiting,
    res: tuple[int, int],
    cyc: Cycle,
    job: JobProgress | None,
    cap: QueueLimit | None,
) -> None:
    """Steps 4-7 of a global service (and a global job); ``cap``: its queue's max, the
    most nodes it holds on (the others wait, with the reason)."""
    # a global job's nodes whose task completed, or failed with no replacement: no holding
    done = job.done_nodes | job.failed_nodes if job is not None else frozenset()
    g = place_global(
        s, r, kept, old, res, cyc, done, None if cap is None else (cap.replicas, cap.reason)
    )
    d.released(g.released, cyc)
    d.placements, d.new, d.nodes_waiting = g.placements, g.new, g.nodes_waiting
    d.device_map(write_devices_and_gates(s, d.placements, EMPTY, running_on, waiting, cyc))
    pending, note = g.outcome(done)
    if note is not None:
        d.warnings.append(note)
    if pending is not None:
        d.status, d.reason = Status.PENDING, pending
    d.state = (
        State.PENDING
        if not d.placements
        else State.BOUND
        if d.labels_set or d.new or d.gates_deferred
        else State.ACTIVE
        if sum(running_on.values()) >= len(d.placements)
        else State.ALLOCATED
    )
    if s.mode == "global-job":
        d.job(job_run(s, job or JobProgress(), d.placements, d.nodes_waiting, d.writes(), cyc,
                      r.cpu_only, g.run_waits, g.run_capped), cyc)


def _plan_replicated(
    d: _Draft,
    s: SwarmService,
    r: GpuRequest,
    kept: Mapping[str, Holding],
    old: Mapping[str, Holding],
    running_on: Mapping[str, int],
    waiting: Waiting,
    res: tuple[int, int],
    cyc: Cycle,
    slots: Mapping[int, str] | None,
    job: JobProgress | None,
    cap: int | None,
) -> None:
    """Steps 4-7 of a replicated service (and a replicated job)."""
    if s.mode == "replicated-job":  # as many holdings as tasks may run now
        job = job or JobProgress()
    want = replicas = job_replicas(s, job) if job is not None else s.replicas or 0
    ranked = running_on
    if job is not None and (busy := job_busy_nodes(s, job, running_on)):
        # a job's done nodes keep their gate: their holding is kept, first, beside those
        # its tasks run on (more than ``want`` while they are)
        replicas = max(replicas, len(busy & kept.keys()))
        ranked = {**dict.fromkeys(busy, 1), **running_on}
    if cap is not None:
        replicas = min(replicas, cap)
    holdings: Mapping[str, Holding] = _keep_holdings(kept, ranked, replicas, cyc)
    d.released(release_dropped(cyc, old, holdings), cyc)
    stuck = ""
    if (conv := converge(s, r, holdings, running_on, waiting, res, cyc)) is not None:
        holdings, stuck, d.transient = conv.holdings, conv.stuck, conv.transient
        if conv.dropped:  # re-placed off them: their ledger entry and gate go
            d.remove_holdings(conv.dropped, cyc)
            d.state_labels[cyc.prefix + REPLACED_STATE] = conv.backoff_label
            d.replaced = conv.replaced
        elif conv.renew:
            d.state_labels[cyc.prefix + REPLACED_STATE] = conv.backoff_label
    spread = place_replicas(s, r, holdings, replicas, slots or {}, res, cyc)
    d.placements = tuple(sorted(spread.placements, key=placement_order))
    d.packed, d.new = spread.packed, spread.new
    # ``want``: Swarm runs every task; one per node keeps the capped ones off held GPUs
    if d.packed is None and want > 1 and s.max_replicas_per_node != 1:
        d.set_max_replicas = 1
    elif d.packed is not None:
        env = packed_env(s, d.packed, d.placements, cyc)
        if env.waits is not None:
            d.status, d.state, d.reason = Status.PENDING, State.PENDING, env.waits
            d.placements = ()
            return
        d.replace_env += env.replace_env
        if env.max_state is not None:
            d.state_labels[cyc.prefix + MAX_STATE] = env.max_state
        if env.set_max_replicas is not None:
            d.set_max_replicas = env.set_max_replicas
        d.warnings += env.warnings
        d.limit = env.limit
    dm = write_devices_and_gates(s, d.placements, spread.draining, running_on, waiting, cyc)
    d.device_map(dm)
    if (
        d.packed is None
        and want > 1
        and job is None
        and (crowd := crowding(s, d.placements, running_on, cyc, r.cpu_only)) is not None
    ):
        d.warnings.append(crowd.why)  # placed: pending would let it preempt for nothing
        d.state_labels[cyc.prefix + RESPREAD_STATE] = crowd.label
        if crowd.force and not d.force_update:
            d.force_update, d.decision = True, ("place", crowd.why)
    if conv is not None and conv.renew and not d.force_update:
        _renew(d, s, running_on, waiting, cyc)
    # swarmgpu's own records: the MaxReplicas it set, the back-off (no device map: no
    # restart), the re-spread; a record no longer true goes
    if want_state := {k: v for k, v in d.state_labels.items() if s.labels.get(k) != v}:
        d.labels_set = {**d.labels_set, **want_state}
    for key in (cyc.prefix + MAX_STATE, cyc.prefix + RESPREAD_STATE):
        if key in s.labels and key not in d.state_labels:
            d.labels_remove += (key,)
    _outcome(d, s, r, spread.reasons, dm.all_open, stuck, running_on, waiting, replicas, want, cyc)
    if job is not None:
        d.job(job_run(s, job, d.placements, d.nodes_waiting, d.writes(), cyc, r.cpu_only), cyc)


def _renew(d: _Draft, s: SwarmService, running_on: Mapping[str, int], waiting: Waiting,
           cyc: Cycle) -> None:
    """Its waiting tasks replaced where they are (``converge``). Nothing of it runs: a
    ForceUpdate. A replica runs: a ForceUpdate would restart it too, so the renewal
    constraint (``keys.RENEW_STATE``) changes instead, which every node meets: Swarm's
    updater replaces only the tasks without a node (swarmkit ``IsTaskDirty``). Either
    way all at once where several wait and nothing runs (the rolling updater waits for
    each new task to run); beside a running replica the owner's parallelism stays: a
    forced update landing while it were 0 would restart every running replica at once."""
    d.renewed = True
    owners = all_at_once(s)
    if any(running_on.values()):
        owners = None
        mine = tuple(c for c in s.constraints if is_renew(c, cyc.prefix))
        d.remove_constraints += mine
        # No decision: ``restarts`` finds it a change of placement alone its running
        # nodes meet, and still holds back anything else that would restart them.
        d.add_constraints += next_renewal(mine, cyc.prefix, s.version)
    else:
        d.force_update, d.decision = True, ("place", RENEW_WHY)
    if owners is not None:
        d.state_labels[cyc.prefix + PARALLELISM_STATE] = owners
        d.set_update_parallelism = 0


def _keep_holdings(
    kept: Mapping[str, Holding], running_on: Mapping[str, int], replicas: int, cyc: Cycle
) -> dict[str, Holding]:
    """Holdings the service keeps: valid ones up to its replica count (idle nodes are
    dropped first on a scale-down); the rest are released."""
    holdings = dict(kept)
    by_id = cyc.by_id
    if len(holdings) > replicas:
        order = sorted(
            holdings,
            key=lambda nid: (running_on.get(nid, 0), by_id[nid].hostname if nid in by_id else nid),
        )
        for nid in order[: len(holdings) - replicas]:
            del holdings[nid]
    return holdings


def _outcome(
    d: _Draft,
    s: SwarmService,
    r: GpuRequest,
    reasons: Sequence[str],
    gates_open: bool,
    stuck: str,
    running_on: Mapping[str, int],
    waiting: Waiting,
    replicas: int,
    want: int,
    cyc: Cycle,
) -> None:
    """Step 6 of a replicated service: status and reason, state, warnings."""
    if len(d.placements) < replicas:
        d.status = Status.PENDING
        d.reason = "; ".join(reasons) or "not enough nodes"
        if len(d.placements) and reasons:
            d.reason = f"{len(d.placements)} of {replicas} replicas placed; {d.reason}"
    elif gates_open and waiting.refused and not d.replaced:
        # Placed by the ledger, but Swarm says it cannot run the task there: not placed.
        d.status = Status.PENDING
        d.reason = f"Swarm cannot run its task: {waiting.refused}"
    if stuck:  # held where Swarm will not run it, and not moved: it waits
        d.status, d.stuck = Status.PENDING, True
        d.reason = f"{d.reason}; {stuck}" if d.reason else stuck
    if d.limit:  # the owner's MaxReplicas: swarmgpu's own cause first, Swarm's words after
        d.status = Status.PENDING
        d.reason = f"{d.limit}; {d.reason}" if d.reason else d.limit
    if d.replaced:
        now_on = sorted({p.hostname for p in d.placements})
        d.replaced += f"; re-placed on {', '.join(now_on) or 'no node yet'}"
        d.warnings.append(d.replaced)
    if d.status == Status.PLACED and replicas and sum(running_on.values()) >= replicas:
        cyc.backoff.pop(s.id, None)  # converged: a later refusal starts afresh
        if cyc.prefix + REPLACED_STATE in s.labels:
            d.labels_remove += (cyc.prefix + REPLACED_STATE,)
    d.state = (
        State.PENDING
        if not d.placements
        else State.BOUND
        if d.labels_set or d.new or d.gates_deferred
        else State.ACTIVE
        if sum(running_on.values()) >= want and want > 0
        else State.ALLOCATED
    )
    if r.rebalance is Rebalance.NEVER:
        d.warnings.append("opted out of rebalancing")


def _finish(
    d: _Draft,
    s: SwarmService,
    r: GpuRequest | RequestError,
    running_on: Mapping[str, int],
    waiting: Waiting,
    cyc: Cycle,
    cap: QueueLimit | None,
) -> ServicePlan:
    """Steps 8 and 9, then the plan."""
    valid = d.status != Status.INVALID
    if cap is not None and valid and s.mode not in GLOBAL_MODES:  # a scale-up held at its max
        d.reason = (
            f"{d.reason}; {cap.reason}"
            if d.status == Status.PENDING and d.reason
            else f"{len(d.placements)} of {cap.wanted} replicas placed; {cap.reason}"
        )
        d.status = Status.PENDING
    if cyc.generic_kind and isinstance(r, GpuRequest) and valid:
        # (tasks this write replaces anyway take the new reservation with them)
        d.set_generic, note = reserve_generic(r, s, cyc.generic_kind,
                                              bool(running_on) and not d.force_update)
        if note is not None:
            d.warnings.append(note)
    who, done_with = preempted_mark(
        s, cyc.prefix, d.status == Status.PENDING and not d.placements, bool(d.placements)
    )
    if who is not None:
        d.reason = f"{who}; {d.reason}" if d.reason else who
    elif done_with is not None and done_with not in d.labels_remove and not d.job_running:
        d.labels_remove += (done_with,)  # (a started job's: before a later run, as
    stale = (stale_order_record(s, cyc.prefix)  # any write of a job runs it again)
             if d.state != State.REBALANCING and not d.job_running else None)
    if stale is not None and stale not in d.labels_remove:
        d.labels_remove += (stale,)
    return _written(d, s, running_on, waiting, cyc)


def _written(d: _Draft, s: SwarmService, running_on: Mapping[str, int], waiting: Waiting,
             cyc: Cycle, ungated: tuple[str, str] = UNGATED) -> ServicePlan:
    """Step 9, then the plan; ``ungated``: the decision of a write adopting a task that
    runs without a device list."""
    writes = d.writes()
    settled = settle_restarts(writes, d.decision, s, running_on, d.node_remove, cyc)
    if settled is not None:
        writes, d.held = settled.writes, settled.held
        d.decision = ungated if settled.decision == UNGATED else settled.decision
        if settled.note is not None:
            # What adoption said it added was not added: the held note says what waits.
            d.warnings = [w for w in d.warnings if not w.startswith("adopted")]
            d.warnings.append(settled.note)
    if strands_waiting(writes, s, waiting):  # written once no task waits for a node
        writes = NO_WRITES
    return d.build(writes)


@dataclass(slots=True, init=False, eq=False)
class _Draft:
    """One service's plan while ``plan_service`` puts its steps' results together (local
    to this module: nothing else sees it, and the plan built from it is frozen)."""

    s: SwarmService
    request: GpuRequest | None
    request_text: str
    status: Status
    state: str
    mode: str
    reason: str | None
    placements: tuple[ReplicaPlacement, ...]
    warnings: list[str]
    labels_set: Mapping[str, str]  # the spec writes, as ``SpecWrites`` names them
    labels_remove: tuple[str, ...]
    add_constraints: tuple[str, ...]
    remove_constraints: tuple[str, ...]
    add_env: tuple[str, ...]
    record_env: tuple[tuple[str, str], ...]
    replace_env: tuple[tuple[str, str], ...]
    add_mounts: tuple[Mapping[str, Any], ...]
    set_max_replicas: int | None
    force_update: bool
    set_update_parallelism: int | None
    set_generic: tuple[str, int] | None
    node_set: dict[str, Mapping[str, str]]
    node_remove: dict[str, tuple[str, ...]]
    packed: str | None
    limit: str | None  # why some packed replicas wait (``PackedEnv.limit``)
    state_labels: dict[str, str]
    gates_deferred: bool
    new: bool
    replaced: str
    nodes_waiting: Mapping[str, str]
    progress: str | None
    job_running: bool  # a job whose run started: its spec is not written (``jobs``)
    decision: tuple[str, str] | None
    held: tuple[str, ...]
    transient: str  # ``ServicePlan.transient``
    renewed: bool
    stuck: bool  # ``ServicePlan.stuck``
    gate_waits: bool  # ``ServicePlan.gate_waits``

    def __init__(self, s: SwarmService, request: GpuRequest | None, text: str) -> None:
        self.s, self.request, self.request_text = s, request, text
        self.status, self.state, self.mode = Status.PLACED, State.ACTIVE, "replicated"
        self.reason, self.placements, self.warnings = None, (), []
        self.labels_set, self.labels_remove = EMPTY, ()
        self.add_constraints = self.remove_constraints = self.add_env = ()
        self.replace_env, self.add_mounts, self.record_env = (), (), ()
        self.set_max_replicas = self.set_update_parallelism = self.set_generic = None
        self.force_update = self.gates_deferred = self.new = False
        self.node_set, self.node_remove, self.state_labels = {}, {}, {}
        self.packed = self.progress = self.decision = self.limit = None
        self.replaced, self.nodes_waiting, self.held = "", EMPTY, ()
        self.job_running = self.renewed = self.stuck = self.gate_waits = False
        self.transient = ""

    def gated(self, g: Gating) -> bool:
        """Step 3's result; False: the service waits."""
        self.add_constraints += g.add_constraints
        self.remove_constraints += g.remove_constraints
        self.add_env += g.add_env
        self.record_env += g.record_env
        self.add_mounts += g.add_mounts
        self.warnings += g.warnings
        if g.waits is None:
            return True
        self.status, self.state, self.reason = Status.PENDING, State.PENDING, g.waits
        self.gate_waits = True
        return False

    def released(self, rel: Released, cyc: Cycle) -> None:
        self.remove_holdings(rel.nodes, cyc)
        self.warnings += rel.warnings

    def remove_holdings(self, nodes: Sequence[str], cyc: Cycle) -> None:
        """The service's ledger entry and gate go on ``nodes``."""
        if nodes:
            keys = (assign_key(cyc.prefix, self.s.name), gate_key(cyc.prefix, self.s.name))
            for nid in nodes:
                self._remove(nid, keys)

    def _remove(self, nid: str, keys: Sequence[str]) -> None:
        cur = self.node_remove.get(nid, ())
        self.node_remove[nid] = cur + tuple(k for k in keys if k not in cur)

    def device_map(self, dm: DeviceMap) -> None:
        """Step 5's result (the first of the service labels' writes)."""
        self.labels_set, self.labels_remove = dm.labels_set, dm.labels_remove
        self.force_update, self.decision = dm.force_update, dm.decision
        self.set_update_parallelism = dm.set_update_parallelism
        self.gates_deferred = dm.gates_deferred
        self.warnings += dm.warnings
        self.node_set.update(dm.node_set)

    def job(self, run: JobRun, cyc: Cycle) -> None:
        """Step 7's result: its gates, progress and outcome, and the writes it allows."""
        gate = gate_key(cyc.prefix, self.s.name)
        for nid in run.keep_gates:
            if gate in (cur := self.node_remove.get(nid, ())):
                self.node_remove[nid] = tuple(k for k in cur if k != gate)
        for nid in run.close_gates:
            self._remove(nid, (gate,))
        self.progress, self.job_running = run.progress, run.running
        if run.done:
            self.status, self.state, self.reason = Status.DONE, State.COMPLETE, run.progress
        w = run.writes
        self.labels_set, self.labels_remove = w.service_labels_set, w.service_labels_remove
        self.add_constraints, self.remove_constraints = w.add_constraints, w.remove_constraints
        self.add_env, self.replace_env, self.add_mounts = w.add_env, w.replace_env, w.add_mounts
        self.record_env = w.record_env
        self.set_max_replicas, self.force_update = w.set_max_replicas, w.force_update
        self.set_update_parallelism, self.set_generic = w.set_update_parallelism, w.set_generic
        self.warnings += run.warnings

    def writes(self) -> SpecWrites:
        if not (
            self.labels_set
            or self.labels_remove
            or self.add_constraints
            or self.remove_constraints
            or self.add_env
            or self.replace_env
            or self.add_mounts
            or self.set_max_replicas is not None
            or self.force_update
            or self.set_update_parallelism is not None
            or self.set_generic is not None
        ):
            return NO_WRITES
        return SpecWrites(
            self.labels_set,
            self.labels_remove,
            self.add_constraints,
            self.remove_constraints,
            self.add_env,
            self.replace_env,
            self.add_mounts,
            self.set_max_replicas,
            self.force_update,
            self.set_update_parallelism,
            self.set_generic,
            record_env=self.record_env,
        )

    def build(self, writes: SpecWrites) -> ServicePlan:
        return ServicePlan(
            self.s.name,
            self.s.id,
            self.request,
            self.request_text,
            self.status,
            self.state,
            self.placements,
            self.reason,
            tuple(self.warnings),
            writes,
            self.node_set or EMPTY,
            self.node_remove or EMPTY,
            self.packed,
            self.state_labels or EMPTY,
            self.gates_deferred,
            self.new,
            self.replaced,
            self.mode,
            self.nodes_waiting,
            self.progress,
            self.decision,
            self.held,
            self.transient,
            self.renewed,
            stuck=self.stuck,
            gate_waits=self.gate_waits,
        )
