"""How long one rebalance plan (``rebalance.planner.plan_moves``) takes on a 200-node
cluster, defrag's search making room for pending requests.

The cluster: ``--nodes`` RTX 4090 nodes (the 8-GPU ``topo -m`` capture), each with six
services holding a whole GPU and two holding half of GPUs 6 and 7, every service one
replica with its running task and ``--history`` shut-down ones (Swarm keeps a task
history: 5 by default); ``--pending`` services wait for two whole GPUs, each of which
defrag makes room for by moving two halves. Metrics read idle on every node.

Timed: ``plan_moves`` on the snapshot in CPU seconds, the fastest of ``--repeat``;
beside it, in the same process and alternated with it, the reference: the same plan
with each check on an allocator built for it (``Context.fresh_trials``, the code before
stop 78; ``--reference scan``: each service's tasks also found by a walk over every task
of the snapshot, ``Context.tasks_of`` scanning, the code before stop 77); both must
propose the same moves with the same reasons and notes (else it stops). The
reference builds one for consolidation's searches too, which stop 77 already kept.
Stop 77, on the 2-core machine with other runs on it (load 3 to 5), CPU seconds, the
default 200 nodes (1,605 services, 8,000 tasks): defrag alone (``--policies defrag``,
10 moves), the code before the index 3.2 s (its reference 3.2), with it 1.1 s
(reference 2.9); every policy (222 moves, one run), before 15.4 s, with it 13.2 s
(reference 16.2): the rest was consolidation's ledger copies and allocators, one each
move it weighed. With consolidation weighing its moves on one kept allocator (stop 77,
load 7 to 8): every policy 1.8 s (reference 4.3), the code before 19.1 s (reference
19.3), the same 222 moves.
Stop 78, defrag's search, its movers' targets and its last check on the kept
allocator (``Context.trial``), its movers' room kept in step across commits (load 5
to 13, one run each): defrag alone, the code before 0.94 s (its reference, tasks
walked, 2.87), with it 0.31 s (reference, allocators built per check, 1.06); every
policy, before 1.63 s (reference 3.65), with it 0.82 s (reference 9.18: consolidation's
allocators built per move too), the same 10 and 222 moves.

    python benchmarks/defrag_scale.py [--nodes 200] [--pending 5] [--history 4] [--repeat 3]
                                      [--policies defrag] [--reference fresh|scan]
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

from support.gpu_nodes import RTX4090  # noqa: E402
from support.rebalance import CFG, P, page  # noqa: E402
from support.rebalance import node as rebalance_node  # noqa: E402
from support.rebalance import service as rebalance_service  # noqa: E402

from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.placement import read_ledger  # noqa: E402
from swarmgpu.manager.rebalance import context  # noqa: E402
from swarmgpu.manager.rebalance.context import Inputs  # noqa: E402
from swarmgpu.manager.rebalance.moves import Proposal  # noqa: E402
from swarmgpu.manager.rebalance.planner import plan_moves  # noqa: E402
from swarmgpu.manager.rebalance.scrape import judge  # noqa: E402
from swarmgpu.manager.rebalance.signals import Signals  # noqa: E402
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask  # noqa: E402


def _facts(k: int, base: NodeFacts) -> NodeFacts:
    """gpu-node-``k``: the capture with its own hostname and GPU UUIDs."""
    return replace(base, hostname=f"gpu-node-{k}", gpus=tuple(
        replace(g, uuid=f"{g.uuid[:-6]}{k:03d}{g.index:03d}") for g in base.gpus))


def cluster(n_nodes: int, n_pending: int, history: int
            ) -> tuple[list[SwarmNode], list[SwarmService], list[SwarmTask],
                       dict[str, NodeFacts]]:
    """The nodes, services (pending first), tasks and facts described above."""
    base = RTX4090.facts()
    svcs = [rebalance_service(f"p{i}", {f"{P}gpus": "2"}) for i in range(n_pending)]
    nodes, tasks, facts = [], [], {}
    for k in range(n_nodes):
        nid, f = f"n{k}", _facts(k, base)
        facts[nid] = f
        labels: dict[str, str] = {}
        for i in range(8):
            name = f"s{k}-{i}"
            whole = i < 6
            share = f.gpus[i].uuid if whole else f"{f.gpus[i].uuid}@500"
            labels.update({f"{P}assign.{name}": share, f"{P}service.{name}": "true"})
            svcs.append(rebalance_service(
                name, {f"{P}gpus": "1"} if whole else {f"{P}gpu-fraction": "0.5"}))
            tasks.append(SwarmTask(f"t-{name}", f"id-{name}", nid, 1, "running",
                                   "running", ()))
            tasks += [SwarmTask(f"t-{name}-old{h}", f"id-{name}", nid, 1, "shutdown",
                                "shutdown", ()) for h in range(history)]
        nodes.append(rebalance_node(nid, f"gpu-node-{k}", labels))
    return nodes, svcs, tasks, facts


def inputs(n_nodes: int, n_pending: int, history: int, policies: str) -> Inputs:
    """The snapshot, its metrics read idle for the signals' windows; ``policies``: the
    config's ``rebalance.policies`` (empty: the default)."""
    nodes, svcs, tasks, facts = cluster(n_nodes, n_pending, history)
    sig = Signals(CFG)
    ledger = read_ledger(nodes, P)
    pages = {n.id: page(facts[n.id], {}) for n in nodes}
    hosts = {n.id: n.hostname for n in nodes}
    for t in (float(t) for t in range(13)):
        sig.observe({n.id: judge(n, "http://x/metrics", pages[n.id], t) for n in nodes},
                    facts, hosts, ledger, t)
    cfg = replace(CFG, policies=policies) if policies else CFG
    return Inputs(nodes, svcs, tasks, facts, ledger, sig.gpus, sig.nodes, cfg, 12.0,
                  [f"p{i}" for i in range(n_pending)], P)


def once(inp: Inputs, scan: bool, fresh: bool = False) -> tuple[float, Proposal]:
    """(``plan_moves``'s CPU seconds, its proposal); ``scan``: each service's tasks read
    by a walk over every task of the snapshot (before stop 77; where no index exists,
    the code is that already); ``fresh``: each check on an allocator built for it
    (``Context.fresh_trials``, before stop 78)."""
    real = getattr(context.Context, "tasks_of", None)
    had = getattr(context.Context, "fresh_trials", False)

    def scanned(self: context.Context, service_id: str) -> Sequence[SwarmTask]:
        return [t for t in self.inp.tasks if t.service_id == service_id]

    if scan and real is not None:
        context.Context.tasks_of = scanned  # type: ignore[method-assign]
    context.Context.fresh_trials = fresh or had
    try:
        t = time.process_time()
        prop = plan_moves(inp)
        return time.process_time() - t, prop
    finally:
        context.Context.fresh_trials = had
        if real is not None:
            context.Context.tasks_of = real  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--pending", type=int, default=5)
    ap.add_argument("--history", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policies", default="", help="rebalance.policies (default: all)")
    ap.add_argument("--reference", choices=("fresh", "scan"), default="fresh",
                    help="fresh: each check on an allocator built for it (before stop "
                         "78); scan: that and each service's tasks walked (before 77)")
    args = ap.parse_args()
    inp = inputs(args.nodes, args.pending, args.history, args.policies)
    scan = args.reference == "scan"
    # alternated, the fastest of each: the machine's other load falls on both alike
    runs = [(once(inp, scan, True), once(inp, False)) for _ in range(args.repeat)]
    ref_s, ref = min((r for r, _ in runs), key=lambda r: r[0])
    got_s, got = min((g for _, g in runs), key=lambda g: g[0])
    key = [(m.service, m.source_node, m.target_node, m.reason) for m in got.moves]
    if key != [(m.service, m.source_node, m.target_node, m.reason) for m in ref.moves] \
            or got.notes != ref.notes:
        raise SystemExit("the two plans differ: the fast path changed a decision")
    what = ("allocators built per check, every task walked per service" if scan
            else "an allocator built per check")
    print(f"{args.nodes} nodes, {len(inp.services)} services, {len(inp.tasks)} tasks, "
          f"{len(got.moves)} moves; fastest of {args.repeat}: plan_moves {got_s:.3f} s; "
          f"reference, {what} {ref_s:.3f} s (CPU)")


if __name__ == "__main__":
    main()
