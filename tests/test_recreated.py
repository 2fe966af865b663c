"""A service removed and created again under the same name (``docker stack rm`` then
``docker stack deploy``, or ``docker service create`` again) while the removed one's task
still stops on its GPUs (``placement.recreated``). The ledger keys holdings by name alone:
before, the new service kept the removed one's entry as its own, and its task started on
GPUs the old container still ran on (GPU memory OOM); the stopping task's hold did not
bite, the GPUs being the new service's own holding."""

from __future__ import annotations

import copy
from dataclasses import replace

from support.forged import FACTS, R_UUIDS, snapshot, sw_node, sw_svc
from support.placement import apply, written

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.placement import (
    PlacementPlan,
    Planner,
    ReplicaPlacement,
    ServicePlan,
    assign_key,
    gate_constraint,
)
from swarmgpu.manager.placement.keys import UNLISTED_CYCLES, devices_key
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.nominated import StoppingGpus
from swarmgpu.manager.placement.recreated import Recreated, gate_name, recreated_entries
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
OLD_AT, NEW_AT = "2026-12-06T10:00:00.5Z", "2026-12-06T10:05:00Z"


def _web(sid: str, gpus: str = "1", created_at: str = OLD_AT) -> SwarmService:
    return replace(sw_svc("web", {f"{P}gpus": gpus}), id=sid, created_at=created_at)


def _nodes() -> list[SwarmNode]:
    return [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
            sw_node("n-4090", "gpu-node-2")]


def _plan(planner: Planner, nodes: list[SwarmNode], services: list[SwarmService],
          tasks: list[SwarmTask], stopping: list[SwarmTask]) -> PlacementPlan:
    return make_plan(replace(snapshot(nodes, services, tasks), stopping=stopping), Config(),
                     planner=planner)


def _old_running(planner: Planner) -> tuple[list[SwarmNode], ServicePlan, SwarmTask]:
    """web (id-old, 1 GPU) placed by the daemon's planner, its gate open, its task running
    on its GPU: the nodes, its plan and its task."""
    nodes, old, tasks = _nodes(), _web("id-old"), []
    for _ in range(3):
        plan = _plan(planner, nodes, [old], tasks, [])
        (sp,) = plan.services
        old, nodes = written(old, sp), apply(nodes, plan)
        p = sp.placements[0]
        tasks = [SwarmTask("t-old", old.id, p.node_id, 1, "running", "running", (),
                           created_at=OLD_AT, constraints=(gate_constraint(P, "web"),))]
    return nodes, sp, tasks[0]


def _recreated_while_old_stops(planner: Planner) -> tuple[
        list[SwarmNode], ReplicaPlacement, SwarmService, SwarmTask, list[SwarmTask]]:
    """web placed and running (``_old_running``), then removed and created again (id-new,
    its task pending) while the old task stops: the nodes, the old web's placement, the
    new web, its task and the stopping list."""
    nodes, old_sp, t_old = _old_running(planner)
    (p,) = old_sp.placements
    new = _web("id-new", created_at=NEW_AT)
    t_new = SwarmTask("t-new", new.id, "", 1, "pending", "running", (), created_at=NEW_AT)
    return nodes, p, new, t_new, [replace(t_old, desired_state="remove")]


def _one(plan: PlacementPlan) -> ServicePlan:
    (sp,) = plan.services
    return sp


def test_a_service_recreated_within_a_cycle_is_not_placed_on_the_removed_ones_gpus() -> None:
    """The daemon saw web (id-old) run on one GPU; within one cycle it was removed and
    created again (id-new) while the old task stops. The new web is placed afresh off
    that GPU, held for the stopping task; the old entry is rewritten. The cycle after,
    its task assigned, it keeps its new GPU (nothing re-placed again); once the old task
    has stopped it stays where it is."""
    planner = Planner(prefix=P)
    nodes, p, new, t_new, stopping = _recreated_while_old_stops(planner)
    plan = _plan(planner, nodes, [new], [t_new], stopping)
    sp = _one(plan)
    assert sp.placements and not set(sp.placements[0].uuids) & set(p.uuids), sp
    assert {(p.node_id, u) for u in p.uuids} <= plan.stopping_held.keys()
    nodes, new = apply(nodes, plan), written(new, sp)
    assert nodes[1 if p.node_id == "n-dgx" else 2].labels.get(assign_key(P, "web")) \
        != Holding("web", p.node_id, p.uuids, p.milli).label_value()
    q = sp.placements[0]
    t_new = replace(t_new, node_id=q.node_id, state="running")
    for leaving in (stopping, []):
        plan = _plan(planner, nodes, [new], [t_new], leaving)
        again = _one(plan)
        assert [(x.node_id, x.uuids) for x in again.placements] == [(q.node_id, q.uuids)]
        # (its gate opens once its device map is written: no assign or spec write)
        assert all(assign_key(P, "web") not in w for w in plan.node_set.values()), plan
        assert not again.writes.force_update and not again.writes.service_labels_set
        nodes = apply(nodes, plan)


def test_a_restarted_daemon_reads_the_removed_service_by_its_tasks_gate() -> None:
    """A fresh planner (a daemon restarted between the removal and the recreation, or
    ``plan``) has no last cycle: the stopping task's gate constraint names web, its
    ServiceID is no live service's and it is older than the new web. The same answer:
    placed afresh, the entry's GPU held for the stopping task."""
    nodes, old_sp, t_old = _old_running(Planner(prefix=P))
    (p,) = old_sp.placements
    new = _web("id-new", created_at=NEW_AT)
    t_new = SwarmTask("t-new", new.id, "", 1, "pending", "running", (), created_at=NEW_AT)
    plan = _plan(Planner(prefix=P), nodes, [new], [t_new],
                 [replace(t_old, desired_state="remove")])
    sp = _one(plan)
    assert sp.placements and not set(sp.placements[0].uuids) & set(p.uuids), sp
    assert {(p.node_id, u) for u in p.uuids} <= plan.stopping_held.keys()


def test_a_recreated_service_of_another_request_is_kept_off_the_removed_ones_gpus() -> None:
    """Recreated asking for every GPU of a node, after a restart: the old entry does not
    fit it, so it was placed afresh before too, but the stopping task's GPU was not held
    (its ledger entry was read as the new service's): free to the new web or any other
    service. Now it is held, and the new web is placed off it."""
    nodes, old_sp, t_old = _old_running(Planner(prefix=P))
    (p,) = old_sp.placements
    every = str(len(FACTS[p.node_id].gpus))
    new = _web("id-new", every, created_at=NEW_AT)
    t_new = SwarmTask("t-new", new.id, "", 1, "pending", "running", (), created_at=NEW_AT)
    plan = _plan(Planner(prefix=P), nodes, [new], [t_new],
                 [replace(t_old, desired_state="remove")])
    sp = _one(plan)
    assert all(not set(q.uuids) & set(p.uuids) for q in sp.placements), sp
    assert {(p.node_id, u) for u in p.uuids} <= plan.stopping_held.keys()


def test_an_updated_service_keeps_its_holding_while_its_old_task_stops() -> None:
    """An update keeps the service's id: its old task stopping is no removed one's, and
    its holding stays (nothing written). So does a live service's whose task of another
    (removed) id stops on its node while its own task runs there, its GPUs unknown."""
    planner = Planner(prefix=P)
    nodes, old_sp, t_old = _old_running(planner)
    (p,) = old_sp.placements
    web = written(_web("id-old"), old_sp)
    t_up = SwarmTask("t-up", web.id, p.node_id, 1, "running", "running", ())
    plan = _plan(planner, nodes, [web], [t_up], [replace(t_old, desired_state="shutdown")])
    assert _one(plan).placements == old_sp.placements and not plan.node_set
    ledger = {"web": {p.node_id: Holding("web", p.node_id, p.uuids, p.milli)}}
    gone = replace(t_old, service_id="id-gone", desired_state="remove")
    new = _web("id-new", created_at=NEW_AT)
    t_new = replace(t_up, service_id=new.id)
    assert recreated_entries([new], [gone], ledger, {}, [t_new], P, lambda _t: None) \
        == frozenset()
    assert recreated_entries([new], [gone], ledger, {}, [], P, lambda _t: None) \
        == {("web", p.node_id)}


def test_a_removed_task_newer_than_the_live_service_is_not_its_predecessors() -> None:
    """The live web was created before the stopping task of the removed id: that task is
    no task of a service web replaced, and web's entry stays its own."""
    ledger = {"web": {"n-dgx": Holding("web", "n-dgx", ("GPU-a",), (1000,))}}
    web = _web("id-web", created_at=OLD_AT)
    t = SwarmTask("t-x", "id-gone", "n-dgx", 1, "running", "remove", (), created_at=NEW_AT,
                  constraints=(gate_constraint(P, "web"),))
    assert recreated_entries([web], [t], ledger, {}, [], P, lambda _t: None) == frozenset()
    assert recreated_entries([web], [replace(t, created_at=OLD_AT)], ledger,
                             {}, [], P, lambda _t: None) == frozenset()  # not older
    assert recreated_entries([replace(web, created_at=NEW_AT)], [replace(
        t, created_at=OLD_AT)], ledger, {}, [], P, lambda _t: None) == {("web", "n-dgx")}


def test_a_removed_task_a_nanosecond_older_than_the_live_service_is_its_predecessors() -> None:
    """Made 1 ns before web (Docker's times carry nine fraction digits): a task of the
    service web replaced, whose entry is disowned (before, both read as the same float
    epoch second, so not older, and web kept the removed one's GPUs)."""
    ledger = {"web": {"n-dgx": Holding("web", "n-dgx", ("GPU-a",), (1000,))}}
    web = _web("id-web", created_at="2026-12-06T10:00:00.000000002Z")
    t = SwarmTask("t-x", "id-gone", "n-dgx", 1, "running", "remove", (),
                  created_at="2026-12-06T10:00:00.000000001Z",
                  constraints=(gate_constraint(P, "web"),))
    assert recreated_entries([web], [t], ledger, {}, [], P, lambda _t: None) == {
        ("web", "n-dgx")}


def test_the_gate_constraint_names_the_service() -> None:
    t = SwarmTask("t", "id", "n", 1, "running", "remove", ())
    assert gate_name(t, P) == ""
    assert gate_name(replace(t, constraints=("node.role==worker",
                                             gate_constraint(P, "a-b_c"))), P) == "a-b_c"
    assert gate_name(replace(t, constraints=(f"node.labels.{P}service.web == true",)),
                     P) == "web"
    assert gate_name(replace(t, constraints=(f"node.labels.{P}service.web!=true",)), P) == ""


def test_a_restarted_daemon_holds_a_removed_services_stopping_gpus_by_its_gate() -> None:
    """No last cycle, web removed (not recreated), its entry not yet released: its task's
    gate constraint names it, and the entry's GPU is held while it stops. Before: a
    daemon with no last cycle read no name, and held nothing."""
    ledger = {"web": {"n-4090": Holding("web", "n-4090", (R_UUIDS[2],), (1000,))}}
    t = SwarmTask("t-old", "id-gone", "n-4090", 1, "running", "remove", (),
                  constraints=(gate_constraint(P, "web"),))
    (n,) = StoppingGpus(P).holds([t], [], ledger, [], FACTS)
    assert (n.node_id, n.uuids) == ("n-4090", (R_UUIDS[2],))
    assert StoppingGpus(P).holds([replace(t, constraints=())], [], ledger, [], FACTS) == []


def _evil(node_id: str, env: tuple[str, ...] = ()) -> SwarmTask:
    """A task of a service of another tenant (id-evil), created before web was, that its
    owner gave web's gate constraint (it ran on web's node) and removed within one cycle:
    the daemon never saw its name, and it stops on web's node."""
    return SwarmTask("t-evil", "id-evil", node_id, 1, "running", "remove", env,
                     created_at=OLD_AT, constraints=(gate_constraint(P, "web"),))


def test_a_foreign_task_with_another_services_gate_disowns_no_live_holding() -> None:
    """A tenant's own constraint naming web's gate is no proof its removed service was a
    web: the live web's own device map names the entry's GPU, so the entry is its own.
    Before, its entry was read as the stopping task's whenever web's task was not
    assigned (restarting) or the foreign task named web's GPU, and web was placed afresh:
    another tenant could move a live service off its GPUs."""
    ledger = {"web": {"n-dgx": Holding("web", "n-dgx", ("GPU-a",), (1000,))}}
    web = replace(_web("id-web", created_at=NEW_AT),
                  labels={f"{P}gpus": "1", f"{P}devices.n-dgx": "GPU-a"})
    for learned in (None, {"GPU-a"}):
        assert recreated_entries([web], [_evil("n-dgx")], ledger, {}, [], P,
                                 lambda _t, got=learned: got) == frozenset(), learned
    # a web recreated with no device map of its own (or another one) is as before
    fresh = _web("id-web", created_at=NEW_AT)
    other = replace(web, labels={f"{P}gpus": "1", f"{P}devices.n-dgx": "GPU-b"})
    for s in (fresh, other):
        assert recreated_entries([s], [_evil("n-dgx")], ledger, {}, [], P,
                                 lambda _t: None) == {("web", "n-dgx")}, s.labels
    # by the last cycle's name (Swarm's word for the removed id), as before
    assert recreated_entries([web], [_evil("n-dgx")], ledger, {"id-evil": "web"}, [], P,
                             lambda _t: None) == {("web", "n-dgx")}


def test_a_restarted_daemon_keeps_a_live_service_on_its_gpus_past_a_foreign_gate() -> None:
    """End to end, a daemon restarted: web runs nowhere this cycle (its task restarting)
    while the other tenant's removed task with web's gate stops on web's node. web keeps
    its GPU (no write); before, it was placed afresh off it."""
    nodes, sp, _t = _old_running(Planner(prefix=P))
    (p,) = sp.placements
    web = _web("id-old", created_at=NEW_AT)  # its device map as the daemon wrote it
    web = replace(web, labels={**web.labels, devices_key(P, p.node_id): ",".join(p.uuids)})
    t_web = SwarmTask("t-web2", web.id, "", 1, "pending", "running", (), created_at=NEW_AT)
    plan = _plan(Planner(prefix=P), nodes, [web], [t_web], [_evil(p.node_id)])
    assert _one(plan).placements == sp.placements, plan
    assert all(assign_key(P, "web") not in w for w in plan.node_set.values()), plan


def test_a_recreated_fraction_on_the_stopping_tasks_gpu_keeps_its_gate_open() -> None:
    """web (0.5 of a GPU) recreated while its old task stops: placed afresh on the other
    half of the old task's GPU (its stopping share counted). The next cycles the entry
    names the old task's GPU still, but the daemon placed web there afresh: its own
    (``recreated.Recreated``). Before, it was
    disowned every other cycle, web's gate removed and set again in turn: Swarm's
    constraint enforcer stopped its running task each time the gate closed."""
    frac = {f"{P}gpus": "1", f"{P}gpu-fraction": "0.5"}
    planner = Planner(prefix=P)
    nodes, old, tasks = _nodes(), replace(_web("id-old"), labels=frac), []
    for _ in range(3):
        plan = _plan(planner, nodes, [old], tasks, [])
        sp = _one(plan)
        old, nodes = written(old, sp), apply(nodes, plan)
        p = sp.placements[0]
        tasks = [SwarmTask("t-old", old.id, p.node_id, 1, "running", "running", (),
                           created_at=OLD_AT, constraints=(gate_constraint(P, "web"),))]
    stopping = [replace(tasks[0], desired_state="remove")]
    new = replace(_web("id-new", created_at=NEW_AT), labels=frac)
    t_new = SwarmTask("t-new", new.id, "", 1, "pending", "running", (), created_at=NEW_AT)
    for cycle in range(5):
        plan = _plan(planner, nodes, [new], [t_new], stopping)
        sp = _one(plan)
        (q,) = sp.placements
        assert (q.node_id, q.uuids, q.milli) == (p.node_id, p.uuids, (500,)), sp
        if cycle:  # (the first rewrites the removed one's entry: placed afresh)
            assert not plan.node_remove, (cycle, plan.node_remove)
        nodes, new = apply(nodes, plan), written(new, sp)
        t_new = replace(t_new, node_id=q.node_id, state="running")


def test_a_recreated_service_seen_while_the_old_task_was_listed_running_is_moved_off() -> None:
    """Swarm sets a removed service's tasks to be removed just after the service goes: a
    cycle may list the old task still meant to run beside the new web, which keeps the
    old entry and has its device map written on it. The next cycle, the old task stops:
    its id is still named by the cycle that saw it listed (kept while a task of it is),
    so the entry is read as the removed one's, not by the device map's word, and the
    new web is placed off its GPU. Before (the name read from its gate), the new web
    stayed on the GPU the old container ran on."""
    planner = Planner(prefix=P)
    nodes, old_sp, t_old = _old_running(planner)
    (p,) = old_sp.placements
    new = _web("id-new", created_at=NEW_AT)
    t_new = SwarmTask("t-new", new.id, "", 1, "pending", "running", (), created_at=NEW_AT)
    plan = _plan(planner, nodes, [new], [t_new, t_old], [])
    nodes, new = apply(nodes, plan), written(new, _one(plan))
    plan = _plan(planner, nodes, [new], [t_new], [replace(t_old, desired_state="remove")])
    sp = _one(plan)
    assert sp.placements and not set(sp.placements[0].uuids) & set(p.uuids), sp
    assert {(p.node_id, u) for u in p.uuids} <= plan.stopping_held.keys()


def test_a_removed_task_listed_again_after_a_long_gap_does_not_disown_the_entry_again() -> None:
    """The removed task drops out of more than ``UNLISTED_CYCLES`` listings (a long
    engine hiccup) and comes back while the live web, placed afresh on its node, has no
    task assigned there (restarting). Its entry stays its own: before, the memory had
    forgotten it, the entry was disowned again, web placed afresh once more and its gate
    closed in turn (flapping)."""
    rec = Recreated()
    web = _web("id-new", created_at=NEW_AT)
    t = SwarmTask("t-old", "id-old", "n-dgx", 1, "running", "remove", (), created_at=OLD_AT,
                  constraints=(gate_constraint(P, "web"),))
    ledger = {"web": {"n-dgx": Holding("web", "n-dgx", ("GPU-a",), (1000,))}}
    assert rec.entries([web], [t], ledger, {}, [], P, lambda _t: None) == {("web", "n-dgx")}
    for _ in range(UNLISTED_CYCLES + 2):
        assert not rec.entries([web], [], ledger, {}, [], P, lambda _t: None)
    assert not rec.entries([web], [t], ledger, {}, [], P, lambda _t: None)
    # its entry gone (web placed elsewhere) and the task unlisted as long: forgotten
    for _ in range(UNLISTED_CYCLES + 1):
        rec.entries([web], [], {}, {}, [], P, lambda _t: None)
    assert not rec.afresh
    assert rec.entries([web], [t], ledger, {}, [], P, lambda _t: None) == {("web", "n-dgx")}


def test_a_restarted_daemon_keeps_a_recreated_service_where_it_was_placed_afresh() -> None:
    """The daemon placed the recreated web afresh on the removed one's node (device map
    first, then the ledger: ``cycle.placement.apply_plan``'s order) and restarted while
    the old task stops, web's task not yet assigned. The fresh daemon has no memory of
    the disowning (``Recreated``), but web's own device map names the entry's GPU: it
    is web's, placed once (nothing written over three cycles)."""
    planner = Planner(prefix=P)
    nodes, p, new, t_new, stopping = _recreated_while_old_stops(planner)
    plan = _plan(planner, nodes, [new], [t_new], stopping)
    (q,) = _one(plan).placements
    assert q.node_id == p.node_id and q.uuids != p.uuids, (p, q)
    nodes, new = apply(nodes, plan), written(new, _one(plan))
    fresh = Planner(prefix=P)
    for _ in range(3):
        plan = _plan(fresh, nodes, [new], [t_new], stopping)
        assert _one(plan).placements == (replace(q, score=None),), plan
        assert not plan.node_set and not plan.node_remove, plan
        assert not _one(plan).writes.service_labels_set, plan


def test_a_copied_device_map_is_its_services_own_word_only_after_a_restart() -> None:
    """web recreated from a copy of the removed one's spec: its device map names the old
    GPU. A daemon that saw the removed id knows the task is its predecessor's, and web is
    placed off that GPU. A restarted one reads the task's name from its gate, another
    owner's text (``placement.recreated``): web's own map wins, as for a foreign task
    with web's gate, and the entry stays web's (its owner's claim; a restart cannot tell
    it from a map the daemon wrote, as the test above shows)."""
    planner = Planner(prefix=P)
    nodes, p, new, t_new, stopping = _recreated_while_old_stops(planner)
    new = replace(new, labels={**new.labels, devices_key(P, p.node_id): ",".join(p.uuids)})
    sp = _one(_plan(planner, nodes, [new], [t_new], stopping))
    assert sp.placements and not set(sp.placements[0].uuids) & set(p.uuids), sp
    again = _one(_plan(Planner(prefix=P), nodes, [new], [t_new], stopping))
    assert [x.uuids for x in again.placements] == [p.uuids], again


def test_a_recreated_service_whose_node_write_failed_is_not_kept_on_the_removed_ones_gpus(
        ) -> None:
    """web recreated while its old task stops, placed afresh on the old node off the old
    GPU; its spec written, the node's write (its entry, its gate) failed: the ledger still
    has the removed one's entry. Remembered as placed afresh there, that entry was read
    as web's own the next cycle: kept, its gate opened on the GPU the old container still
    ran on. Now the entry is web's own only as it was placed: it is disowned again."""
    planner = Planner(prefix=P)
    nodes, p, new, t_new, stopping = _recreated_while_old_stops(planner)
    only = [n for n in nodes if n.id in ("n-mgr", p.node_id)]  # (placed on the old node)
    plan = _plan(planner, only, [new], [t_new], stopping)
    sp = _one(plan)
    (q,) = sp.placements
    assert q.node_id == p.node_id and not set(q.uuids) & set(p.uuids), sp
    new = written(new, sp)  # the spec landed; the node's write failed (nodes as they were)
    for _ in range(2):
        plan = _plan(planner, only, [new], [t_new], stopping)
        sp = _one(plan)
        assert sp.placements and not set(sp.placements[0].uuids) & set(p.uuids), sp
        assert {(p.node_id, u) for u in p.uuids} <= plan.stopping_held.keys()


def test_a_recreated_service_repinned_onto_the_stopping_tasks_gpu_keeps_its_entry() -> None:
    """web (0.5 of a GPU) recreated while the removed one's task stops on GPU-x of n-dgx:
    its entry there disowned, web placed afresh on GPU-y. Then a same-node repin (the
    mover's: the device map first, then the ledger) takes it onto the half of GPU-x the
    stopping task leaves. Before, the entry, no longer the GPUs web was placed on and
    naming the stopping task's, was read as the removed one's again: disowned while the
    repin was in flight, web placed afresh once more. web's own device map names it, and
    the daemon's record of the repin (``moving``) says the map is the move's: without
    one, the map is its owner's word alone (a service label), and the entry disowned."""
    rec, node = Recreated(), "n-dgx"
    web = replace(_web("id-new", created_at=NEW_AT),
                  labels={f"{P}gpus": "1", f"{P}gpu-fraction": "0.5"})
    t = SwarmTask("t-old", "id-old", node, 1, "running", "remove", (), created_at=OLD_AT,
                  constraints=(gate_constraint(P, "web"),))
    last, stopping_on = {"id-old": "web"}, lambda _t: {"GPU-x"}

    def entries(uuid: str, mapped: str, on: Recreated = rec,
                moving: frozenset[str] = frozenset({"web"})) -> frozenset[tuple[str, str]]:
        ledger = {"web": {node: Holding("web", node, (uuid,), (500,))}}
        s = replace(web, labels={**web.labels, devices_key(P, node): mapped}) if mapped \
            else web
        return on.entries([s], [t], ledger, last, [], P, stopping_on, moving=moving)

    assert entries("GPU-x", "") == {("web", node)}  # the removed one's: disowned
    placed = ServicePlan("web", "id-new", None, "", "placed", "placed", placements=(
        ReplicaPlacement(node, "gpu-node-1", (1,), ("GPU-y",), (500,)),))
    rec.placed_elsewhere(frozenset(), [placed])
    assert not entries("GPU-y", "GPU-y")  # placed afresh on GPU-y: its own
    assert not entries("GPU-y", "GPU-x")  # repin step 1: its device map on GPU-x
    unmoved = entries("GPU-x", "GPU-x", copy.deepcopy(rec), frozenset())
    assert unmoved == {("web", node)}  # no move recorded: the owner's map, disowned
    assert not entries("GPU-x", "GPU-x")  # step 2: the ledger too


def test_a_device_map_naming_the_removed_ones_gpus_does_not_keep_its_entry() -> None:
    """web recreated while its old task stops, placed afresh on the old node off the old
    GPU, the node's write failed (the ledger still has the removed one's entry). Its
    device map names the old GPU: a copy of the removed one's spec whose own write failed
    too, or one its owner wrote since (a service label: any stack may write it). Before,
    a map naming the entry's GPU made it the one web was placed on afresh: kept, its gate
    opened on the GPU the old container still ran on. The daemon's map is told from the
    owner's by the daemon's own move record (a repin in flight), which neither has."""
    for spec_landed in (False, True):
        planner = Planner(prefix=P)
        nodes, p, new, t_new, stopping = _recreated_while_old_stops(planner)
        only = [n for n in nodes if n.id in ("n-mgr", p.node_id)]  # (placed on the old node)
        old_map = {devices_key(P, p.node_id): ",".join(p.uuids)}
        new = replace(new, labels={**new.labels, **old_map})  # (a copied spec)
        sp = _one(_plan(planner, only, [new], [t_new], stopping))
        assert sp.placements and not set(sp.placements[0].uuids) & set(p.uuids), sp
        if spec_landed:  # its map written, then its owner's map over it
            new = written(new, sp)
            new = replace(new, labels={**new.labels, **old_map})
        for _ in range(2):
            plan = _plan(planner, only, [new], [t_new], stopping)
            sp = _one(plan)
            assert sp.placements and not set(sp.placements[0].uuids) & set(p.uuids), (
                spec_landed, sp)
            assert {(p.node_id, u) for u in p.uuids} <= plan.stopping_held.keys()
