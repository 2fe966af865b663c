"""The departures and priorities replays place the trace's CPU-only pods as the plain
replay does (since stop 68): each is a ``swarmgpu.gpus: "0"`` service the planner holds
by its CPU and memory, never a task the planner's allocator puts on a node directly (the
stand-in no daemon runs, ``World.add_cpu_task``)."""

from __future__ import annotations

import pytest
from support.sim import node_spec, trace_pod

from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.sim.cli_entry import run_simulate, unused_option
from swarmgpu.sim.priorities import replay_priorities
from swarmgpu.sim.swarm_replay import World, replay_departures_planner
from swarmgpu.sim.trace import TracePod


def cpu_pod(name: str, start: int, end: int, cpu_milli: int) -> TracePod:
    return TracePod(name, cpu_milli, 1024, 0, 0, (), start, end)


def planner_placed(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The trace pods the planner placed as ``gpus: "0"`` services (read from the plans
    the replay applies); the stand-in, if called, fails the test."""
    placed: set[str] = set()
    apply = World.apply

    def record(self: World, plan: PlacementPlan) -> None:
        for sp in plan.services:
            pod = self.pods.get(sp.name)
            if pod is not None and sp.placements and sp.request is not None \
                    and sp.request.cpu_only:
                placed.add(pod.name)
        apply(self, plan)

    def stand_in(*_args: object) -> None:
        raise AssertionError("a CPU-only pod placed by the stand-in (World.add_cpu_task)")

    monkeypatch.setattr(World, "apply", record)
    monkeypatch.setattr(World, "add_cpu_task", stand_in)
    return placed


# One node of 2 GPUs and 8 CPUs: g1 takes 1 CPU, c1 6; c2 (6) finds no room while c1
# runs; c1 leaves at 50, and c3 (arriving at 70) gets its CPU back.
NODES = [node_spec("n", 2, 8000)]
PODS = [trace_pod("g1", 0, 1000), cpu_pod("c1", 1, 50, 6000), cpu_pod("c2", 2, 60, 6000),
        cpu_pod("c3", 70, 80, 6000)]


def test_the_departures_replay_places_cpu_only_pods_through_the_planner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    placed = planner_placed(monkeypatch)
    r = replay_departures_planner(NODES, PODS, 1, batch=1)
    assert placed == {"c1", "c3"}
    # c2 is tried once and dropped, as any pod of this replay; c1's job gave its CPU back
    assert r.placed == 3 and r.failed == {"cpu": 1}
    assert r.failed_gpu_milli == 0


def test_the_priorities_replay_places_cpu_only_pods_through_the_planner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    placed = planner_placed(monkeypatch)
    r = replay_priorities(NODES, PODS, 1, share=0.0, priorities=False, drain_s=1000)
    assert placed == {"c1", "c2", "c3"}
    # c2 waits (as a pending service does) until c1 leaves; the GPU classes count g1 alone
    cpu = r.cpu.to_dict()
    assert cpu["pods"] == 3 and cpu["started"] == 3 and cpu["never_started"] == 0
    assert max(r.cpu.waits) >= 48
    assert sum(c.pods for c in r.classes.values()) == 1
    assert r.to_dict()["cpu_pods"] == cpu


def test_cpu_pods_policy_is_taken_with_departures_and_priorities_swarm_is_refused() -> None:
    base = {"policies": ["swarmgpu"], "bound": "off", "online_at": 0}
    for departures, priorities in ((True, False), (False, True)):
        mode = {"departures": departures, "priorities": priorities}
        assert unused_option({"--cpu-pods"}, cpu_pods="policy", **mode, **base) is None
        why = unused_option({"--cpu-pods"}, cpu_pods="swarm", **mode, **base)
        assert why is not None and why.startswith("--cpu-pods swarm applies without")
        assert 'as gpus: "0" services' in why
    text, rc = run_simulate("n.csv", "p.csv", ["fgd"], [1], False, None, True, cpu_pods="swarm")
    assert rc == 2 and text.startswith("--cpu-pods swarm applies without --departures")
