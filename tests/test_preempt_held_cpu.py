"""A settling preemptor's CPU is counted on the node its hold names for the requests of
its priority or lower (``placement.heldroom``), as Kubernetes counts a nominated pod.
Before, a lower request short of CPU there only for the preemptor's job victim, still
stopping, waited for that CPU, which the preemptor then took: it preempted a grace
period late. Pure: the real planner and ``choose_preemptions`` over a forged snapshot."""

from __future__ import annotations

import pytest
from support.forged import DGX_F, R4090_F, reserving, sw_node, sw_svc

from swarmgpu.manager.placement import Holding, Planner, assign_key, gate_key
from swarmgpu.manager.placement.nominated import Nomination, holds_with_stopping
from swarmgpu.manager.placement.preempt import Candidate, Preemption, choose_preemptions
from swarmgpu.manager.placement.records import Status
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
D = tuple(g.uuid for g in DGX_F.gpus)
R = tuple(g.uuid for g in R4090_F.gpus)
FACTS = {"n-a": DGX_F, "n-b": R4090_F}


def _decide(low_priority: int, low_cpu: int) -> list[str]:
    """high (priority 100, 2 GPUs, 32 CPUs) preempted job on n-a (64 CPUs), whose task
    still stops there reserving 40; its hold names 2 DGX GPUs, it waits for the CPU.
    old (priority 0) holds all of n-b. low asks 1 GPU and ``low_cpu`` CPU milli."""
    h = Holding("old", "n-b", R, (1000,) * 8)
    nodes = [sw_node("n-a", "gpu-node-1"),
             sw_node("n-b", "gpu-node-2", {assign_key(P, "old"): h.label_value(),
                                           gate_key(P, "old"): "true"})]
    job = sw_svc("job", {f"{P}gpus": "2"}, mode={"ReplicatedJob": {}})
    old = sw_svc("old", {f"{P}gpus": "8"})
    high = reserving(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100"}), 32000)
    low = reserving(sw_svc("low", {f"{P}gpus": "1", f"{P}priority": str(low_priority)}),
                     low_cpu)
    services = [job, old, high, low]
    stop = SwarmTask("t-job", job.id, "n-a", 1, "running", "shutdown", (), cpu_milli=40000)
    tasks = [SwarmTask("t-old", old.id, "n-b", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ()),
             SwarmTask("t-low", low.id, "", 1, "pending", "running", ())]
    nom = Nomination("high", 100, "n-a", D[:2], victims=(job.id,), service_id=high.id)
    plan = Planner(prefix=P).plan(nodes, services, tasks, FACTS, stopping=[stop],
                                  nominated=[nom])
    by = {sp.name: sp.status for sp in plan.services}
    assert by["high"] == by["low"] == Status.PENDING, by
    return [p.describe() for p in choose_preemptions(
        plan, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100,
        settling={"high"}, stopping=[stop],
        held=holds_with_stopping([nom], plan))]


def test_a_lower_request_does_not_wait_for_cpu_its_settling_preemptor_takes() -> None:
    """low (priority 50, 40 CPUs) fits n-a once job's task stops, but not beside high's
    32: it preempts old on n-b now. Before: it waited for job's stop, and preempted old
    only once high had taken the CPU."""
    assert _decide(50, 40000) == [
        "preempt old (priority 0) on gpu-node-2 for low (priority 50)"]


@pytest.mark.parametrize(("priority", "cpu"), [
    (50, 30000),  # fits beside high's 32 once job's task stops: it waits for that
    (200, 40000),  # above high: placed before it, the CPU its own
])
def test_a_request_the_settling_preemptors_cpu_leaves_room_for_waits(priority: int,
                                                                    cpu: int) -> None:
    assert _decide(priority, cpu) == []


def test_a_higher_request_served_after_a_lower_one_does_not_count_the_preemptors_cpu(
        ) -> None:
    """A round that takes another round's choices first (``first``: ``preempt_notes``)
    serves low (priority 50, 30 CPUs) before top (priority 200, 34 CPUs). top fits n-a
    once job's task stops, high (priority 100) not counted for it: it waits. Before,
    high's 32 CPUs, counted for low, stayed counted for top, which preempted old2 on n-b
    for nothing."""
    r = tuple(g.uuid for g in R4090_F.gpus)
    h1, h2 = Holding("old1", "n-b", r[:4], (1000,) * 4), Holding("old2", "n-b", r[4:],
                                                                 (1000,) * 4)
    nodes = [sw_node("n-a", "gpu-node-1"),
             sw_node("n-b", "gpu-node-2", {assign_key(P, "old1"): h1.label_value(),
                                           gate_key(P, "old1"): "true",
                                           assign_key(P, "old2"): h2.label_value(),
                                           gate_key(P, "old2"): "true"})]
    job = sw_svc("job", {f"{P}gpus": "2"}, mode={"ReplicatedJob": {}})
    old1, old2 = sw_svc("old1", {f"{P}gpus": "4"}), sw_svc("old2", {f"{P}gpus": "4"})
    high = reserving(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100"}), 32000)
    low = reserving(sw_svc("low", {f"{P}gpus": "1", f"{P}priority": "50"}), 30000)
    top = reserving(sw_svc("top", {f"{P}gpus": "1", f"{P}priority": "200"}), 34000)
    services = [job, old1, old2, high, low, top]
    stop = SwarmTask("t-job", job.id, "n-a", 1, "running", "shutdown", (), cpu_milli=40000)
    tasks = [SwarmTask("t-old1", old1.id, "n-b", 1, "running", "running", ()),
             SwarmTask("t-old2", old2.id, "n-b", 1, "running", "running", ()),
             *(SwarmTask(f"t-{s.name}", s.id, "", 1, "pending", "running", ())
               for s in (high, low, top))]
    nom = Nomination("high", 100, "n-a", D[:2], victims=(job.id,), service_id=high.id)
    plan = Planner(prefix=P).plan(nodes, services, tasks, FACTS, stopping=[stop],
                                  nominated=[nom])
    assert {sp.name for sp in plan.services if sp.status == Status.PENDING} == {
        "high", "low", "top"}
    made = Preemption("low", low.id, 50, "n-b", "gpu-node-2",
                      (Candidate("old1", old1.id, "n-b", 0, "", h1.uuids, h1),))
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100, settling={"high"}, stopping=[stop],
                             held=holds_with_stopping([nom], plan), first=[made])
    assert [(p.service, [v.service for v in p.victims]) for p in got] == [("low", ["old1"])]


def _decide_beside_own(low_cpu: int) -> list[str]:
    """high (priority 100, 2 replicas of 2 GPUs and 16 CPUs, packed) runs one replica on
    n-a (64 CPUs) and preempted job there for the other, whose task still stops there
    reserving 40; its hold names 2 more DGX GPUs. old (priority 0) holds all of n-b. low
    asks 1 GPU and ``low_cpu`` CPU milli."""
    h = Holding("old", "n-b", R, (1000,) * 8)
    mine = Holding("high", "n-a", D[2:4], (1000,) * 2, (1, 1))  # (its replica in slot 1)
    nodes = [sw_node("n-a", "gpu-node-1", {assign_key(P, "high"): mine.label_value(),
                                           gate_key(P, "high"): "true"}),
             sw_node("n-b", "gpu-node-2", {assign_key(P, "old"): h.label_value(),
                                           gate_key(P, "old"): "true"})]
    job = sw_svc("job", {f"{P}gpus": "2"}, mode={"ReplicatedJob": {}})
    old = sw_svc("old", {f"{P}gpus": "8"})
    high = reserving(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100",
                                     f"{P}pack": "always"}, replicas=2), 16000)
    low = reserving(sw_svc("low", {f"{P}gpus": "1", f"{P}priority": "50"}), low_cpu)
    services = [job, old, high, low]
    stop = SwarmTask("t-job", job.id, "n-a", 1, "running", "shutdown", (), cpu_milli=40000)
    tasks = [SwarmTask("t-old", old.id, "n-b", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "n-a", 1, "running", "running", (),
                       cpu_milli=16000),
             SwarmTask("t-high2", high.id, "", 2, "pending", "running", ()),
             SwarmTask("t-low", low.id, "", 1, "pending", "running", ())]
    nom = Nomination("high", 100, "n-a", D[:2], victims=(job.id,), service_id=high.id)
    plan = Planner(prefix=P).plan(nodes, services, tasks, FACTS, stopping=[stop],
                                  nominated=[nom])
    by = {sp.name: sp for sp in plan.services}
    assert by["high"].status == by["low"].status == Status.PENDING, by
    assert by["high"].packed, by["high"]
    return [p.describe() for p in choose_preemptions(
        plan, nodes, services, tasks, FACTS, prefix=P, preemptible_below=100,
        settling={"high"}, stopping=[stop], held=holds_with_stopping([nom], plan))]


@pytest.mark.parametrize(("low_cpu", "want"), [
    # 48 CPUs once job's task stops, 32 beside high's held replica: low does not fit
    (40000, ["preempt old (priority 0) on gpu-node-2 for low (priority 50)"]),
    (30000, []),  # fits beside it: waits for job's stop
])
def test_a_packed_preemptor_running_on_its_holds_node_counts_the_replicas_it_holds_for(
        low_cpu: int, want: list[str]) -> None:
    """Before, a preemptor with a task on its hold's node was not counted at all (``Room``
    counts its running replica, not the one the hold is for): low waited for the CPU
    job's stop frees, which high's second replica then took."""
    assert _decide_beside_own(low_cpu) == want
