"""The victims stopped for a ``topology`` preemptor (nvlink, numa) free a set the
allocator would give it (``Allocator.gpu_set``, as ``preempt._gpu_pick`` holds it), not
just enough GPUs: counted by number alone, victims whose GPUs (with the free ones) form
no such set were stopped and the preemptor still could not be placed. Pure: the real
planner and ``choose_preemptions`` over a forged snapshot."""

from __future__ import annotations

from support.forged import R4090_F, sw_node, sw_svc

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s: GPUs 0-3 on NUMA node 0, 4-7 on 1
FACTS = {"n-4090": R4090_F}
CFG = Config(preemption=PreemptionConfig(dry_run=False))


def _choose(held: dict[str, tuple[tuple[str, ...], int]], want: dict[str, str],
            ) -> list[Preemption]:
    """n-4090's holders ``held`` (GPUs, priority; filler is not preemptible); high
    (priority 100, 2 GPUs, labels ``want``) waits: the preemptions chosen for it."""
    labels: dict[str, str] = {}
    svcs = []
    for name, (uuids, prio) in held.items():
        h = Holding(name, "n-4090", uuids, (1000,) * len(uuids))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
        svcs.append(sw_svc(name, {f"{P}gpus": str(len(uuids)), f"{P}priority": str(prio),
                                  devices_key(P, "n-4090"): ",".join(uuids),
                                  **({f"{P}preemptible": "false"} if name == "filler"
                                     else {})}))
    svcs.append(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100", **want}))
    tasks = [SwarmTask(f"t-{s.name}", s.id, "" if s.name == "high" else "n-4090", 1,
                       "pending" if s.name == "high" else "running", "running", ())
             for s in svcs]
    snap = Snapshot([sw_node("n-4090", "gpu-node-2", labels)], svcs, tasks, {})
    plan = make_plan(snap, CFG, FACTS)
    assert [sp.status for sp in plan.services if sp.name == "high"] == ["pending"]
    return choose_preemptions(plan, snap.nodes, snap.services, snap.tasks, FACTS, prefix=P,
                              preemptible_below=CFG.preemption.preemptible_below)


def test_a_numa_preemptor_stops_the_victim_whose_gpus_share_a_numa_node() -> None:
    """low (priority 0) holds GPUs 0 and 4 (a NUMA node each), mid (priority 10) GPUs 1
    and 2 (NUMA node 0), filler the rest. Before, low went (one victim, the lowest
    priority): high, on one NUMA node, still could not be placed on 0 and 4. Now mid."""
    (p,) = _choose({"low": ((R[0], R[4]), 0), "mid": ((R[1], R[2]), 10),
                    "filler": ((R[3], R[5], R[6], R[7]), 0)}, {f"{P}topology": "numa"})
    assert [v.service for v in p.victims] == ["mid"]
    assert sorted(p.held) == sorted((R[1], R[2]))


def test_a_numa_preemptor_stops_nothing_when_no_victim_set_leaves_it_a_numa_pair() -> None:
    """Only low, across the NUMA nodes, may go: before, it was stopped for nothing."""
    assert _choose({"low": ((R[0], R[4]), 0), "filler": (R[1:4] + R[5:], 0)},
                   {f"{P}topology": "numa"}) == []


def test_a_plain_preemptor_still_stops_the_lowest_priority_victim() -> None:
    """Without a topology, any two GPUs do: low goes, as before."""
    (p,) = _choose({"low": ((R[0], R[4]), 0), "mid": ((R[1], R[2]), 10),
                    "filler": ((R[3], R[5], R[6], R[7]), 0)}, {})
    assert [v.service for v in p.victims] == ["low"]


def test_an_nvlink_preemptor_stops_nothing_on_a_node_without_nvlink() -> None:
    """n-4090's GPUs have no NVLink between them: no victim set gives high a pair. Before,
    low was stopped for nothing."""
    assert _choose({"low": ((R[0], R[4]), 0), "mid": ((R[1], R[2]), 10),
                    "filler": ((R[3], R[5], R[6], R[7]), 0)}, {f"{P}topology": "nvlink"}) == []
