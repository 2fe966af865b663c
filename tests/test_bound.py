"""The upper bound of `simulate` (sim.bound): against the exact optimum found by brute
force on small instances, against every policy's replay, and on the openb figure
computed outside the project (default, seed 42, 100% arrived: 96.908%)."""

from __future__ import annotations

import itertools
import random
from functools import cache

import pytest

from swarmgpu.allocator.fragmentation import product_matches
from swarmgpu.allocator.values import GpuSpec, NodeSpec
from swarmgpu.sim.bound import DUAL_SCALE, certify, forced_unfit, linear_bound, upper_bound
from swarmgpu.sim.bound_model import build, maximal_patterns, node_patterns, node_types
from swarmgpu.sim.bound_runs import placed_all
from swarmgpu.sim.report import run_bounds, run_many, summary
from swarmgpu.sim.runs import arrival_order, level_prefixes
from swarmgpu.sim.trace import TracePod, load_nodes, load_pods
from swarmgpu.sim.traces import bundled


def node(name: str, gpus: int, model: str = "T4", cpu: int = 32_000, mem: int = 65_536) -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, model, 0) for i in range(gpus)), cpu, mem)


def pod(
    name: str,
    num_gpu: int,
    milli: int,
    cpu: int = 1000,
    mem: int = 1024,
    spec: tuple[str, ...] = (),
) -> TracePod:
    return TracePod(name, cpu, mem, num_gpu, milli, spec)


def brute_force(nodes: list[NodeSpec], pods: list[TracePod], forced: int = 0) -> int | None:
    """The most GPU-milli any placement of a subset of ``pods`` reaches: every pod is
    dropped or placed on every node and GPU it fits (whole GPUs on free ones). The first
    ``forced`` pods may not be dropped (CPU-only ones among them take CPU and memory):
    None when they cannot all be placed."""
    todo = [(p, i < forced) for i, p in enumerate(pods) if p.total_gpu_milli or i < forced]
    never = -(1 << 60)

    @cache
    def best(i: int, state: tuple[tuple[int, int, tuple[int, ...]], ...]) -> int:
        if i == len(todo):
            return 0
        p, must = todo[i]
        out = never if must else best(i + 1, state)  # dropped
        for k, (cpu, mem, free) in enumerate(state):
            spec = nodes[k]
            if cpu < p.cpu_milli or mem < p.memory_mib:
                continue
            if p.num_gpu and not product_matches(spec.gpus[0].product, p.gpu_spec):
                continue
            options: set[tuple[int, ...]] = set()
            if not p.num_gpu:
                options.add(free)
            elif 0 < p.gpu_milli < 1000:
                for g, f in enumerate(free):
                    if f >= p.gpu_milli:
                        options.add(tuple(sorted((*free[:g], f - p.gpu_milli, *free[g + 1 :]))))
            else:
                whole = [g for g, f in enumerate(free) if f == 1000]
                for pick in itertools.combinations(whole, p.num_gpu):
                    options.add(tuple(sorted(0 if g in pick else f for g, f in enumerate(free))))
            for nf in options:
                nxt = (*state[:k], (cpu - p.cpu_milli, mem - p.memory_mib, nf), *state[k + 1 :])
                out = max(out, p.total_gpu_milli + best(i + 1, nxt))
        return out

    start = tuple((n.cpu_milli or 0, n.memory_mib or 0, tuple(1000 for _ in n.gpus)) for n in nodes)
    got = best(0, start)
    return got if got >= 0 else None


SHARES = (110, 160, 230, 320, 470, 500, 550, 650, 810)


def random_instance(
    rng: random.Random, distinct_nodes: bool
) -> tuple[list[NodeSpec], list[TracePod]]:
    nodes = []
    for i in range(rng.randint(1, 3)):
        gpus = rng.choice((1, 2, 4))
        model = rng.choice(("T4", "V100"))
        cpu = rng.choice((4000, 8000, 32_000)) + (i if distinct_nodes else 0)
        nodes.append(node(f"n{i}", gpus, model, cpu, rng.choice((8192, 65_536))))
    pods = []
    for j in range(rng.randint(2, 7)):
        kind = rng.random()
        spec = (rng.choice(("T4", "V100")),) if rng.random() < 0.2 else ()
        cpu, mem = rng.choice((500, 2000, 6000)), rng.choice((1024, 6144))
        if kind < 0.5:
            pods.append(pod(f"p{j}", 1, rng.choice(SHARES), cpu, mem, spec))
        elif kind < 0.8:
            pods.append(pod(f"p{j}", 1, 1000, cpu, mem, spec))
        elif kind < 0.95:
            pods.append(pod(f"p{j}", rng.choice((2, 4)), 1000, cpu, mem, spec))
        else:
            pods.append(pod(f"p{j}", 0, 0, cpu, mem))
    return nodes, pods


@pytest.mark.parametrize("seed", range(40))
def test_the_integer_bound_is_the_optimum_when_every_node_differs(seed: int) -> None:
    """With one node per type nothing is aggregated: the integer program is placement
    itself, so its bound is the brute-force optimum; the linear one is at least that."""
    nodes, pods = random_instance(random.Random(seed), distinct_nodes=True)
    assert all(t.count == 1 for t in node_types(nodes))
    exact = brute_force(nodes, pods)
    b = upper_bound(nodes, pods, method="mip")
    assert b.method == "mip"
    assert b.milli == exact, (nodes, pods)
    assert b.lp_milli >= b.milli


@pytest.mark.parametrize("seed", range(40))
def test_the_bounds_are_at_least_the_optimum(seed: int) -> None:
    """Nodes alike are aggregated (their CPU and memory summed): the bound can only
    rise above the optimum, never fall below it."""
    rng = random.Random(1000 + seed)
    nodes, pods = random_instance(rng, distinct_nodes=False)
    nodes = nodes + [
        node(f"m{i}", n.gpus.__len__(), n.gpus[0].product, n.cpu_milli or 0, n.memory_mib or 0)
        for i, n in enumerate(nodes)
        if rng.random() < 0.5
    ]
    exact = brute_force(nodes, pods)
    b = upper_bound(nodes, pods, method="mip")
    assert b.lp_milli >= b.milli >= exact
    assert upper_bound(nodes, pods).milli == b.lp_milli


def test_where_aggregating_cpu_loosens_the_bound() -> None:
    """Two nodes of 3 cores and two 2-core pods: one pod per node, but the per-type sum
    (6 cores) would hold both plus more. Documented as relaxed (docs/simulate.md)."""
    nodes = [node("a", 2, cpu=3000), node("b", 2, cpu=3000)]
    pods = [pod("p", 1, 1000, cpu=2000), pod("q", 1, 1000, cpu=2000), pod("r", 1, 1000, cpu=2000)]
    assert brute_force(nodes, pods) == 2000
    assert upper_bound(nodes, pods, method="mip").milli == 3000


def test_shares_stay_on_one_gpu_and_multi_gpu_pods_on_one_node() -> None:
    nodes = [node("a", 2), node("b", 2)]
    # Three 0.6 shares: one per GPU at most, though 1.8 GPUs of capacity is free beside.
    assert upper_bound(nodes, [pod(f"s{i}", 1, 600) for i in range(5)], method="mip").milli == 2400
    # A 4-GPU pod never fits a 2-GPU node, though 4 GPUs are free in all.
    assert upper_bound(nodes, [pod("m", 4, 1000)], method="mip").milli == 0
    assert upper_bound(nodes, [pod("m", 4, 1000)]).milli == 0
    # gpu_spec: a pod pinned to a model the cluster lacks places nowhere.
    assert upper_bound(nodes, [pod("v", 1, 1000, spec=("V100",))]).milli == 0


def test_patterns_are_the_maximal_ones() -> None:
    pats = maximal_patterns({500: 2, 300: 3, 200: 5})
    assert pats is not None
    for q in pats:
        used = 500 * q[0] + 300 * q[1] + 200 * q[2]
        assert used <= 1000 and used > 800  # nothing of 200 or more still fits
    assert (2, 0, 0) in pats and (0, 2, 2) in pats and (1, 1, 1) in pats
    assert maximal_patterns({50: 20, 60: 16, 70: 14}, limit=10) is None
    assert node_patterns(8, [2, 8]) == [
        ((k2, k8), 8 - 2 * k2 - 8 * k8)
        for k2 in range(5)
        for k8 in range(2)
        if 2 * k2 + 8 * k8 <= 8
    ]


def test_any_duals_give_a_bound() -> None:
    """Weak duality holds for every nonnegative dual vector, not only the optimal one."""
    nodes = [node("a", 2), node("b", 4, "V100")]
    pods = [pod("s", 1, 470), pod("t", 1, 320), pod("w", 1, 1000), pod("m", 2, 1000)]
    b = build(nodes, pods)
    numerator, duals = linear_bound(b)
    exact = brute_force(nodes, pods)
    assert numerator // DUAL_SCALE >= exact
    rng = random.Random(3)
    for _ in range(20):
        d = [rng.randrange(0, 3 * DUAL_SCALE) for _ in duals]
        assert certify(b, d) // DUAL_SCALE >= exact


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The real trace's first 30 nodes and 250 pods, in its own format."""
    tmp = tmp_path_factory.mktemp("trace")
    out = []
    for src, n in zip(bundled("default"), (30, 250), strict=True):
        lines = open(src).read().splitlines()  # noqa: SIM115
        dst = tmp / src.name
        dst.write_text("\n".join(lines[: n + 1]) + "\n")
        out.append(str(dst))
    return out[0], out[1]


def test_no_policy_passes_the_bound(small_trace: tuple[str, str]) -> None:
    nodes, pods = small_trace
    policies = ["swarmgpu", "fgd", "bestfit", "dotprod", "packing", "random"]
    results = run_many(nodes, pods, policies, [1, 2], workers=1)
    bounds = run_bounds(nodes, pods, results, workers=1)
    s = summary(results, bounds)
    assert any(b.solved for b in bounds)  # not every level is the trivial one
    for b in bounds:
        for name in policies:
            r = next(r for r in results[name] if r.seed == b.seed)
            for lv, pct in r.alloc_pct_at.items():
                assert pct <= b.alloc_pct_at[lv] + 1e-9, (name, b.seed, lv)
                if placed_all(r, lv):
                    assert b.alloc_pct_at[lv] == pytest.approx(pct)
    for v in s["policies"].values():
        assert all(g >= -1e-9 for g in v["gap_pct_at"].values())
    assert set(s["bound"]["alloc_pct_at"]) == set(s["policies"]["fgd"]["alloc_pct_at"])


def test_the_prefixes_are_the_replays_levels(small_trace: tuple[str, str]) -> None:
    """The bound is solved for the very pods that had arrived when a replay recorded the
    level: with nothing failing the replay's allocation equals their GPU-milli."""
    nodes_p, pods_p = small_trace
    nodes, pods = load_nodes(nodes_p), load_pods(pods_p)
    cluster = sum(len(n.gpus) for n in nodes) * 1000
    order, _ = arrival_order(pods, cluster, 3)
    prefix = level_prefixes(order, cluster)
    (r,) = run_many(nodes_p, pods_p, ["fgd"], [3], workers=1)["fgd"]
    for lv, n in prefix.items():
        if placed_all(r, lv):
            assert r.alloc_pct_at[lv] == pytest.approx(
                100.0 * sum(p.total_gpu_milli for p in order[:n]) / cluster
            )


@pytest.fixture(scope="module")
def openb_100() -> tuple[list[NodeSpec], list[TracePod]]:
    n, p = bundled("default")
    nodes, pods = load_nodes(n), load_pods(p)
    cluster = sum(len(x.gpus) for x in nodes) * 1000
    order, _ = arrival_order(pods, cluster, 42)
    return nodes, order[: level_prefixes(order, cluster)[100]]


def test_openb_default_seed_42_at_100(openb_100: tuple[list[NodeSpec], list[TracePod]]) -> None:
    """The figure computed outside the project: 8,313 pods arrived (7,207 GPU pods:
    3,128 shares, 4,003 single GPUs, 76 multi-GPU), and a cutting-stock optimum of
    96.908%. The integer bound is that; the linear one 0.001 points above it."""
    nodes, arrived = openb_100
    gpu = [p for p in arrived if p.total_gpu_milli]
    assert (len(arrived), len(gpu)) == (8313, 7207)
    assert sum(1 for p in gpu if p.gpu_milli < 1000) == 3128
    assert sum(1 for p in gpu if p.gpu_milli == 1000 and p.num_gpu == 1) == 4003
    cluster = sum(len(x.gpus) for x in nodes) * 1000
    # (HiGHS's time limit is wall-clock: the product's 300 s, passed on a machine shared
    # by other work, left it unsolved once; the figure is what is checked here, not time)
    b = upper_bound(nodes, arrived, method="mip", mip_seconds=3600.0)
    assert round(100 * b.milli / cluster, 3) == 96.908
    assert b.mip_best_milli == b.milli  # solved to optimality
    assert round(100 * b.lp_milli / cluster, 3) == 96.909


# ---- the departures replay's bound (sim.bound_timed) ----------------------------------


def test_the_timed_bound_is_the_demand_where_nothing_is_solved(
    small_trace: tuple[str, str],
) -> None:
    """Its sweep of what is asked over time is the replays' own window: with no span
    solved, its mean is the replay's mean demand."""
    from swarmgpu.sim.bound_timed import timed_bound
    from swarmgpu.sim.timeline import replay_departures

    nodes_p, pods_p = small_trace
    nodes, pods = load_nodes(nodes_p), load_pods(pods_p)
    r = replay_departures(nodes, pods, "bestfit", 1, speedup=50.0)
    b = timed_bound(nodes, pods, 50.0, solve_from=10.0)  # never solves
    assert not b.solved
    assert b.mean_alloc_pct == pytest.approx(r.mean_demand_pct, rel=1e-9)
    assert b.mean_alloc_pct >= r.mean_alloc_pct and b.peak_alloc_pct >= r.peak_alloc_pct


@pytest.mark.parametrize("speedup", [300.0, 3000.0])
def test_no_policy_passes_the_timed_bound(small_trace: tuple[str, str], speedup: float) -> None:
    from swarmgpu.sim.bound_timed import timed_bound
    from swarmgpu.sim.report import run_timed

    nodes_p, pods_p = small_trace
    b = timed_bound(load_nodes(nodes_p), load_pods(pods_p), speedup, solve_from=0.0)
    assert len(b.solved) == b.spans  # every span solved: the packing bound, not demand
    results = run_timed(
        nodes_p,
        pods_p,
        ["swarmgpu", "fgd", "bestfit", "random"],
        [1, 2],
        speedup=speedup,
        workers=1,
    )
    for name, runs in results.items():
        for r in runs:
            assert r.mean_alloc_pct <= b.mean_alloc_pct + 1e-9, name
            assert r.peak_alloc_pct <= b.peak_alloc_pct + 1e-9, name
            assert b.mean_alloc_pct <= r.mean_demand_pct + 1e-9


def test_the_timed_bound_peak_holds_at_every_arrival_instant() -> None:
    """A replay's peak is read as it places each pod, so at the last arrival too, and
    with a pod that leaves as it arrives still counted: the bound's peak holds there
    (it stopped at the last span's start, missed zero-length pods, and was 0 when every
    pod arrived at once, below the replays' 100%)."""
    from swarmgpu.sim.bound_timed import timed_bound
    from swarmgpu.sim.timeline import replay_departures

    nodes = [node("n", 2, cpu=32_000)]

    def timed(name: str, arrive: int, leave: int) -> TracePod:
        return TracePod(name, 1000, 1024, 1, 1000, (), arrive, leave)

    def two(name: str, arrive: int, leave: int) -> TracePod:
        return TracePod(name, 1000, 1024, 2, 1000, (), arrive, leave)

    cases = [
        [timed("a", 0, 1000), timed("b", 10, 1000)],  # the peak at the last arrival
        [timed("a", 0, 1000), two("b", 5, 5), timed("c", 10, 1000)],  # b: no lifetime
        [timed("a", 0, 1000), timed("b", 0, 1000)],  # every pod at once: no window
    ]
    for pods in cases:
        r = replay_departures(nodes, pods, "bestfit", 1)
        for solve_from in (0.0, 10.0):  # solved, and what is asked alone
            b = timed_bound(nodes, pods, solve_from=solve_from)
            assert r.peak_alloc_pct <= b.peak_alloc_pct + 1e-9, (pods, solve_from)
            assert r.mean_alloc_pct <= b.mean_alloc_pct + 1e-9
    # on 3 GPUs b's instant is the peak: a and b hold all 3 (a and c 2 at the end)
    pods = [timed("a", 0, 1000), two("b", 5, 5), timed("c", 10, 1000)]
    r = replay_departures([node("n", 3)], pods, "bestfit", 1)
    assert r.peak_alloc_pct == timed_bound([node("n", 3)], pods).peak_alloc_pct == 100.0


# ---- the online bound: a prefix of the arrivals forced in -----------------------------


@pytest.mark.parametrize("seed", range(40))
def test_the_forced_bound_is_the_optimum_when_every_node_differs(seed: int) -> None:
    """Forcing the first f pods in (CPU-only ones included, as consumers): with one node
    per type the integer bound is the brute-force optimum over placements holding them,
    never above the offline one; where they cannot all be placed it says so."""
    rng = random.Random(7000 + seed)
    nodes, pods = random_instance(rng, distinct_nodes=True)
    f = rng.randint(1, len(pods))
    exact = brute_force(nodes, pods, forced=f)
    b = upper_bound(nodes, pods, method="mip", forced=pods[:f])
    if exact is None:  # they do not all fit: only solutions leaving one out, at 10^6 each
        assert b.milli < 0 and b.unfit
        return
    assert not b.unfit
    assert b.milli == exact, (nodes, pods, f)
    assert b.lp_milli >= exact and b.short < 1e-6
    assert b.milli <= upper_bound(nodes, pods, method="mip").milli
    assert upper_bound(nodes, pods, forced=pods[:f]).milli == b.lp_milli


@pytest.mark.parametrize("seed", range(20))
def test_the_forced_bounds_are_at_least_the_optimum(seed: int) -> None:
    """Nodes alike pooled: the forced bound can only rise above the optimum."""
    rng = random.Random(8000 + seed)
    nodes, pods = random_instance(rng, distinct_nodes=False)
    nodes = nodes + [
        node(f"m{i}", len(n.gpus), n.gpus[0].product, n.cpu_milli or 0, n.memory_mib or 0)
        for i, n in enumerate(nodes)
        if rng.random() < 0.5
    ]
    f = rng.randint(1, len(pods))
    exact = brute_force(nodes, pods, forced=f)
    if exact is not None:
        b = upper_bound(nodes, pods, method="mip", forced=pods[:f])
        assert b.lp_milli >= b.milli >= exact


def test_forced_cpu_only_pods_take_cpu() -> None:
    """A forced CPU-only pod holds 3 of the node's 4 cores: the 2-core GPU pod after it
    no longer fits, though offline (the CPU-only pod left out) it does."""
    nodes = [node("a", 1, cpu=4000)]
    pods = [pod("c", 0, 0, cpu=3000), pod("g", 1, 1000, cpu=2000)]
    assert upper_bound(nodes, pods).milli == 1000
    assert upper_bound(nodes, pods, method="mip", forced=pods[:1]).milli == 0
    assert upper_bound(nodes, pods, forced=pods[:1]).milli == 500  # the LP: half a pod
    # nodes without a GPU take forced CPU-only pods (they are counted in then)
    more = [*nodes, NodeSpec("cpu", (), 4000, 65_536)]
    assert upper_bound(more, pods, forced=pods[:1]).milli == 1000


def test_forced_pods_that_cannot_all_fit_are_short() -> None:
    nodes = [node("a", 1)]
    pods = [pod("s", 1, 810), pod("t", 1, 810), pod("u", 1, 160)]
    assert upper_bound(nodes, pods, forced=pods[:1]).milli == 970
    b = upper_bound(nodes, pods, forced=pods[:2])
    assert b.short > 0.5 and b.milli < 0 and b.unfit
    # the price of leaving one out makes the bound negative there; where it does not,
    # the program with placed pods worth nothing proves it (sim.bound.forced_unfit)
    assert forced_unfit(nodes, pods, pods[:2]) and not forced_unfit(nodes, pods, pods[:1])
    assert not upper_bound(nodes, pods, forced=pods[:1]).unfit


@pytest.mark.parametrize("moves", [None, 2.0])
def test_no_policy_passes_its_online_bound(
    small_trace: tuple[str, str], moves: float | None
) -> None:
    """Each replay, moves included, stays at or below the bound forced with every pod
    before its own first failure, which is at most the offline bound; the first failure
    is where the replay's failure counts start; the "all placed by F%" row bounds every
    replay that failed nothing by F."""
    nodes_p, pods_p = small_trace
    nodes, pods = load_nodes(nodes_p), load_pods(pods_p)
    cluster = sum(len(n.gpus) for n in nodes) * 1000
    policies = ["swarmgpu", "fgd", "bestfit", "random"]
    results = run_many(nodes_p, pods_p, policies, [1, 2], moves=moves, workers=1)
    bounds = run_bounds(nodes_p, pods_p, results, workers=1, online_at=80)
    s = summary(results, bounds)
    forced_rows = 0
    for b in bounds:
        order, _ = arrival_order(pods, cluster, b.seed)
        prefix = level_prefixes(order, cluster)
        assert b.online_at == 80
        for name in policies:
            r = next(r for r in results[name] if r.seed == b.seed)
            assert r.first_failed, name  # the small trace overflows: every policy fails
            for lv, n in prefix.items():
                assert (sum(r.failed_at[lv].values()) > 0) == (n >= r.first_failed)
            own = b.policy_online_pct_at[name]
            for lv, pct in own.items():
                assert pct is not None
                assert r.alloc_pct_at[lv] <= pct + 1e-9, (name, b.seed, lv)
                assert pct <= b.alloc_pct_at[lv] + 1e-9
            if r.first_failed > prefix[80]:
                forced_rows += 1
                for lv, pct in b.online_pct_at.items():
                    assert pct is not None and r.alloc_pct_at[lv] <= pct + 1e-9
    assert forced_rows  # some replay placed everything to 80%: the row was checked
    assert any(b.online_pct_at[130] < b.alloc_pct_at[130] - 1e-6 for b in bounds)
    for name in policies:
        v = s["policies"][name]
        assert all(g >= -1e-9 for g in v["online_gap_pct_at"].values())
        assert set(v["by_seed"]["1"]) >= {"first_failed_pct", "online_bound_pct_at"}
    assert s["online_bound"]["forced_to_pct"] == 80


def test_policies_failing_first_at_the_same_pod_share_one_forced_solve(
    small_trace: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from swarmgpu.sim import bound_runs

    nodes_p, pods_p = small_trace
    calls: list[tuple[int, int]] = []
    real = bound_runs.online_bound

    def counted(
        nodes: list[NodeSpec],
        order: list[TracePod],
        arrived: int,
        forced: int,
        method: str,
        offline_pct: float,
        fits: bool,
    ) -> float | None:
        calls.append((arrived, forced))
        return real(nodes, order, arrived, forced, method, offline_pct, fits)

    monkeypatch.setattr(bound_runs, "online_bound", counted)
    levels = (50, 100, 130)
    alike = bound_runs.bound_seed(
        (nodes_p, pods_p, "bound", 1, "lp", levels, (), 0, (("a", 60), ("b", 60), ("c", 90)))
    )
    assert len(calls) == len(set(calls)) == 2 * len(levels)  # a and b: one solve each
    assert alike.policy_online_pct_at["a"] == alike.policy_online_pct_at["b"]
    assert alike.policy_online_pct_at["c"] != alike.policy_online_pct_at["a"]
