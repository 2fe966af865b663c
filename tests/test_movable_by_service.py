"""Whether a service may move (``rebalance.context.why_not_movable``) reads only its own
service's tasks: the pass indexes the snapshot's tasks by service once
(``Context.tasks_of``), where each question scanned every task (5.7 s of a 17.5 s plan
on a 200-node cluster: ``benchmarks/defrag_scale.py``). The reasons and the plan are
the same as before: the expected values below were recorded on the code before the
index (stop 77). Pure: real facts and metrics pages, ``plan_moves``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from support.defrag_cluster import RTX, defrag_cluster
from support.rebalance import CFG, P, observed
from support.rebalance import service as rebalance_service

from swarmgpu.manager.rebalance.admission import admit
from swarmgpu.manager.rebalance.context import MOVED_AT, Context, Inputs, why_not_movable
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.swarm.client import SwarmTask


def _inputs() -> Inputs:
    """defrag_cluster (a2..a5 on GPU 0 of gpu-node-2..5, b and c on gpu-node-6, p
    pending for two RTX 4090s) with services of every kind of answer: a3 has a second
    task starting (not converged), a4 moved 7 s ago (cooling down), a5 opted out, b's
    task runs on gpu-node-1 (not its placement), c has a task shutting down beside its
    running one (not counted), g is global, z wants 2 replicas and runs 1. The tasks
    come in no service's order."""
    pending = [rebalance_service("p", {f"{P}gpus": "2", **RTX})]
    nodes, svcs, tasks, facts = defrag_cluster(pending)
    labels = {"a4": {f"{P}{MOVED_AT}": "5"}, "a5": {f"{P}rebalance": "never"}}
    svcs = [replace(s, labels={**s.labels, **labels.get(s.name, {})}) for s in svcs]
    svcs += [replace(rebalance_service("g", {f"{P}gpus": "1"}, mode="global")),
             replace(rebalance_service("z", {f"{P}gpus": "1"}), replicas=2)]
    tasks = [replace(t, node_id="n1") if t.service_id == "id-b" else t for t in tasks]
    tasks += [SwarmTask("t-a3-new", "id-a3", "n3", 1, "starting", "running", ()),
              SwarmTask("t-c-old", "id-c", "n6", 1, "running", "shutdown", ()),
              SwarmTask("t-z", "id-z", "n1", 1, "running", "running", ())]
    tasks = tasks[1::2] + tasks[::2]  # interleaved: no service's tasks together
    return observed(nodes, svcs, tasks, facts)


NOT_CONVERGED = "not converged ({} running of {}, {} placed); moved only once stable"
UNCONVERGED_TASK = "a task runs on a node without its placement; not converged"
MOVABLE: dict[str, str | None] = {
    "p": NOT_CONVERGED.format(0, 1, 0), "a2": None, "a3": NOT_CONVERGED.format(1, 1, 1),
    "a4": "cooling down (293s left of 300s)", "a5": "opted out (swarmgpu.rebalance=never)",
    "b": UNCONVERGED_TASK, "c": None,
    "g": "global service: moved only between GPUs of its own node",
    "z": NOT_CONVERGED.format(1, 2, 0)}
SAME_NODE: dict[str, str | None] = {
    **MOVABLE, "g": None,
    "z": ("several replicas without MaxReplicas 1: the stopped task's replacement could "
          "start on another node")}
PLAN = [("a2", "n2", "n3", "makes room for pending p (2 GPUs (*4090*)) on gpu-node-2"),
        ("c", "n6", "n1", "gpu-node-6 has 100% of its GPU share allocated (> 90%), "
                          "gpu-node-1 0% (< 10%)")]
NOTES: list[str] = []


def test_each_service_is_judged_movable_as_before_the_index() -> None:
    ctx = Context.build(_inputs())
    got = {s.name: ctx.movable(s.name) for s in ctx.inp.services}
    assert got == MOVABLE
    got = {s.name: ctx.movable(s.name, same_node=True) for s in ctx.inp.services}
    assert got == SAME_NODE


def test_the_plan_is_the_same_as_before_the_index() -> None:
    prop = plan_moves(_inputs())
    assert [(m.service, m.source_node, m.target_node, m.reason) for m in prop.moves] == PLAN
    assert prop.notes == NOTES


def test_a_services_tasks_are_its_own_in_the_snapshots_order() -> None:
    inp = _inputs()
    ctx = Context.build(inp)
    assert [t.id for t in ctx.tasks_of("id-a3")] == [
        t.id for t in inp.tasks if t.service_id == "id-a3"]
    assert len(ctx.tasks_of("id-a3")) == 2
    assert ctx.tasks_of("no-such-service") == ()


class _Counted(list[SwarmTask]):
    """The snapshot's tasks, counting the walks over all of them."""

    walks = 0

    def __iter__(self) -> Iterator[SwarmTask]:
        self.walks += 1
        return super().__iter__()


def test_the_pass_walks_the_snapshots_tasks_once_for_every_services_question() -> None:
    """Asked of each of 9 services, twice: before the index each question that came to
    the tasks walked every task of the snapshot (12 walks); now the index's one."""
    inp = _inputs()
    tasks = _Counted(inp.tasks)
    ctx = Context.build(replace(inp, tasks=tasks))
    for same in (False, True):
        for s in ctx.inp.services:
            ctx.movable(s.name, same_node=same)
    assert tasks.walks == 1


def _admitted(tasks: list[SwarmTask]) -> tuple[list[str], list[tuple[str, str]]]:
    """``admit`` of a move of each service (defrag's first, renamed), within budgets:
    the services admitted, and those refused with why."""
    inp = _inputs()
    first = plan_moves(inp).moves[0]
    moves = [replace(first, service=s.name, service_id=s.id) for s in inp.services]
    cfg = replace(CFG, max_moves_per_cycle=20, max_moves_per_node=20)
    ok, refused = admit(moves, (), {s.name: s for s in inp.services}, tasks, inp.ledger,
                        cfg, P, inp.now)
    return [m.service for m in ok], [(m.service, why) for m, why in refused]


def test_the_mover_admits_each_move_as_before_and_walks_the_tasks_once() -> None:
    """The mover's admission asks the same of each proposed move (recorded before stop
    77); it walked every task of the snapshot for each that came to them (6 here), now
    once."""
    tasks = _Counted(_inputs().tasks)
    ok, refused = _admitted(tasks)
    assert ok == ["a2", "c"]
    assert refused == [(s, why) for s, why in MOVABLE.items() if why is not None]
    assert tasks.walks == 1


def _edges() -> Inputs:
    """``_inputs`` with the tasks an index by service ID could file wrongly: one with no
    service ID, one of a service the snapshot does not list, a second listed service
    under a2's ID (a reused ID: both are asked of its tasks), and g's global task."""
    inp = _inputs()
    a2 = next(s for s in inp.services if s.name == "a2")
    tasks = [*inp.tasks,
             SwarmTask("t-none", "", "n2", 1, "running", "running", ()),
             SwarmTask("t-ghost", "id-ghost", "n2", 1, "running", "running", ()),
             SwarmTask("t-g", "id-g", "n1", 1, "running", "running", ())]
    return replace(inp, services=[*inp.services, replace(a2, name="a2-again")],
                   tasks=tasks[::-1])


def test_each_service_is_judged_as_by_a_walk_over_every_task_of_the_snapshot() -> None:
    """The pass's answer (``Context.movable``) and the mover's (``admit``) are the old
    call's, ``why_not_movable`` given every task of the snapshot, however its tasks'
    service IDs fall."""
    inp = _edges()
    ctx = Context.build(inp)
    first = plan_moves(inp).moves[0]
    moves = [replace(first, service=s.name, service_id=s.id) for s in inp.services]
    cfg = replace(CFG, max_moves_per_cycle=99, max_moves_per_node=99)
    _ok, refused = admit(moves, (), {s.name: s for s in inp.services}, inp.tasks,
                         inp.ledger, cfg, P, inp.now)
    for same in (False, True):
        walked = {s.name: why_not_movable(
            s, ctx.requests.get(s.name), inp.tasks, inp.ledger.get(s.name, {}), P, inp.now,
            CFG.cooldown_s, same_node=same) for s in inp.services}
        assert {s.name: ctx.movable(s.name, same_node=same) for s in inp.services} == walked
    assert walked["a2-again"] is not None  # the reused ID's tasks were asked of it too
    assert dict((m.service, why) for m, why in refused) == {
        s.name: why for s, why in zip(inp.services, (
            why_not_movable(s, ctx.requests.get(s.name), inp.tasks,
                            inp.ledger.get(s.name, {}), P, inp.now, CFG.cooldown_s)
            for s in inp.services), strict=True) if why is not None}
