"""Where a service of several replicas, not packed, may preempt: never on a node it
holds while its replicas are spread (placement puts one per node and writes
``MaxReplicas`` 1: a victim stopped there frees GPUs it is never given), but on the
one node it holds where placement would pack the rest there (``pack: auto``, no other
node: ``spread.place_replicas``). Before, that node was skipped too, and a service
whose other nodes held only work it may not stop waited for ever beside a lower
holder. Pure: the lists as Swarm answers them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from support.forged import FACTS, held_labels, sw_node, sw_svc

from swarmgpu.manager.placement import Planner, devices_key
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.placement.records import Status
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
DGX, R4090 = (tuple(g.uuid for g in FACTS[n].gpus) for n in ("n-dgx", "n-4090"))


def _holders(nid: str, uuids: tuple[str, ...], priority: int, tag: str,
             ) -> tuple[dict[str, str], list[SwarmService], list[SwarmTask]]:
    """One running holder of ``priority`` per GPU of ``uuids`` on ``nid``, started in
    that order."""
    labels: dict[str, str] = {}
    services, tasks = [], []
    for i, u in enumerate(uuids):
        name = f"{tag}{i}"
        labels |= held_labels(name, nid, u)
        s = sw_svc(name, {f"{P}gpus": "1", devices_key(P, nid): u, f"{P}priority": str(priority)})
        services.append(s)
        tasks.append(SwarmTask(f"t-{name}", s.id, nid, 1, "running", "running", (),
                               created_at=f"2026-01-01T10:0{i}:00Z"))
    return labels, services, tasks


def _multi(replicas: int, on: tuple[tuple[str, str], ...],
           ) -> tuple[dict[str, dict[str, str]], SwarmService, list[SwarmTask]]:
    """multi (priority 100, one GPU a replica) holding and running on each (node, GPU)."""
    labels: dict[str, dict[str, str]] = {nid: held_labels("multi", nid, u) for nid, u in on}
    s = sw_svc("multi", {f"{P}gpus": "1", f"{P}priority": "100",
                         **{devices_key(P, nid): u for nid, u in on}}, replicas=replicas)
    tasks = [SwarmTask(f"t-multi-{nid}", s.id, nid, k, "running", "running", ())
             for k, (nid, _u) in enumerate(on, start=1)]
    return labels, s, tasks


def _nodes(dgx: dict[str, str], r4090: dict[str, str]) -> list[SwarmNode]:
    return [sw_node("n-dgx", "gpu-node-1", dgx), sw_node("n-4090", "gpu-node-2", r4090)]


def test_spread_replicas_preempt_on_no_node_they_hold() -> None:
    """multi's 3 replicas, one per node: it holds both GPU nodes, its third replica
    waits. Placement keeps one replica per node (a free GPU beside its replica on
    gpu-node-1 stays unused: pending, by name of that rule, MaxReplicas 1 written), so
    a lower holder stopped on either node frees nothing it gets: none is."""
    mine, multi, mtasks = _multi(3, (("n-dgx", DGX[0]), ("n-4090", R4090[0])))
    dl, ds, dt = _holders("n-dgx", DGX[1:7], 0, "d")  # DGX[7] free
    rl, rs, rt = _holders("n-4090", R4090[1:], 0, "r")
    nodes = _nodes(mine["n-dgx"] | dl, mine["n-4090"] | rl)
    services, tasks = [*ds, *rs, multi], [*dt, *rt, *mtasks]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    sp = next(sp for sp in plan.services if sp.name == "multi")
    assert sp.status == Status.PENDING and "one replica per node" in sp.reason
    assert sp.set_max_replicas == 1
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []


def test_a_service_holding_one_node_preempts_there_for_the_replicas_placement_packs() -> None:
    """multi's 2 replicas: one runs on gpu-node-1, which lower holders fill; gpu-node-2
    is full of priority 200 work it may not stop. Placement would pack its second
    replica beside the first (``pack: auto``), so the newest lower holder there goes
    for it; its next plan packs both on gpu-node-1."""
    mine, multi, mtasks = _multi(2, (("n-dgx", DGX[0]),))
    dl, ds, dt = _holders("n-dgx", DGX[1:], 0, "d")
    rl, rs, rt = _holders("n-4090", R4090, 200, "r")
    nodes = _nodes(mine["n-dgx"] | dl, rl)
    services, tasks = [*ds, *rs, multi], [*dt, *rt, *mtasks]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    assert next(sp.status for sp in plan.services if sp.name == "multi") == Status.PENDING
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [(p.service, p.hostname, [v.service for v in p.victims], p.held) for p in got] == [
        ("multi", "gpu-node-1", ["d6"], (DGX[7],))]
    # the victim gone (its ledger entry, its task; removed, not placed again): multi is
    # packed on gpu-node-1
    gone = {k: v for k, v in nodes[0].labels.items() if k not in held_labels("d6", "n-dgx", "")}
    after = [replace(nodes[0], labels=gone), nodes[1]]
    again = Planner().plan(after, [s for s in services if s.name != "d6"],
                           [t for t in tasks if t.id != "t-d6"], FACTS)
    sp = next(sp for sp in again.services if sp.name == "multi")
    assert sp.status == Status.PLACED and sp.packed is not None
    assert {p.hostname for p in sp.placements} == {"gpu-node-1"}


@pytest.mark.parametrize(("replicas", "slots"), [(2, ((1, "n-dgx"), (2, "n-dgx"))),
                                                 (2, ((1, ""), (2, ""), (3, "n-dgx")))],
                         ids=["two-tasks-on-its-node", "its-slot-past-its-replicas"])
def test_no_preemption_where_placement_would_not_pack_for_its_task_slots(
    replicas: int, slots: tuple[tuple[int, str], ...],
) -> None:
    """As the test above, but multi's tasks keep placement from packing on gpu-node-1
    (``spread.place_replicas``: the node holds at most one of its task slots, one of
    those it keeps): two of its tasks run there, or its task there has a slot past its
    replicas (scaled down; the lower slots' tasks not scheduled). Placement leaves it
    pending unpacked, so a victim stopped there frees GPUs it is never given: none is
    (before, ``spread_packs`` counted the node, and d6 was stopped for nothing)."""
    mine, multi, _mtasks = _multi(replicas, (("n-dgx", DGX[0]),))
    mtasks = [SwarmTask(f"t-multi-{k}", multi.id, nid, k, "running" if nid else "pending",
                        "running", ()) for k, nid in slots]
    dl, ds, dt = _holders("n-dgx", DGX[1:], 0, "d")
    rl, rs, rt = _holders("n-4090", R4090, 200, "r")
    nodes = _nodes(mine["n-dgx"] | dl, rl)
    services, tasks = [*ds, *rs, multi], [*dt, *rt, *mtasks]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    sp = next(sp for sp in plan.services if sp.name == "multi")
    assert sp.status == Status.PENDING and sp.packed is None
    assert choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                              preemptible_below=100) == []
    # d6 gone (as the old choice stopped it): placement still packs nothing there
    gone = {k: v for k, v in nodes[0].labels.items() if k not in held_labels("d6", "n-dgx", "")}
    again = Planner().plan([replace(nodes[0], labels=gone), nodes[1]],
                           [s for s in services if s.name != "d6"],
                           [t for t in tasks if t.id != "t-d6"], FACTS)
    sp = next(sp for sp in again.services if sp.name == "multi")
    assert sp.status == Status.PENDING and sp.packed is None


class _Walked(list[SwarmTask]):
    """A task list that counts the walks over it."""

    walks = 0

    def __iter__(self) -> Iterator[SwarmTask]:
        type(self).walks += 1
        return super().__iter__()


def _walks_for(spread: int) -> int:
    """How often ``choose_preemptions`` walks the snapshot's tasks with ``spread``
    services of 2 replicas, each holding one GPU of gpu-node-1 (the one node it holds:
    ``spread_packs`` reads its task slots), lower holders on the rest, gpu-node-2 full
    of work none of them may stop."""
    labels: dict[str, str] = {}
    multis: list[SwarmService] = []
    mtasks: list[SwarmTask] = []
    for k in range(spread):
        name = f"multi{k}"
        labels |= held_labels(name, "n-dgx", DGX[k])
        s = sw_svc(name, {f"{P}gpus": "1", f"{P}priority": "100",
                          devices_key(P, "n-dgx"): DGX[k]}, replicas=2)
        multis.append(s)
        mtasks.append(SwarmTask(f"t-{name}", s.id, "n-dgx", 1, "running", "running", ()))
    dl, ds, dt = _holders("n-dgx", DGX[spread:], 0, "d")
    rl, rs, rt = _holders("n-4090", R4090, 200, "r")
    nodes = _nodes(labels | dl, rl)
    services, tasks = [*ds, *rs, *multis], [*dt, *rt, *mtasks]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    assert all(sp.status == Status.PENDING for sp in plan.services if sp.name.startswith("m"))
    _Walked.walks = 0
    got = choose_preemptions(plan, nodes, services, _Walked(tasks), FACTS, prefix=P,
                             preemptible_below=100)
    assert {p.service for p in got} == {s.name for s in multis}
    return _Walked.walks


def test_a_preemption_round_walks_the_tasks_as_often_for_many_spread_preemptors() -> None:
    """Each spread preemptor on the one node it holds reads its own tasks' slots
    (``Round.tasks_of``, indexed once a round): before, each walked every task of the
    snapshot, a round over a big cluster preemptors x tasks."""
    assert _walks_for(3) == _walks_for(1)
