"""How long one preemption round (``placement.preempt.choose_preemptions``) takes on a
big cluster whose pending services each hold one node and would be packed there
(``preemptview.spread_packs`` reads their task slots).

The cluster: ``--nodes`` RTX 4090 nodes (the 8-GPU ``topo -m`` capture); on each, a
service of 2 replicas and priority 100 holds GPU 0 with its one running task (its
second replica waits: no GPU is free anywhere) and seven services of priority 0 hold
the other GPUs, every service with its running task and ``--history`` shut-down ones
(Swarm keeps a task history: 5 by default). Each of the ``--nodes`` preemptors reads
its slots on its node, and stops one holder there.

Timed: ``choose_preemptions`` on the plan (made once before) in CPU seconds, the
fastest of ``--repeat``; beside it, in the same process and alternated with it, the
reference: each preemptor's slots read from every task of the snapshot (``Round.
tasks_of`` giving all of them: the code before stop 78). Both must choose the same
preemptions (else it stops).
Stop 78, on the 2-core machine with other runs on it (load 4 to 6), CPU seconds, 200
nodes, 1,600 services, 200 preemptions, one run each: a history of 4 (8,000 tasks),
with the index 5.17 s, reference 5.05 (within the noise: the round is the victim search
on every node for every preemptor, not the walk); a history of 40 (65,600 tasks), 5.90
vs 6.48 (the walk 200 x 65,600 tasks, gone).

    python benchmarks/bench_preempt_scale.py [--nodes 200] [--history 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from support.forged import held_labels, sw_node, sw_svc  # noqa: E402
from support.gpu_nodes import RTX4090  # noqa: E402

from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.placement import Planner, devices_key  # noqa: E402
from swarmgpu.manager.placement.preempt import Preemption, choose_preemptions  # noqa: E402
from swarmgpu.manager.placement.preemptview import Round  # noqa: E402
from swarmgpu.manager.placement.records import PlacementPlan  # noqa: E402
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask  # noqa: E402

P = "swarmgpu."


def _facts(k: int, base: NodeFacts) -> NodeFacts:
    """gpu-node-``k``: the capture with its own hostname and GPU UUIDs."""
    return replace(base, hostname=f"gpu-node-{k}", gpus=tuple(
        replace(g, uuid=f"{g.uuid[:-6]}{k:03d}{g.index:03d}") for g in base.gpus))


def cluster(n_nodes: int, history: int
            ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                       dict[str, NodeFacts]]:
    """The nodes, services, tasks and facts described above."""
    base = RTX4090.facts()
    nodes, svcs, tasks, facts = [], [], [], {}
    for k in range(n_nodes):
        nid, f = f"n{k}", _facts(k, base)
        facts[nid] = f
        labels: dict[str, str] = {}
        for i, g in enumerate(f.gpus):
            name = f"m{k}" if i == 0 else f"s{k}-{i}"
            labels |= held_labels(name, nid, g.uuid)
            s = sw_svc(name, {f"{P}gpus": "1", f"{P}priority": "100" if i == 0 else "0",
                              devices_key(P, nid): g.uuid}, replicas=2 if i == 0 else 1)
            svcs.append(s)
            tasks.append(SwarmTask(f"t-{name}", s.id, nid, 1, "running", "running", (),
                                   created_at=f"2026-01-01T10:00:0{i}Z"))
            tasks += [SwarmTask(f"t-{name}-old{h}", s.id, nid, 1, "shutdown", "shutdown",
                                ()) for h in range(history)]
        nodes.append(sw_node(nid, f"gpu-node-{k}", labels))
    return nodes, svcs, tasks, facts


def once(plan: PlacementPlan, snap: tuple[list[SwarmNode], list[SwarmService],
                                          list[SwarmTask], dict[str, NodeFacts]],
         scan: bool) -> tuple[float, list[Preemption]]:
    """(``choose_preemptions``' CPU seconds, its preemptions); ``scan``: each
    preemptor's slots read from every task of the snapshot (the reference)."""
    real = Round.tasks_of

    def every(self: Round, service_id: str) -> Sequence[SwarmTask]:  # tasks_of's names
        return self.tasks

    if scan:
        Round.tasks_of = every  # type: ignore[method-assign]
    try:
        nodes, svcs, tasks, facts = snap
        t = time.process_time()
        got = choose_preemptions(plan, nodes, svcs, tasks, facts, prefix=P,
                                 preemptible_below=100)
        return time.process_time() - t, got
    finally:
        Round.tasks_of = real  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--history", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    snap = cluster(args.nodes, args.history)
    plan = Planner().plan(*snap)
    # alternated, the fastest of each: the machine's other load falls on both alike
    runs = [(once(plan, snap, True), once(plan, snap, False)) for _ in range(args.repeat)]
    ref_s, ref = min((r for r, _ in runs), key=lambda r: r[0])
    got_s, got = min((g for _, g in runs), key=lambda g: g[0])
    if got != ref:
        raise SystemExit("the two rounds differ: the index changed a decision")
    print(f"{args.nodes} nodes, {len(snap[1])} services, {len(snap[2])} tasks, "
          f"{len(got)} preemptions; fastest of {args.repeat}: choose_preemptions "
          f"{got_s:.3f} s; reference, every task walked per preemptor {ref_s:.3f} s (CPU)")


if __name__ == "__main__":
    main()
