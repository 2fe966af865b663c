"""How long a ``topology`` preemptor's victim choice takes on one crowded 8-GPU node.

The worst case of ``placement.preempt``: a node holds 12 small victims (the most
``pick_victims`` weighs: ``MAX_CANDIDATES``), four on a whole GPU each and eight
sharing the other four GPUs in halves, and a pending request of priority 100 asks for
2 GPUs with ``topology: nvlink`` on the RTX 4090 capture, whose GPUs have no NVLink
between them. Nearly every one of the 4,095 victim sets frees 2 GPUs, and none gives the
request an NVLink pair, so each set's test asks the allocator for a GPU set
(``Allocator.gpu_set``) and none is chosen. Beside it, from the same run: the same node
and victims with a plain 2-GPU request (no topology: the first set that frees 2 GPUs
is taken, no allocator asked), and two topology cases that do find victims or not
(``numa`` for 5 GPUs on the 4090, more than a NUMA node has; ``numa`` for 4 GPUs on
the DGX A100 capture, whose NUMA nodes the victims' halves straddle).

Timed: ``choose_preemptions`` alone (the plan is made once before), the fastest of
``--repeat`` runs, in ms per node (the choice is made per node: a cluster of N such
nodes takes N times as long for each pending topology preemptor).

    python benchmarks/bench_preempt_topology.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from loguru import logger  # noqa: E402
from support.forged import DGX_F, R4090_F, sw_node, sw_svc  # noqa: E402

from swarmgpu.core.config import Config, PreemptionConfig  # noqa: E402
from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.cycle.placement import make_plan  # noqa: E402
from swarmgpu.manager.nodes.sync import Snapshot  # noqa: E402
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key  # noqa: E402
from swarmgpu.manager.placement.preempt import choose_preemptions  # noqa: E402
from swarmgpu.swarm.client import SwarmTask  # noqa: E402

P = "swarmgpu."
CFG = Config(preemption=PreemptionConfig(dry_run=False))


def crowded() -> dict[str, tuple[int, int]]:
    """Victim -> (GPU index, milli): four whole GPUs, then four GPUs shared in halves."""
    held = {f"w{i}": (i, 1000) for i in range(4)}
    for i in range(4, 8):
        held |= {f"a{i}": (i, 500), f"b{i}": (i, 500)}
    return held


def case(facts: NodeFacts, gpus: int, topology: str, repeat: int,
         ) -> tuple[float, list[list[str]]]:
    """(the fastest ``choose_preemptions`` in seconds, the victims it chose)."""
    uuids = [g.uuid for g in facts.gpus]
    labels: dict[str, str] = {}
    svcs = []
    for name, (i, milli) in crowded().items():
        h = Holding(name, "n", (uuids[i],), (milli,))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
        ask = {P + "gpus": "1"} if milli == 1000 else {P + "gpu-fraction": str(milli / 1000)}
        svcs.append(sw_svc(name, {**ask, P + "priority": "0", devices_key(P, "n"): uuids[i]}))
    svcs.append(sw_svc("high", {P + "gpus": str(gpus), P + "priority": "100",
                                **({P + "topology": topology} if topology else {})}))
    tasks = [SwarmTask(f"t-{s.name}", s.id, "" if s.name == "high" else "n", 1,
                       "pending" if s.name == "high" else "running", "running", ())
             for s in svcs]
    snap = Snapshot([sw_node("n", "gpu-node-1", labels)], svcs, tasks, {})
    on = {"n": facts}
    plan = make_plan(snap, CFG, on)
    best, got = float("inf"), []
    for _ in range(repeat):
        t = time.perf_counter()
        out = choose_preemptions(plan, snap.nodes, snap.services, snap.tasks, on, prefix=P,
                                 preemptible_below=CFG.preemption.preemptible_below)
        best = min(best, time.perf_counter() - t)
        got = [sorted(v.service for v in p.victims) for p in out]
    return best, got


CASES = (
    ("reference: plain 2 GPUs, RTX 4090", R4090_F, 2, ""),
    ("worst: nvlink 2 GPUs, RTX 4090 (no NVLink)", R4090_F, 2, "nvlink"),
    ("numa 5 GPUs, RTX 4090 (4 per NUMA node)", R4090_F, 5, "numa"),
    ("numa 4 GPUs, DGX A100", DGX_F, 4, "numa"),
    ("numa 2 GPUs, RTX 4090", R4090_F, 2, "numa"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per case; the fastest counts")
    args = ap.parse_args()
    logger.remove()  # the planner's log lines would drown the figures
    print(f"{'case':<46} {'ms/node':>9}  victims")
    for name, facts, gpus, topo in CASES:
        s, victims = case(facts, gpus, topo, args.repeat)
        print(f"{name:<46} {s * 1000:9.1f}  {victims or 'none'}")


if __name__ == "__main__":
    main()
