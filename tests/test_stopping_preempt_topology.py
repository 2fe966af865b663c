"""A ``topology`` request (nvlink) that a node lacks a set for only while a task Swarm is
stopping there holds one of its GPUs waits for that task, as a plain request does: the
task ends within its grace period and completes the set, and no running service is
stopped for it (``preempt._gpus_once_stopped``). Past the hold's end it preempts as
before. Pure: the real planner and ``Preempter.decide`` over a forged snapshot."""

from __future__ import annotations

from dataclasses import replace

from support.forged import R4090_F, sw_node, sw_svc
from support.placement import apply

from swarmgpu.core.config import Config, PreemptionConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, Planner, Status, assign_key, gate_key
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."
# four RTX 4090s NVLinked in pairs: 0-1 and 2-3
PAIRS_F = replace(R4090_F, gpus=R4090_F.gpus[:4], links=tuple(
    tuple("X" if i == j else "NV4" if i // 2 == j // 2 else "SYS" for j in range(4))
    for i in range(4)))
U = tuple(g.uuid for g in PAIRS_F.gpus)
FACTS: dict[str, NodeFacts] = {"n-pairs": PAIRS_F}
CFG = Config(preemption=PreemptionConfig(dry_run=False))


def _held(name: str, uuids: tuple[str, ...]) -> dict[str, str]:
    h = Holding(name, "n-pairs", uuids, tuple(1000 for _ in uuids))
    return {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}


def _cluster(old_on: int = 1, held: dict[str, int] | None = None,
             ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask], SwarmTask]:
    """old held GPU ``old_on`` and was scaled to 0 (its task stops, desired shutdown,
    still running); ``held`` (by default low on GPU 2) holds those GPUs, one each: low
    (priority 0) may be preempted, filler may not; the rest are free. high (priority
    100) asks for an NVLinked pair."""
    old = sw_svc("old", {f"{P}gpus": "1"}, replicas=0)
    high = sw_svc("high", {f"{P}gpus": "2", f"{P}topology": "nvlink", f"{P}priority": "100"})
    labels, services, tasks = _held("old", (U[old_on],)), [old, high], []
    for name, i in (held or {"low": 2}).items():
        s = sw_svc(name, {f"{P}gpus": "1", **({f"{P}preemptible": "false"}
                                              if name == "filler" else {})})
        labels |= _held(name, (U[i],))
        services.append(s)
        tasks.append(SwarmTask(f"t-{name}", s.id, "n-pairs", 1, "running", "running", ()))
    tasks.append(SwarmTask("t-high", high.id, "", 1, "pending", "running", ()))
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-pairs", "gpu-pairs", labels)]
    t_old = SwarmTask("t-old", old.id, "n-pairs", 1, "running", "shutdown", ())
    return nodes, services, tasks, t_old


def _cycles(nodes: list[SwarmNode], services: list[SwarmService], tasks: list[SwarmTask],
            t_old: SwarmTask) -> tuple[list[list[tuple[str, list[str]]]], list[str]]:
    """Three cycles while old's task (10 s grace period) stops: first seen at 1000 s, at
    1065 s, and at 1100 s (past its hold's end and a minute of skew): each cycle's
    preemptions (preemptor, victims), and high's pending reason."""
    results = {"n-pairs": FactsResult("n-pairs", "gpu-pairs", "", PAIRS_F, None, 1.0)}
    planner, got, reasons = Planner(prefix=P), [], []
    for now in (1000.0, 1065.0, 1100.0):
        snap = replace(Snapshot(nodes, services, tasks, results, swarm_labels={}),
                       stopping=[t_old])
        plan = planner.plan(snap.nodes, snap.services, snap.tasks, FACTS, now=now,
                            stopping=[t_old])
        chosen = Preempter(CFG).decide(snap, plan, FACTS, None, now, None, {})
        got.append([(p.service, [v.service for v in p.victims]) for p in chosen])
        (sp,) = [sp for sp in plan.services if sp.name == "high"]
        assert sp.status == Status.PENDING
        reasons.append(sp.reason or "")
        nodes = apply(nodes, plan)
    return got, reasons


def test_an_nvlink_request_waits_for_the_stopping_task_whose_gpu_completes_its_pair(
        ) -> None:
    """old's task stops on GPU 1, the pair of free GPU 0 (free GPU 3's pair is low's):
    high waits for it while its hold lasts, pending for that hold by name (once old's
    ledger entry is gone), and low runs on. Past the hold's end (the container may never
    stop) high preempts low, as it did at once before."""
    got, reasons = _cycles(*_cluster())
    assert got == [[], [], [("high", ["low"])]]
    assert "1 GPU of gpu-pairs held for tasks Swarm is stopping there" in reasons[1], reasons


def test_an_nvlink_request_a_stopping_gpu_pairs_with_no_free_one_still_preempts() -> None:
    """old's task stops on GPU 3, whose pair filler (not preemptible) holds; GPU 0 is
    free, low holds its pair: the stopping GPU gives high no pair, so low goes at once."""
    got, _reasons = _cycles(*_cluster(3, {"low": 1, "filler": 2}))
    assert got[0] == [("high", ["low"])]
