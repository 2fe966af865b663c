"""The victim rule's "most recently started", for a holder with no task on its node yet
(placed this cycle, or its task not made yet): it has started nothing, so it is the
newest and loses no work, as kube-scheduler reads a pod with no start time as started
now (``util.GetPodStartTime``). Before, its start read "" and sorted as the oldest: it
was stopped last among its equals, after services that had run for hours. Pure: the
lists as Swarm answers them."""

from __future__ import annotations

from support.forged import FACTS, R_UUIDS, held_labels, sw_node, sw_svc

from swarmgpu.manager.placement import Planner, devices_key
from swarmgpu.manager.placement.preempt import Candidate, choose_preemptions, rule_sorted
from swarmgpu.manager.placement.records import Status
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."


def test_a_victim_placed_this_cycle_goes_before_its_running_equals() -> None:
    """v1..v7 hold one RTX 4090 each and run, started in that order; fresh (priority 0
    too) is placed this cycle on the eighth. hi (priority 100) needs two GPUs: the two
    newest go, fresh (started nothing) and v7, not v7 and v6."""
    names = [f"v{i}" for i in range(1, 8)]
    labels: dict[str, str] = {}
    for name, u in zip(names, R_UUIDS[:7], strict=True):
        labels |= held_labels(name, "n-4090", u)
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2", labels)]
    held = [sw_svc(n, {f"{P}gpus": "1", devices_key(P, "n-4090"): u, f"{P}priority": "0"})
            for n, u in zip(names, R_UUIDS[:7], strict=True)]
    product = {f"{P}gpu-product": "*RTX 4090*"}
    fresh = sw_svc("fresh", {f"{P}gpus": "1", f"{P}priority": "0", **product})
    hi = sw_svc("hi", {f"{P}gpus": "2", f"{P}priority": "100", **product})
    tasks = [SwarmTask(f"t-{s.name}", s.id, "n-4090", 1, "running", "running", (),
                       created_at=f"2026-01-01T10:0{i}:00Z") for i, s in enumerate(held)]
    services = [*held, fresh, hi]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    status = {sp.name: sp.status for sp in plan.services}
    assert (status["fresh"], status["hi"]) == (Status.PLACED, Status.PENDING)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [(p.service, sorted(v.service for v in p.victims)) for p in got] == [
        ("hi", ["fresh", "v7"])]


def test_the_rule_ranks_a_holder_not_started_first_among_its_priority() -> None:
    """Lowest priority first; within it, not started ("") before the newest start."""
    def c(name: str, priority: int, started: str) -> Candidate:
        return Candidate(name, "id-" + name, "n", priority, started, ("u-" + name,))
    got = rule_sorted([c("old", 0, "2026-01-01T09:00:00Z"), c("low", -1, "2026-01-01T08:00:00Z"),
                       c("new", 0, "2026-01-01T10:00:00Z"), c("none", 0, ""),
                       c("high", 5, "")])
    assert [x.service for x in got] == ["low", "none", "new", "old", "high"]


def test_across_nodes_the_most_recently_started_victim_goes_before_the_hostname() -> None:
    """Both nodes are full of priority 0 holders, one GPU each: gpu-node-1's started at
    9:00, gpu-node-2's at 10:00. hi (priority 100, one GPU of any product) preempts the
    newest, on gpu-node-2, as the module's rule says ("across nodes the same order,
    then the hostname"); before, the hostname came right after the priorities and
    gpu-node-1's 9:07 holder went."""
    labels: dict[str, dict[str, str]] = {"n-dgx": {}, "n-4090": {}}
    held, tasks = [], []
    for nid, hour in (("n-dgx", 9), ("n-4090", 10)):
        for i, g in enumerate(FACTS[nid].gpus):
            name = f"{nid}-v{i}"
            labels[nid] |= held_labels(name, nid, g.uuid)
            s = sw_svc(name, {f"{P}gpus": "1", devices_key(P, nid): g.uuid,
                              f"{P}priority": "0"})
            held.append(s)
            tasks.append(SwarmTask(f"t-{name}", s.id, nid, 1, "running", "running", (),
                                   created_at=f"2026-01-01T{hour:02}:0{i}:00Z"))
    nodes = [sw_node("n-dgx", "gpu-node-1", labels["n-dgx"]),
             sw_node("n-4090", "gpu-node-2", labels["n-4090"])]
    hi = sw_svc("hi", {f"{P}gpus": "1", f"{P}priority": "100"})
    services = [*held, hi]
    plan = Planner().plan(nodes, services, tasks, FACTS)
    got = choose_preemptions(plan, nodes, services, tasks, FACTS, prefix=P,
                             preemptible_below=100)
    assert [(p.service, p.hostname, [v.service for v in p.victims]) for p in got] == [
        ("hi", "gpu-node-2", ["n-4090-v7"])]
