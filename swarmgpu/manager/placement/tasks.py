"""Swarm's tasks as placement reads them, per service: where they run, which wait and why."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar

from swarmgpu.manager.placement.keys import ACTIVE_STATES, ASSIGNED_STATES, MEANT_STATES
from swarmgpu.swarm.client import SwarmTask


@dataclass(frozen=True)
class Waiting:
    """A service's tasks meant to run that do not run yet, as placement reads them: how
    many, the oldest device map one was created with (``ForceUpdate``), and Swarm's
    reason when its scheduler refuses one. A summary, not a list: a service of 100,000
    replicas Swarm cannot run costs one pass over its tasks, and nothing after."""

    count: int = 0
    min_force_update: int = 0
    refused: str = ""  # Swarm's words ("no suitable node (insufficient resources ...)")
    placed: int = 0  # of them, those Swarm has put on a node already
    nodes: frozenset[str] = frozenset()  # the nodes those are on
    # the nodes where one is past Swarm's scheduler (assigned to ready): put there while
    # the node met every constraint, so before a gate closed there (``devicemap``)
    assigned: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return self.count > 0

    def reads_map_of(self, nodes: AbstractSet[str]) -> bool:
        """Some waiting task would start with the device map of one of ``nodes``: one not
        on a node yet (it may land on any), or one on one of them. A task on another node
        reads only its own node's map, which it was made with."""
        return self.count > self.placed or not self.nodes.isdisjoint(nodes)

    def all_newer(self, gen: int) -> bool:
        """Every waiting task was created at device-map generation ``gen`` or later."""
        return not self.count or self.min_force_update >= gen


NO_WAITING = Waiting()
_T = TypeVar("_T")
_ACTIVE = frozenset(ACTIVE_STATES) - {"running", "starting"}
_ASSIGNED = ASSIGNED_STATES - {"running", "starting"}
_FAILED = frozenset(("failed", "rejected"))
_JOB_LIVE = frozenset(ACTIVE_STATES)


@dataclass
class TaskView:
    """Per service id, of its tasks meant to run: how many run on each node, the ones
    waiting (``Waiting``), each slot's node ("": not scheduled yet), the nodes its
    tasks are on; and the ids of tasks Swarm reports failed or rejected."""

    running: dict[str, dict[str, int]]
    waiting: dict[str, Waiting]
    slots: dict[str, dict[int, str]]
    on_nodes: dict[str, set[str]]
    failed: dict[str, list[str]]
    use: dict[str, list[int]]  # node id -> [CPU milli, memory MiB] its tasks reserve
    # per service id, node id -> the constraints (``SwarmTask.constraints``) of its tasks
    # there that run or are past the scheduler: whether they read its gate (devicemap)
    rules: dict[str, dict[str, set[tuple[str, ...] | None]]] = field(default_factory=dict)
    # per service id, node id -> the CreatedAt of its tasks running there (RFC 3339 text,
    # read only where asked: ``devicemap``'s foreign device lists)
    made: dict[str, dict[str, list[str]]] = field(default_factory=dict)


def meant_to_run(t: SwarmTask) -> bool:
    """Desired state running or ready (``MEANT_STATES``: a restart's or an update's new
    task before it starts, which Swarm counts on its node and which starts with the
    spec it was made from), or a job's task (desired state "complete") still live."""
    return t.desired_state in MEANT_STATES or (
        t.desired_state == "complete" and t.state in _JOB_LIVE)


def tasks_by_service(
    tasks: Sequence[SwarmTask], slots_of: Callable[[str], bool] | None = None
) -> TaskView:
    """``slots_of``: the services whose slots are wanted (those that could be packed on
    one node; default all): the others' slots are never read."""
    running: dict[str, dict[str, int]] = {}
    use: dict[str, list[int]] = {}
    slots: dict[str, dict[int, str]] = {}
    on_nodes: dict[str, set[str]] = {}
    failed: dict[str, list[str]] = {}
    # service id -> [count, min ForceUpdate, refusal, count on a node, their nodes,
    # nodes where one is past the scheduler]
    acc: dict[str, list[Any]] = {}
    refusal: dict[tuple[str, str], str] = {}  # Swarm repeats one text over many tasks
    wanted: dict[str, bool] = {}
    readied: set[tuple[str, int]] = set()  # slots a desired-ready task named the node of
    for t in tasks:
        sid, state = t.service_id, t.state
        if state in _FAILED:
            failed.setdefault(sid, []).append(t.id)
        if not meant_to_run(t):
            continue
        nid = t.node_id
        if t.slot:
            at = slots.get(sid)
            if at is None:
                want = wanted.get(sid)
                if want is None:
                    want = wanted[sid] = slots_of is None or slots_of(sid)
                if want:
                    at = slots[sid] = {}
            # A slot's desired-running task names its node over a ready one (an update's
            # new task while the old one stops): as before ready tasks were read.
            if at is not None and (not at.get(t.slot) or (sid, t.slot) in readied):
                at[t.slot] = nid
                if t.desired_state == "ready":
                    readied.add((sid, t.slot))
                else:
                    readied.discard((sid, t.slot))
        if nid:
            on = on_nodes.get(sid)
            if on is None:
                on_nodes[sid] = {nid}
            else:
                on.add(nid)
            if t.cpu_milli or t.memory_mib:
                u = use.get(nid)
                if u is None:
                    u = use[nid] = [0, 0]
                u[0] += t.cpu_milli
                u[1] += t.memory_mib
        if state == "running" or state == "starting":
            per = running.get(sid)
            if per is None:
                running[sid] = {nid: 1}
            else:
                per[nid] = per.get(nid, 0) + 1
        elif state in _ACTIVE:
            a = acc.get(sid)
            if a is None:
                a = acc[sid] = [0, t.force_update, "", 0, set(), set()]
            a[0] += 1
            if nid:
                a[3] += 1
                a[4].add(nid)
                if state in _ASSIGNED:
                    a[5].add(nid)
            if t.force_update < a[1]:
                a[1] = t.force_update
            if not a[2] and (t.error or t.message):
                key = (t.error, t.message)
                text = refusal.get(key)
                if text is None:
                    text = refusal[key] = _refusal_text(t.error, t.message)
                a[2] = text
    waiting = {
        sid: Waiting(a[0], a[1], a[2], a[3], frozenset(a[4]), frozenset(a[5]))
        for sid, a in acc.items()
    }
    return TaskView(running, waiting, slots, on_nodes, failed, use, *_per_node(tasks))


def _per_node(tasks: Sequence[SwarmTask]) -> tuple[
        dict[str, dict[str, set[tuple[str, ...] | None]]], dict[str, dict[str, list[str]]]]:
    """``TaskView.rules``: of each service's tasks meant to run that are on a node and
    past the scheduler (assigned to running: ``devicemap``'s old tasks), the constraints;
    ``TaskView.made``: of those that run (or start, as ``running`` counts them), the
    CreatedAt texts."""
    rules: dict[str, dict[str, set[tuple[str, ...] | None]]] = {}
    made: dict[str, dict[str, list[str]]] = {}
    for t in tasks:
        if t.node_id and t.state in ASSIGNED_STATES and meant_to_run(t):
            rules.setdefault(t.service_id, {}).setdefault(t.node_id, set()).add(t.constraints)
            if t.state == "running" or t.state == "starting":
                made.setdefault(t.service_id, {}).setdefault(t.node_id, []).append(
                    t.created_at)
    return rules, made


# What Swarm's scheduler writes into a task it cannot place (swarmkit scheduler/filter.go).
_REFUSED = ("no suitable node", "insufficient resources")


def _refusal_text(*texts: str) -> str:
    for text in texts:
        if any(x in text.lower() for x in _REFUSED):
            return text
    return ""


_task_id = attrgetter("id")


class TaskBook:
    """``tasks_by_service`` kept across a planner's cycles: each cycle re-reads only the
    services some task of which is new, changed or gone (and those that came into or
    left the services whose slots are read), and says which those are. A service whose
    tasks did not change keeps the very objects of its last view, so the planner's
    change-driven cycle (placement.quiet) asks one set instead of comparing them."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._tasks: dict[str, SwarmTask] = {}
        self._few: AbstractSet[str] = frozenset()
        self._use: dict[str, dict[str, tuple[int, int]]] = {}  # service -> node -> use
        self.view = TaskView({}, {}, {}, {}, {}, {})
        self.tasks_on: set[tuple[str, str]] = set()  # ``view.on_nodes`` as pairs

    def update(
        self,
        tasks: Sequence[SwarmTask],
        few: AbstractSet[str],
    ) -> tuple[TaskView, set[str]]:
        """This cycle's view (what ``tasks_by_service(tasks, few.__contains__)`` gives),
        and the service ids whose part of it may differ from the last cycle's."""
        prev = self._tasks
        ids = list(map(_task_id, tasks))
        olds = list(map(prev.get, ids))
        # (comprehensions: a loop over the tasks doing all of it cost twice as much)
        differ = [
            (t, o) for t, o in zip(tasks, olds, strict=True) if o is None or (o is not t and o != t)
        ]
        changed = {t.service_id for t, _ in differ}
        changed.update(o.service_id for _, o in differ if o is not None)
        matched = len(olds) - sum(1 for _, o in differ if o is None)  # (new ones differ)
        now = dict(zip(ids, tasks, strict=True))
        if len(now) != len(tasks):  # one task listed twice: read it all again
            self._reset()
            now = {}
            changed = {t.service_id for t in tasks}
        if matched != len(prev):  # tasks gone
            changed.update(prev[k].service_id for k in prev.keys() - now.keys())
        changed.update(few ^ self._few)  # slots read, or no longer read
        self._tasks, self._few = now, set(few)
        if changed:
            self._merge([t for t in tasks if t.service_id in changed], changed, few)
        return self.view, changed

    def _merge(self, tasks: list[SwarmTask], changed: set[str], few: AbstractSet[str]) -> None:
        v = self.view
        part = tasks_by_service(tasks, few.__contains__)
        pairs = self.tasks_on
        for sid in changed:
            _put(v.running, part.running, sid)
            _put(v.waiting, part.waiting, sid)
            _put(v.slots, part.slots, sid)
            for nid in v.on_nodes.get(sid, ()):
                pairs.discard((sid, nid))
            _put(v.on_nodes, part.on_nodes, sid)
            for nid in v.on_nodes.get(sid, ()):
                pairs.add((sid, nid))
            _put(v.failed, part.failed, sid)
            _put(v.rules, part.rules, sid)
            _put(v.made, part.made, sid)
        use = _use_by_service(tasks)
        for sid in changed:  # node totals: each changed service's old part out, new in
            for nid, (cpu, mem) in self._use.pop(sid, {}).items():
                u = v.use[nid]
                u[0] -= cpu
                u[1] -= mem
            mine = use.get(sid)
            if mine:
                self._use[sid] = mine
                for nid, (cpu, mem) in mine.items():
                    u = v.use.setdefault(nid, [0, 0])
                    u[0] += cpu
                    u[1] += mem


def _put(mine: dict[str, _T], theirs: Mapping[str, _T], sid: str) -> None:
    got = theirs.get(sid)
    if got is None:
        mine.pop(sid, None)
    else:
        mine[sid] = got


def _use_by_service(tasks: Sequence[SwarmTask]) -> dict[str, dict[str, tuple[int, int]]]:
    """Service id -> node id -> what its tasks meant to run reserve there (the tasks
    ``tasks_by_service`` counts in ``use``)."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for t in tasks:
        if not t.node_id or not (t.cpu_milli or t.memory_mib) or not meant_to_run(t):
            continue
        per = out.setdefault(t.service_id, {})
        cpu, mem = per.get(t.node_id, (0, 0))
        per[t.node_id] = (cpu + t.cpu_milli, mem + t.memory_mib)
    return out
