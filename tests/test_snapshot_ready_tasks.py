"""The daemon's reads take the tasks Swarm means to run but has not started: desired
state ``ready`` (swarmkit's restart supervisor during a restart delay, its updater while
the old task stops) beside ``running`` (``placement.keys.MEANT_STATES``; Moby's task
filter ORs several desired states). Swarm's scheduler counts such a task on its node.
Before, the snapshot (``nodes.sync.take_snapshot``) and the mover's look at a move in
flight listed desired running alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import support.rebalance as rb
from support.forged import (
    DGX_F,
    RecordingSwarm,
    held_labels,
    repin_move,
    snapshot,
    sw_node,
    sw_svc,
    victim_cluster,
    victim_move,
    victim_source_closed,
)
from support.gpu_nodes import RTX4090
from support.placement import node, svc
from support.planner import cpu_node

from swarmgpu.core.config import Config, RebalanceConfig
from swarmgpu.core.model import MigDevice
from swarmgpu.manager.cycle.placement import gates_ready_now
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import (
    MOVE_STATE,
    Planner,
    devices_key,
    gate_key,
    plan_placement,
    read_ledger,
)
from swarmgpu.manager.placement.cpunodes import agent_nodes
from swarmgpu.manager.placement.hostports import binds
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.placement.tasks import tasks_by_service
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.manager.rebalance.targets import SwarmTargets
from swarmgpu.manager.services.grants import on_gpu_nodes
from swarmgpu.manager.web.cluster_view import build_cluster
from swarmgpu.swarm.client import SwarmService, SwarmTask, service_from_api
from swarmgpu.swarm.plugins import network_drivers_of

P = "swarmgpu."


def _cpu_service(name: str, labels: dict[str, str], cpu_milli: int) -> SwarmService:
    tt = {"ContainerSpec": {"Image": "x"},
          "Resources": {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000}}}
    spec = {"Name": name, "Labels": labels, "TaskTemplate": tt,
            "Mode": {"Replicated": {"Replicas": 1}}}
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def _agents(*tasks: SwarmTask) -> RecordingSwarm:
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-c", "node-c")]
    return RecordingSwarm(nodes, [sw_svc("swarmgpu_agent", {}, gated=False,
                                         mode={"Global": {}})], list(tasks))


def _agent_task(tid: str, desired: str, state: str) -> SwarmTask:
    return SwarmTask(tid, "id-swarmgpu_agent", "n-c", None, state, desired, ())


def test_the_snapshot_holds_an_agents_task_in_its_restart_delay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """node-c's agent failed; its replacement waits out the restart delay (desired
    ready, assigned to node-c). Before: the snapshot had no task of the agents there,
    so the live daemon took node-c as a CPU-only node (no agent expected)."""
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    sw = _agents(_agent_task("t-old", "shutdown", "failed"),
                 _agent_task("t-new", "ready", "ready"))
    snap = sync.take_snapshot(sw, Config())  # type: ignore[arg-type]
    assert [t.id for t in snap.tasks] == ["t-new"]
    agents = agent_nodes(snap.services, snap.tasks, "swarmgpu_agent")
    assert agents == {"n-c"}
    assert sync.is_gpu_node(sw.node("n-c"), AgentBook(), P, agents=agents)


def test_the_snapshot_of_running_tasks_is_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    sw = _agents(_agent_task("t-run", "running", "running"),
                 _agent_task("t-old", "shutdown", "shutdown"))
    snap = sync.take_snapshot(sw, Config())  # type: ignore[arg-type]
    assert [t.id for t in snap.tasks] == ["t-run"]
    assert not sync.is_gpu_node(sw.node("n-mgr"), AgentBook(), P,
                                agents=agent_nodes(snap.services, snap.tasks,
                                                   "swarmgpu_agent"))


def _source_closed() -> tuple[RecordingSwarm, list[float], Mover]:
    """The victim's source closed (``victim_source_closed``), its new task running on the
    target."""
    sw, now, m = victim_source_closed()
    sw.run_task(SwarmTask("t-moved", "id-victim", "n-4090", 1, "running", "running", ()))
    return sw, now, m


def _done(m: Mover, sw: RecordingSwarm) -> Any:
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    return read_records(sw.swarm_labels(), P).get("id-victim")


def test_a_move_waits_for_a_task_desired_ready_on_its_source() -> None:
    """A task of the victim on the source made before its gate closed (a restart's
    replacement in its delay: desired ready) may still start there, on the old GPU.
    Before: the move ended as soon as no task desired running was on the source."""
    sw, now, m = _source_closed()
    sw.run_task(SwarmTask("t-late", "id-victim", "n-dgx", 2, "assigned", "ready", ()))
    now[0] += 5.0
    assert _done(m, sw) is not None  # not finished: the source task may still start
    assert not any(r.outcome is Outcome.DONE for r in m.recent)
    sw.stop_tasks("id-victim", "n-dgx")  # the constraint enforcer
    now[0] += 5.0
    assert _done(m, sw) is None
    assert m.recent[-1].outcome is Outcome.DONE


def test_a_move_with_nothing_left_on_its_source_ends_as_before() -> None:
    sw, now, m = _source_closed()
    now[0] += 5.0
    assert _done(m, sw) is None
    assert m.recent[-1].outcome is Outcome.DONE


def test_a_move_is_not_started_while_an_update_or_restart_is_under_way() -> None:
    """The victim's running task and, for its slot, an update's new task desired ready
    (assigned, waiting for the old one to stop): not converged. Before: the mover read
    desired running alone and started the move in the middle of Swarm's update."""
    sw = victim_cluster({})
    sw.run_task(SwarmTask("t-next", "id-victim", "n-dgx", 1, "assigned", "ready", ()))
    m = Mover(sw, RebalanceConfig(dry_run=False), prefix=P, dry_run=False,  # type: ignore[arg-type]
              clock=lambda: 1000.0)
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {}
    assert P + MOVE_STATE not in sw.service("id-victim").labels
    assert gate_key(P, "victim") in sw.node("n-dgx").labels


def test_placement_reads_a_ready_task_as_waiting_with_its_reservation() -> None:
    """A restart's replacement in its delay, assigned to n-a (desired ready), made
    with device-map generation 3: placement counts it as waiting there (so no gate opens
    until every waiting task carries the newer map) and its CPU on n-a, as Swarm's
    scheduler does. Before: it was not read at all. A slot keeps the node of its task
    desired running over an update's new one."""
    ready = SwarmTask("t-new", "s", "n-a", 1, "ready", "ready", (), force_update=3,
                      cpu_milli=500, memory_mib=64)
    tv = tasks_by_service([ready, SwarmTask("t-old", "s", "n-a", 1, "failed", "shutdown", ())])
    w = tv.waiting["s"]
    assert w.count == 1 and w.assigned == {"n-a"} and not w.all_newer(4)
    assert tv.use == {"n-a": [500, 64]} and tv.slots["s"] == {1: "n-a"}
    old = SwarmTask("t-run", "s", "n-b", 1, "running", "running", ())
    for order in ([ready, old], [old, ready]):
        assert tasks_by_service(order).slots["s"] == {1: "n-b"}
        assert tasks_by_service(order).running == {"s": {"n-b": 1}}


def test_a_ready_task_on_a_node_waiting_to_start_binds_its_host_port() -> None:
    """A task desired ready with a node, not yet past Swarm's scheduler's early states,
    binds its host-mode port there as one desired running does. Before: it did not."""
    for desired in ("running", "ready"):
        assert binds(SwarmTask("t", "s", "n-a", 1, "pending", desired, ()))
    assert not binds(SwarmTask("t", "s", "n-a", 1, "pending", "shutdown", ()))


def test_reads_of_tasks_meant_to_run_count_a_ready_one() -> None:
    """What Swarm's scheduler counts on a node counts a task desired ready as one
    desired running: preemption's CPU room (``preemptroom.Room``), the rebalancer's
    "a task of it is there" (``SwarmTargets.has``), the network drivers Swarm's
    PluginFilter reads, and the GPU nodes a service's tasks are on (grants). Before:
    none did; a task desired shutdown still counts in none."""
    node = sw_node("n-a", "node-a")
    svc = sw_svc("s", {}, gated=False)
    for desired, counted in (("ready", True), ("running", True), ("shutdown", False)):
        t = SwarmTask("t", svc.id, "n-a", 1, "assigned", desired, (), cpu_milli=500,
                      network_drivers=("overlay",))
        room = Room.of([node], [svc], [t], {})
        assert (("s", "n-a") in room.held) is counted, desired
        has = SwarmTargets([node], [svc], [t], P).has
        assert ((svc.id, "n-a") in has) is counted, desired
        assert (svc.id in network_drivers_of([t])) is counted, desired
        assert (svc.id in on_gpu_nodes([svc], [t], {"n-a": "node-a"})) is counted, desired


def test_a_gate_does_not_open_in_the_cycle_while_a_ready_task_has_the_old_map() -> None:
    """The daemon opens a new placement's gate in the cycle it writes the map once every
    task meant to run carries it (``cycle.placement.gates_ready_now``). A restart's
    replacement made before the map (desired ready, ForceUpdate 0) would start with the
    old one: the gate waits for the next cycle. Before: the list was desired running
    alone, so the gate opened."""
    nodes, facts = [node("n-a", "node-a")], {"n-a": RTX4090.facts()}
    services = [svc("a", {"swarmgpu.gpus": "1"})]
    sid = services[0].id
    for force, opened in ((0, []), (1, ["a"])):
        plan = Planner().plan(nodes, services, [], facts)
        assert plan.services[0].gates_deferred
        sw = RecordingSwarm(nodes, services, [
            SwarmTask("t-new", sid, "", 1, "pending", "ready", (), force_update=force)])
        assert gates_ready_now(sw, plan, {sid: 1}, P) == opened  # type: ignore[arg-type]


def test_placement_counts_the_cpu_a_ready_task_reserves_on_its_node() -> None:
    """Another service's restart replacement in its delay (desired ready) on the
    CPU-only node-c reserves 1.5 of its 2 CPUs, as Swarm's scheduler counts it: a
    service of no GPU needing 1 CPU goes to the GPU node. Before: placed on node-c,
    where Swarm's ResourceFilter left it pending."""
    zero = {f"{P}gpus": "0"}
    nodes, facts = [cpu_node("n-g", "node-g"), cpu_node("n-c", "node-c")], {
        "n-g": RTX4090.facts()}
    other = _cpu_service("other", {}, cpu_milli=1500)
    web = _cpu_service("web", zero, cpu_milli=1000)
    for desired, where in (("ready", "n-g"), ("running", "n-g"), ("shutdown", "n-c")):
        t = SwarmTask("t-other", other.id, "n-c", 1, "assigned", desired, (), cpu_milli=1500)
        plan = plan_placement(nodes, [other, web], [t], facts)  # type: ignore[arg-type]
        sp = next(x for x in plan.services if x.name == "web")
        assert sp.status == "placed" and sp.placements[0].node_id == where, desired


def test_the_map_shows_a_holders_task_in_its_restart_delay() -> None:
    """The web map names the tasks of each GPU's holder: the victim's replacement in its
    restart delay (desired ready) is its task on gpu-node-1. Before: none was shown."""
    sw = victim_cluster({})
    sw.stop_tasks("id-victim", "n-dgx")
    sw.run_task(SwarmTask("t-next", "id-victim", "n-dgx", 1, "ready", "ready", ()))
    out = build_cluster(snapshot(sw.nodes(), sw.services(), sw.tasks()), None)
    dgx = next(n for n in out["nodes"] if n["id"] == "n-dgx")
    held = [h for g in dgx["gpus"] for h in g["holders"] if h["service"] == "victim"]
    assert [h["tasks"] for h in held] == [["t-next"]]


@pytest.mark.parametrize("repin", [False, True])
def test_a_moves_own_read_at_its_start_sees_a_ready_task(repin: bool) -> None:
    """``Mover.start`` reads the service's tasks afresh (between nodes, and a repin's):
    an update's new task desired ready beside the running one is a service not settled,
    never moved. Before: that read listed desired running alone."""
    sw = victim_cluster({})
    move, sid, nid = ((repin_move(), "id-third", "n-4090") if repin
                      else (victim_move(), "id-victim", "n-dgx"))
    sw.run_task(SwarmTask("t-next", sid, nid, 1, "assigned", "ready", ()))
    m = Mover(sw, RebalanceConfig(dry_run=False), prefix=P, dry_run=False,  # type: ignore[arg-type]
              clock=lambda: 1000.0)
    got = m.start(move, sw.service(sid))
    assert not got.ok and "not converged" in (got.why or ""), got
    assert read_records(sw.swarm_labels(), P) == {}


def test_defrag_counts_the_cpu_a_ready_task_reserves_on_the_node_it_frees() -> None:
    """p (8 GPUs, 4 CPUs) pending; gpu-node-2 (8 CPUs) holds a (1 GPU) and c's task (no
    GPU, 6 CPUs) in its restart delay (desired ready): moving a leaves p no CPU there
    (Swarm's scheduler counts c's task), so no room is made. Before: a was moved."""
    n2 = {f"{P}assign.a": rb.U2[0], f"{P}service.a": "true"}
    nodes = [dataclasses.replace(rb.node("n1", "gpu-node-1", {}), cpu_milli=64000),
             dataclasses.replace(rb.node("n2", "gpu-node-2", n2), cpu_milli=8000)]
    res = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 4000 * 10**6}}}}
    p = dataclasses.replace(rb.service("p", {f"{P}gpus": "8"}), spec={"Name": "p", **res})
    a = rb.service("a", {f"{P}gpus": "1"})
    c = dataclasses.replace(rb.service("c", {}), constraints=())
    cfg = dataclasses.replace(rb.CFG, policies="defrag")
    for desired, moved in (("ready", []), ("running", []), ("shutdown", ["a"])):
        tasks = [rb.running("a", "n2"),
                 SwarmTask("t-c", c.id, "n2", 1, "assigned", desired, (), cpu_milli=6000)]
        sig = Signals(cfg)
        times = [float(t) for t in range(13)]
        rb.feed(sig, nodes, times, {})
        inp = Inputs(nodes, [a, p, c], tasks, rb.FACTS, read_ledger(nodes, P), sig.gpus,
                     sig.nodes, cfg, times[-1], ["p"], P)
        assert [m.service for m in plan_moves(inp).moves] == moved, desired


def test_a_jobs_ready_task_is_in_the_snapshot_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's tasks are listed by service too (``job_task_read``: its replacement in
    the restart delay, desired ready, among them): that task is read once, not twice
    (it would count twice in the job's progress and on its node)."""
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    job = sw_svc("j", {}, gated=False, mode={"ReplicatedJob": {"MaxConcurrent": 1,
                                                               "TotalCompletions": 1}})
    sw = RecordingSwarm([sw_node("n-a", "node-a")], [job], [
        SwarmTask("t-old", job.id, "n-a", 1, "failed", "shutdown", ()),
        SwarmTask("t-new", job.id, "n-a", 1, "ready", "ready", ())])
    snap = sync.take_snapshot(sw, Config())  # type: ignore[arg-type]
    assert sorted(t.id for t in snap.tasks) == ["t-new", "t-old"]


@pytest.mark.parametrize("ready_first", [False, True])
def test_the_map_names_a_mig_holders_running_task_beside_its_update(
        ready_first: bool) -> None:
    """A start-first update: the service's new task (desired running, still ready) beside
    the running one on the node of its MIG slice. The slice's holder names the running
    task whatever Swarm's list order; before, it named the first listed (the ready one
    where Swarm listed it first)."""
    mig = MigDevice("3g.20gb", "MIG-1111", 19968, gi_id=1, ci_id=0)
    gpu0 = dataclasses.replace(DGX_F.gpus[0], mig_enabled=True, mig_devices=(mig,))
    facts = dataclasses.replace(DGX_F, gpus=(gpu0, *DGX_F.gpus[1:]))
    nodes = [sw_node("n-dgx", "gpu-node-1", held_labels("m", "n-dgx", mig.uuid))]
    m = sw_svc("m", {f"{P}gpus": "1", devices_key(P, "n-dgx"): mig.uuid})
    run = SwarmTask("t-run", "id-m", "n-dgx", 1, "running", "running", ())
    new = SwarmTask("t-new", "id-m", "n-dgx", 1, "ready", "running", ())
    tasks = [new, run] if ready_first else [run, new]
    snap = Snapshot(nodes, [m], tasks, {"n-dgx": FactsResult("n-dgx", "n-dgx", "", facts,
                                                            None, 1.0)}, swarm_labels={})
    out = build_cluster(snap, None)
    slices = [s for g in out["nodes"][0]["gpus"] for s in g["mig"]]
    assert [s["holder"] for s in slices] == [{"service": "m", "task": "t-run"}]
