"""Several replicas on one node: per-slot device lists (pure planner tests on facts from
real captures)."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.placement import DGX, FACTS, R4090, apply, svc, written

from swarmgpu.manager.commands.render import render_stack
from swarmgpu.manager.placement import (
    PlacementPlan,
    ServicePlan,
    env_template,
    env_template_per_node,
    gate_constraint,
    packed_holding,
    parse_holding,
    plan_placement,
    read_ledger,
)
from swarmgpu.manager.rebalance.context import why_not_movable
from swarmgpu.manager.services.requests import parse_all
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
ONE_GPU = {"swarmgpu.gpus": "1"}


def task(s: SwarmService, slot: int, state: str = "running", node: str = "n-4090",
         desired: str = "running", force: int = 1) -> SwarmTask:
    return SwarmTask(f"t-{s.name}-{slot}-{state}", s.id, node if state == "running" else "",
                     slot, state, desired, (), force_update=force)


def slot_lists(sp: ServicePlan, node: str = "n-4090") -> dict[int, str]:
    pre = f"{P}devices.{node}."
    return {int(k[len(pre):]): v for k, v in sp.service_labels_set.items()
            if k.startswith(pre)}


def test_eight_replicas_of_one_gpu_on_one_8gpu_node_get_eight_lists() -> None:
    s = replace(svc("inf", ONE_GPU, replicas=8), max_replicas_per_node=1)
    plan = plan_placement([R4090], [s], [], FACTS)
    (sp,) = plan.services
    assert sp.status == "placed", sp.reason
    assert sp.packed and "gpu-node-2" in sp.packed and "spread" in sp.packed
    assert [p.slot for p in sp.placements] == list(range(1, 9))
    lists = slot_lists(sp)
    assert sorted(lists) == list(range(1, 9))
    assert sorted(lists.values()) == sorted(RTX4090.uuids())  # eight distinct GPUs
    assert f"{P}devices.n-4090" not in sp.service_labels_set  # no node-wide list
    # swarmgpu's one-per-node rule becomes "no more tasks on the node than lists"
    assert sp.set_max_replicas == 8 and sp.service_labels_set[f"{P}state.max-replicas"] == "8"
    assert any("max_replicas_per_node 1 (swarmgpu's one-per-node rule) is now 8" in w
               for w in sp.warnings)
    # The ledger: one holding for the node, per slot, read back as it was written.
    value = plan.node_set["n-4090"][f"{P}assign.inf"]
    assert value.startswith("s1=") and value.count(";") == 7
    h = parse_holding("inf", "n-4090", value)
    assert h is not None and h.replicas == 8 and h.per_slot() == {
        k: (v,) for k, v in lists.items()}
    # Applied (tasks recreated after the map, gate opened): a restart plans the same
    # and writes nothing.
    s2 = written(s, sp)
    tasks = [task(s2, k, "pending", force=s2.force_update) for k in range(1, 9)]
    nodes = apply([R4090], plan)
    opened = plan_placement(nodes, [s2], tasks, FACTS)
    assert opened.node_set == {"n-4090": {f"{P}service.inf": "true"}}
    nodes = apply(nodes, opened)
    running = [task(s2, k, force=s2.force_update) for k in range(1, 9)]
    again = plan_placement(nodes, [s2], running, FACTS)
    assert again.empty, (again.node_set, again.services[0].service_labels_set)
    assert again.services[0].state == "Active" and again.services[0].packed
    assert [p.uuids for p in again.services[0].placements] == [p.uuids for p in sp.placements]
    # The packed holding is never moved (a move or restart closes its one gate).
    r = parse_all(s2.labels)
    assert why_not_movable(s2, r if not isinstance(r, Exception) else None, running,
                           read_ledger(nodes, P)["inf"], P, 0.0, 0.0) == \
        "replicas packed on one node: never moved"


def test_spread_stays_spread_when_nodes_have_room() -> None:
    s = svc("two", ONE_GPU, replicas=2)
    (sp,) = plan_placement([DGX, R4090], [s], [], FACTS).services
    assert sp.status == "placed" and sp.packed is None
    assert sorted(p.hostname for p in sp.placements) == ["gpu-node-1", "gpu-node-2"]
    assert all(p.slot is None for p in sp.placements)
    assert sp.set_max_replicas == 1
    assert set(sp.service_labels_set) >= {f"{P}devices.n-dgx", f"{P}devices.n-4090"}


def test_pack_never_and_always() -> None:
    never = svc("n", {**ONE_GPU, "swarmgpu.pack": "never"}, replicas=3)
    (sp,) = plan_placement([R4090], [never], [], FACTS).services
    assert sp.status == "pending" and sp.packed is None and len(sp.placements) == 1
    always = svc("a", {**ONE_GPU, "swarmgpu.pack": "always"}, replicas=2)
    (sp,) = plan_placement([DGX, R4090], [always], [], FACTS).services
    assert sp.status == "placed" and sp.packed and "always" in sp.packed
    assert len({p.node_id for p in sp.placements}) == 1 and len(sp.placements) == 2
    # A share or a MIG device keeps one replica per node.
    share = svc("s", {"swarmgpu.gpu-fraction": "0.5"}, replicas=3)
    (sp,) = plan_placement([R4090], [share], [], FACTS).services
    assert sp.packed is None and sp.status == "pending"
    assert isinstance(parse_all({"swarmgpu.gpu-fraction": "0.5", "swarmgpu.pack": "always"}),
                      ValueError)


def test_topology_holds_per_replica_when_packed() -> None:
    s = svc("numa", {"swarmgpu.gpus": "4", "swarmgpu.topology": "numa",
                     "swarmgpu.gpu-product": "*4090*"}, replicas=2)
    (sp,) = plan_placement([DGX, R4090], [s], [], FACTS).services
    assert sp.status == "placed" and sp.packed
    assert sorted(sorted(p.gpus) for p in sp.placements) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_user_max_replicas_below_replicas_is_a_conflict_not_overridden() -> None:
    s = replace(svc("c", ONE_GPU, replicas=4), max_replicas_per_node=2)
    (sp,) = plan_placement([R4090], [s], [], FACTS).services
    assert sp.packed is None and sp.status == "pending"
    assert "max_replicas_per_node 2 is below 4 replicas" in (sp.reason or "")


def _packed(replicas: int) -> tuple[list[SwarmNode], SwarmService, list[SwarmTask], PlacementPlan]:
    s = svc("sc", ONE_GPU, replicas=replicas)
    plan = plan_placement([R4090], [s], [], FACTS)
    s2 = written(s, plan.services[0])
    nodes = apply(apply([R4090], plan), plan_placement(
        apply([R4090], plan), [s2], [], FACTS))
    running = [task(s2, k, force=s2.force_update) for k in range(1, replicas + 1)]
    return nodes, s2, running, plan


def test_scale_down_gives_back_the_gone_slots_and_restarts_nothing() -> None:
    nodes, s, running, first = _packed(4)
    before = {p.slot: p.uuids for p in first.services[0].placements}
    # Swarm removed slots 2 and 4 (it picks on scale-down; slots are not renumbered).
    s2 = replace(s, replicas=2, version=s.version + 1)
    live = [t for t in running if t.slot in (1, 3)]
    plan = plan_placement(nodes, [s2], live, FACTS)
    (sp,) = plan.services
    assert sp.status == "placed" and not sp.force_update and sp.set_max_replicas == 2
    assert {p.slot: p.uuids for p in sp.placements} == {1: before[1], 3: before[3]}
    assert sorted(sp.service_labels_remove) == [f"{P}devices.n-4090.2", f"{P}devices.n-4090.4"]
    # Their GPUs stay held while the lists are on the service: the gate is open, so a
    # task Swarm created for slot 2 or 4 before the removal landed would run on them.
    assert "n-4090" not in plan.node_set
    s3 = written(s2, sp)
    nxt = plan_placement(nodes, [s3], live, FACTS)
    h = parse_holding("sc", "n-4090", nxt.node_set["n-4090"][f"{P}assign.sc"])
    assert h is not None and h.per_slot() == {1: before[1], 3: before[3]}
    assert not nxt.services[0].needs_service_write


def test_scale_up_adds_slots_on_the_same_node_with_free_gpus() -> None:
    nodes, s, running, first = _packed(2)
    s2 = replace(s, replicas=4, version=s.version + 1)
    new = [task(s2, 3, "pending"), task(s2, 4, "pending")]
    (sp,) = plan_placement(nodes, [s2], running + new, FACTS).services
    assert sp.status == "placed" and sp.packed
    got = {p.slot: p.uuids for p in sp.placements}
    assert sp.set_max_replicas == 4
    assert sorted(got) == [1, 2, 3, 4]
    assert {k: got[k] for k in (1, 2)} == {p.slot: p.uuids for p in first.services[0].placements}
    assert len({u for us in got.values() for u in us}) == 4


def test_old_template_is_upgraded_when_packed_and_kept_when_spread() -> None:
    old = replace(svc("o", ONE_GPU, replicas=3), env=(env_template_per_node(P),))
    (sp,) = plan_placement([R4090], [old], [], FACTS).services
    assert sp.status == "placed" and sp.packed
    assert sp.replace_env == ((env_template_per_node(P), env_template(P)),)
    (sp,) = plan_placement([R4090], [old], [], FACTS, adopt_ungated=False).services
    assert sp.status == "pending" and "per-slot env template" in (sp.reason or "")
    spread = replace(svc("o2", ONE_GPU, replicas=2), env=(env_template_per_node(P),))
    (sp,) = plan_placement([DGX, R4090], [spread], [], FACTS).services
    assert sp.status == "placed" and not sp.replace_env and not sp.add_env


def test_ledger_round_trip_and_bad_values() -> None:
    h = packed_holding("x", "n1", {2: (("GPU-b",), (1000,)), 1: (("GPU-a", "GPU-c"),
                                                                  (1000, 1000))})
    assert h.label_value() == "s1=GPU-a,GPU-c;s2=GPU-b"
    assert parse_holding("x", "n1", h.label_value()) == h
    plain = parse_holding("x", "n1", "GPU-a,GPU-b@500")
    assert plain is not None and not plain.packed and plain.replicas == 1
    for bad in ("s1=GPU-a;s1=GPU-b", "s1=GPU-a;s2=GPU-a", "s0=GPU-a", "s1=", "x1=GPU-a",
                "s1=GPU-a;GPU-b"):
        assert parse_holding("x", "n1", bad) is None, bad


def test_render_writes_per_slot_lists_and_drops_one_per_node() -> None:
    stack = f"""
services:
  inf:
    image: x
    environment:
      - '{env_template_per_node(P)}'
    deploy:
      replicas: 4
      labels: {{swarmgpu.gpus: "1"}}
      placement:
        max_replicas_per_node: 1
        constraints: ["node.hostname==gpu-node-2"]
"""
    text, plan = render_stack(stack, "st", [DGX, R4090], [], [], FACTS)
    assert plan.services[0].packed
    import yaml
    out = yaml.safe_load(text.split("\n", 2)[2])["services"]["inf"]
    assert out["deploy"]["placement"]["max_replicas_per_node"] == 4
    assert out["deploy"]["labels"][f"{P}state.max-replicas"] == "4"
    assert gate_constraint(P, "st_inf") in out["deploy"]["placement"]["constraints"]
    assert env_template(P) in out["environment"]
    assert env_template_per_node(P) not in out["environment"]
    lists = {k: v for k, v in out["deploy"]["labels"].items() if k.startswith(f"{P}devices.")}
    assert sorted(lists) == [f"{P}devices.n-4090.{k}" for k in range(1, 5)]
    assert len(set(lists.values())) == 4


def test_a_slot_back_before_its_list_was_removed_keeps_its_gpus() -> None:
    """Scale-down, then up again before the daemon's removal of the gone slot's list
    landed: Swarm's new task for that slot carries the old list, so the slot keeps
    those GPUs (they were still held) and nobody else is given them."""
    nodes, s, running, first = _packed(4)
    before = {p.slot: p.uuids for p in first.services[0].placements}
    s2 = replace(s, replicas=2, version=s.version + 1)
    live = [t for t in running if t.slot in (1, 3)]
    down = plan_placement(nodes, [s2], live, FACTS).services[0]
    s3 = replace(written(s2, down), replicas=3)
    back = [*live, task(s3, 2, "pending", force=s.force_update)]  # created before removal
    other = svc("other", {"swarmgpu.gpus": "5"})
    plan = plan_placement(nodes, [s3, other], back, FACTS)
    sp, osp = plan.services[1], plan.services[0]
    assert {p.slot: p.uuids for p in sp.placements} == {k: before[k] for k in (1, 2, 3)}
    assert osp.status == "pending"  # the ledger (4 slots held) is committed first: 4 free
    taken = {u for p in osp.placements for u in p.uuids}
    assert not taken & {u for k in (1, 2, 3) for u in before[k]}


def test_per_slot_lists_without_a_ledger_are_adopted_onto_free_gpus() -> None:
    """A lost ledger (or a stack from `swarmgpu render`): the per-slot lists on the
    service are taken as the holding where those GPUs are free, so running replicas keep
    theirs and nothing restarts; a list naming another service's GPUs is not."""
    nodes, s, running, first = _packed(3)
    lists = {p.slot: p.uuids for p in first.services[0].placements}
    bare = [replace(n, labels={k: v for k, v in n.labels.items()
                               if not k.startswith(f"{P}assign.")}) for n in nodes]
    (sp,) = (plan := plan_placement(bare, [s], running, FACTS)).services
    assert sp.status == "placed" and sp.packed
    assert {p.slot: p.uuids for p in sp.placements} == lists
    assert not sp.service_labels_set and not sp.force_update
    h = parse_holding("sc", "n-4090", plan.node_set["n-4090"][f"{P}assign.sc"])
    assert h is not None and h.per_slot() == lists
    # Another service whose ledger holds slot 1's GPU: the declared lists are not adopted.
    thief = svc("aaa", ONE_GPU)
    owned = [replace(n, labels={**n.labels, f"{P}assign.aaa": lists[1][0]}) for n in bare]
    plan = plan_placement(owned, [thief, s], running, FACTS)
    got = {p.slot: p.uuids for p in plan.services[1].placements}
    assert lists[1] not in got.values()
    assert any("hold(s) in the ledger" in w for w in plan.services[1].warnings)


def test_a_spread_service_short_of_nodes_is_packed_where_its_replica_runs() -> None:
    """Placed one per node before packing existed: one replica runs (slot 2), two wait
    for nodes that never come. It is packed on its node, slot 2 keeping its GPU."""
    gpu = RTX4090.uuids()[5]
    node = replace(R4090, labels={f"{P}assign.old": gpu, f"{P}service.old": "true"})
    s = replace(svc("old", ONE_GPU, replicas=3), env=(env_template_per_node(P),),
                labels={**ONE_GPU, f"{P}devices.n-4090": gpu}, max_replicas_per_node=1)
    tasks = [task(s, 2, force=0), task(s, 1, "pending", force=0),
             task(s, 3, "pending", force=0)]
    (sp,) = plan_placement([node], [s], tasks, FACTS).services
    assert sp.status == "placed" and sp.packed and "keeps its GPUs" in sp.packed
    got = {p.slot: p.uuids for p in sp.placements}
    assert got[2] == (gpu,) and len({u for us in got.values() for u in us}) == 3
    assert sp.service_labels_remove == (f"{P}devices.n-4090",)
    assert sp.replace_env == ((env_template_per_node(P), env_template(P)),)
    assert sp.set_max_replicas == 3 and sp.force_update
    # pack: never keeps it as it was: one placed, the rest pending.
    never = replace(s, labels={**s.labels, "swarmgpu.pack": "never"})
    (sp,) = plan_placement([node], [never], tasks, FACTS).services
    assert sp.status == "pending" and sp.packed is None and len(sp.placements) == 1


def test_fragmentation_budget_counts_each_packed_replica() -> None:
    from swarmgpu.manager.rebalance.budget import FragBudget

    h = packed_holding("p", "n1", {k: ((f"GPU-{k}",), (1000,)) for k in (1, 2, 3)})
    b = FragBudget(per_hour=10, per_100_placements=100)
    assert b.observe({"p": {"n1": h}}, set(), [], 0.0) == 3
    grown = packed_holding("p", "n1", {k: ((f"GPU-{k}",), (1000,)) for k in (1, 2, 3, 4)})
    assert b.observe({"p": {"n1": grown}}, set(), [], 1.0) == 1


def test_scale_up_past_the_nodes_room_waits_and_swarm_runs_no_gpu_less_task() -> None:
    nodes, s, running, _first = _packed(4)
    s2 = replace(s, replicas=10, version=s.version + 1)
    new = [task(s2, k, "pending") for k in range(5, 11)]
    (sp,) = plan_placement(nodes, [s2], running + new, FACTS).services
    assert sp.status == "pending" and "no room for 6 more" in (sp.reason or "")
    assert len(sp.placements) == 4 and not sp.service_labels_set
    # MaxReplicas stays 4: Swarm keeps the six new tasks pending instead of starting
    # them on the node with NVIDIA_VISIBLE_DEVICES=void.
    assert s2.max_replicas_per_node == 4 and sp.set_max_replicas is None


def test_users_own_max_replicas_is_left_as_it_is() -> None:
    s = replace(svc("u", ONE_GPU, replicas=4), max_replicas_per_node=6)
    (sp,) = plan_placement([R4090], [s], [], FACTS).services
    assert sp.status == "placed" and sp.packed and sp.set_max_replicas is None
    assert f"{P}state.max-replicas" not in sp.service_labels_set


def test_packing_respects_zone_wishes() -> None:
    dgx = replace(DGX, labels={"topology.zone": "a"})
    box = replace(R4090, labels={"topology.zone": "b"})
    for zone_key, zone, host in (("swarmgpu.zone-avoid", "b", "gpu-node-1"),
                                 ("swarmgpu.zone-avoid", "a", "gpu-node-2"),
                                 ("swarmgpu.zone-prefer", "a", "gpu-node-1"),
                                 ("swarmgpu.zone-prefer", "b", "gpu-node-2")):
        s = svc("z", {**ONE_GPU, zone_key: zone}, replicas=3)
        (sp,) = plan_placement([dgx, box], [s], [], FACTS).services
        assert sp.packed and {p.hostname for p in sp.placements} == {host}, (zone_key, zone)


def test_swarmgpus_own_max_replicas_is_no_conflict_when_packing_anew() -> None:
    """Packed with MaxReplicas 3 (swarmgpu's, recorded), then the request changes: the
    holding goes, and the service is packed anew for its 5 replicas, not refused."""
    s = replace(svc("m", {"swarmgpu.gpus": "1", "swarmgpu.gpu-product": "*4090*"},
                    replicas=5), max_replicas_per_node=3)
    s = replace(s, labels={**s.labels, f"{P}state.max-replicas": "3"})
    (sp,) = plan_placement([DGX, R4090], [s], [], FACTS).services
    assert sp.status == "placed" and sp.packed and sp.set_max_replicas == 5


def test_want_slots_keeps_live_slots_then_fills_the_lowest_missing() -> None:
    from swarmgpu.manager.placement.replicas import want_slots

    assert want_slots({3: "n", 7: "n"}, 4) == [1, 2, 3, 7]
    assert want_slots({1: "n", 2: "n", 5: "n"}, 2) == [1, 2]  # scale-down keeps the lowest
    assert want_slots(set(), 3) == [1, 2, 3]
    big = want_slots(set(range(2, 100_001, 2)), 100_000)  # linear: no list scan per slot
    assert big == list(range(1, 100_001))


def test_replicas_beyond_the_cluster_are_pending_without_a_list_each() -> None:
    """100,000 replicas x 1 GPU on two 8-GPU nodes: one replica per node placed, the
    rest one pending count in the reason; nothing in the plan grows with them."""
    s = svc("big", ONE_GPU, replicas=100_000)
    tasks = [SwarmTask(f"t{k}", s.id, "", k, "pending", "running", ()) for k in range(1, 100_001)]
    plan = plan_placement([DGX, R4090], [s], tasks, FACTS)
    (sp,) = plan.services
    assert sp.status == "pending" and len(sp.placements) == 2
    assert sp.packed is None  # no node holds them all: packing is not even tried
    assert (sp.reason or "").startswith("2 of 100000 replicas placed")
    assert len(str(sp.to_dict())) < 2000
    assert len(sp.service_labels_set) <= 4 and sp.set_max_replicas == 1


MAXREP_REFUSED = ("no suitable node (max replicas per node limit exceed; scheduling constraints "
                  "not satisfied on 2 nodes)")


def test_owner_lowering_max_replicas_of_a_packed_service_names_swarmgpus_cause() -> None:
    """Packed 4 on gpu-node-2, then its owner sets max_replicas_per_node 2 (docker service
    update --replicas-max-per-node 2, or the stack file): Swarm runs 2 there, and the 2
    others wait, their GPUs held on that node only. Before: pending with Swarm's words
    alone ("Swarm cannot run its task: no suitable node (max replicas per node ...)");
    now swarmgpu names its own cause (its replicas packed on that node cannot fit the
    limit) and the fix; what is held stays held, nothing written."""
    nodes, s, running, _first = _packed(4)
    s2 = replace(s, max_replicas_per_node=2, version=s.version + 1)
    tasks = [*running[:2], *(replace(t, node_id="", state="pending", error=MAXREP_REFUSED)
                             for t in running[2:])]
    (sp,) = plan_placement(nodes, [s2], tasks, FACTS).services
    assert sp.status == "pending" and sp.packed and len(sp.placements) == 4
    why = sp.reason or ""
    assert why.startswith("max_replicas_per_node 2 (yours) is below the 4 replicas packed on "
                          "gpu-node-2"), why
    assert "raise max_replicas_per_node to 4 or remove it" in why
    assert "max replicas per node" in why  # Swarm's words after swarmgpu's
    assert sp.set_max_replicas is None and not sp.service_labels_set
    # Before Swarm says so (the tasks just made), the same cause.
    fresh = [*running[:2], *(replace(t, node_id="", state="pending") for t in running[2:])]
    (sp,) = plan_placement(nodes, [s2], fresh, FACTS).services
    assert sp.status == "pending" and (sp.reason or "").startswith("max_replicas_per_node 2")
    # Raised again to what it packs: placed.
    s3 = replace(s2, max_replicas_per_node=4, version=s2.version + 1)
    (sp,) = plan_placement(nodes, [s3], running, FACTS).services
    assert sp.status == "placed", sp.reason
