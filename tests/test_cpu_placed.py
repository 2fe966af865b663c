"""A service without a GPU placed by swarmgpu (``swarmgpu.gpus: "0"``): its CPU and
memory reservations are the demand, behind the gate GPU services use; it preempts
nothing, counts no GPU quota, is never moved; without the opt-in it is Swarm's, and
swarmgpu writes nothing to it (docs/requests.md, "A service without a GPU")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from loguru import logger
from support.placement import P, apply
from support.planner import two_nodes
from support.sim import default_sample

from swarmgpu.cli import main
from swarmgpu.core.config import Config
from swarmgpu.manager.commands.plan import render_plan
from swarmgpu.manager.cycle.placement import PlacementStep
from swarmgpu.manager.placement import Planner, gate_constraint, gate_key, plan_placement
from swarmgpu.manager.placement.envs import env_template
from swarmgpu.manager.placement.preempt import choose_preemptions
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.rebalance.context import why_not_movable
from swarmgpu.manager.services.requests import RequestError, parse_all, parse_request
from swarmgpu.sim.swarm_replay import Replay
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, service_from_api

GIB = 1024 * 1024 * 1024


def service(name: str, labels: dict[str, str], cpu_milli: int = 0, memory_gib: int = 0,
            sid: str | None = None) -> SwarmService:
    spec = {"Name": name, "Labels": labels,
            "TaskTemplate": {"ContainerSpec": {"Image": "x"},
                             "Resources": {"Reservations": {
                                 "NanoCPUs": cpu_milli * 1_000_000,
                                 "MemoryBytes": memory_gib * GIB}}},
            "Mode": {"Replicated": {"Replicas": 1}}}
    return service_from_api({"ID": sid or f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def running(s: SwarmService, node_id: str, cpu_milli: int, memory_gib: int = 0) -> SwarmTask:
    return SwarmTask(id=f"t-{s.name}", service_id=s.id, node_id=node_id, slot=1,
                     state="running", desired_state="running", env=(), cpu_milli=cpu_milli,
                     memory_mib=memory_gib * 1024)


def settle(pl: Planner, nodes: list[SwarmNode], services: list[SwarmService],
           tasks: list[SwarmTask], facts: dict[str, object], name: str,
           ) -> tuple[list[SwarmNode], SwarmService, str]:
    """Cycles until ``name``'s gate is open, its writes applied as the daemon applies
    them: the nodes, the service after them, the node its gate is open on."""
    s = next(x for x in services if x.name == name)
    for _ in range(3):
        plan = pl.plan(nodes, [*(x for x in services if x.name != name), s], tasks, facts)  # type: ignore[arg-type]
        sp = next(x for x in plan.services if x.name == name)
        assert sp.status == "placed", sp.reason
        nodes = apply(nodes, plan)
        new = service_compute(sp.writes)(s.spec)
        if new is not None:
            s = service_from_api({"ID": s.id, "Spec": new, "Version": {"Index": s.version + 1}})
        opened = [n.id for n in nodes if n.labels.get(gate_key(P, name)) == "true"]
        if opened:
            return nodes, s, opened[0]
    raise AssertionError(f"{name}'s gate never opened")


def test_gpus_0_asks_for_no_gpu_and_says_so() -> None:
    r = parse_request({f"{P}gpus": "0"})
    assert r is not None and r.cpu_only and r.gpus == 0
    assert r.describe() == "no GPU, placed by swarmgpu by its CPU and memory"
    assert not parse_request({f"{P}gpus": "1"}).cpu_only  # type: ignore[union-attr]


@pytest.mark.parametrize("other", ["gpu-fraction", "mig", "gpu-memory", "gpu-product",
                                   "topology"])
def test_gpus_0_with_a_key_about_gpus_is_a_clear_error(other: str) -> None:
    value = {"gpu-fraction": "0.5", "mig": "1g.10gb", "gpu-memory": "8GiB",
             "gpu-product": "A100*", "topology": "nvlink"}[other]
    e = parse_all({f"{P}gpus": "0", f"{P}{other}": value})
    assert isinstance(e, RequestError)
    assert e.key == f"{P}gpus"
    assert f"no {P}{other} with {P}gpus=0" in str(e) and f"drop {P}{other}" in str(e)


def test_the_planner_places_an_opted_in_service_by_its_cpu_behind_its_gate() -> None:
    """Two nodes of 2 CPUs: a GPU service reserving 1.5 runs on one, so the opted-in
    service reserving 1 CPU goes to the other (the stand-in's CPU, not a GPU, decides);
    its gate and the constraint on it are written as for a GPU service."""
    nodes, facts = two_nodes()
    pl = Planner()
    gpu = service("x", {f"{P}gpus": "1"}, cpu_milli=1500)
    nodes, gpu, on = settle(pl, nodes, [gpu], [], facts, "x")
    tasks = [running(gpu, on, 1500)]
    web = service("web", {f"{P}gpus": "0"}, cpu_milli=1000)
    nodes, web, web_on = settle(pl, nodes, [gpu, web], tasks, facts, "web")
    assert web_on != on
    assert gate_constraint(P, "web") in web.constraints
    # its env resolves to no GPU (NVIDIA_VISIBLE_DEVICES=void): an image that sets
    # NVIDIA_VISIBLE_DEVICES=all does not see the node's GPUs through it
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=") and '"void"' in e for e in web.env)
    sp = next(x for x in plan_placement(nodes, [gpu, web], tasks, facts).services  # type: ignore[arg-type]
              if x.name == "web")
    assert sp.status == "placed" and sp.placements[0].node_id == web_on
    assert sp.placements[0].gpus == ()  # a fresh planner reads its holding back


def test_memory_counts_too_and_no_room_leaves_it_pending() -> None:
    """Nodes of 8 GiB: two services of 6 GiB go to two nodes, a third waits (pending,
    with a reason), never placed where Swarm would refuse its task."""
    nodes, facts = two_nodes()
    svcs = [service(f"m{i}", {f"{P}gpus": "0"}, memory_gib=6) for i in range(3)]
    plan = plan_placement(nodes, svcs, [], facts)  # type: ignore[arg-type]
    by = {sp.name: sp for sp in plan.services}
    got = [by[f"m{i}"].placements[0].node_id for i in range(2)]
    assert sorted(got) == ["n-a", "n-b"]
    assert by["m2"].status == "pending" and not by["m2"].placements


def test_a_service_without_the_opt_in_is_untouched() -> None:
    """A service reserving CPU with no request key stays Swarm's: no gate label, no
    constraint, no env, no ledger entry."""
    nodes, facts = two_nodes()
    plain = service("plain", {}, cpu_milli=1000)
    plan = plan_placement(nodes, [plain], [running(plain, "n-a", 1000)], facts)  # type: ignore[arg-type]
    assert not any(labels for labels in plan.node_set.values())
    for sp in plan.services:
        assert sp.name != "plain" or (not sp.placements and not sp.needs_service_write
                                       and not sp.node_writes)
    assert all(not n.labels for n in apply(nodes, plan))


def test_it_is_never_moved_and_preempts_no_gpu_service() -> None:
    """The operator's rules: no GPU work is stopped or moved for CPU work. A
    high-priority opted-in service with no room preempts nothing (the GPU holders of low
    priority keep their nodes); the rebalancer never moves it."""
    nodes, facts = two_nodes()
    nodes = [replace(n, cpu_milli=1000) for n in nodes]
    live = {f"low{i}": service(f"low{i}", {f"{P}gpus": "1", f"{P}priority": "0"},
                               cpu_milli=1000) for i in range(2)}
    pl = Planner()
    tasks: list[SwarmTask] = []
    for name in list(live):
        nodes, live[name], on = settle(pl, nodes, list(live.values()), tasks, facts, name)
        tasks.append(running(live[name], on, 1000))
    live["hi"] = service("hi", {f"{P}gpus": "0", f"{P}priority": "1000"}, cpu_milli=1000)
    services = list(live.values())
    plan = pl.plan(nodes, services, tasks, facts)  # type: ignore[arg-type]
    sp = next(x for x in plan.services if x.name == "hi")
    assert sp.status == "pending"
    assert choose_preemptions(plan, nodes, services, tasks, facts, prefix=P,  # type: ignore[arg-type]
                              preemptible_below=100) == []
    r = parse_request(live["hi"].labels)
    assert r is not None
    why = why_not_movable(live["hi"], r, [], {}, P, 0.0, 0.0)
    assert why is not None and "never moved" in why


def test_the_replay_places_cpu_only_pods_through_the_planner() -> None:
    """``--cpu-pods policy``: each CPU-only pod is a service with ``gpus: "0"`` the
    planner holds (its gate opens, its task runs there), not a task put on a node by the
    planner's allocator directly (the stand-in until stop 67)."""
    nodes, pods = default_sample(150, 60)
    rp = Replay(nodes, pods, 42, batch=20)
    rp.run()
    w = rp.world
    assert not w.cpu_tasks  # the stand-in placed none
    opted = [s for s in w.services.values() if s.labels.get(f"{P}gpus") == "0"]
    assert len(opted) > 20
    held = {svc: nid for (svc, nid), h in rp.planner.cluster.held_items()}
    for s in opted:
        assert s.name in held and gate_constraint(P, s.name) in s.constraints
        pod = w.pods[s.name]
        assert pod.total_gpu_milli == 0
        t = w.tasks[s.id]
        if t.node_id:  # its gate opened (a full cycle since it arrived)
            assert t.node_id == held[s.name]
            assert w.nodes[t.node_id].labels.get(gate_key(P, s.name)) == "true"
    assert any(w.tasks[s.id].node_id for s in opted)


def test_it_counts_no_gpu_quota_and_a_queue_above_its_max_does_not_hold_it_back() -> None:
    """A queue whose max was lowered below what it holds (1 GPU held, max 0) holds its
    next GPU request back, never one of no GPU; the queue's use counts none for it."""
    nodes, facts = two_nodes()
    held = service("h", {f"{P}gpus": "1", f"{P}queue": "q"})
    nodes, held, on = settle(Planner(queues={"q": (0, 1000)}), nodes, [held], [], facts, "h")
    tasks = [running(held, on, 0)]
    cpu = service("c", {f"{P}gpus": "0", f"{P}queue": "q"}, cpu_milli=500)
    gpu = service("g", {f"{P}gpus": "1", f"{P}queue": "q"})
    plan = Planner(queues={"q": (0, 0)}).plan(nodes, [held, cpu, gpu], tasks, facts)  # type: ignore[arg-type]
    by = {sp.name: sp for sp in plan.services}
    assert by["c"].status == "placed", by["c"].reason
    assert by["g"].status != "placed"
    (row,) = [q for q in plan.queues if q["queue"] == "q"]
    assert row["used_gpus"] == 1 and row["blocked"] == ["g"]


def test_an_empty_ledger_entry_is_no_holding_for_a_gpu_request() -> None:
    """The empty ledger value a service of no GPU holds is not taken for a GPU
    request's (a forged or stale one): the GPU request is placed on GPUs."""
    nodes, facts = two_nodes()
    nodes = [replace(n, labels={f"{P}assign.g": ""}) if n.id == "n-a" else n for n in nodes]
    gpu = service("g", {f"{P}gpus": "1"})
    (sp,) = plan_placement(nodes, [gpu], [], facts).services  # type: ignore[arg-type]
    assert sp.status == "placed" and all(len(p.uuids) == 1 for p in sp.placements)


def test_dropping_the_opt_in_gives_the_service_back_to_swarm() -> None:
    """Its label removed, the gate, the ledger entry and swarmgpu's labels leave, as for
    any request removed; the user's own constraint, label and env stay."""
    nodes, facts = two_nodes()
    pl = Planner()
    web = service("web", {f"{P}gpus": "0", "team": "x"}, cpu_milli=1000)
    nodes, web, _on = settle(pl, nodes, [web], [], facts, "web")
    raw = dict(web.spec)
    raw["Labels"] = {k: v for k, v in web.labels.items() if k != f"{P}gpus"}
    web = service_from_api({"ID": web.id, "Spec": raw, "Version": {"Index": web.version + 1}})
    for _ in range(2):
        plan = pl.plan(nodes, [web], [], facts)  # type: ignore[arg-type]
        nodes = apply(nodes, plan)
        for sp in plan.services:
            new = service_compute(sp.writes)(web.spec)
            if new is not None:
                web = service_from_api({"ID": web.id, "Spec": new,
                                        "Version": {"Index": web.version + 1}})
    assert all(not n.labels for n in nodes)
    assert web.labels == {"team": "x"} and web.constraints == ()


def test_held_where_swarm_will_not_run_it_its_reason_names_no_gpu() -> None:
    """Held on node-a (its gate open there), its task waiting while a task Swarm placed
    there first reserves the CPU (seen on the real swarm when a released service's new
    task came back to that node, tests/test_cpu_placed_swarm.py): pending with the CPU
    named, and no word of GPUs it does not hold. Before: "Swarm cannot run its task
    where its GPUs are"."""
    nodes, facts = two_nodes()
    pl = Planner()
    c = service("c", {f"{P}gpus": "0"}, cpu_milli=1000)
    spec = {**c.spec, "TaskTemplate": {**c.spec["TaskTemplate"],
                                       "Placement": {"Constraints": ["node.hostname==node-a"]}}}
    c = service_from_api({"ID": c.id, "Spec": spec, "Version": {"Index": 1}})
    nodes, c, on = settle(pl, nodes, [c], [], facts, "c")
    assert on == "n-a"
    other = service("other", {}, cpu_milli=1500)
    waiting = SwarmTask(id="t-c", service_id=c.id, node_id="", slot=1, state="pending",
                        desired_state="running", env=(), cpu_milli=1000, memory_mib=0)
    plan = pl.plan(nodes, [c, other], [running(other, "n-a", 1500), waiting], facts)  # type: ignore[arg-type]
    sp = next(x for x in plan.services if x.name == "c")
    assert sp.status == "pending" and sp.reason is not None
    assert "node-a has not the CPU or memory its task reserves left" in sp.reason, sp.reason
    assert "GPU" not in sp.reason.split(":")[0], sp.reason
    assert sp.reason.startswith("Swarm cannot run its task where swarmgpu placed it ("), \
        sp.reason


def deployed_by_render(name: str, gpus: str, replicas: int) -> SwarmService:
    """A service as ``render`` writes it: its gate constraint and the device env line
    from the start, so its first tasks wait on the gate with the env they need."""
    spec = {"Name": name, "Labels": {f"{P}gpus": gpus},
            "TaskTemplate": {"ContainerSpec": {"Image": "x", "Env": [env_template(P)]},
                             "Placement": {"Constraints": [gate_constraint(P, name)]},
                             "Resources": {"Reservations": {"NanoCPUs": 500_000_000}}},
            "Mode": {"Replicated": {"Replicas": replicas}}}
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def pending(s: SwarmService, n: int) -> list[SwarmTask]:
    return [SwarmTask(id=f"t-{s.name}-{i}", service_id=s.id, node_id="", slot=i,
                      state="pending", desired_state="running", env=(), cpu_milli=500)
            for i in range(1, n + 1)]


def test_a_service_without_a_gpu_given_its_env_now_still_replaces_its_waiting_tasks() -> None:
    """Deployed without the device env line (the daemon adds it): a task made before it
    would start without ``NVIDIA_VISIBLE_DEVICES=void`` (an image setting ``all`` sees
    every GPU), so those are replaced as before and the gate waits for the new ones."""
    nodes, facts = two_nodes()
    raw = deployed_by_render("web", "0", 2)
    spec = {**raw.spec, "TaskTemplate": {**raw.spec["TaskTemplate"],
                                         "ContainerSpec": {"Image": "x"}}}
    s = service_from_api({"ID": raw.id, "Spec": spec, "Version": {"Index": 1}})
    (sp,) = Planner().plan(nodes, [s], pending(s, 2), facts).services  # type: ignore[arg-type]
    assert sp.force_update and sp.set_update_parallelism == 0


def test_its_pending_line_reads_without_nested_parentheses() -> None:
    """The daemon's pending line puts the request in parentheses: seen on the real swarm
    as ``... (no GPU (CPU and memory placed by swarmgpu))``."""
    nodes, facts = two_nodes()
    svcs = [service(f"m{i}", {f"{P}gpus": "0"}, memory_gib=6) for i in range(3)]
    plan = plan_placement(nodes, svcs, [], facts)  # type: ignore[arg-type]
    step = PlacementStep(SimpleNamespace(cfg=Config()))  # type: ignore[arg-type]
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    try:
        assert step._log(plan) == 1
    finally:
        logger.remove(sink)
    (line,) = lines
    assert line.startswith("pending: needs no GPU; ") and line.endswith(
        " (no GPU, placed by swarmgpu by its CPU and memory)"), line
    assert "))" not in line


def test_its_release_says_no_gpu() -> None:
    """Scaled to 0 (or its node no longer its own), the holding of a service without a
    GPU is released: said as its place, not as GPUs it never held."""
    nodes, facts = two_nodes()
    pl = Planner()
    web = service("web", {f"{P}gpus": "0"}, cpu_milli=1000)
    nodes, web, on = settle(pl, nodes, [web], [], facts, "web")
    raw = {**web.spec, "Mode": {"Replicated": {"Replicas": 0}}}
    web = service_from_api({"ID": web.id, "Spec": raw, "Version": {"Index": web.version + 1}})
    (sp,) = pl.plan(nodes, [web], [], facts).services  # type: ignore[arg-type]
    host = next(n.hostname for n in nodes if n.id == on)
    assert f"released its place on {host} (no GPU)" in sp.warnings, sp.warnings
    assert not any("GPUs" in w for w in sp.warnings), sp.warnings


def test_render_check_counts_it_apart_from_the_gpu_requests(tmp_path: Path) -> None:
    """``render --check`` said ``valid (2 service(s), 2 GPU request(s))`` for one GPU
    service and one of ``gpus: "0"``: the latter asks for no GPU."""
    src = tmp_path / "s.yml"
    src.write_text("services:\n"
                   "  llm:\n    image: x\n    deploy:\n      labels:\n"
                   f"        {P}gpus: '1'\n"
                   "  web:\n    image: x\n    deploy:\n      labels:\n"
                   f"        {P}gpus: '0'\n"
                   "  plain:\n    image: x\n")
    res = CliRunner().invoke(main, ["render", "--check", str(src)],
                             env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert res.exit_code == 0, res.stderr
    assert "valid (3 service(s), 1 GPU request(s), 1 placed without a GPU)" in res.stderr, \
        res.stderr


def test_plan_says_no_gpu_on_its_node() -> None:
    """``swarmgpu plan`` lists a placement as ``<node>: GPU <indices> <uuids>``; for a
    service of no GPU it said ``node-a: GPU`` with nothing after it."""
    nodes, facts = two_nodes()
    web = service("web", {f"{P}gpus": "0"}, cpu_milli=1000)
    (sp,) = plan_placement(nodes, [web], [], facts).services  # type: ignore[arg-type]
    text = render_plan([sp], ungranted=[], workload={}, health=[], moves=None, listen="x")
    lines = text.splitlines()
    host = sp.placements[0].hostname
    assert f"  {host}: no GPU" in lines, text
    assert not any(ln.rstrip().endswith(": GPU") for ln in lines), text


def _reserved(s: SwarmService) -> list[object]:
    res = (s.spec.get("TaskTemplate") or {}).get("Resources") or {}
    return list((res.get("Reservations") or {}).get("GenericResources") or [])


def test_switched_to_no_gpu_it_reserves_no_gpu_of_swarm_while_it_runs() -> None:
    """``placement.generic_resource_kind``: a GPU service reserves its GPUs as Swarm
    generic resources too. Switched to ``gpus: "0"`` while its task runs, its tasks are
    replaced (its device list goes) but the reservation was left "while tasks run": its
    new task claimed a GPU in Swarm's count that the ledger gives another service (whose
    task Swarm then refuses there), every cycle saying so."""
    kind = "NVIDIA-GPU"
    nodes, facts = two_nodes()
    nodes = [replace(n, generic_resources={kind: tuple(g.uuid for g in facts[n.id].gpus)})  # type: ignore[attr-defined]
             for n in nodes]
    pl = Planner(generic_kind=kind)
    web = service("web", {f"{P}gpus": "1"}, cpu_milli=500)
    nodes, web, on = settle(pl, nodes, [web], [], facts, "web")
    assert [g["DiscreteResourceSpec"] for g in _reserved(web)] == [{"Kind": kind, "Value": 1}]  # type: ignore[index]
    tasks = [running(web, on, 500)]
    raw = {**web.spec, "Labels": {**web.labels, f"{P}gpus": "0"}}
    web = service_from_api({"ID": web.id, "Spec": raw, "Version": {"Index": web.version + 1}})
    (sp,) = pl.plan(nodes, [web], tasks, facts).services  # type: ignore[arg-type]
    assert sp.force_update, sp  # its tasks are replaced anyway
    assert not any("generic" in w for w in sp.warnings), sp.warnings
    new = service_compute(sp.writes)(web.spec)
    assert new is not None
    web = service_from_api({"ID": web.id, "Spec": new, "Version": {"Index": web.version + 1}})
    assert _reserved(web) == []
    (again,) = pl.plan(nodes, [web], tasks, facts).services  # type: ignore[arg-type]
    assert again.set_generic is None and not any("generic" in w for w in again.warnings)


def test_two_tasks_on_one_node_are_said_without_gpus() -> None:
    """Two replicas, one held per node; Swarm ran both tasks on node-a (MaxReplicas
    raised by the owner): the warning said "whose GPUs are held for one replica: they
    share its device list" of a service that holds no GPU. It names its place now."""
    nodes, facts = two_nodes()
    pl = Planner()
    web = service("web", {f"{P}gpus": "0"}, cpu_milli=500)
    raw = {**web.spec, "Mode": {"Replicated": {"Replicas": 2}}}
    web = service_from_api({"ID": web.id, "Spec": raw, "Version": {"Index": 1}})
    nodes, web, on = settle(pl, nodes, [web], [], facts, "web")
    web = replace(web, max_replicas_per_node=None)
    tasks = [replace(running(web, on, 500), id=f"t-{k}", slot=k) for k in (1, 2)]
    (sp,) = pl.plan(nodes, [web], tasks, facts).services  # type: ignore[arg-type]
    said = [w for w in sp.warnings if "2 tasks run on" in w]
    assert said, sp.warnings
    assert "GPU" not in said[0] and "device list" not in said[0], said[0]
    assert "placed for one replica" in said[0], said[0]


def test_a_gpu_request_short_of_cpu_preempts_no_gpu_holder_for_nothing() -> None:
    """One node: ``low`` (priority 0) holds its GPUs and reserves no CPU, ``c`` (gpus
    "0", never a victim) reserves 1.5 of its 2 CPUs. ``hi`` (priority 1000, 1 GPU, 1 CPU)
    waits for the CPU ("has only 500 CPU milli free"). Before, it preempted ``low``:
    stopping it frees GPUs but no CPU, so ``hi`` stayed pending and ``low`` was stopped
    for nothing, again after each cooldown."""
    nodes, facts = two_nodes()
    nodes, facts = nodes[:1], {"n-a": facts["n-a"]}
    n = len(facts["n-a"].gpus)  # type: ignore[attr-defined]
    pl = Planner()
    low = service("low", {f"{P}gpus": str(n), f"{P}priority": "0"})
    nodes, low, on = settle(pl, nodes, [low], [], facts, "low")
    tasks = [running(low, on, 0)]
    c = service("c", {f"{P}gpus": "0"}, cpu_milli=1500)
    nodes, c, _ = settle(pl, nodes, [low, c], tasks, facts, "c")
    tasks.append(running(c, on, 1500))
    hi = service("hi", {f"{P}gpus": "1", f"{P}priority": "1000"}, cpu_milli=1000)
    services = [low, c, hi]
    plan = pl.plan(nodes, services, tasks, facts)  # type: ignore[arg-type]
    sp = next(x for x in plan.services if x.name == "hi")
    assert sp.status == "pending" and "CPU" in (sp.reason or ""), sp.reason
    assert choose_preemptions(plan, nodes, services, tasks, facts, prefix=P,  # type: ignore[arg-type]
                              preemptible_below=100) == []
    # with the CPU there (c gone), the same request does preempt low
    plan = pl.plan(nodes, [low, hi], tasks[:1], facts)  # type: ignore[arg-type]
    (p,) = choose_preemptions(plan, nodes, [low, hi], tasks[:1], facts, prefix=P,  # type: ignore[arg-type]
                              preemptible_below=100)
    assert [v.service for v in p.victims] == ["low"]


def test_a_job_of_no_gpu_counts_its_holdings_without_gpus() -> None:
    """A replicated job of ``gpus: "0"``: its run's progress said "2 GPU holding(s)
    now" of holdings of no GPU."""
    nodes, facts = two_nodes()
    spec = {"Name": "batch", "Labels": {f"{P}gpus": "0"},
            "TaskTemplate": {"ContainerSpec": {"Image": "x"},
                             "Resources": {"Reservations": {"NanoCPUs": 500_000_000}}},
            "Mode": {"ReplicatedJob": {"MaxConcurrent": 2, "TotalCompletions": 2}}}
    job = service_from_api({"ID": "id-batch", "Spec": spec, "Version": {"Index": 1}})
    (sp,) = plan_placement(nodes, [job], [], facts).services  # type: ignore[arg-type]
    assert sp.progress == "0 of 2 complete, 2 holding(s) of no GPU now", sp.progress
