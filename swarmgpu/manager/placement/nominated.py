"""GPUs a preemption freed, held for its preemptor while it settles (Kubernetes'
nominated node, ``pod.status.nominatedNodeName``).

Placement serves the waiting services by priority, then by age (``preempt.serve_order``),
so an older waiting service of the preemptor's own priority -- a share or a MIG device,
which never preempts -- was visited first and took the GPUs the victims had just freed;
the preemptor stayed pending and, once its settle time had passed, stopped another
victim. While a nomination holds, the GPUs of it that are free are counted used for
every service visited of the preemptor's priority or lower but the preemptor itself; a
higher-priority one may take them, as Kubernetes lets a pod of higher priority onto a
nominated node, but for those a victim's container still runs on (``StoppingGpus``:
the preemptor's alone while it stops). The nominations are the daemon's own records
(``manager.cycle.preemption.Preempter.nominated``), never a label; a hold is counted
on the allocator for one visit only (``Holds.end``), so nothing of it outlives the cycle.
A hold's work that raises (a bug, or a state no one foresaw) costs that hold alone, as a
service's planning costs that service alone (``placement.isolate``): it is dropped for
the rest of the visit, its GPUs given back, said once while it keeps raising
(``HoldFaults``), and the services are planned as if it were not there. A preemptor
whose own planning raises (plan status failed) keeps its hold until it settles: that
fault is the daemon's, and its victims' GPUs, given to others, were stopped for nothing.

The preemption decision counts them the same way (``held_gpus``, given to
``preempt.choose_preemptions``): for a preemptor of the hold's priority or lower, the
held GPUs are used, so it preempts elsewhere instead of taking itself for pending for
another reason, and no victim is moved onto GPUs held for anyone. A hold whose victim
is moved, not stopped, lasts while that move is in flight (the daemon's move records,
at most ``rebalance.move_timeout_s``, when the mover rolls it back) and ``settle_s``
after: the GPUs free only when the move ends. So does one whose victim's task Swarm
stops with its spec (a job's: ``keys.stopping``), ``STOP_WAIT_S`` at most: Swarm counts
its CPU, memory and host ports until it stops, which no hold can give the preemptor.

Their times are in-memory durations, measured on a monotonic clock (``time.monotonic``,
or the clock the ``Preempter`` is given): nothing of them is stored in or compared with
Swarm, and on the wall clock a clock stepped back lengthened a hold while its preemptor
waited (stepped forward, ended it early).

The rebalancer is handed them too, a live preemptor's only, as placement reads them
(``held_gpus``, ``rebalance.context.Inputs.held``): no
move of any of its policies lands on a held GPU, whatever the moved service's priority
(``Context.held_for_other`` says why). A stopping task's is handed by its share
(``stopping_shares``), as placement counts it: the rest of its GPU is free to a move.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass

from loguru import logger

from swarmgpu.allocator.fragmentation import MILLI
from swarmgpu.allocator.values import Choice, Demand
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.envs import DEVICE_VAR, own_device_line
from swarmgpu.manager.placement.heldchoice import (
    held_choice,
    held_words,
    mig_words,
    migs_keep_off,
    share_choice,
)
from swarmgpu.manager.placement.keys import (
    ASSIGNED_STATES,
    SKEW_S,
    kept_starts,
    stop_hold_end,
    stop_overdue,
)
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.preempt import Candidate, Preemption
from swarmgpu.manager.placement.records import PlacementPlan, ServicePlan, Status
from swarmgpu.manager.placement.recreated import removed_name
from swarmgpu.manager.placement.repinned import repin_uses
from swarmgpu.manager.placement.specs import schedulable
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import MAX_GRACE_S

# A preemptor's plan status while its hold lasts: one whose planning raised
# (``placement.isolate``) keeps it, or its victims' GPUs went to others for a daemon fault.
WAITING = frozenset({Status.PENDING, Status.FAILED})


@dataclass(frozen=True)
class Nomination:
    """``uuids`` on ``node_id``, freed by ``service``'s preemption, held for it."""

    service: str
    priority: int
    node_id: str
    uuids: tuple[str, ...]
    moved: tuple[str, ...] = ()  # its victims to be moved, not stopped
    # The share of each of ``uuids`` held (stopping tasks': ``StoppingGpus``), what of it
    # is free; empty: each GPU held only when it is wholly free (a preemption's)
    milli: tuple[int, ...] = ()
    # its victims' service ids: only their stopping tasks' GPUs are its own while they
    # stop (``StoppingGpus.holds``' spare), another service's stay held from all
    victims: tuple[str, ...] = ()
    # a stopping tasks' hold spared for this preemptor (its victims'): held from every
    # other service, whatever its priority ("": held from all, or a preemption's)
    owner: str = ""
    # ``service``'s id ("": unknown, a one-shot's, read from its victims' records): a
    # service listed by its name with another id is another one (``live_nominations``)
    service_id: str = ""


def held_gpus(nominations: Sequence[Nomination]) -> dict[tuple[str, str], tuple[str, int]]:
    """(node id, GPU uuid) -> (the preemptor, its priority) each held GPU is held for, as
    ``preempt.choose_preemptions`` reads them."""
    out: dict[tuple[str, str], tuple[str, int]] = {}
    for n in sorted(nominations, key=lambda n: n.priority):  # the highest one's, if two
        out |= {(n.node_id, u): (n.owner or n.service, n.priority) for u in n.uuids}
    return out


def held_shares(nominations: Sequence[Nomination]) -> dict[tuple[str, str], int]:
    """(node id, GPU uuid) -> the share (milli) the stopping tasks' holds among
    ``nominations`` hold of it (``StoppingGpus``), summed: what placement counts used."""
    out: dict[tuple[str, str], int] = {}
    for n in nominations:
        for u, m in zip(n.uuids, n.milli, strict=True) if n.milli else ():
            out[(n.node_id, u)] = min(MILLI, out.get((n.node_id, u), 0) + m)
    return out


def live_nominations(nominations: Sequence[Nomination],
                     names: AbstractSet[str] | Mapping[str, str],
                     left_out: bool = False) -> list[Nomination]:
    """Those of a preemptor among ``names`` (Swarm's services now, or name -> id; every one
    not listed while its list left one out: ``left_out``, ``swarm.unkeyed``), in order: a
    removed one's hold ends at once for every reader (placement's, ``Inputs.held``), not
    at the next ``Nominations.keep``; so does one whose name ``names`` lists under another
    id (``another_holder``)."""
    ids = names if isinstance(names, Mapping) else {}
    return [n for n in nominations
            if (left_out or n.service in names) and not another_holder(n, ids)]


def another_holder(n: Nomination, ids: Mapping[str, str]) -> bool:
    """Whether the service ``ids`` (name -> id) lists by ``n``'s preemptor's name is
    another one: its id known and not that one's. Swarm's names are unique: the
    preemptor was removed and a service created under its name, which preempted
    nothing; by name alone it kept the hold and took its GPUs."""
    sid = ids.get(n.service)
    return bool(n.service_id) and sid is not None and sid != n.service_id


class Nominations:
    """The nominations kept across cycles (by the daemon's ``Preempter``): one per
    preemptor, its last preemption's, from when its victims were stopped or moved."""

    def __init__(self, settle_s: float, move_timeout_s: float = 0.0,
                 clock: Callable[[], float] | None = None) -> None:
        self.clock = clock or time.monotonic  # every time here is an in-memory duration's
        self.settle_s = settle_s  # ``preemption.settle_s``: how long one settles
        self.move_timeout_s = move_timeout_s  # ``rebalance.move_timeout_s``: a move's longest
        # preemptor -> (it, when nominated, when it last had a victim's move in flight)
        self.by: dict[str, tuple[Nomination, float, float]] = {}

    def nominate(self, p: Preemption, victims: Sequence[Candidate], at: float) -> None:
        """``p`` stopped or moved ``victims`` at ``at`` (``clock``'s time): ``p.held`` is
        held (or, where it names none, the GPUs they free), all of it whether all of its
        victims went or some (held back, or cut part-way): what its preemptor will use,
        those another victim still runs on too (its own until it goes, then the
        preemptor's), never a GPU beside."""
        uuids = p.held or tuple(sorted({u for v in victims for u in v.uuids}))
        moved = tuple(sorted(v.service for v in victims if v.service in p.moves))
        ids = tuple(sorted({v.service_id for v in victims}))
        self.by[p.service] = (Nomination(p.service, p.priority, p.node_id, uuids, moved,
                                         victims=ids, service_id=p.service_id), at, at)

    def current(self, now: float | None = None) -> tuple[Nomination, ...]:
        """Those that hold at ``now`` (``clock``'s time, monotonic; None: now): still
        settling."""
        now = self.clock() if now is None else now
        return tuple(n for n, _at, last in self.by.values() if now - last < self.settle_s)

    def keep(self, plan: PlacementPlan, now: float, moving: AbstractSet[str] = frozenset(),
             stopping: AbstractSet[tuple[str, str]] = frozenset(), left_out: bool = False,
             ) -> None:
        """Forget those that ended at ``now`` (``clock``'s time): settled (the preemption
        given up; a new one nominates anew), or whose preemptor ``plan`` has no longer
        pending (placed, or gone); one whose planning failed (``placement.isolate``: the
        daemon's fault, not its) keeps it until it settles. ``moving``: the services with
        a move in flight by the daemon's records; a hold one of whose victims is among them
        settles from now (its GPUs free when the move ends), for ``move_timeout_s`` from
        its nomination at most. ``stopping``: (service id, node id) of the tasks Swarm is
        stopping that still use their node (``keys.stopping``: a job victim's, stopped by
        its spec write); a hold one of whose victims has one on its node settles from now,
        ``STOP_WAIT_S`` after its nomination at most (``settles_from``): Swarm counts
        that task's CPU, memory and host ports until it stops, so its preemptor waits for
        them (its GPUs are its own meanwhile: ``StoppingGpus``), or its hold lapsed after
        ``settle_s`` and it stopped another victim for what the first one's stop frees.
        ``left_out``: the list left a service out (``swarm.unkeyed``)."""
        pending = {sp.name for sp in plan.services if sp.status in WAITING}
        ids = {sp.name: sp.id for sp in plan.services}
        if left_out:  # (one the plan lacks is not gone: maybe the one the list left out)
            pending |= self.by.keys() - ids.keys()
        kept: dict[str, tuple[Nomination, float, float]] = {}
        for k, (n, at, last) in self.by.items():
            if another_holder(n, ids):
                continue  # (its name another service's now: the preemptor is gone)
            if any(v in moving for v in n.moved) and now - at < self.move_timeout_s:
                last = now
            last = settles_from(at, last, now,
                                any((v, n.node_id) in stopping for v in n.victims))
            if now - last < self.settle_s and k in pending:
                kept[k] = (n, at, last)
        self.by = kept


def stops_waited(stopping: Sequence[SwarmTask], nodes: Sequence[SwarmNode],
                 ) -> frozenset[tuple[str, str]]:
    """(service id, node id) of the tasks Swarm is stopping (``keys.stopping``) whose stop
    a hold waits for (``Nominations.keep``): on a ready, active node only. A down node's
    task may never report its stop, and a paused or drained node starts nothing: its
    preemptor could not run there once it stopped, so its hold settles as ever."""
    usable = {n.id for n in nodes if schedulable(n)}
    return frozenset((t.service_id, t.node_id) for t in stopping if t.node_id in usable)


class HoldFaults:
    """The holds whose work raised, by preemptor: each said with its traceback once while
    it keeps raising (again after a cycle without it). Kept across cycles by the planner."""

    def __init__(self) -> None:
        self.said: SaidOnce[str] = SaidOnce()

    def say(self, preemptor: str, exc: Exception) -> None:
        if self.said.fresh(preemptor):
            logger.bind(service=preemptor).opt(exception=exc).error(
                "placement: the hold of the GPUs freed for {} by its preemption failed "
                "unexpectedly ({}: {}): it is dropped for this cycle, its GPUs free to any "
                "service, every service planned as usual; fix: this is a swarmgpu fault, "
                "report it with the daemon's log, which has the traceback",
                preemptor, type(exc).__name__, peer_text(str(exc), 200))


class Holds:
    """The nominations of one cycle's visit, counted on ``cluster`` while they hold.
    ``faults``: the planner's (said once across cycles); one round of it per visit."""

    def __init__(self, cluster: ClusterAllocator, nominations: Sequence[Nomination],
                 faults: HoldFaults) -> None:
        self.cluster = cluster
        # Each counted in this order when first held: the stopping tasks' held from all,
        # then those spared for a preemptor, then the preemptions' (whole free GPUs only).
        # A GPU another task stops on too is so counted by the first, not given back
        # with the spared hold on its preemptor's visit (its container runs there).
        def order(n: Nomination) -> tuple[bool, bool]:
            return (n.priority != STOPPING_PRIORITY or bool(n.owner),
                    n.priority != STOPPING_PRIORITY)
        # not ended in this visit
        self.left = {n.service: n for n in sorted(nominations, key=order)}
        self.on: dict[str, Choice] = {}  # preemptor -> its GPUs counted used now
        self.migs: dict[str, tuple[str, ...]] = {}  # -> its MIG devices counted used now
        self.faults = faults
        self.faults.said.begin()

    def visit(self, name: str, priority: int, planned: Sequence[ServicePlan]) -> None:
        """Before service ``name`` (of ``priority``) is planned: each hold counted for it
        or not; ``planned``: the plans made so far in this visit (a preemptor placed
        by the last one ends its hold; one whose planning failed keeps it)."""
        if not self.left:
            return
        last = planned[-1] if planned else None
        if last is not None and last.name in self.left and last.status not in WAITING:
            with self._own(last.name):
                self._free(last.name)
                del self.left[last.name]
        for n in list(self.left.values()):
            want = name not in (n.service, n.owner) and priority <= n.priority
            with self._own(n.service):
                if want and n.service not in self.on:
                    self._hold(n)
                elif not want:
                    self._free(n.service)

    def note(self, d: Demand, refused: AbstractSet[str] = frozenset()) -> str:
        """The holds counted for the service visited now that keep demand ``d`` off a
        node, in words, for a pending one's reason (the ledger shows their GPUs free): ""
        when none does. Only a node it could otherwise run on is named: not one in
        ``refused`` (Swarm's filters: constraints, ports, plugins), nor a paused, drained
        or down one, nor one whose GPUs it cannot use (model, memory, topology) or
        where it does not fit even without the hold."""
        said = []
        for svc, c in sorted(self.on.items(), key=lambda kv: (kv[1].node, self._for(kv[0]))):
            n, host = self.left.get(svc), self.cluster.nodes.get(c.node)
            if n is None or host is None or c.node in refused or not self._keeps_off(c, d):
                continue
            gpus = f"{held_words(self.cluster, c)} of {host.hostname}"
            said.append(self._held_for(svc, n, gpus))
        # a stopping task's MIG devices are held by UUID, beside the whole GPUs (``_hold``)
        for svc, migs in sorted(self.migs.items(), key=lambda kv: (
                self.left[kv[0]].node_id if kv[0] in self.left else "", self._for(kv[0]))):
            n = self.left.get(svc)
            host = self.cluster.nodes.get(n.node_id) if n is not None else None
            if n is None or host is None or n.node_id in refused \
                    or not migs_keep_off(self.cluster, n.node_id, migs, d):
                continue
            said.append(self._held_for(svc, n, f"{mig_words(self.cluster, n.node_id, migs)}"
                                                f" of {host.hostname}"))
        return "; ".join(said)

    def _held_for(self, svc: str, n: Nomination, what: str) -> str:
        # a victim's stopping task's GPUs spared for its preemptor are that one's
        return (f"{what} held for tasks Swarm is stopping there"
                if n.priority == STOPPING_PRIORITY and not n.owner
                else f"{what} held for {self._for(svc)} (its preemption)")

    def _for(self, svc: str) -> str:
        """Whom the hold ``svc`` (a key of ``on``) keeps its GPUs for, by name."""
        n = self.left.get(svc)
        return n.owner if n is not None and n.owner else svc

    def _keeps_off(self, c: Choice, d: Demand) -> bool:
        """``d`` does not fit on ``c``'s node now, but would with ``c`` given back."""
        alloc = self.cluster.alloc
        state = alloc.nodes.get(c.node)
        if state is None or alloc.fits(state, d):
            return False
        shadow = copy.copy(state)  # the allocator's own state is left as it is
        shadow.free = list(state.free)
        for i, m in zip(c.gpus, c.milli, strict=True):
            shadow.free[i] += m
        return alloc.fits(shadow, d)

    def end(self) -> None:
        """The visit is over: every hold given back to the allocator."""
        for svc in dict.fromkeys([*self.on, *self.migs]):
            with self._own(svc):
                self._free(svc)
        self.left = {}
        self.faults.said.end()

    @contextmanager
    def _own(self, preemptor: str) -> Iterator[None]:
        """One hold's own work: a fault in it costs that hold alone (the module's
        docstring), not the cycle. Its GPUs are given back where it counted them (a
        release that raises too is not raised again: the first fault is the one said)."""
        try:
            yield
        except Exception as exc:  # a hold's fault is its own: the visit goes on
            n = self.left.pop(preemptor, None)
            migs = self.migs.pop(preemptor, ())
            if n is not None and migs:
                self.cluster.free_migs(n.node_id, migs)  # (only a set's work: never raises)
            choice = self.on.pop(preemptor, None)
            if choice is not None:
                try:
                    self.cluster.alloc.release(choice)
                except Exception:  # the first fault is the one said
                    # Its GPUs stayed counted used on an allocator that lives across
                    # cycles: that node is built anew from the ledger at the next sync.
                    self.cluster.rebuild_node(choice.node)
            self.faults.say(preemptor, exc)

    def _hold(self, n: Nomination) -> None:
        """Count ``n``'s GPUs that are wholly free now as used (one a higher-priority
        service took in this visit, or still held, is left as it is)."""
        if n.milli and (migs := self.cluster.hold_migs(n.node_id, n.uuids)):
            # a stopping task's MIG device, counted as a holding's (by UUID, not share)
            self.migs[n.service] = (*self.migs.get(n.service, ()), *migs)
        alloc = self.cluster.alloc
        want = set(n.uuids)
        choice = (share_choice(self.cluster, n.node_id, dict(zip(n.uuids, n.milli, strict=True)),
                               f"held for {n.service}") if n.milli else
                  held_choice(self.cluster, n.node_id, want.__contains__,
                              f"held for {n.service} (its preemption)"))
        if choice is None:
            return
        # Recorded before commit: commit can raise once it counted the GPUs (the scorer's
        # ``observe_cluster`` runs last), and ``_own`` gives back only what is recorded
        # (a give-back that raises, as one never counted does, rebuilds the node).
        self.on[n.service] = choice
        alloc.commit(choice)

    def _free(self, svc: str) -> None:
        migs, n = self.migs.pop(svc, ()), self.left.get(svc)
        if migs and n is not None:
            self.cluster.free_migs(n.node_id, migs)
        choice = self.on.pop(svc, None)
        if choice is not None:
            self.cluster.alloc.release(choice)


# A stopping task's GPUs are held from every service: none is of a higher priority.
STOPPING_PRIORITY = sys.maxsize
# The longest a hold waits for its victims' stopping tasks (``Nominations.keep``): a
# stop grace period as long as a rejected task's is held (``keys.rejected_running``).
STOP_WAIT_S = MAX_GRACE_S + SKEW_S


def settles_from(at: float, last: float, now: float, stops: bool) -> float:
    """When a hold nominated at ``at``, settling from ``last``, settles from at ``now``
    (it ends ``settle_s`` after): while a victim's task it waits for still stops
    (``stops``), from ``now``, ``STOP_WAIT_S`` after ``at`` at most. The daemon's
    ``Nominations.keep`` and the one-shot's ``recorded_nominations`` both read it, so a
    `plan` ends the hold when the daemon does."""
    return max(last, min(now, at + STOP_WAIT_S)) if stops else last


def stopping_held(plan: PlacementPlan, nominations: Sequence[Nomination],
                  ) -> dict[tuple[str, str], tuple[str, int]]:
    """``plan.stopping_held``, the GPUs its placement spared for a preemptor
    (``plan.stopping_spared``: held for it alone) whose hold is not among ``nominations``
    (a later reader's: the preemption step's, after its ``keep``; the rebalancer's) held
    from all, as the stopping tasks' they are. Placement read the holds before: one that
    ended since left its victims' still-running GPUs to a preemptor that no longer has
    them (before: counted nowhere for that reader)."""
    live = {n.service for n in nominations}
    return {k: (f"tasks stopping on {k[0]}", STOPPING_PRIORITY)
            if k in plan.stopping_spared and who not in live else (who, pr)
            for k, (who, pr) in plan.stopping_held.items()}


def holds_with_stopping(nominations: Sequence[Nomination], plan: PlacementPlan | None,
                        ) -> dict[tuple[str, str], tuple[str, int]]:
    """The GPUs ``nominations`` hold for preemptors (``held_gpus``) and, with ``plan``,
    its stopping tasks' GPUs read with these same holds (``stopping_held``): what a
    mover keeps off (the rebalance step's, the preemption step's)."""
    return held_gpus(nominations) | (stopping_held(plan, nominations) if plan is not None
                                     else {})


def stopping_shares(milli: Mapping[tuple[str, str], int], nominations: Sequence[Nomination],
                    ) -> dict[tuple[str, str], int]:
    """Of ``milli`` (stopping tasks' shares: ``held_shares``, ``plan.stopping_milli``),
    those of GPUs no preemptor's hold among ``nominations`` names: the rebalancer judges
    them by share, as placement counts them; a preemptor's hold keeps its GPUs whole."""
    whole = {(n.node_id, u) for n in nominations if not n.milli for u in n.uuids}
    return {k: m for k, m in milli.items() if k not in whole}


# (GPU uuid, the share of it in milli) a stopping task uses
Uses = tuple[tuple[str, int], ...]


class StoppingGpus:
    """The GPUs of tasks Swarm is stopping (``keys.stopping``: a scale-down's, an
    update's old task, a removed service's), held as a nomination of the top priority
    while they stop: its share of each (a fraction's beside live services' shares too),
    as much of it as is free; a MIG device by its UUID, as a holding's (``Holds``:
    the allocator counts MIG devices so, not by share). The service's holding there goes
    as ever (the task keeps none), but its container runs on its GPUs, its stop grace
    period at most: no service is placed on them, nor preempts as if they were free,
    meanwhile.

    A task's GPUs are read, in order: from the task itself, the device line of its own
    env (``envs.own_device_line``: UUIDs or indexes a service pins, as given when the
    task was made), those of its node's GPUs only (the agent's facts: a UUID not there is
    input, ignored); else as the ledger named them when the task was first seen running
    (a same-node repin writes the new GPUs before Swarm stops the old task); else from
    the ledger of the cycle that first sees it stopping. While its service's same-node
    repin is in flight, the repin's record of its GPU sets is read before the ledger
    (``repinned``: the ledger names the new GPUs from its step 2 on, a restarted
    daemon's first look too). Kept by task id while it runs or stops. swarmgpu's own
    device template is expanded from the service's labels on the node, which the task
    API does not show, and Swarm's assigned generic resources are not the GPUs
    placement's grant gives (docs/deploy.md): neither is read. So a daemon
    that starts while a task stops, after its entry went, knows only a pinned line's.

    A task whose gate closed (a repin's old one, a preemption's victim, a move's source)
    is rejected by Swarm's constraint enforcer instead: its reservations freed at once,
    its container stopped as any other's. Its GPUs are held the same way (not its CPU,
    memory or ports) until its status time plus its stop grace period
    (``keys.rejected_running``). A victim's (either way: a job's spec write stops it as
    a scale-down does) on GPUs its preemptor's nomination holds is held for that
    preemptor alone (``Nomination.owner``).

    A stopping task's hold is timed by one clock, when its stop began (``began``,
    ``keys.stop_began``: first seen so, or Swarm's time for one already stopping at the
    first look): when its GPUs are waited for until (``waits``, ``until``) and when it is
    overdue (``keys.stop_hold_end``). A fresh reader (``plan``, ``status``, a restarted
    daemon) so ends it when a long-running daemon does."""

    def __init__(self, prefix: str = "swarmgpu.") -> None:
        self.prefix = prefix
        self.known: dict[str, tuple[str, Uses]] = {}  # stopping task id -> (node, uses)
        self.running: dict[str, tuple[str, Uses]] = {}  # meant task id -> as first seen
        # service id -> name, as the last cycle had them (a removed one's while it has a task)
        self.names: dict[str, str] = {}
        self.taken: frozenset[str] = frozenset()  # the live services' names, this cycle
        self.recreated: AbstractSet[tuple[str, str]] = frozenset()  # (``holds``)
        # stopping or rejected task id -> when its stop began (epoch s, ``keys.stop_began``):
        # its hold's one clock (``keys.stop_hold_end``), whether its GPUs are known or not
        self.began: dict[str, float] = {}  # (kept a few cycles unlisted: ``kept_starts``)
        self.unlisted: dict[str, int] = {}  # of those, task id -> cycles it was not listed
        self.looked = False  # a cycle was read before: a task new since began stopping since
        self.overdue: frozenset[str] = frozenset()  # of those, past their hold's end at ``now``
        # node id -> when its hold ends at most (epoch s): its tasks' rejected_until, or
        # ``keys.stop_hold_end`` (a global job's run waits for it)
        self.until: dict[str, float] = {}
        # (node id, GPU uuid) -> the preemptor its hold spared it for, in the last ``holds``
        self.spared: dict[tuple[str, str], str] = {}
        # (node id, GPU uuid) held for stopping tasks alone, none past its end and a
        # minute of skew (``SKEW_S``): a preemptor waits for them (``preempt``); one past
        # it may never stop (a process hung in the GPU driver), its GPUs held as ever
        self.waits: frozenset[tuple[str, str]] = frozenset()

    def holds(self, stopping: Sequence[SwarmTask], services: Sequence[SwarmService],
              ledger: Mapping[str, Mapping[str, Holding]],
              tasks: Sequence[SwarmTask] = (),
              facts: Mapping[str, NodeFacts] | None = None,
              rejected: Sequence[SwarmTask] = (),
              spare: Sequence[Nomination] = (),
              now: float = 0.0, recreated: AbstractSet[tuple[str, str]] = frozenset(),
              ) -> list[Nomination]:
        """This cycle's holds; ``ledger``: service name -> node id -> holding, as read;
        ``tasks``: the meant ones (their GPUs learned while they run); ``facts``: the
        agents' answers per node id (a task's own device line is checked against them).
        ``rejected``: tasks the constraint enforcer rejected whose container may still
        run (``keys.rejected_running``). The GPUs of both are held from all but those
        ``spare`` (the live preemptors' nominations) names for a victim of its own on its
        node, held from all but that preemptor: its victims' are its own, stopped by their
        gate or by a write to their spec (a job's), or a grace period longer than its
        settle time would make it preempt again (``spared`` says which, and for whom).
        Another task on them (a service placed there and stopped within the settle time)
        is held from all: its container runs. ``now`` (epoch s): when each node's hold
        ends at most is kept in ``until`` (spared GPUs aside: they go to their preemptor).
        ``recreated``: (name, node id) of ledger entries a removed service left to one
        recreated under its name (``placement.recreated``): read as its stopping task's."""
        self.recreated = recreated
        names = {s.id: s.name for s in services}
        by_id = {s.id: s for s in services}
        self.taken = frozenset(names.values())  # (``_from_ledger``: a name reused)
        facts = facts or {}
        running: dict[str, tuple[str, Uses]] = {}
        for t in tasks:  # learned before it stops: its ledger entry may change first
            if t.node_id and t.state in ASSIGNED_STATES:
                got = self.running.get(t.id) or self._unlearned(t, by_id, names, ledger)
            else:  # rejected, not yet desired shutdown: as learned while it ran
                got = self.running.get(t.id) if t.rejected_until is not None else None
            if got is not None:
                running[t.id] = got
        known: dict[str, tuple[str, Uses]] = {}
        owner: dict[str, str] = {}  # stopping task id -> its service id
        for t in [*stopping, *rejected]:
            owner[t.id] = t.service_id
            own = task_device_uses(t, self.prefix, facts.get(t.node_id))
            got = ((t.node_id, own) if own else self.known.get(t.id)
                   or self.running.get(t.id) or self._unlearned(t, by_id, names, ledger))
            if got is not None:
                known[t.id] = got
        self.known, self.running = known, running
        self.names = names | self._removed_names([*tasks, *stopping, *rejected], names)
        leaving = [*stopping, *rejected]
        self.began, self.unlisted = kept_starts(self.began, self.unlisted, leaving, now,
                                                self.looked)
        self.looked = True
        self.overdue = frozenset(t.id for t in stopping
                                 if stop_overdue(t, self.began[t.id], now))
        ends = {t.id: t.rejected_until if t.rejected_until is not None
                else stop_hold_end(t, self.began[t.id]) for t in leaving if t.id in known}
        for_victim = {(n.node_id, u, v): n.service for n in spare
                      for u in n.uuids for v in n.victims}
        self.spared, self.until = {}, {}
        # (node id, "" or the preemptor they are spared for) -> uuid -> share: one hold
        # per node and one per preemptor there (each visit walks them all)
        by_node: dict[tuple[str, str], dict[str, int]] = {}
        soon: set[tuple[str, str]] = set()
        late: set[tuple[str, str]] = set()
        for tid, (nid, uses) in known.items():
            for u, m in uses:
                who = for_victim.get((nid, u, owner[tid]), "")
                if who:
                    self.spared[(nid, u)] = who
                else:
                    self.until[nid] = max(self.until.get(nid, 0.0), ends[tid])
                    (late if now > ends[tid] + SKEW_S else soon).add((nid, u))
                on = by_node.setdefault((nid, who), {})
                on[u] = min(1000, on.get(u, 0) + m)
        self.waits = frozenset(soon - late - self.spared.keys())
        # Those spared first: ``held_gpus`` keeps the last of one priority, and a GPU
        # another stopping task uses too is held from all.
        return [Nomination(f"tasks stopping on {nid}" + (f" for {who}" if who else ""),
                           STOPPING_PRIORITY, nid, tuple(sorted(on)),
                           milli=tuple(on[u] for u in sorted(on)), owner=who)
                for (nid, who), on in sorted(by_node.items(), key=lambda kv: (
                    not kv[0][1], kv[0]))]

    def _removed_names(self, listed: Sequence[SwarmTask], names: Mapping[str, str],
                       ) -> dict[str, str]:
        """Of the last cycle's names, those of a removed service (not in ``names``) with a
        task ``listed``: the cycle that saw it listed still meant to run (Swarm sets that
        just after the service goes) names it, not its gate constraint, its owner's text
        (``placement.recreated``)."""
        ids = {t.service_id for t in listed} - names.keys()
        return {k: v for k, v in self.names.items() if k in ids}

    def learned(self, t: SwarmTask, facts: Mapping[str, NodeFacts]) -> set[str] | None:
        """The GPUs ``t`` uses as ``holds`` reads them but from the ledger: its own line,
        else what was learned while it ran or stopped; None where none is known."""
        got = self.known.get(t.id) or self.running.get(t.id)
        uses = task_device_uses(t, self.prefix, facts.get(t.node_id)) or (
            got[1] if got is not None else ())
        return {u for u, _m in uses} or None

    def _unlearned(self, t: SwarmTask, by_id: Mapping[str, SwarmService],
                   names: Mapping[str, str], ledger: Mapping[str, Mapping[str, Holding]],
                   ) -> tuple[str, Uses] | None:
        """``t``'s GPUs where nothing was learned of them: by its service's same-node
        repin in flight (``repinned``: from its step 2 on the ledger names the repin's new
        GPUs), else from the ledger."""
        uses = repin_uses(t, by_id.get(t.service_id), self.prefix)
        return (t.node_id, uses) if uses else self._from_ledger(t, names, ledger)

    def _from_ledger(self, t: SwarmTask, names: Mapping[str, str],
                     ledger: Mapping[str, Mapping[str, Holding]]) -> tuple[str, Uses] | None:
        """What the ledger names for ``t``'s service on its node (its slot's, packed). The
        ledger keys by name alone: a removed service's name (the last cycle's) that a live
        service of another id has now (recreated so) names that one's entry, not the
        removed task's GPUs: nothing is read from it (its own line, or what was learned
        while it ran, is all that is held) unless the entry is still the removed one's
        (``recreated``). Without the last cycle's name, its gate constraint's is read."""
        name = names.get(t.service_id)
        if name is None:  # a removed one's, by the last cycle's name
            name = removed_name(t, self.names, self.prefix)
            if name in self.taken and (name, t.node_id) not in self.recreated:
                return None
        h = ledger.get(name, {}).get(t.node_id)
        if h is None or not h.uuids:
            return None
        uuids, milli = h.uuids, h.milli
        if h.packed:
            uuids, milli = h.per_slot_milli().get(t.slot or 0, ((), ()))
            if not uuids:
                uuids, milli = h.uuids, h.milli
        return t.node_id, tuple(zip(uuids, milli, strict=True))


def task_device_uses(t: SwarmTask, prefix: str, facts: NodeFacts | None) -> Uses:
    """The GPUs of its node that ``t``'s own device line names (UUIDs or indexes; a MIG
    device's UUID too, held by UUID), each wholly; none without the node's facts, for
    swarmgpu's template, ``all`` and ``void``. Docker reads the last line that sets the
    variable: a line of the service's before swarmgpu's template is not the one used."""
    # (an entry that is no text, which no engine sends, is skipped: this runs outside
    # any service's isolation, and a raise failed the cycle)
    last = [x for x in t.env if isinstance(x, str) and x.partition("=")[0] == DEVICE_VAR][-1:]
    line = own_device_line(last, prefix)
    if line is None or facts is None:
        return ()
    by_name = {g.uuid: g.uuid for g in facts.gpus} | {str(g.index): g.uuid for g in facts.gpus}
    by_name |= {m.uuid: m.uuid for g in facts.gpus for m in g.mig_devices}
    out: dict[str, int] = {}
    for part in line.partition("=")[2].split(","):
        u = by_name.get(part.strip())
        if u is not None:
            out[u] = 1000
    return tuple(out.items())
