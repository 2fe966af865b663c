"""Pure tests of the placement planner on facts from real captures."""

from __future__ import annotations

from dataclasses import replace

from support.gpu_nodes import RTX4090
from support.placement import DGX, FACTS, R4090, P, apply, node, svc

from swarmgpu.allocator.fragmentation import TaskShape
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.manager.placement import (
    env_template,
    gate_constraint,
    hold_constraint,
    plan_placement,
    read_ledger,
)
from swarmgpu.manager.placement.envs import ORDER_ENV, VOID_LINE
from swarmgpu.manager.placement.keys import ORDER_STATE
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, service_from_api


def test_nvlink_pair_lands_on_dgx() -> None:
    s = svc("llm", {"swarmgpu.gpus": "2", "swarmgpu.topology": "nvlink"})
    plan = plan_placement([DGX, R4090], [s], [], FACTS)
    sp = plan.services[0]
    assert sp.status == "placed", sp.reason
    (p,) = sp.placements
    assert p.hostname == "gpu-node-1" and len(p.uuids) == 2
    numa = {FACTS["n-dgx"].gpus[i].numa_node for i in p.gpus}
    assert len(numa) == 1, "equally linked GPUs: the pair stays on one NUMA node"
    assert sp.service_labels_set["swarmgpu.devices.n-dgx"] == ",".join(p.uuids)
    assert plan.node_set["n-dgx"]["swarmgpu.assign.llm"] == ",".join(p.uuids)
    # The pending task predates the device map: it is replaced, the gate waits.
    assert sp.force_update and sp.gates_deferred
    assert "swarmgpu.service.llm" not in plan.node_set["n-dgx"]
    s2 = replace(s, labels={**s.labels, **sp.service_labels_set}, force_update=1)
    fresh = SwarmTask("t2", s.id, "", 1, "pending", "running", (), force_update=1)
    nxt = plan_placement(apply([DGX, R4090], plan), [s2], [fresh], FACTS)
    assert nxt.node_set == {"n-dgx": {"swarmgpu.service.llm": "true"}}
    assert not nxt.services[0].needs_service_write


def test_numa_request_gets_one_pix_group_on_4090() -> None:
    s = svc(
        "train",
        {"swarmgpu.gpus": "4", "swarmgpu.topology": "numa", "swarmgpu.gpu-product": "*4090*"},
    )
    sp = plan_placement([DGX, R4090], [s], [], FACTS).services[0]
    (p,) = sp.placements
    assert p.hostname == "gpu-node-2"
    assert set(p.gpus) in ({0, 1, 2, 3}, {4, 5, 6, 7})


def test_39gib_never_on_24gib_and_pending_reason() -> None:
    # (the DGX's A100-SXM4-40GB report 40537 MiB: 40GiB, 40960, fits none of them)
    s = svc(
        "big",
        {"swarmgpu.gpus": "1", "swarmgpu.gpu-memory": "39GiB", "swarmgpu.pack": "never"},
        replicas=2,
    )
    sp = plan_placement([DGX, R4090], [s], [], FACTS).services[0]
    assert [p.hostname for p in sp.placements] == ["gpu-node-1"]
    assert sp.status == "pending" and "1 of 2 replicas placed" in (sp.reason or "")
    # By default the two replicas, which cannot be spread, are packed on the DGX.
    s = svc("big", {"swarmgpu.gpus": "1", "swarmgpu.gpu-memory": "39GiB"}, replicas=2)
    sp = plan_placement([DGX, R4090], [s], [], FACTS).services[0]
    assert sp.status == "placed" and sp.packed and "gpu-node-1" in sp.packed
    assert [(p.hostname, p.slot) for p in sp.placements] == [("gpu-node-1", 1), ("gpu-node-1", 2)]
    s2 = svc("huge", {"swarmgpu.gpus": "1", "swarmgpu.gpu-memory": "80GiB"})
    sp2 = plan_placement([DGX, R4090], [s2], [], FACTS).services[0]
    assert sp2.status == "pending" and not sp2.placements
    assert "best node" in (sp2.reason or "")


def test_no_gpu_handed_out_twice_across_services_and_restart_keeps_all() -> None:
    nodes = [DGX, R4090]
    # DGX: 7 whole GPUs (GPU 0 runs MIG); 4090 box: 8.
    services = [
        svc("a", {"swarmgpu.gpus": "4"}, replicas=2),
        svc("b", {"swarmgpu.gpus": "3"}),
        svc("c", {"swarmgpu.gpus": "4"}),
    ]
    plan = plan_placement(nodes, services, [], FACTS)
    seen: set[str] = set()
    for sp in plan.services:
        assert sp.status == "placed", (sp.name, sp.reason)
        for p in sp.placements:
            assert not seen & set(p.uuids)
            seen |= set(p.uuids)
    assert plan.services[0].set_max_replicas == 1
    assert len(seen) == 15
    # Applied, then planned again (a daemon restart): nothing to write, same holdings.
    nodes2 = apply(nodes, plan)
    services2 = [
        replace(
            s,
            labels={**s.labels, **sp.service_labels_set},
            max_replicas_per_node=1 if sp.set_max_replicas else None,
            force_update=1,
        )
        for s, sp in zip(services, plan.services, strict=True)
    ]
    opened = plan_placement(nodes2, services2, [], FACTS)  # gates open
    assert all(not sp.needs_service_write for sp in opened.services)
    nodes2 = apply(nodes2, opened)
    again = plan_placement(nodes2, services2, [], FACTS)
    assert again.empty, (again.node_set, [s.service_labels_set for s in again.services])
    assert [sorted(p.uuids for p in sp.placements) for sp in again.services] == [
        sorted(p.uuids for p in sp.placements) for sp in plan.services
    ]
    # A fourth 4-GPU service cannot fit.
    d = plan_placement(nodes2, [*services2, svc("d", {"swarmgpu.gpus": "4"})], [], FACTS)
    assert d.services[-1].status == "pending"


def test_redeploy_removed_device_labels_restored_in_one_service_write() -> None:
    s = svc("llm", {"swarmgpu.gpus": "2"})
    plan = plan_placement([DGX, R4090], [s], [], FACTS)
    s1 = replace(s, labels={**s.labels, **plan.services[0].service_labels_set}, force_update=1)
    nodes = apply(
        apply([DGX, R4090], plan), plan_placement(apply([DGX, R4090], plan), [s1], [], FACTS)
    )
    running = SwarmTask("t1", s.id, "n-dgx", 1, "running", "running", (), force_update=1)
    assert plan_placement(nodes, [s1], [running], FACTS).empty
    # stack re-deploy: the service's labels are the file's again (device labels gone)
    s2 = replace(s, force_update=1)
    again = plan_placement(nodes, [s2], [running], FACTS)
    sp = again.services[0]
    first = plan.services[0].service_labels_set
    assert sp.service_labels_set == {k: v for k, v in first.items() if "parallelism" not in k}
    assert not sp.force_update, "restoring must not restart the running task"
    assert not again.node_set and not again.node_remove


def test_fraction_packs_by_memory_and_never_over() -> None:
    services = [svc(f"small{i}", {"swarmgpu.gpu-fraction": "0.3"}) for i in range(4)]
    # A cluster whose work is 0.3 shares: a GPU left with 0.1 wastes the same whether
    # it is broken now or later, so shares pack (ties go to the fullest GPU).
    only_shares = WorkloadModel.fixed([TaskShape(0, 300, 1)], "test")
    plan = plan_placement([R4090], services, [], {"n-4090": FACTS["n-4090"]}, workload=only_shares)
    per_gpu: dict[str, int] = {}
    for sp in plan.services:
        (p,) = sp.placements
        per_gpu[p.uuids[0]] = per_gpu.get(p.uuids[0], 0) + p.milli[0]
    assert all(v <= 1000 for v in per_gpu.values())
    assert len(per_gpu) == 2  # three shares of 0.3 fit on one card, the fourth goes next door
    assert "@300" in plan.node_set["n-4090"]["swarmgpu.assign.small0"]


def test_mig_request_gets_mig_uuid() -> None:
    from support.paths import TOPOLOGY

    from swarmgpu.agent.facts.topo import TopoSource

    h100 = TopoSource(
        TOPOLOGY / "topo_hgx_h100_nv18_partial_nics.txt",
        hostname="h",
        product="NVIDIA H100 80GB HBM3",
        memory_mib=81559,
        mig_layout="0:3g.40gb,1g.10gb*2",
    ).read()
    n = node("n-h100", "gpu-node-3")
    s = svc("slice", {"swarmgpu.mig": "1g.10gb"})
    sp = plan_placement([n], [s], [], {"n-h100": h100}).services[0]
    (p,) = sp.placements
    assert p.uuids[0].startswith("MIG-")
    migs = {m.uuid: m.profile for g in h100.gpus for m in g.mig_devices}
    assert migs[p.uuids[0]] == "1g.10gb"


def test_invalid_request_reported_others_proceed() -> None:
    bad = svc("bad", {"swarmgpu.gpus": "two"})
    good = svc("good", {"swarmgpu.gpus": "1"})
    plan = plan_placement([DGX], [bad, good], [], {"n-dgx": FACTS["n-dgx"]})
    by = {sp.name: sp for sp in plan.services}
    assert by["bad"].status == "invalid" and "swarmgpu.gpus='two'" in (by["bad"].reason or "")
    assert not by["bad"].needs_service_write
    assert by["good"].status == "placed"


def test_ungated_service_is_adopted_or_reported() -> None:
    s = svc("raw", {"swarmgpu.gpus": "1"}, gated=False)
    sp = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}).services[0]
    assert gate_constraint(P, "raw") in sp.add_constraints
    assert env_template(P) in sp.add_env
    sp2 = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}, adopt_ungated=False).services[0]
    assert sp2.status == "pending" and "not gated" in (sp2.reason or "")


def test_adoption_keeps_the_owners_cuda_device_order() -> None:
    """The owner's CUDA_DEVICE_ORDER, a value or a bare name (docker: unset the image's),
    is theirs: adoption plans and writes no PCI_BUS_ID line (the later of two lines
    wins, so one after a bare name replaced it). Pinning is by UUID: it needs no order."""
    for own in ("CUDA_DEVICE_ORDER=FASTEST_FIRST", "CUDA_DEVICE_ORDER"):
        s = replace(svc("raw", {"swarmgpu.gpus": "1"}, gated=False), env=(own,))
        (sp,) = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}).services
        assert sp.add_env == (env_template(P),), own
        new = service_compute(sp.writes)({"TaskTemplate": {"ContainerSpec": {"Env": [own]}}})
        assert new is not None
        assert new["TaskTemplate"]["ContainerSpec"]["Env"] == [own, env_template(P)]
    s = svc("raw", {"swarmgpu.gpus": "1"}, gated=False)
    (sp,) = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}).services
    assert sp.add_env == (env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID")


def _as_written(s: SwarmService, writes: object) -> SwarmService:
    """``s`` after the plan's spec write, as Swarm would then answer for it."""
    spec = {"Name": s.name, "Labels": dict(s.labels), "Mode": {"Replicated": {"Replicas": 1}},
            "TaskTemplate": {"ContainerSpec": {"Env": list(s.env)},
                             "Placement": {"Constraints": list(s.constraints)}}}
    new = service_compute(writes)(spec)  # type: ignore[arg-type]
    return service_from_api({"ID": s.id, "Version": {"Index": s.version + 1},
                             "Spec": spec if new is None else new})


def test_a_release_takes_back_the_cuda_device_order_only_swarmgpu_wrote() -> None:
    """Adoption adds CUDA_DEVICE_ORDER=PCI_BUS_ID to a service without one and records
    that it did: when the request goes, that line goes with swarmgpu's others. The same
    line with no record is the owner's (their stack file, `render`'s output) and stays;
    adoption beside an owner's line records nothing."""
    only = {"n-dgx": FACTS["n-dgx"]}
    raw = svc("raw", {"swarmgpu.gpus": "1", "team": "x"}, gated=False)
    (sp,) = plan_placement([DGX], [raw], [], only).services
    adopted = _as_written(raw, sp.writes)
    assert ORDER_ENV in adopted.env and gate_constraint(P, "raw") in adopted.constraints
    assert adopted.labels[P + ORDER_STATE] == "true"
    gone = replace(adopted, labels={k: v for k, v in adopted.labels.items()
                                    if k != "swarmgpu.gpus"})
    (rel,) = plan_placement([DGX], [gone], [], only).services
    assert rel.status == "released"
    out = _as_written(gone, rel.writes)
    assert out.env == (VOID_LINE,) and out.labels == {"team": "x"}
    owners = replace(gone, labels={"team": "x"})  # the same line, not recorded as ours
    (rel,) = plan_placement([DGX], [owners], [], only).services
    assert _as_written(owners, rel.writes).env == (VOID_LINE, ORDER_ENV)
    for own in ("CUDA_DEVICE_ORDER=FASTEST_FIRST", ORDER_ENV):
        beside = replace(raw, env=(own,))
        (sp,) = plan_placement([DGX], [beside], [], only).services
        written = _as_written(beside, sp.writes)
        assert P + ORDER_STATE not in written.labels, own
        (rel,) = plan_placement([DGX], [replace(written, labels={"team": "x"})], [],
                                only).services
        assert own in _as_written(written, rel.writes).env


def test_a_cuda_device_order_record_whose_line_the_owner_took_out_is_dropped() -> None:
    """The owner takes adoption's CUDA_DEVICE_ORDER line out by hand (docker service
    update --env-rm): its record stayed, so when the owner later wrote the line again,
    a release removed the owner's line as swarmgpu's. The record is read against the
    spec each cycle and dropped once its line is gone; the owner's line then stays."""
    only = {"n-dgx": FACTS["n-dgx"]}
    raw = svc("raw", {"swarmgpu.gpus": "1", "team": "x"}, gated=False)
    (sp,) = plan_placement([DGX], [raw], [], only).services
    adopted = _as_written(raw, sp.writes)
    assert adopted.labels[P + ORDER_STATE] == "true"
    removed = replace(adopted, env=tuple(e for e in adopted.env if e != ORDER_ENV),
                      version=adopted.version + 1)
    (sp,) = plan_placement([DGX], [removed], [], only).services
    assert P + ORDER_STATE in sp.service_labels_remove
    cleaned = _as_written(removed, sp.writes)
    assert P + ORDER_STATE not in cleaned.labels and ORDER_ENV not in cleaned.env
    again = replace(cleaned, env=(*cleaned.env, ORDER_ENV))  # the owner's own, now
    (sp,) = plan_placement([DGX], [again], [], only).services
    assert P + ORDER_STATE not in sp.service_labels_remove
    gone = replace(again, labels={k: v for k, v in again.labels.items()
                                  if k != "swarmgpu.gpus"})
    (rel,) = plan_placement([DGX], [gone], [], only).services
    assert rel.status == "released"
    assert ORDER_ENV in _as_written(gone, rel.writes).env
    # A record whose line is there is kept, cycle after cycle.
    (sp,) = plan_placement([DGX], [adopted], [], only).services
    assert P + ORDER_STATE not in sp.service_labels_remove


def test_a_request_whose_own_env_sets_the_device_variable_waits_naming_it() -> None:
    """The owner's NVIDIA_VISIBLE_DEVICES (a value, or a bare name) is kept, so the
    template that pins the GPUs cannot go in: the service waits, the line and the fix
    named, nothing written (it was gated and placed with its own `all`: every GPU of its
    node, and the note said the template was added). A void line is swarmgpu's
    (placement.ungranted: void): the template replaces it."""
    for own in ("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES"):
        for s in (
            replace(svc("raw", {"swarmgpu.gpus": "1"}, gated=False), env=(own, "A=1")),
            replace(svc("raw", {"swarmgpu.gpus": "1"}), env=(own,)),
            replace(
                svc("raw", {"swarmgpu.gpus": "1"}, gated=False),
                constraints=(hold_constraint(P),),
                env=(own,),
            ),
        ):
            (sp,) = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}).services
            assert sp.status == "pending" and not sp.placements, (own, sp.reason)
            assert f"sets {own} itself" in (sp.reason or ""), sp.reason
            assert "docker service update --env-rm NVIDIA_VISIBLE_DEVICES raw" in (sp.reason or "")
            assert not sp.add_env and not sp.add_constraints and not sp.remove_constraints
    s = replace(svc("raw", {"swarmgpu.gpus": "1"}, gated=False), env=(VOID_LINE,))
    (sp,) = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}).services
    assert sp.status == "placed" and env_template(P) in sp.add_env


def test_an_ungate_takes_only_the_gate_in_its_exact_form() -> None:
    """A service without a request loses its own ``<gate>==true``; the owner's
    ``!= true`` on another service's gate and ``== false`` on its own stay."""
    own = f"node.labels.{P}service.app == true"
    away, never = f"node.labels.{P}service.db != true", f"node.labels.{P}service.app==false"
    s = replace(svc("app", {"team": "x"}), constraints=(own, away, never))
    (sp,) = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}).services
    assert sp.status == "released" and sp.remove_constraints == (own,)
    new = service_compute(sp.writes)(
        {"TaskTemplate": {"Placement": {"Constraints": list(s.constraints)}}}
    )
    assert new is not None
    assert new["TaskTemplate"]["Placement"]["Constraints"] == [away, never]


def test_deleted_service_releases_gate_and_ledger() -> None:
    s = svc("gone", {"swarmgpu.gpus": "1"})
    plan = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]})
    nodes = apply([DGX], plan)
    assert read_ledger(nodes, P)["gone"]
    after = plan_placement(nodes, [], [], {"n-dgx": FACTS["n-dgx"]})
    assert sorted(after.node_remove["n-dgx"]) == ["swarmgpu.assign.gone", "swarmgpu.service.gone"]


def test_a_service_without_a_request_loses_only_swarmgpus_own_lines() -> None:
    """No request, no holding, but the hold, its own gate and swarmgpu's records in its
    spec: they go in one write (the template voided), decided as a release. The owner's
    constraint, a gate naming another service, its env and a MaxReplicas of 1 stay; a
    service without any of swarmgpu's lines gets no write."""
    own, foreign = gate_constraint(P, "app"), gate_constraint(P, "db")
    base = svc("app", {"team": "x", f"{P}devices.n-dgx": "GPU-1", f"{P}state.replaced": "1@5"})
    spaced = f"node.labels.{P}service.app == TRUE"  # its own gate, as Swarm reads it
    s = replace(
        base,
        constraints=("node.role == worker", foreign, spaced, hold_constraint(P)),
        env=("A=1", env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID"),
        max_replicas_per_node=1,
    )
    plain = svc("cpu", {"team": "x"}, gated=False)
    plan = plan_placement([DGX], [s, plain], [], {"n-dgx": FACTS["n-dgx"]})
    (sp,) = plan.services
    assert sp.name == "app" and sp.status == "released" and sp.decision[0] == "release"
    assert sorted(sp.remove_constraints) == sorted([spaced, hold_constraint(P)])
    assert sorted(sp.service_labels_remove) == [f"{P}devices.n-dgx", f"{P}state.replaced"]
    assert sp.replace_env == ((env_template(P), VOID_LINE),)
    assert sp.set_max_replicas is None and not plan.node_remove
    new = service_compute(sp.writes)(
        {
            "Labels": dict(s.labels),
            "TaskTemplate": {
                "ContainerSpec": {"Env": list(s.env)},
                "Placement": {"Constraints": list(s.constraints), "MaxReplicas": 1},
            },
        }
    )
    assert new is not None
    assert new["Labels"] == {"team": "x"}
    assert new["TaskTemplate"]["Placement"] == {
        "Constraints": ["node.role == worker", foreign],
        "MaxReplicas": 1,
    }
    assert new["TaskTemplate"]["ContainerSpec"]["Env"] == [
        "A=1",
        VOID_LINE,
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
    ]
    # MaxReplicas swarmgpu recorded setting goes; the gate alone leaves no constraint.
    # So does the update parallelism 0 swarmgpu set: the owner's is given back. A move's
    # record is the mover's.
    packed = replace(
        svc(
            "app",
            {
                f"{P}state.max-replicas": "3",
                f"{P}state.move": "{}",
                f"{P}state.update-parallelism": "2",
            },
        ),
        max_replicas_per_node=3,
        spec={"UpdateConfig": {"Parallelism": 0}},
    )
    (sp,) = plan_placement([DGX], [packed], [], {"n-dgx": FACTS["n-dgx"]}).services
    assert sp.set_max_replicas == 0 and sp.remove_constraints == (own,)
    assert sp.set_update_parallelism == 2
    assert sorted(sp.service_labels_remove) == [
        f"{P}state.max-replicas",
        f"{P}state.update-parallelism",
    ]
    new = service_compute(sp.writes)(
        {"TaskTemplate": {"Placement": {"Constraints": [own], "MaxReplicas": 3}}}
    )
    assert new is not None and new["TaskTemplate"]["Placement"] == {
        "Constraints": [],
        "MaxReplicas": 0,
    }


def test_zone_spread_and_avoid() -> None:
    a = node("n-a", "a", {"topology.zone": "z1"})
    b = node("n-b", "b", {"topology.zone": "z2"})
    c = node("n-c", "c", {"topology.zone": "z1"})
    f = {n: RTX4090.facts() for n in ("n-a", "n-b", "n-c")}
    s = svc("web", {"swarmgpu.gpus": "1"}, replicas=2)
    sp = plan_placement([a, b, c], [s], [], f).services[0]
    assert sorted(p.hostname for p in sp.placements) in (["a", "b"], ["b", "c"])
    s2 = svc("web2", {"swarmgpu.gpus": "1", "swarmgpu.zone-avoid": "z1"})
    sp2 = plan_placement([a, b, c], [s2], [], f).services[0]
    assert [p.hostname for p in sp2.placements] == ["b"]


def test_running_tasks_counted_for_state() -> None:
    s = svc("llm", {"swarmgpu.gpus": "1"})
    plan = plan_placement([DGX], [s], [], {"n-dgx": FACTS["n-dgx"]})
    nodes = apply([DGX], plan)
    s2 = replace(s, labels={**s.labels, **plan.services[0].service_labels_set}, force_update=1)
    nodes = apply(nodes, plan_placement(nodes, [s2], [], {"n-dgx": FACTS["n-dgx"]}))
    t = SwarmTask("t1", s.id, "n-dgx", 1, "running", "running", (), force_update=1)
    sp = plan_placement(nodes, [s2], [t], {"n-dgx": FACTS["n-dgx"]}).services[0]
    assert sp.state == "Active"


def test_generic_resource_reservation_before_tasks_run() -> None:
    s = svc("llm", {"swarmgpu.gpus": "2"})
    sp = plan_placement(
        [DGX], [s], [], {"n-dgx": FACTS["n-dgx"]}, generic_kind="NVIDIA-GPU"
    ).services[0]
    assert sp.set_generic == ("NVIDIA-GPU", 2)
    frac = svc("small", {"swarmgpu.gpu-fraction": "0.5"})
    sp2 = plan_placement(
        [DGX], [frac], [], {"n-dgx": FACTS["n-dgx"]}, generic_kind="NVIDIA-GPU"
    ).services[0]
    assert sp2.set_generic is None  # a share is not a whole generic resource
    running = SwarmTask("t", s.id, "n-dgx", 1, "running", "running", ())
    sp3 = plan_placement(
        [DGX], [s], [running], {"n-dgx": FACTS["n-dgx"]}, generic_kind="NVIDIA-GPU"
    ).services[0]
    assert sp3.set_generic is None and any("generic" in w for w in sp3.warnings)


# --- render reads what Swarm checks (issue 20, finding 4) -----------------------------


def _cpu_node(nid: str, host: str, cpus: int = 2) -> SwarmNode:
    return replace(node(nid, host), cpu_milli=cpus * 1000, memory_mib=8192)


def test_render_sees_the_stacks_cpu_reservation() -> None:
    """The issue's X/Y case: X, pinned to gpu-node-1, reserves 1.5 of its 2 CPUs; Y
    (1 GPU, cpus "1.0") rendered as a separate stack gets its devices on gpu-node-2,
    where Swarm can run it (render used to build Y without its reservation)."""
    from swarmgpu.manager.commands.render import render_stack

    dgx, r4090 = _cpu_node("n-dgx", "gpu-node-1"), _cpu_node("n-4090", "gpu-node-2")
    x = replace(
        svc("x_x", {"swarmgpu.gpus": "1"}),
        spec={"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 1_500_000_000}}}},
    )
    plan = plan_placement([dgx, r4090], [x], [], FACTS)
    nodes = apply([dgx, r4090], plan)
    x = replace(x, labels={**x.labels, **plan.services[0].service_labels_set})
    tx = SwarmTask("tx", x.id, "n-dgx", 1, "running", "running", (), cpu_milli=1500)
    # "y" quoted: plain, docker 27 and older read it as the key true (render refuses it)
    text = """
services:
  "y":
    image: busybox
    deploy:
      labels: {swarmgpu.gpus: "1"}
      resources: {reservations: {cpus: "1.0", memory: 512M}}
"""
    out, p = render_stack(text, "y", nodes, [x], [tx], FACTS, prefix=P)
    sp = next(s for s in p.services if s.name == "y_y")
    assert sp.status == "placed", sp.reason
    assert [pl.hostname for pl in sp.placements] == ["gpu-node-2"]
    assert "swarmgpu.devices.n-4090" in out and "swarmgpu.devices.n-dgx" not in out


def test_render_builds_the_spec_swarm_will_hold() -> None:
    import pytest

    from swarmgpu.manager.commands.render import StackError, load_stack, stack_services

    text = """
services:
  a:
    image: busybox
    platform: linux/arm64
    deploy:
      replicas: 2
      labels: {swarmgpu.gpus: "1"}
      resources:
        reservations:
          cpus: 1.5
          memory: 1g
          generic_resources:
            - discrete_resource_spec: {kind: NVIDIA-GPU, value: 1}
      placement:
        constraints: [node.role==worker]
        preferences: [{spread: node.labels.zone}]
        max_replicas_per_node: 1
"""
    (a,) = stack_services(load_stack(text), "s", [])
    tt = a.spec["TaskTemplate"]
    assert tt["Resources"]["Reservations"] == {
        "NanoCPUs": 1_500_000_000,
        "MemoryBytes": 1 << 30,
        "GenericResources": [{"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 1}}],
    }
    assert tt["Placement"] == {
        "Constraints": ["node.role==worker"],
        "Preferences": [{"Spread": {"SpreadDescriptor": "node.labels.zone"}}],
        "MaxReplicas": 1,
        "Platforms": [{"OS": "linux", "Architecture": "arm64"}],
    }
    assert a.spec["Mode"] == {"Replicated": {"Replicas": 2}} and a.max_replicas_per_node == 1
    # the planner refuses what Swarm would: an amd64 node for an arm64 platform
    amd = replace(_cpu_node("n-dgx", "gpu-node-1"), arch="x86_64")
    sp = plan_placement(
        [amd],
        [
            replace(
                a, constraints=(*a.constraints, gate_constraint(P, a.name)), env=(env_template(P),)
            )
        ],
        [],
        {"n-dgx": FACTS["n-dgx"]},
    ).services[0]
    assert sp.status == "pending"
    for bad, key in (
        ("cpus: lots", "reservations.cpus"),
        ("memory: 12Q", "reservations.memory"),
        ("cpus: 0.0001", "reservations.cpus"),  # below Swarm's least; 0 is none
        (
            "generic_resources: [{discrete_resource_spec: {kind: g}}]",
            "reservations.generic_resources",
        ),
    ):
        with pytest.raises(StackError, match=rf"services\.b\.deploy\.resources\.{key}"):
            stack_services(
                load_stack(
                    f"services:\n  b:\n    deploy:\n      resources:\n        reservations: "
                    f"{{{bad}}}\n"
                ),
                "s",
                [],
            )
    with pytest.raises(StackError, match=r"services\.b\.deploy\.mode"):
        stack_services(load_stack("services:\n  b:\n    deploy: {mode: sometimes}\n"), "s", [])


def test_a_gpu_product_glob_matches_gfds_dashed_name_as_documented() -> None:
    """docs/requests.md: spaces, - and _ alike, so GPU feature discovery's
    NVIDIA-A100-SXM4-40GB matches NVIDIA A100*. The request's node filter did; the
    allocator's GPU choice did not, and the service stayed pending on a node it passed."""
    facts = {
        nid: replace(f, gpus=tuple(replace(g, product=g.product.replace(" ", "-")) for g in f.gpus))
        for nid, f in FACTS.items()
    }
    s = svc("llm", {"swarmgpu.gpus": "1", "swarmgpu.gpu-product": "NVIDIA A100*"})
    sp = plan_placement([DGX, R4090], [s], [], facts).services[0]
    assert sp.status == "placed", sp.reason
    assert [p.hostname for p in sp.placements] == ["gpu-node-1"]


def test_a_request_in_the_container_labels_is_invalid_naming_deploy_labels() -> None:
    # ContainerSpec.Labels (a stack file's service-level labels:, --container-label) are
    # not read for a request: one there was no request, the service run with no GPU and
    # nothing said.
    spec = {"TaskTemplate": {"ContainerSpec": {"Labels": {"swarmgpu.gpus": "1"}}}}
    there = replace(svc("there", {}), spec=spec)
    good = svc("good", {"swarmgpu.gpus": "1"})
    plan = plan_placement([DGX], [there, good], [], {"n-dgx": FACTS["n-dgx"]})
    by = {sp.name: sp for sp in plan.services}
    assert by["there"].status == "invalid", by.get("there")
    assert "swarmgpu.gpus='1'" in (by["there"].reason or "")
    assert "move it under deploy.labels" in (by["there"].reason or "")
    assert not by["there"].needs_service_write
    assert by["good"].status == "placed"


def test_tasks_swarm_ran_together_on_one_spread_node_are_respread_once() -> None:
    """Spread replicas hold one device list per node; MaxReplicas 1 keeps Swarm to one
    task there, but only for the tasks it schedules while the spec says so. The owner
    removes it (``--replicas-max-per-node 0``, a re-deploy without it) and Swarm runs a
    second task on a gated node before swarmgpu sets 1 back: both read that node's list.
    Setting 1 back moves no task (a change of placement alone), so they are replaced
    once (ForceUpdate, with MaxReplicas 1 in the same write), not again while that
    rolling update runs, and the record goes once they run one per node."""
    s = svc("inf", {"swarmgpu.gpus": "1"}, replicas=2)
    plan = plan_placement([DGX, R4090], [s], [], FACTS)
    labels = {**s.labels, **plan.services[0].service_labels_set}
    s1 = replace(s, labels=labels, max_replicas_per_node=1, force_update=1, version=2)
    nodes = apply([DGX, R4090], plan)
    nodes = apply(nodes, plan_placement(nodes, [s1], [], FACTS))  # gates open

    def run(tid: str, nid: str, slot: int, force: int = 1) -> SwarmTask:
        return SwarmTask(tid, s.id, nid, slot, "running", "running", (), force_update=force)

    spread = [run("t1", "n-dgx", 1), run("t2", "n-4090", 2)]
    assert plan_placement(nodes, [s1], spread, FACTS).empty
    # MaxReplicas removed, and Swarm put slot 2 beside slot 1 (its node down a while)
    owner = replace(s1, max_replicas_per_node=None, version=3)
    crowded = [run("t1", "n-dgx", 1), run("t3", "n-dgx", 2)]
    sp = plan_placement(nodes, [owner], crowded, FACTS).services[0]
    assert sp.set_max_replicas == 1 and sp.force_update and sp.decision is not None
    assert sp.status == "placed" and "2 tasks run on gpu-node-1" in sp.warnings[-1]
    assert sp.service_labels_set[f"{P}state.respread"] == "2"
    # Written: its rolling update has not reached the crowded tasks yet: no second one
    s2 = replace(
        owner,
        labels={**owner.labels, **sp.service_labels_set},
        max_replicas_per_node=1,
        force_update=2,
        version=4,
    )
    sp = plan_placement(nodes, [s2], crowded, FACTS).services[0]
    assert not sp.needs_service_write and "being replaced" in sp.warnings[-1]
    # The owner removes it again while they roll: replaced again, with 1 again
    again = replace(s2, max_replicas_per_node=0, version=5)
    sp = plan_placement(nodes, [again], crowded, FACTS).services[0]
    assert sp.set_max_replicas == 1 and sp.force_update
    # One per node again: placed, the record goes
    done = [run("t4", "n-dgx", 1, 2), run("t5", "n-4090", 2, 2)]
    sp = plan_placement(nodes, [s2], done, FACTS).services[0]
    assert sp.service_labels_remove == (f"{P}state.respread",) and not sp.force_update
    assert not any("tasks run on" in w for w in sp.warnings)
    # A crowd seen only after MaxReplicas 1 is back (no record): replaced as well
    sp = plan_placement(nodes, [s1], crowded, FACTS).services[0]
    assert sp.force_update and sp.set_max_replicas is None and sp.decision is not None
