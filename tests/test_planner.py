"""The long-lived planner: CPU-aware, Swarm's own constraints, the workload model it
learns, truthful status, and that its incremental state equals a fresh build."""

from __future__ import annotations

import gc
import random
import weakref
from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.placement import P, apply, svc
from support.planner import cpu_node, two_nodes

from swarmgpu.allocator.fragmentation import TaskShape
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.manager.placement import Planner, gate_constraint, plan_placement, read_ledger
from swarmgpu.manager.placement.backoff import REPLACE_BACKOFF_MAX_S, Backoff
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, task_from_api


def reserving(s: SwarmService, cpu_milli: int) -> SwarmService:
    spec = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000}}}}
    return replace(s, spec=spec)


def task(tid: str, service: SwarmService, node_id: str, cpu_milli: int,
         state: str = "running", err: str = "") -> SwarmTask:
    return SwarmTask(id=tid, service_id=service.id, node_id=node_id, slot=1, state=state,
                     desired_state="running", env=(), error=err, cpu_milli=cpu_milli)


def test_cpu_reserved_by_a_running_task_sends_the_next_service_elsewhere() -> None:
    """The issue's case: X runs on node A and reserves 1.5 of its 2 CPUs; Y (1 CPU) must
    not get devices on A, though A is 'already in use'."""
    nodes, facts = two_nodes()
    x = reserving(svc("x", {"swarmgpu.gpus": "1"}), 1500)
    plan = plan_placement(nodes, [x], [], facts)  # type: ignore[arg-type]
    (px,) = plan.services[0].placements
    nodes = apply(nodes, plan)
    y = reserving(svc("y", {"swarmgpu.gpus": "1"}), 1000)
    running_x = task("tx", x, px.node_id, 1500)
    sp = {s.name: s for s in plan_placement(nodes, [x, y], [running_x],
                                             facts).services}  # type: ignore[arg-type]
    (py,) = sp["y"].placements
    assert py.node_id != px.node_id
    assert sp["y"].status == "placed"


def test_a_reservation_below_a_milli_cpu_or_a_mib_counts_whole() -> None:
    """Swarm's ResourceFilter compares nanoCPUs and bytes: a task reserving 1.000000001
    CPUs leaves less than 1 CPU of 2, so a service reserving 1 CPU waits on that node
    forever. Reservations round up, a node's capacity down."""
    nodes, facts = two_nodes()
    hog = svc("hog", {}, gated=False)
    raw = {"ID": "th", "ServiceID": hog.id, "NodeID": "n-a", "Slot": 1,
           "Status": {"State": "running"}, "DesiredState": "running",
           "Spec": {"Resources": {"Reservations": {"NanoCPUs": 1_000_000_001,
                                                   "MemoryBytes": 1024 * 1024 + 1}}}}
    t = task_from_api(raw)
    assert (t.cpu_milli, t.memory_mib) == (1001, 2)
    y = reserving(svc("y", {"swarmgpu.gpus": "1"}), 1000)
    for _ in range(2):  # either node first (hostname order): never n-a
        sp = plan_placement(nodes, [y, hog], [t], facts).services[0]  # type: ignore[arg-type]
        assert [p.node_id for p in sp.placements] == ["n-b"]
        nodes.reverse()


def test_cpu_counts_a_placed_holding_before_its_task_exists() -> None:
    nodes, facts = two_nodes()
    a = reserving(svc("a", {"swarmgpu.gpus": "1"}), 1500)
    b = reserving(svc("b", {"swarmgpu.gpus": "1"}), 1500)
    c = reserving(svc("c", {"swarmgpu.gpus": "1"}), 1500)
    plan = plan_placement(nodes, [a, b, c], [], facts)  # type: ignore[arg-type]
    by = {s.name: s for s in plan.services}
    assert by["a"].placements[0].node_id != by["b"].placements[0].node_id
    assert by["c"].status == "pending"
    assert "CPU" in (by["c"].reason or "")


def test_service_constraints_and_platform_are_respected() -> None:
    nodes, facts = two_nodes()
    nodes[1] = replace(nodes[1], labels={"pool": "infer"}, os="linux", arch="x86_64")
    s = replace(svc("s", {"swarmgpu.gpus": "1"}),
                constraints=(gate_constraint(P, "s"), "node.labels.pool == infer"))
    (p,) = plan_placement(nodes, [s], [], facts).services[0].placements  # type: ignore[arg-type]
    assert p.node_id == "n-b"
    arm = replace(svc("arm", {"swarmgpu.gpus": "1"}), spec={"TaskTemplate": {"Placement": {
        "Platforms": [{"OS": "linux", "Architecture": "arm64"}]}}})
    sp = plan_placement(nodes, [arm], [], facts).services[0]  # type: ignore[arg-type]
    assert [q.node_id for q in sp.placements] == ["n-a"]  # n-a's platform is unknown


def test_a_constraint_swarm_matches_on_no_node_holds_no_gpus() -> None:
    """A key swarmkit does not read (``node.platform``) and a malformed ``node.ip`` match
    no node in Swarm: its task would wait forever on GPUs held for it."""
    nodes, facts = two_nodes()
    for bad in ("node.platform == linux", "node.ip == node-a"):
        s = replace(svc("s", {"swarmgpu.gpus": "1"}),
                    constraints=(gate_constraint(P, "s"), bad))
        sp = plan_placement(nodes, [s], [], facts).services[0]  # type: ignore[arg-type]
        assert sp.status == "pending" and not sp.placements, bad
    ip = replace(svc("s", {"swarmgpu.gpus": "1"}),
                 constraints=(gate_constraint(P, "s"), "node.ip != 10.0.0.1"))
    nodes[1] = replace(nodes[1], addr="10.0.0.2")
    (p,) = plan_placement(nodes, [ip], [], facts).services[0].placements  # type: ignore[arg-type]
    assert p.node_id == "n-b"


def test_second_replica_reason_names_the_one_per_node_rule() -> None:
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    s = svc("r", {"swarmgpu.gpus": "1", "swarmgpu.pack": "never"}, replicas=2)
    sp = plan_placement(nodes, [s], [], {"n-a": facts["n-a"]}).services[0]  # type: ignore[arg-type]
    assert sp.status == "pending"
    assert "one replica per node" in (sp.reason or "")
    # By default (pack: auto) the two replicas are packed on the one node instead.
    s = svc("r", {"swarmgpu.gpus": "1"}, replicas=2)
    sp = plan_placement(nodes, [s], [], {"n-a": facts["n-a"]}).services[0]  # type: ignore[arg-type]
    assert sp.status == "placed" and sp.packed and [p.slot for p in sp.placements] == [1, 2]


def test_replicas_publishing_a_host_mode_port_are_never_packed_on_one_node() -> None:
    """Swarm's HostPortFilter: a node runs one task per host-mode published port, so a
    second packed replica would wait forever on the GPUs held for it there."""
    nodes, facts = two_nodes()
    nodes = nodes[:1]
    s = replace(svc("web", {"swarmgpu.gpus": "1"}, replicas=2), spec={"EndpointSpec": {
        "Ports": [{"Protocol": "tcp", "TargetPort": 80, "PublishedPort": 8000,
                   "PublishMode": "host"}]}})
    sp = plan_placement(nodes, [s], [], {"n-a": facts["n-a"]}).services[0]  # type: ignore[arg-type]
    assert not sp.packed and len(sp.placements) == 1 and sp.status == "pending"
    assert "host-mode port 8000/tcp" in (sp.reason or ""), sp.reason
    ingress = replace(s, spec={"EndpointSpec": {"Ports": [
        {"Protocol": "tcp", "TargetPort": 80, "PublishedPort": 8000}]}})
    sp = plan_placement(nodes, [ingress], [], {"n-a": facts["n-a"]}).services[0]  # type: ignore[arg-type]
    assert sp.packed and len(sp.placements) == 2


def test_gate_naming_another_service_is_replaced_and_reported() -> None:
    nodes, facts = two_nodes()
    s = replace(svc("prod_llm", {"swarmgpu.gpus": "1"}),
                constraints=(gate_constraint(P, "dev_llm"),))
    sp = plan_placement(nodes, [s], [], facts).services[0]  # type: ignore[arg-type]
    assert sp.remove_constraints == (gate_constraint(P, "dev_llm"),)
    assert sp.add_constraints == (gate_constraint(P, "prod_llm"),)
    assert any("names another service" in w for w in sp.warnings)


def test_an_owners_constraint_on_a_gate_label_is_kept_and_obeyed() -> None:
    """Only ``<gate>==true`` is a gate: ``!= true`` on another service's gate label (not
    where its tasks run) and ``== false`` are the owner's. No placement write, first or
    again, takes them out or calls them another service's gate, and the planner refuses
    the nodes Swarm would refuse."""
    nodes, facts = two_nodes()
    nodes[0] = replace(nodes[0], labels={f"{P}service.db": "true"})
    away, never = f"node.labels.{P}service.db != true", f"node.labels.{P}service.x==false"
    s = replace(svc("app", {"swarmgpu.gpus": "1"}), constraints=(gate_constraint(P, "app"), away))
    db = svc("db", {}, gated=False)  # (its gate stands for one of a GPU service's: not a stray)
    planner = Planner()
    for _ in range(2):  # the first write, then a re-placement from the new labels
        plan = planner.plan(nodes, [s, db], [], facts)  # type: ignore[arg-type]
        (sp,) = plan.services
        assert sp.remove_constraints == () and sp.add_constraints == ()
        assert not any("another service" in w for w in sp.warnings), sp.warnings
        assert [p.node_id for p in sp.placements] == ["n-b"]
        nodes = apply(nodes, plan)
        s = replace(s, labels={**s.labels, **sp.service_labels_set}, version=s.version + 1)
    t = replace(svc("t", {"swarmgpu.gpus": "1"}), constraints=(gate_constraint(P, "t"), never))
    sp = plan_placement(nodes, [t, db], [], facts).services[0]  # type: ignore[arg-type]
    assert sp.remove_constraints == () and sp.status == "pending", sp


def test_placed_is_not_claimed_when_swarm_refuses_the_task() -> None:
    nodes, facts = two_nodes()
    s = svc("s", {"swarmgpu.gpus": "1"})
    planner = Planner()
    plan = planner.plan(nodes, [s], [], facts)  # type: ignore[arg-type]
    nodes = apply(nodes, plan)
    s = replace(s, labels={**s.labels, **plan.services[0].service_labels_set}, version=2,
                force_update=1)
    plan = planner.plan(nodes, [s], [], facts)  # type: ignore[arg-type]  # opens the gate
    nodes = apply(nodes, plan)
    stuck = replace(task("t1", s, "", 0, state="pending",
                         err="no suitable node (insufficient resources on 1 node)"),
                    force_update=1)
    sp = planner.plan(nodes, [s], [stuck], facts).services[0]  # type: ignore[arg-type]
    assert sp.status == "pending"
    assert "insufficient resources" in (sp.reason or "")


def test_workload_is_learned_and_shown() -> None:
    nodes, facts = two_nodes()
    planner = Planner()
    assert planner.model.source == "prior"
    services = [svc(f"s{i}", {"swarmgpu.gpu-fraction": "0.5"}) for i in range(40)]
    plan = planner.plan(nodes, services, [], facts)  # type: ignore[arg-type]
    top = plan.workload["top"]
    assert plan.workload["tasks_seen"] == 40
    assert any(t["gpu_milli"] == 500 for t in top)
    again = planner.plan(nodes, services, [], facts)  # type: ignore[arg-type]
    assert again.workload["tasks_seen"] == 40  # each service counts once


def test_workload_round_trips_through_its_label() -> None:
    m = WorkloadModel.prior()
    m.observe("a", "x", TaskShape(2000, 250, 1, ("NVIDIA-A100*",)), 3)
    back = WorkloadModel.loads(m.dumps())
    # what is stored is the mix the policy uses: the prior's CPU scaled to the tasks'
    assert {s: round(w, 3) for s, w in back.weights.items()} == {
        s: round(w, 3) for s, w in m.current().items()}
    assert len(m.dumps()) < 2048


def test_incremental_planner_equals_a_fresh_one() -> None:
    """Across cycles of arrivals and departures, what the long-lived planner decides
    equals what a fresh planner decides from the same snapshot."""
    rng = random.Random(7)
    nodes = [cpu_node(f"n{i}", f"node-{i}", cpu_milli=64000) for i in range(6)]
    facts = {n.id: RTX4090.facts() for n in nodes}
    pinned = WorkloadModel.fixed([TaskShape(4000, 500, 1), TaskShape(8000, 1000, 1)], "t")
    live = Planner(workload=pinned)
    services: list[SwarmService] = []
    for cycle in range(12):
        for k in range(rng.randint(1, 5)):
            ask = rng.choice([{"swarmgpu.gpus": str(rng.choice([1, 2]))},
                              {"swarmgpu.gpu-fraction": rng.choice(["0.25", "0.5", "0.7"])}])
            services.append(reserving(svc(f"c{cycle:02d}-{k}", ask), rng.choice([0, 4000])))
        if len(services) > 4 and rng.random() < 0.5:
            services.pop(rng.randrange(len(services)))
        a = live.plan(nodes, services, [], facts)  # type: ignore[arg-type]
        b = plan_placement(nodes, services, [], facts, workload=pinned)  # type: ignore[arg-type]
        assert [s.to_dict() for s in a.services] == [s.to_dict() for s in b.services]
        assert a.node_set == b.node_set and a.node_remove == b.node_remove
        nodes = apply(nodes, a)
        led = read_ledger(nodes, P)
        services = [replace(s, labels={**s.labels, **sp.service_labels_set}, version=s.version + 1)
                    if (sp := next((x for x in a.services if x.name == s.name), None))
                    and sp.service_labels_set else s for s in services]
        assert set(led) <= {s.name for s in services}


def test_usage_survives_a_node_rebuild() -> None:
    """A node whose labels change is rebuilt in the allocator; the CPU its tasks reserve
    must still count afterwards."""
    nodes, facts = two_nodes()
    planner = Planner()
    x = reserving(svc("x", {"swarmgpu.gpus": "1"}), 1500)
    plan = planner.plan(nodes, [x], [], facts)  # type: ignore[arg-type]
    nodes = apply(nodes, plan)
    (px,) = plan.services[0].placements
    tx = task("tx", x, px.node_id, 1500)
    planner.plan(nodes, [x], [tx], facts)  # type: ignore[arg-type]
    nodes = [replace(n, labels={**n.labels, "rack": "r1"}, version=n.version + 1)
             for n in nodes]  # a rebuild
    y = reserving(svc("y", {"swarmgpu.gpus": "1"}), 1000)
    sp = {s.name: s for s in planner.plan(nodes, [x, y], [tx], facts).services}  # type: ignore[arg-type]
    assert sp["y"].placements[0].node_id != px.node_id


def test_cpu_only_services_on_gpu_nodes_are_learned() -> None:
    """Services without a GPU request take CPU that GPU tasks need: the model counts
    those whose tasks run on GPU nodes (and not those elsewhere)."""
    nodes, facts = two_nodes()
    cpu_node_ = cpu_node("n-cpu", "cpu-only")
    web = reserving(replace(svc("web", {}), constraints=(), env=()), 4000)
    batch = reserving(replace(svc("batch", {}), constraints=(), env=()), 6000)
    planner = Planner()
    tasks = [task("tw", web, "n-a", 4000), task("tb", batch, "n-cpu", 6000)]
    plan = planner.plan([*nodes, cpu_node_], [web, batch], tasks,
                        facts)  # type: ignore[arg-type]
    assert plan.workload["tasks_seen"] == 1
    back = WorkloadModel.loads(planner.model.dumps())  # and it survives storage
    assert TaskShape(4000, 0, 0) in back.weights and TaskShape(6000, 0, 0) not in back.weights


# --- convergence: a GPU task Swarm will not run where its devices are (issue 20, 4) ----

def _placed(planner: Planner, nodes: list[SwarmNode], s: SwarmService, facts: dict[str, object],
            now: float = 0.0) -> tuple[list[SwarmNode], SwarmService, str]:
    """Plan, apply, write the device map, open the gate: the service held on one node."""
    plan = planner.plan(nodes, [s], [], facts, now=now)  # type: ignore[arg-type]
    nodes = apply(nodes, plan)
    s = replace(s, labels={**s.labels, **plan.services[0].service_labels_set},
                version=s.version + 1, force_update=s.force_update + 1)
    nodes = apply(nodes, planner.plan(nodes, [s], [], facts, now=now))  # type: ignore[arg-type]
    held = [n.id for n in nodes if n.labels.get(f"{P}service.{s.name}") == "true"]
    assert len(held) == 1
    return nodes, s, held[0]


def test_refused_task_is_replaced_after_the_gate_grace_and_logged() -> None:
    nodes, facts = two_nodes()
    planner = Planner()
    s = svc("s", {"swarmgpu.gpus": "1"})
    nodes, s, where = _placed(planner, nodes, s, facts)
    stuck = replace(task("t1", s, "", 0, state="pending",
                         err="no suitable node (insufficient resources on 1 node)"),
                    force_update=s.force_update)
    # A message Swarm may have written before the gate opened is no refusal yet.
    sp = planner.plan(nodes, [s], [stuck], facts, now=1.0).services[0]  # type: ignore[arg-type]
    assert sp.status == "pending" and not sp.replaced
    later = planner.plan(nodes, [s], [stuck], facts, now=10.0)  # type: ignore[arg-type]
    sp = later.services[0]
    assert sp.replaced and "insufficient resources" in sp.replaced, sp
    (p,) = sp.placements
    assert p.node_id != where  # moved to the other node, within this one cycle
    gone = later.node_remove[where]
    assert f"{P}assign.s" in gone and f"{P}service.s" in gone
    assert f"{P}devices.{where}" in sp.service_labels_remove
    assert any(w.startswith("Swarm cannot run") and "re-placed on" in w for w in sp.warnings)


def test_drained_node_moves_the_replica_and_back_off_stops_a_loop() -> None:
    nodes, facts = two_nodes()
    planner = Planner()
    s = svc("s", {"swarmgpu.gpus": "1"})
    nodes, s, first = _placed(planner, nodes, s, facts, now=100.0)
    waiting = replace(task("t1", s, "", 0, state="pending"), force_update=s.force_update)
    drained = [replace(n, availability="drain", version=n.version + 1) if n.id == first else n
               for n in nodes]
    plan = planner.plan(drained, [s], [waiting], facts, now=101.0)  # type: ignore[arg-type]
    sp = plan.services[0]
    assert "is drain" in sp.replaced and [p.node_id for p in sp.placements] != [first]
    nodes = apply(drained, plan)
    s = replace(s, labels={**{k: v for k, v in s.labels.items()
                              if k not in sp.service_labels_remove}, **sp.service_labels_set},
                version=s.version + 1, force_update=s.force_update + 1)
    nodes = apply(nodes, planner.plan(nodes, [s], [], facts, now=102.0))  # type: ignore[arg-type]
    # The second node is drained too and the first is back: the service was just moved,
    # so it waits out its back-off (reported) instead of bouncing back at once.
    second = next(n.id for n in nodes if n.labels.get(f"{P}service.s") == "true")
    nodes = [replace(n, availability="drain" if n.id == second else "active",
                     version=n.version + 1) for n in nodes]
    waiting = replace(waiting, id="t2", force_update=s.force_update)
    sp = planner.plan(nodes, [s], [waiting], facts, now=103.0).services[0]  # type: ignore[arg-type]
    assert sp.status == "pending" and not sp.replaced
    assert "backed off" in (sp.reason or "") and "1 re-placement" in (sp.reason or ""), sp.reason
    # The count is kept in Swarm (a service label): `plan` (a fresh planner) and a new
    # leader see the same back-off.
    assert s.labels[f"{P}state.replaced"] == "1@101"
    fresh = Planner().plan(nodes, [s], [waiting], facts, now=103.0)  # type: ignore[arg-type]
    assert "backed off for 8 s more" in (fresh.services[0].reason or ""), fresh.services[0]
    sp = planner.plan(nodes, [s], [waiting], facts, now=113.0).services[0]  # type: ignore[arg-type]
    assert sp.replaced and [p.node_id for p in sp.placements] == [first]


def test_failed_tasks_back_off_and_nowhere_better_keeps_the_gpus() -> None:
    nodes, facts = two_nodes()
    planner = Planner()
    s = svc("s", {"swarmgpu.gpus": "1"})
    nodes, s, where = _placed(planner, nodes, s, facts, now=0.0)
    waiting = replace(task("t9", s, "", 0, state="pending"), force_update=s.force_update)
    failed = [replace(task(f"f{i}", s, where, 0, state="rejected", err="no such image"),
                      desired_state="shutdown") for i in range(3)]
    drained = [replace(n, availability="drain", version=n.version + 1) if n.id == where else n
               for n in nodes]
    sp = planner.plan(drained, [s], [waiting, *failed], facts,  # type: ignore[arg-type]
                      now=1.0).services[0]
    assert not sp.replaced and "3 task(s) failed or rejected" in (sp.reason or ""), sp.reason
    # Only one node, drained: nowhere better, so the service keeps its GPUs and waits.
    one = [replace(n, availability="drain", version=n.version + 1) for n in nodes
           if n.id == where]
    fresh = Planner()
    sp = fresh.plan(one, [s], [waiting], {where: facts[where]},  # type: ignore[arg-type]
                    now=0.0).services[0]
    assert sp.status == "pending" and "no other node can take it" in (sp.reason or "")
    assert [p.node_id for p in sp.placements] == [where]


def test_a_node_without_the_cpu_its_task_reserves_is_left_before_the_gate_opens() -> None:
    """A render's device list on a node whose CPU another service took since: the
    daemon's own view (reservations of the node's tasks) moves it, no gate opened."""
    nodes, facts = two_nodes()
    y = reserving(svc("y", {"swarmgpu.gpus": "1"}), 1000)
    uuid = RTX4090.facts().gpus[0].uuid
    y = replace(y, labels={**y.labels, f"{P}devices.n-a": uuid})  # rendered onto n-a
    hog = SwarmService("id-hog", "hog", {}, (), (), "replicated", 1, None, 1)
    t_hog = task("th", hog, "n-a", 1500)
    t_y = replace(task("ty", y, "", 0, state="pending"), slot=1)
    sp = Planner().plan(nodes, [y, hog], [t_hog, t_y], facts,  # type: ignore[arg-type]
                        now=0.0).services[0]
    assert sp.replaced and "CPU" in sp.replaced
    assert [p.node_id for p in sp.placements] == ["n-b"]
    assert f"{P}devices.n-a" in sp.service_labels_remove


def test_back_off_record_goes_once_all_replicas_run() -> None:
    nodes, facts = two_nodes()
    planner = Planner()
    s = svc("s", {"swarmgpu.gpus": "1"})
    nodes, s, where = _placed(planner, nodes, s, facts)
    s = replace(s, labels={**s.labels, f"{P}state.replaced": "2@50"}, version=s.version + 1)
    runs = replace(task("t1", s, where, 0), force_update=s.force_update)
    sp = planner.plan(nodes, [s], [runs], facts, now=60.0).services[0]  # type: ignore[arg-type]
    assert sp.status == "placed" and sp.service_labels_remove == (f"{P}state.replaced",)


def test_back_off_of_a_service_replaced_for_weeks_stays_at_its_cap() -> None:
    """A service whose tasks never start is re-placed every 600 s for as long as it
    lasts, and a new leader adopts up to 999 from its label: the wait stays at its cap.
    Before, 2 ** (n - 1) past 1,024 re-placements and failures raised OverflowError in
    the planner, every cycle, for every service."""
    b = Backoff()
    b.adopt("999@0")
    b.saw_failures([f"t{i}" for i in range(16)], 1.0)
    for i in range(2000):
        b.replaced(2.0 + i)
    assert b.delay() == REPLACE_BACKOFF_MAX_S
    assert b.wait_left(2001.0) == REPLACE_BACKOFF_MAX_S
    assert "next wait 600 s" in b.describe()


def test_a_new_leader_keeps_the_back_off_of_a_service_replaced_a_thousand_times() -> None:
    """The count written on the service is one a new leader adopts (at most 999): before,
    the 1,000th re-placement wrote 1000@t, which adopt refuses, and the new leader's
    wait started again at 10 s."""
    b = Backoff()
    for i in range(1000):
        b.replaced(float(i))
    new = Backoff()
    new.adopt(b.label())
    assert new.delay() == REPLACE_BACKOFF_MAX_S and new.wait_left(999.0) == REPLACE_BACKOFF_MAX_S


def test_a_planner_is_freed_when_its_owner_lets_go() -> None:
    """No reference cycle through a planner, its allocator or its memos: reference
    counting frees them at once. In a cycle, everything they hold (a replay's: 600,000
    objects) waited for a full collection, which took 0.75 s of ``simulate``'s wall time
    per seed."""
    nodes, facts = two_nodes()
    planner = Planner()
    x = svc("x", {"swarmgpu.gpus": "1"})
    plan = planner.plan(nodes, [x], [], facts)  # type: ignore[arg-type]
    nodes = apply(nodes, plan)
    planner.plan(nodes, [x], [], facts)  # type: ignore[arg-type]
    planner.place_arrivals([svc("y", {"swarmgpu.gpu-fraction": "0.5"})], [])
    refs = [weakref.ref(o) for o in (planner, planner.cluster, planner.cluster.alloc,
                                     planner.cluster.alloc.scorer)]
    gc.disable()
    try:
        del planner
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        gc.enable()
