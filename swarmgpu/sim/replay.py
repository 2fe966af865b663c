"""Replaying a pod trace against a cluster, as the FGD paper's simulator does.

Pods are sorted by name and shuffled with the seed; resampled copies are appended until
the arrived GPU demand would pass ``inflate`` (130%) of the cluster's GPU-milli. Each pod
is tried once in that order and either placed or dropped; pods never leave. Node order
for equal scores is a per-seed random permutation. At each arrived-load level (5% steps)
the GPU allocation ratio, the fragmentation ratio and failed pods by kind are recorded.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.fragmentation import FragCache, TypicalTask
from swarmgpu.allocator.scorer import Scorer
from swarmgpu.allocator.values import Choice, Demand, NodeSpec
from swarmgpu.sim.baselines import BestFitScorer, DotProdScorer, FgdScorer, PackingScorer
from swarmgpu.sim.limits import DaemonLimits
from swarmgpu.sim.rebalance import Move, Rebalancer, Running, apply_moves
from swarmgpu.sim.runs import (
    DEFRAG_EVERY,
    LEVEL_STEP,
    METER_EVERY,
    RunResult,
    arrival_order,
    meter,
    pod_kind,
    workload_of,
)
from swarmgpu.sim.swarm_sched import SwarmScheduler
from swarmgpu.sim.trace import TracePod

POLICIES = ("swarmgpu", "random", "bestfit", "dotprod", "packing", "fgd")


def make_scorer(policy: str, workload: tuple[TypicalTask, ...]) -> Scorer:
    """The baselines' node scorers. swarmgpu has none here: it runs through the daemon's
    own planner (``sim.swarm_replay``), so its figures are the daemon's."""
    if policy == "swarmgpu":
        raise ValueError("swarmgpu replays through the daemon's planner: sim.swarm_replay")
    if policy == "fgd":
        return FgdScorer(workload)
    if policy == "fgd-unrounded":
        return FgdScorer(workload, rounded=False)
    if policy == "bestfit":
        return BestFitScorer()
    if policy == "packing":
        return PackingScorer()
    if policy == "dotprod":
        return DotProdScorer()
    raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")


def build_allocator(nodes: Sequence[NodeSpec], scorer: Scorer, rng: random.Random) -> Allocator:
    alloc = Allocator(scorer)
    ranks = list(range(len(nodes)))
    rng.shuffle(ranks)  # the original prefixes node names with a random permutation
    for node, rank in zip(sorted(nodes, key=lambda n: n.name), ranks, strict=True):
        alloc.add_node(node, rank=rank)
    return alloc


def cluster_frag_milli(alloc: Allocator, frag: FragCache) -> float:
    return sum(frag(n.product, n.cpu_left or 0, tuple(n.free)) for n in alloc.nodes.values())


def place_random(alloc: Allocator, d: Demand, rng: random.Random) -> Choice | None:
    feasible = [n for n in alloc.nodes.values() if alloc.fits(n, d)]
    if not feasible:
        return None
    node = feasible[rng.randrange(len(feasible))]
    elig = alloc.eligible_gpus(node, d)
    if d.gpu_milli:
        cands = [i for i in elig if node.free[i] >= d.gpu_milli]
        gpus: tuple[int, ...] = (cands[rng.randrange(len(cands))],)
        milli: tuple[int, ...] = (d.gpu_milli,)
    else:
        whole = [i for i in elig if node.free[i] >= 1000]
        gpus = tuple(sorted(rng.sample(whole, d.num_gpu)))
        milli = tuple(1000 for _ in gpus)
    return Choice(node.spec.name, gpus, milli, 0.0, "random", d.cpu_milli, d.memory_mib)


# (allocator, running tasks, moves allowed now) -> moves made (already committed on the
# allocator); called between arrivals
Defrag = Callable[[Allocator, Running, int], list[Move]]


def replay(nodes: Sequence[NodeSpec], pods: Sequence[TracePod], policy: str, seed: int,
           *, inflate: float = 1.3, timing: bool = False,
           rebalancer: Rebalancer | None = None, moves_per_100: float = 0.0,
           defrag: Defrag | None = None, defrag_every: int = DEFRAG_EVERY,
           cpu_pods: str = "policy", limits: DaemonLimits | None = None) -> RunResult:
    """One no-departure replay; returns the metrics per arrived-load level.

    Moves are allowed at most ``moves_per_100`` per 100 arrived pods over the run so far
    (counted in ``moves``): by ``defrag`` every ``defrag_every`` arrivals, and by
    ``rebalancer`` for a pod that finds no node.

    ``cpu_pods``: ``policy`` places a CPU-only pod by the policy's allocator, as any
    pod; ``swarm`` by Swarm's scheduler (``sim.swarm_sched``), as in the product, and
    then such a pod is Swarm's: no move takes it or makes room for it.
    ``limits``: the daemon's budgets ``defrag`` and ``rebalancer`` share (``sim.limits``),
    told the arrivals so far.
    """
    import time

    if policy == "swarmgpu":
        if rebalancer is not None or defrag is not None:
            raise ValueError("swarmgpu's moves replay through the planner: "
                             "sim.swarm_replay.replay_planner(defrag=...)")
        from swarmgpu.sim.swarm_replay import replay_planner

        return replay_planner(nodes, pods, seed, inflate=inflate, timing=timing,
                              cpu_pods=cpu_pods)
    cluster_milli = sum(len(n.gpus) for n in nodes) * 1000
    order, rng = arrival_order(pods, cluster_milli, seed, inflate)
    workload = workload_of(pods)
    frag = FragCache(workload)
    scorer = make_scorer("bestfit" if policy == "random" else policy, workload)
    alloc = build_allocator(nodes, scorer, rng)
    res = RunResult(policy, seed, pods=len(order))
    failed: Counter[str] = Counter()
    arrived = allocated = 0
    next_level = LEVEL_STEP
    last_level = int(inflate * 100)
    demands: dict[TracePod, Demand] = {}
    sched = SwarmScheduler(seed) if cpu_pods == "swarm" else None

    def record(level: int) -> None:
        res.alloc_pct_at[level] = 100.0 * allocated / cluster_milli
        res.frag_pct_at[level] = 100.0 * cluster_frag_milli(alloc, frag) / cluster_milli
        res.failed_at[level] = dict(failed)
        res.moves_at[level] = res.moves

    running: Running = {}
    for n_arrived, pod in enumerate(order, start=1):
        if n_arrived % METER_EVERY == 0:
            meter(n_arrived, len(order))
        d = demands.get(pod)
        if d is None:
            d = demands[pod] = pod.demand()
        arrived += pod.total_gpu_milli
        if limits is not None:
            limits.now = n_arrived
        t0 = time.perf_counter() if timing else 0.0
        swarms = sched is not None and pod.total_gpu_milli == 0  # Swarm's, not the policy's
        if sched is not None and swarms:
            choice: Choice | None = sched.pick(alloc, d)
        elif policy == "random":
            choice = place_random(alloc, d, rng)
        else:
            got = alloc.place(d, explain=False)
            choice = got if isinstance(got, Choice) else None
        if timing:
            res.decision_s.append(time.perf_counter() - t0)
        if choice is None and rebalancer is not None and not swarms:
            budget = int(n_arrived * moves_per_100 / 100) - res.moves
            rescue = rebalancer(alloc, running, d, budget) if budget >= 1 else None
            if rescue is not None:
                res.moves += apply_moves(running, rescue.moves)
                running.setdefault(rescue.placed.node, {})[n_arrived] = (d, rescue.placed)
                if sched is not None:
                    sched.moved((mv.old.node, mv.new.node) for mv in rescue.moves)
                    sched.add(rescue.placed.node)
                allocated += pod.total_gpu_milli
                res.placed += 1
                continue_level = True
            else:
                continue_level = False
        else:
            continue_level = False
        if continue_level:
            pass
        elif choice is None:
            failed[pod_kind(pod)] += 1
            res.failed_one(n_arrived)
        else:
            alloc.commit(choice)
            if (rebalancer is not None or defrag is not None) and not swarms:
                running.setdefault(choice.node, {})[n_arrived] = (d, choice)
            if sched is not None:
                sched.add(choice.node)
            allocated += pod.total_gpu_milli
            res.placed += 1
        if defrag is not None and n_arrived % defrag_every == 0:
            budget = int(n_arrived * moves_per_100 / 100) - res.moves
            if budget >= 1:
                made = defrag(alloc, running, budget)
                res.moves += apply_moves(running, made)
                if sched is not None:
                    sched.moved((mv.old.node, mv.new.node) for mv in made)
        while next_level <= last_level and arrived * 100 >= next_level * cluster_milli:
            record(next_level)
            next_level += LEVEL_STEP
    while next_level <= last_level:  # the last copy may stop just short of the cap
        record(next_level)
        next_level += LEVEL_STEP
    return res
