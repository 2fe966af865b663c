"""A task Swarm is stopping (desired state ``shutdown`` or ``remove``, actual state still
running: a scale-down's, an update's old task, a removed service's, in its stop grace
period) still uses its node: swarmkit's scheduler counts its reservations, generic
resources and host ports there until it stops (``placement.keys.stopping``). Before,
the daemon's snapshot listed only the tasks desired running or ready: for the grace
period it counted less CPU on that node, and gave the GPUs of the stopping task to
another service whose task then started on GPUs still in use."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import support.rebalance as rb
from support.forged import DGX_F, FACTS, R_UUIDS, RecordingSwarm, snapshot, sw_node, sw_svc
from support.placement import apply
from support.planner import cpu_node
from support.rebalance import SeenPolicy

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig, SyncConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.cycle.session import CycleSession
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes import sync
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot, facts_by_node
from swarmgpu.manager.placement import (
    Holding,
    PlacementPlan,
    Planner,
    Status,
    assign_key,
    env_template,
    gate_key,
    read_ledger,
)
from swarmgpu.manager.placement.keys import stopping
from swarmgpu.manager.placement.ledger import packed_holding
from swarmgpu.manager.placement.nominated import STOPPING_PRIORITY, Nomination, StoppingGpus
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.rebalance import policies
from swarmgpu.manager.rebalance.context import Inputs
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.signals import Signals
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask, service_from_api

P = "swarmgpu."


def _task(tid: str, service: SwarmService, node: str, state: str, desired: str,
          cpu_milli: int = 0) -> SwarmTask:
    return SwarmTask(tid, service.id, node, 1, state, desired, (), cpu_milli=cpu_milli)


def _held(name: str, nid: str, uuids: tuple[str, ...]) -> dict[str, str]:
    h = Holding(name, nid, uuids, tuple(1000 for _ in uuids))
    return {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}


def test_the_snapshot_carries_stopping_tasks_apart_from_the_meant_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    s = sw_svc("s", {f"{P}gpus": "1"})
    tasks = [_task("t-run", s, "n-4090", "running", "running"),
             _task("t-stopping", s, "n-4090", "running", "shutdown"),
             _task("t-removed", s, "n-4090", "starting", "remove"),
             _task("t-ended", s, "n-4090", "shutdown", "shutdown"),
             _task("t-never-placed", s, "", "pending", "shutdown")]
    sw = RecordingSwarm([sw_node("n-4090", "gpu-node-2")], [s], tasks)
    snap = sync.take_snapshot(sw, Config())  # type: ignore[arg-type]
    assert [t.id for t in snap.tasks] == ["t-run"]
    assert [t.id for t in snap.stopping] == ["t-stopping", "t-removed"]
    assert [t.id for t in tasks if stopping(t)] == ["t-stopping", "t-removed"]


def _scaled_down() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask], SwarmTask]:
    """old held six RTX 4090s of n-4090 (filler the other two) and was scaled to 0: its
    task stops (desired shutdown, still running). new asks for 2 RTX 4090s."""
    old = sw_svc("old", {f"{P}gpus": "6"}, replicas=0)
    filler = sw_svc("filler", {f"{P}gpus": "2"})
    new = sw_svc("new", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*"})
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {**_held("old", "n-4090", R_UUIDS[:6]),
                                            **_held("filler", "n-4090", R_UUIDS[6:])})]
    tasks = [_task("t-filler", filler, "n-4090", "running", "running"),
             _task("t-new", new, "", "pending", "running")]
    return nodes, [old, filler, new], tasks, _task("t-old", old, "n-4090", "running", "shutdown")


def _snap(nodes: list[SwarmNode], services: list[SwarmService], tasks: list[SwarmTask],
          leaving: list[SwarmTask]) -> Snapshot:
    return replace(snapshot(nodes, services, tasks), stopping=leaving)


def test_a_new_gpu_task_is_not_placed_on_the_gpus_a_stopping_task_holds() -> None:
    """old's holding goes (it keeps none: scaled to 0), but its task runs on its six
    GPUs until it stops; new waits for them, across cycles (old's ledger entry is gone
    from the second), and is placed once the task has stopped. Before: new was given
    two of old's GPUs in the cycle after the one that released them."""
    nodes, services, tasks, t_old = _scaled_down()
    planner, cfg = Planner(prefix=P), Config()
    for _ in range(2):
        plan = make_plan(_snap(nodes, services, tasks, [t_old]), cfg, planner=planner)
        by = {sp.name: sp for sp in plan.services}
        assert by["new"].status == Status.PENDING and not by["new"].placements, by["new"]
        nodes = apply(nodes, plan)
    assert {("n-4090", u) for u in R_UUIDS[:6]} <= plan.stopping_held.keys()  # preemption's
    assert assign_key(P, "old") not in nodes[2].labels  # its holding went, as before
    plan = make_plan(_snap(nodes, services, tasks, []), cfg, planner=planner)
    placed = {sp.name: sp for sp in plan.services}["new"].placements
    assert [p.node_id for p in placed] == ["n-4090"]
    assert set(placed[0].uuids) <= set(R_UUIDS[:6])


def test_a_service_the_stopping_gpus_keep_pending_is_told_why() -> None:
    """Once old's ledger entry is gone its GPUs read free there, yet new waits: its
    reason says they are held for the tasks Swarm is stopping on that node (before, only
    "best node gpu-node-1 has 0 free": nothing named gpu-node-2's six GPUs)."""
    nodes, services, tasks, t_old = _scaled_down()
    planner, cfg = Planner(prefix=P), Config()
    nodes = apply(nodes, make_plan(_snap(nodes, services, tasks, [t_old]), cfg,
                                   planner=planner))
    plan = make_plan(_snap(nodes, services, tasks, [t_old]), cfg, planner=planner)
    by = {sp.name: sp for sp in plan.services}
    assert by["new"].status == Status.PENDING, by["new"]
    assert by["new"].reason is not None and by["new"].reason.endswith(
        "; 6 GPUs of gpu-node-2 held for tasks Swarm is stopping there"), by["new"].reason
    assert by["filler"].reason is None  # placed: nothing to explain
    plan = make_plan(_snap(nodes, services, tasks, []), cfg, planner=planner)
    assert "held for" not in ({sp.name: sp for sp in plan.services}["new"].reason or "")


def test_a_stopping_task_is_not_a_victim_and_its_gpus_are_not_free_to_preempt() -> None:
    """high (priority 100) wants 2 RTX 4090s; old, preemptible, stops on six of them. It
    is no victim (no holding, no meant task: it is stopping already) and its GPUs are
    not taken for free: high waits. Before: high was placed on old's GPUs while old's
    task still ran on them (the cycle after the one that released them)."""
    nodes, services, tasks, t_old = _scaled_down()
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    services = [*services[:2], high]
    tasks = [tasks[0], _task("t-high", high, "", "pending", "running")]
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    planner = Planner(prefix=P)
    for _ in range(2):  # the cycle that releases old's holding, then the next
        snap = _snap(nodes, services, tasks, [t_old])
        plan = make_plan(snap, cfg, planner=planner)
        assert {sp.name: sp for sp in plan.services}["high"].status == Status.PENDING
        chosen = Preempter(cfg).decide(snap, plan, facts_by_node(snap), None, 0.0, None, {})
        assert all(v.service != "old" for p in chosen for v in p.victims), chosen
        nodes = apply(nodes, plan)


def _reserving(name: str, cpu_milli: int, gpus: str = "1") -> SwarmService:
    labels = {f"{P}gpus": gpus} if gpus else {}
    tt = {"ContainerSpec": {"Image": "x"},
          "Resources": {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000}}}
    spec = {"Name": name, "Labels": labels, "TaskTemplate": tt,
            "Mode": {"Replicated": {"Replicas": 1}}}
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def test_the_cpu_of_a_stopping_task_is_counted_on_its_node() -> None:
    """Two nodes of 2000 CPU milli: a task of no GPU reserves 1500 on node-b, a stopping
    one 1500 on node-a. gpu (1 GPU, 1000 CPU milli) fits on neither until it stops.
    Before: it was placed on node-a, where Swarm left it pending."""
    nodes = [cpu_node("n-a", "node-a"), cpu_node("n-b", "node-b")]
    facts = {"n-a": FACTS["n-4090"], "n-b": FACTS["n-4090"]}
    hog, gone, gpu = _reserving("hog", 1500, ""), _reserving("gone", 1500, ""), \
        _reserving("gpu", 1000)
    tasks = [_task("t-hog", hog, "n-b", "running", "running", 1500),
             _task("t-gpu", gpu, "", "pending", "running")]
    t_gone = _task("t-gone", gone, "n-a", "running", "shutdown", 1500)
    read = {nid: FactsResult(nid, nid, "", f, None, 1.0) for nid, f in facts.items()}
    snap = Snapshot(nodes, [hog, gpu], tasks, read, stopping=[t_gone])
    plan = make_plan(snap, Config(), planner=Planner(prefix=P))
    sp = {sp.name: sp for sp in plan.services}["gpu"]
    assert sp.status == Status.PENDING and not sp.placements, sp
    plan = make_plan(replace(snap, stopping=[]), Config(), planner=Planner(prefix=P))
    assert [p.node_id for p in {sp.name: sp for sp in plan.services}["gpu"].placements] \
        == ["n-a"]


def test_preemption_counts_a_stopping_tasks_cpu_and_never_frees_it() -> None:
    """``Room``: the stopping task's CPU is used on its node, and a victim's stop there
    frees only the victim's own."""
    node = replace(sw_node("n-a", "node-a"), cpu_milli=4000)
    small = _reserving("small", 1000)
    high = _reserving("high", 3500)
    tasks = [_task("t-small", small, "n-a", "running", "running", 1000)]
    leaving = [_task("t-small-old", small, "n-a", "running", "shutdown", 1000)]

    class V:
        service = "small"

    room = Room.of([node], [small, high], tasks, {}, leaving)
    assert room.left["n-a"] == (2000, 256000)
    assert not room.fits(high, "n-a", [V()], 1)  # 2000 left + small's 1000 < 3500
    assert Room.of([node], [small, high], tasks, {}).fits(high, "n-a", [V()], 1)


def _defrag_moves(c_desired: str) -> list[str]:
    """p (8 GPUs, 4 CPUs) pending; gpu-node-2 (8 CPUs) holds a (1 GPU) and a task of c,
    a service of no GPU, reserving 6 CPUs there: running, or stopping."""
    n2 = {f"{P}assign.a": rb.U2[0], f"{P}service.a": "true"}
    nodes = [replace(rb.node("n1", "gpu-node-1", {}), cpu_milli=64000),
             replace(rb.node("n2", "gpu-node-2", n2), cpu_milli=8000)]
    res = {"TaskTemplate": {"Resources": {"Reservations": {"NanoCPUs": 4000 * 10**6}}}}
    p = replace(rb.service("p", {f"{P}gpus": "8"}), spec={"Name": "p", **res})
    a, c = rb.service("a", {f"{P}gpus": "1"}), replace(rb.service("c", {}), constraints=())
    t_c = SwarmTask("t-c", c.id, "n2", 1, "running", c_desired, (), cpu_milli=6000)
    cfg = replace(rb.CFG, policies="defrag")
    sig = Signals(cfg)
    times = [float(t) for t in range(13)]
    rb.feed(sig, nodes, times, {})
    meant = c_desired == "running"
    inp = Inputs(nodes, [a, p, c], [rb.running("a", "n2"), *([t_c] if meant else [])],
                 rb.FACTS, read_ledger(nodes, P), sig.gpus, sig.nodes, cfg, times[-1],
                 ["p"], P, stopping=[] if meant else [t_c])
    return [m.service for m in plan_moves(inp).moves]


def test_defrag_makes_no_room_where_a_stopping_tasks_cpu_is_still_used() -> None:
    """c's 6 CPUs and p's 4 exceed gpu-node-2's 8 while c's task stops, as while it runs.
    Before: the stopping task's CPU was free to the rebalancer, which moved a away for a
    p that Swarm then left pending."""
    assert _defrag_moves("running") == []
    assert _defrag_moves("shutdown") == []


def test_the_rebalancer_is_handed_the_stopping_tasks_and_their_gpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's rebalance step: no move lands on the GPUs placement holds for a
    stopping task (``Inputs.held``), and the task's CPU counts (``Inputs.stopping``)."""
    seen = SeenPolicy()
    monkeypatch.setitem(policies.PLUGINS, "hotspot", lambda _rb: seen)
    s = sw_svc("s", {f"{P}gpus": "1"})
    sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager")], [s], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 rebalance=RebalanceConfig(policies="hotspot"))
    (step,) = [x for x in daemon_steps(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
               if isinstance(x, Rebalancer)]
    t_s = _task("t-s", s, "n-4090", "running", "shutdown", 500)
    held = {("n-4090", R_UUIDS[0]): ("tasks stopping on n-4090", STOPPING_PRIORITY)}
    session = CycleSession(Snapshot(sw.nodes(), sw.services(), [], {}, taken_at=1000.0,
                                    stopping=[t_s]))
    session.facts, session.scrapes = {}, {}
    session.placement = PlacementPlan(stopping_held=held)
    session.planner = Planner(prefix=P)
    step.run(session)
    (inp,) = seen.inputs
    assert inp.held == held and list(inp.stopping) == [t_s]


def test_a_stopping_tasks_host_port_is_still_bound_on_its_node() -> None:
    """proxy's task publishing 8000 in host mode stops on node-a (the only node): llm,
    publishing 8000 too, waits for it. Before: the daemon's snapshot had no such task and
    llm was placed on node-a, where Swarm's HostPortFilter left it pending."""
    ports = {"EndpointSpec": {"Ports": [{"Protocol": "tcp", "TargetPort": 80,
                                         "PublishedPort": 8000, "PublishMode": "host"}]}}
    llm = replace(_reserving("llm", 0), spec={**_reserving("llm", 0).spec, **ports})
    proxy = replace(_reserving("proxy", 0, ""), spec={"Name": "proxy", **ports})
    facts = {"n-a": FactsResult("n-a", "n-a", "", FACTS["n-4090"], None, 1.0)}
    snap = Snapshot([cpu_node("n-a", "node-a")], [llm, proxy], [], facts,
                    stopping=[_task("t-proxy", proxy, "n-a", "running", "shutdown")])
    sp = {sp.name: sp for sp in make_plan(snap, Config(), planner=Planner(prefix=P)).services}
    assert sp["llm"].status == Status.PENDING and "8000/tcp" in (sp["llm"].reason or "")
    sp = {sp.name: sp for sp in make_plan(replace(snap, stopping=[]), Config(),
                                          planner=Planner(prefix=P)).services}
    assert sp["llm"].status == Status.PLACED


def test_the_gpus_held_are_those_of_the_stopping_tasks_own_slot_and_outlive_the_service(
        ) -> None:
    """A packed service's stopping task holds its slot's GPUs only; a removed service's
    task (desired remove) is known by the name the last cycle had for the service, and
    its GPUs are held after its ledger entry went, until it stops."""
    s = sw_svc("old", {})
    packed = packed_holding("old", "n-4090", {1: ((R_UUIDS[0],), (1000,)),
                                              2: ((R_UUIDS[1],), (1000,))})
    g = StoppingGpus()
    assert g.holds([], [s], {}) == []
    t2 = replace(_task("t-2", s, "n-4090", "running", "remove"), slot=2)
    (n,) = g.holds([t2], [], {"old": {"n-4090": packed}})  # old is gone from the services
    assert (n.node_id, n.uuids, n.priority) == ("n-4090", (R_UUIDS[1],), STOPPING_PRIORITY)
    assert g.holds([t2], [], {}) == [n]  # its ledger entry gone: still held
    assert g.holds([], [], {}) == []  # it stopped


def test_a_stopping_tasks_own_device_line_names_its_gpus_to_a_fresh_daemon() -> None:
    """A daemon (or a new leader) that starts after the stopping task's ledger entry went
    reads the GPUs from the task itself: the device line its service pinned, those of
    its node only (index 3 too; a UUID the node has not is input, ignored). Before:
    nothing was held (the ledger was the only source)."""
    s = sw_svc("pinned", {})
    line = f"NVIDIA_VISIBLE_DEVICES={R_UUIDS[1]}, GPU-not-on-this-node,3"
    t = replace(_task("t-p", s, "n-4090", "running", "shutdown"), env=("A=1", line))
    (n,) = StoppingGpus(P).holds([t], [s], {}, [], FACTS)
    assert (n.node_id, set(n.uuids)) == ("n-4090", {R_UUIDS[1], R_UUIDS[3]})
    other = replace(t, env=(line.replace(R_UUIDS[1], "GPU-gone").replace(",3", ""),))
    assert StoppingGpus(P).holds([other], [s], {}, [], FACTS) == []  # none of its node's
    templated = replace(t, env=(line, env_template(P)))  # docker reads the later line
    assert StoppingGpus(P).holds([templated], [s], {}, [], FACTS) == []


def test_a_same_node_repins_old_task_holds_the_gpus_it_runs_on_not_the_new_ones() -> None:
    """s runs on GPU 0 of n-4090; a repin writes GPU 1 into its ledger before Swarm stops
    the old task. Once it stops, GPU 0 (where its container still runs) is held. Before:
    the ledger of the cycle that first saw it stopping named GPU 1 only, and GPU 0 was
    free to any service."""
    s = sw_svc("s", {})
    t = _task("t-old", s, "n-4090", "running", "running")
    old = {"s": {"n-4090": Holding("s", "n-4090", (R_UUIDS[0],), (1000,))}}
    new = {"s": {"n-4090": Holding("s", "n-4090", (R_UUIDS[1],), (1000,))}}
    g = StoppingGpus(P)
    assert g.holds([], [s], old, [t], FACTS) == []
    assert g.holds([], [s], new, [t], FACTS) == []  # repinned: the old task runs on
    t_new = _task("t-new", s, "n-4090", "starting", "running")
    (n,) = g.holds([replace(t, desired_state="shutdown")], [s], new, [t_new], FACTS)
    assert n.uuids == (R_UUIDS[0],)


def _half_gpu_stopping() -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                                    SwarmTask]:
    """n-4090: filler holds seven GPUs, live half of the eighth, old's task (the other
    half) stops; frac (half an RTX 4090) pending. Nodes, services, tasks and old's task."""
    old = sw_svc("old", {f"{P}gpu-fraction": "0.5"}, replicas=0)
    live = sw_svc("live", {f"{P}gpu-fraction": "0.5"})
    filler = sw_svc("filler", {f"{P}gpus": "7"})
    frac = sw_svc("frac", {f"{P}gpu-fraction": "0.5", f"{P}gpu-product": "*RTX 4090*"})
    half = Holding("old", "n-4090", (R_UUIDS[0],), (500,))
    labels = {**_held("filler", "n-4090", R_UUIDS[1:]), gate_key(P, "live"): "true",
              assign_key(P, "live"): Holding("live", "n-4090", (R_UUIDS[0],), (500,))
              .label_value(), assign_key(P, "old"): half.label_value(),
              gate_key(P, "old"): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", labels)]
    tasks = [_task("t-filler", filler, "n-4090", "running", "running"),
             _task("t-live", live, "n-4090", "running", "running"),
             _task("t-frac", frac, "", "pending", "running")]
    t_old = _task("t-old", old, "n-4090", "running", "shutdown")
    services = [old, live, filler, frac]
    return nodes, services, tasks, t_old


def test_a_stopping_tasks_share_of_a_gpu_other_services_share_is_held() -> None:
    """n-4090: filler holds seven GPUs, live half of the eighth; old's task (the other
    half) stops. frac (half a GPU) waits for it. Before: only wholly free GPUs were
    held, and frac was placed on the half old's container still used."""
    nodes, services, tasks, t_old = _half_gpu_stopping()
    planner, cfg = Planner(prefix=P), Config()
    for _ in range(2):  # the cycle that releases old's holding, then the next
        plan = make_plan(_snap(nodes, services, tasks, [t_old]), cfg, planner=planner)
        by = {sp.name: sp for sp in plan.services}
        assert by["frac"].status == Status.PENDING and not by["frac"].placements, by["frac"]
        nodes = apply(nodes, plan)
    plan = make_plan(_snap(nodes, services, tasks, []), cfg, planner=planner)
    placed = {sp.name: sp for sp in plan.services}["frac"].placements
    assert [(p.node_id, p.uuids) for p in placed] == [("n-4090", (R_UUIDS[0],))]


def test_render_plans_beside_the_tasks_swarm_is_stopping(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`swarmgpu render` reads Swarm (a snapshot, stopping tasks included): gone's task,
    reserving 1.5 of node-a's 2 CPUs, stops there (the only node), so the rendered llm,
    reserving 1 CPU, waits. Before: render planned without the stopping tasks and wrote
    llm onto node-a, where Swarm left it pending until the task stopped."""
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.cli import manager as cli_manager
    from swarmgpu.swarm import client

    gone = _reserving("gone", 1500, "")
    facts = {"n-a": FactsResult("n-a", "n-a", "", FACTS["n-4090"], None, 1.0)}
    snap = Snapshot([cpu_node("n-a", "node-a")], [gone], [], facts,
                    stopping=[_task("t-gone", gone, "n-a", "running", "shutdown", 1500)])
    monkeypatch.setattr(cli_manager, "_snapshot", lambda cfg, _tenants, *_: snap)
    monkeypatch.setattr(client, "SwarmClient",
                        lambda *a, **k: RecordingSwarm(snap.nodes, snap.services, []))
    src, cfg = tmp_path / "ai.yml", tmp_path / "config.yml"
    src.write_text('version: "3.8"\nservices:\n  llm:\n    image: x\n    deploy:\n'
                   '      resources: {reservations: {cpus: "1"}}\n'
                   '      labels:\n        swarmgpu.gpus: "1"\n')
    cfg.write_text(f"state_dir: {tmp_path}\n")
    res = CliRunner().invoke(main, ["render", str(src), "--config", str(cfg)],
                             catch_exceptions=False)
    assert res.exit_code == 0 and "ai_llm is pending" in res.output, res.output
    assert R_UUIDS[0] not in res.output, res.output


class _TaskApi:
    """The engine's task list (the API's objects), filtered by desired state as Moby
    filters it; nodes, services and the swarm object empty."""

    def __init__(self, raw: list[dict[str, object]]) -> None:
        self.raw = raw

    def tasks(self, filters: dict[str, list[str]]) -> list[dict[str, object]]:
        want = filters.get("desired-state")
        return [t for t in self.raw if want is None or t["DesiredState"] in want]

    def nodes(self, **_: object) -> list[object]:
        return []

    def services(self, **_: object) -> list[object]:
        return []

    def inspect_swarm(self) -> dict[str, object]:
        return {}


def test_the_snapshot_parses_no_ended_task_of_swarms_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine filters the task list by desired state only: the stopping tasks' list
    holds every ended task Swarm keeps (5 per slot by default). Only the ones still on
    their node are parsed (benchmarks/bench_snapshot_history.py). Before: all 300 ended
    tasks were parsed each cycle to keep the one still running."""
    from swarmgpu.swarm import client as client_mod
    from swarmgpu.swarm.client import SwarmClient, task_from_api

    def raw(i: int, desired: str, state: str) -> dict[str, object]:
        return {"ID": f"t{i}", "ServiceID": "s", "NodeID": "n", "Slot": 1,
                "DesiredState": desired, "Status": {"State": state},
                "Spec": {"ContainerSpec": {"Image": "x"}}}

    tasks = [raw(0, "running", "running"), raw(1, "shutdown", "running"),
             *(raw(2 + i, ("shutdown", "remove")[i % 2], ("shutdown", "failed")[i % 2])
               for i in range(300))]
    parsed: list[str] = []

    def counted(t: dict[str, object]) -> SwarmTask:
        parsed.append(str(t["ID"]))
        return task_from_api(t)

    monkeypatch.setattr(client_mod, "task_from_api", counted)
    monkeypatch.setattr(sync, "fetch_agents", lambda *_a, **_k: {})
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", _TaskApi(tasks)
    snap = sync.take_snapshot(sw, Config())
    assert [t.id for t in snap.tasks] == ["t0"] and [t.id for t in snap.stopping] == ["t1"]
    assert sorted(parsed) == ["t0", "t1"]


def test_a_task_stopped_after_the_daemon_released_its_gpus_still_holds_them() -> None:
    """The daemon re-places old (now asking A100s) on n-dgx and releases its six RTX
    4090s in the same cycle, while its task still runs on them; Swarm stops that task
    after the write, so the next cycle sees it stopping with its entry already gone.
    new (2 RTX 4090s) waits for them all the same. Before: new was placed on two of the
    GPUs the stopping task still used (its ledger entry was gone when first seen)."""
    nodes, services, tasks, t_old = _scaled_down()
    old, filler, new = services
    running = replace(t_old, desired_state="running")
    planner, cfg = Planner(prefix=P), Config()
    plan = make_plan(_snap(nodes, [old, filler], [tasks[0], running], []), cfg,
                     planner=planner)
    nodes = apply(nodes, plan)
    a100 = replace(sw_svc("old", {f"{P}gpus": "6", f"{P}gpu-product": "*A100*"}), version=2)
    plan = make_plan(_snap(nodes, [a100, filler], [tasks[0], running], []), cfg,
                     planner=planner)
    assert [p.node_id for sp in plan.services if sp.name == "old"
            for p in sp.placements] == ["n-dgx"]
    nodes = apply(nodes, plan)
    assert assign_key(P, "old") not in nodes[2].labels  # released, its task still runs
    waiting = [tasks[0], replace(running, id="t-old-2", node_id="", state="pending",
                                 desired_state="ready"), tasks[1]]
    plan = make_plan(_snap(nodes, [a100, filler, new], waiting, [t_old]), cfg,
                     planner=planner)
    by = {sp.name: sp for sp in plan.services}
    assert by["new"].status == Status.PENDING and not by["new"].placements, by["new"]
    assert {("n-4090", u) for u in R_UUIDS[:6]} <= plan.stopping_held.keys()


def test_a_victim_stopped_by_a_write_to_its_spec_leaves_its_gpus_to_its_preemptor() -> None:
    """A job victim's spec is written (a new run): Swarm stops its task (desired shutdown,
    still running), not its constraint enforcer. The GPUs its preemptor's hold names stay
    the preemptor's (``spare``: held from every other service), the rest held from all
    while it stops. Before: all held, and the preemptor waited out the victim's grace
    period (real swarm: test_job_preempt_swarm)."""
    s = sw_svc("victim", {})
    t = _task("t-v", s, "n-4090", "running", "shutdown")
    h = Holding("victim", "n-4090", R_UUIDS[:2], (1000, 1000))
    g = StoppingGpus()
    g.holds([], [s], {"victim": {"n-4090": h}}, [replace(t, desired_state="running")])
    mine, n = g.holds([t], [s], {}, spare=[_hold(R_UUIDS[:1], s)])
    assert n.uuids == (R_UUIDS[1],) and not n.owner and g.spared == {
        ("n-4090", R_UUIDS[0]): "p"}
    assert (mine.uuids, mine.owner, mine.priority) == (R_UUIDS[:1], "p", STOPPING_PRIORITY)
    (mine,) = g.holds([t], [s], {}, spare=[_hold(R_UUIDS[:2], s)])
    assert (set(mine.uuids), mine.owner) == (set(R_UUIDS[:2]), "p")  # held from the others


def _new_instead(new: SwarmService, *, drain: bool = False) -> tuple[Planner, Snapshot]:
    """``_scaled_down`` with ``new`` in new's place, a cycle after old's holding went
    (its GPUs held for its stopping task, the ledger showing them free: the planner that
    saw the first cycle learned them), gpu-node-2 drained if ``drain``."""
    nodes, services, tasks, t_old = _scaled_down()
    planner, cfg = Planner(prefix=P), Config()
    nodes = apply(nodes, make_plan(_snap(nodes, services, tasks, [t_old]), cfg,
                                   planner=planner))
    assert assign_key(P, "old") not in nodes[2].labels
    if drain:
        nodes = [replace(n, availability="drain") if n.id == "n-4090" else n for n in nodes]
    services = [*services[:2], new]
    return planner, _snap(nodes, services, [tasks[0], _task("t-new", new, "", "pending",
                                                            "running")], [t_old])


def _constrained(name: str, labels: dict[str, str], rule: str) -> SwarmService:
    s = sw_svc(name, labels)
    spec = {**s.spec, "TaskTemplate": {**s.spec["TaskTemplate"], "Placement": {
        "Constraints": [*s.spec["TaskTemplate"]["Placement"]["Constraints"], rule]}}}
    return service_from_api({"ID": s.id, "Spec": spec,
                             "Version": {"Index": 1}})


def test_a_stopping_hold_where_the_service_could_not_run_anyway_is_not_named() -> None:
    """The six RTX 4090s held for old's stopping task are not why a service waits that
    asks for H100s, that a constraint keeps off gpu-node-2, or while gpu-node-2 is
    drained: no hold is named (before, each reason ended "; 6 GPUs of gpu-node-2 held
    for tasks Swarm is stopping there"). A service that could run there is told."""
    r4090 = {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*"}
    cases = [(sw_svc("h100", {f"{P}gpus": "2", f"{P}gpu-product": "*H100*"}), False),
             (_constrained("kept-off", r4090, "node.hostname!=gpu-node-2"), False),
             (sw_svc("drained", r4090), True)]
    for new, drain in cases:
        planner, snap = _new_instead(new, drain=drain)
        plan = make_plan(snap, Config(), planner=planner)
        sp = next(sp for sp in plan.services if sp.name == new.name)
        assert sp.status == Status.PENDING, sp
        assert "held for" not in (sp.reason or ""), (new.name, sp.reason)
    planner, snap = _new_instead(sw_svc("fits", r4090))
    plan = make_plan(snap, Config(), planner=planner)
    sp = next(sp for sp in plan.services if sp.name == "fits")
    assert (sp.reason or "").endswith(
        "; 6 GPUs of gpu-node-2 held for tasks Swarm is stopping there"), sp.reason


def test_a_held_share_of_a_gpu_is_said_as_a_share() -> None:
    """old's stopping task used half of an RTX 4090 (live the other half): frac, which
    waits for it, is told "0.50 of a GPU" is held, not "1 GPU" (before)."""
    nodes, services, tasks, t_old = _half_gpu_stopping()
    planner, cfg = Planner(prefix=P), Config()
    nodes = apply(nodes, make_plan(_snap(nodes, services, tasks, [t_old]), cfg, planner=planner))
    plan = make_plan(_snap(nodes, services, tasks, [t_old]), cfg, planner=planner)
    sp = next(sp for sp in plan.services if sp.name == "frac")
    assert sp.status == Status.PENDING, sp
    assert (sp.reason or "").endswith(
        "; 0.50 of a GPU of gpu-node-2 held for tasks Swarm is stopping there"), sp.reason


def test_a_service_swarm_cannot_run_is_not_told_of_a_hold() -> None:
    """placed holds a DGX GPU, but Swarm refuses its task there: it waits for Swarm, not
    for room, so the RTX 4090s held for old's stopping task are not named (before, its
    reason "Swarm cannot run its task: ..." ended with them)."""
    placed = sw_svc("placed", {f"{P}gpus": "1"})
    planner, snap = _new_instead(placed)
    nodes = [replace(n, labels={**n.labels, **_held("placed", "n-dgx", (DGX_F.gpus[0].uuid,))})
             if n.id == "n-dgx" else n for n in snap.nodes]
    refused = replace(_task("t-new", placed, "", "pending", "running"),
                      message="no suitable node (insufficient resources on 3 nodes)")
    snap = replace(snap, nodes=nodes, tasks=[snap.tasks[0], refused])
    sp = next(sp for sp in make_plan(snap, Config(), planner=planner).services
              if sp.name == "placed")
    assert sp.status == Status.PENDING, sp
    assert (sp.reason or "").startswith("Swarm cannot run its task"), sp.reason
    assert "held for" not in (sp.reason or ""), sp.reason


def _hold(uuids: tuple[str, ...], *victims: SwarmService) -> Nomination:
    """p's hold of ``uuids`` on n-4090, its preemption's victims ``victims``."""
    return Nomination("p", 100, "n-4090", uuids, victims=tuple(v.id for v in victims))


def test_a_stopping_task_no_hold_names_as_its_victim_keeps_its_gpus_held() -> None:
    """new's hold (its preemption, still settling) covers two of the six GPUs old's task
    still runs on, but old is no victim of it: old was scaled down on its own (a
    higher-priority service placed there and stopped within the settle time). Its GPUs
    stay held while it stops. Before, every stopping task on a hold's GPUs was spared:
    new was placed on two GPUs old's task still used."""
    nodes, services, tasks, t_old = _scaled_down()
    hold = Nomination("new", 100, "n-4090", R_UUIDS[:2])  # its victims: none of old
    planner = Planner(prefix=P)
    for _ in range(2):  # (the second: old's ledger entry gone)
        plan = make_plan(_snap(nodes, services, tasks, [t_old]), Config(), planner=planner,
                         nominated=[hold])
        by = {sp.name: sp for sp in plan.services}
        assert by["new"].status == Status.PENDING and not by["new"].placements, by["new"]
        nodes = apply(nodes, plan)
    assert {("n-4090", u) for u in R_UUIDS[:6]} <= plan.stopping_held.keys()
