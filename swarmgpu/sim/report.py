"""Running policies over seeds (both cores) and reporting means as text, JSON or a plot."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict
from statistics import mean
from typing import Any

from swarmgpu.sim.bound_runs import (
    ONLINE_AT,
    SeedBound,
    bound_jobs,
    bound_seed,
    bound_summary,
    online_summary,
)
from swarmgpu.sim.bound_timed import TimedBound
from swarmgpu.sim.limits import DaemonLimits
from swarmgpu.sim.rebalance import Defragmenter, MoveRescuer
from swarmgpu.sim.replay import replay
from swarmgpu.sim.runs import RunResult, TimelineResult, set_meter, timed_pods, workload_of
from swarmgpu.sim.swarm_replay import (
    DEFRAG_MIN_BATCH,
    FragmentationMover,
    replay_departures_planner,
    replay_planner,
)
from swarmgpu.sim.swarm_rescue import PlannerRescuer
from swarmgpu.sim.timeline import replay_departures
from swarmgpu.sim.trace import load_nodes, load_pods

REPORT_LEVELS = (50, 100, 130)
# Moves the defragmenter leaves for rescuing pods that find no node (docs/simulate.md);
# every policy's replay, swarmgpu's (the daemon's defrag policy) included.
RESCUE_RESERVE = 8


def _one(args: tuple[str, str, str, int, float | None, str, str, str, int]) -> RunResult:
    nodes_path, pods_path, policy, seed, moves, workload, cpu_pods, move_limits, flight = args
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    # --move-limits daemon: each mover's call a daemon cycle under its budgets, shared by
    # the defragmenter and the rescuer; planned as soon as one move is allowed
    limits = DaemonLimits(flight=flight) if moves and move_limits == "daemon" else None
    if policy == "swarmgpu":  # the daemon's own planner (sim.swarm_replay)
        return replay_planner(
            nodes,
            pods,
            seed,
            workload=workload,
            moves_per_100=moves or 0.0,
            defrag=(FragmentationMover(RESCUE_RESERVE, limits) if moves else None),
            rescuer=PlannerRescuer(limits=limits) if moves else None,
            cpu_pods=cpu_pods,
            min_batch=DEFRAG_MIN_BATCH if limits is None else 1,
            limits=limits,
        )
    if moves:
        return replay(
            nodes,
            pods,
            policy,
            seed,
            moves_per_100=moves,
            defrag=Defragmenter(workload_of(pods), RESCUE_RESERVE, limits),
            rebalancer=MoveRescuer(limits=limits),
            cpu_pods=cpu_pods,
            limits=limits,
        )
    return replay(nodes, pods, policy, seed, cpu_pods=cpu_pods)


def _one_timed(args: tuple[str, str, str, int, float | None, float, str]) -> TimelineResult:
    nodes_path, pods_path, policy, seed, moves, speedup, workload = args
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    if policy == "swarmgpu":  # the daemon's own planner (sim.swarm_replay)
        return replay_departures_planner(
            nodes,
            pods,
            seed,
            workload=workload,
            speedup=speedup,
            moves_per_100=moves or 0.0,
            defrag=FragmentationMover(reserve=RESCUE_RESERVE) if moves else None,
            rescuer=PlannerRescuer() if moves else None,
            source=pods_path,
        )
    return replay_departures(
        nodes,
        pods,
        policy,
        seed,
        rebalancer=MoveRescuer() if moves else None,
        defrag=(Defragmenter(workload_of(pods), reserve=RESCUE_RESERVE) if moves else None),
        moves_per_100=moves or 0.0,
        source=pods_path,
        speedup=speedup,
    )


def _map(
    fn: Callable[[Any], Any],
    jobs: list[Any],
    workers: int | None,
    progress: Progress | None = None,
    within: Within | None = None,
) -> list[Any]:
    """``fn`` over jobs (each starts with nodes, pods, policy, seed), results in job
    order; ``progress`` hears of each job as it ends, in the order they end; ``within``
    of the share of all pods replayed so far (0-1), while the jobs run (every replay
    reports through sim.runs.meter, from the worker processes through shared memory)."""

    def done(job: Any) -> None:
        if progress is not None:
            progress(job[2], job[3])

    n = workers or min(len(jobs), os.cpu_count() or 1)
    if n <= 1:
        out = []
        for i, j in enumerate(jobs):
            if within is not None:
                set_meter(_serial_meter(within, i, len(jobs)))
            try:
                out.append(fn(j))
            finally:
                set_meter(None)
            done(j)
        return out
    shares = (
        multiprocessing.get_context().Array("d", len(jobs), lock=False)
        if within is not None
        else None
    )
    with ProcessPoolExecutor(max_workers=n, initializer=_share_into, initargs=(shares,)) as ex:
        futures = {
            (ex.submit(_metered, fn, i, j) if shares is not None else ex.submit(fn, j)): (i, j)
            for i, j in enumerate(jobs)
        }
        pending = set(futures)
        while pending:
            ended, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for f in ended:
                f.result()  # a failed replay fails the run now
                i, j = futures[f]
                if shares is not None:
                    shares[i] = 1.0
                done(j)
            if within is not None and shares is not None and pending:
                within(sum(shares) / len(jobs))
        return [f.result() for f in futures]


def _serial_meter(within: Within, i: int, n: int) -> Callable[[int, int], None]:
    def report(d: int, t: int) -> None:
        within((i + d / max(t, 1)) / n)

    return report


_shares: Any = None  # a worker's view of the run's progress array (_map)


def _share_into(shares: Any) -> None:
    global _shares
    _shares = shares


def _metered(fn: Callable[[Any], Any], slot: int, job: Any) -> Any:
    """``fn(job)`` in a worker, its replay's progress written to the shared slot."""
    shares = _shares

    def report(d: int, t: int) -> None:
        shares[slot] = d / max(t, 1)

    set_meter(report if shares is not None else None)
    try:
        return fn(job)
    finally:
        set_meter(None)


# Called as each replay ends: (its policy, its seed).
Progress = Callable[[str, int], None]
# Called while replays run: the share (0-1) of all their pods replayed so far.
Within = Callable[[float], None]


def run_many(
    nodes_path: str,
    pods_path: str,
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    moves: float | None = None,
    workload: str = "online",
    workers: int | None = None,
    progress: Progress | None = None,
    within: Within | None = None,
    cpu_pods: str = "policy",
    move_limits: str = "replay",
    move_flight: int = 0,
) -> dict[str, list[RunResult]]:
    """No-departure replays of every policy x seed, on all cores; ``cpu_pods``: who
    places the CPU-only pods (``policy`` or ``swarm``, ``sim.swarm_sched``);
    ``move_limits``: ``replay`` (the moves as allowed) or ``daemon`` (``sim.limits``),
    where each move stays in flight ``move_flight`` arrivals."""
    jobs = [
        (nodes_path, pods_path, p, s, moves, workload, cpu_pods, move_limits, move_flight)
        for p in policies
        for s in seeds
    ]
    out: dict[str, list[RunResult]] = {p: [] for p in policies}
    for r in _map(_one, jobs, workers, progress, within):
        out[r.policy].append(r)
    return out


def run_bounds(
    nodes_path: str,
    pods_path: str,
    results: dict[str, list[RunResult]],
    method: str = "lp",
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    online_at: int = ONLINE_AT,
) -> list[SeedBound]:
    """The upper bound for every seed the replays ran, at the levels they report
    (``sim.bound_runs``), on all cores; seeds in order. ``online_at``: F of the online
    bound's row (every pod arrived by F% placed; 0: no online bound)."""
    jobs = bound_jobs(nodes_path, pods_path, results, method, online_at)
    return list(_map(bound_seed, jobs, workers, progress))


def run_timed(
    nodes_path: str,
    pods_path: str,
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    moves: float | None = None,
    speedup: float = 1.0,
    workload: str = "online",
    workers: int | None = None,
    progress: Progress | None = None,
    within: Within | None = None,
) -> dict[str, list[TimelineResult]]:
    """Departure replays; with ``moves`` each policy runs with the rebalancer off and on
    (keys ``policy`` and ``policy+moves``)."""
    timed_pods(load_pods(pods_path), pods_path)  # fail fast, before the workers start
    variants = [None, moves] if moves else [None]
    jobs = [
        (nodes_path, pods_path, p, s, m, speedup, workload)
        for p in policies
        for m in variants
        for s in seeds
    ]
    out: dict[str, list[TimelineResult]] = {}
    for (_n, _p, pol, _s, m, _k, _w), r in zip(
        jobs, _map(_one_timed, jobs, workers, progress, within), strict=True
    ):
        out.setdefault(pol + ("+moves" if m else ""), []).append(r)
    return out


def timed_text(
    results: dict[str, list[TimelineResult]], bound: TimedBound | str | None = None
) -> str:
    """The departures table; with ``bound`` (``sim.bound_timed``) its row and each
    policy's gap to its mean, or why there is none."""
    head = [
        "policy",
        "mean alloc%",
        "mean demand%",
        "peak alloc%",
        "failed pods",
        "failed GPU%",
        "moves",
        "seeds",
    ]
    with_bound = isinstance(bound, TimedBound)
    if with_bound:
        head.insert(2, "gap")
    rows = [head]
    for name, runs in results.items():
        cells = _timed_cells(runs, bound)
        rows.append([name, *(cells[k] for k in _TIMED_KEYS)])
        if "gap" in cells:
            rows[-1].insert(2, cells["gap"])
    if isinstance(bound, TimedBound):
        rows.append(
            [
                f"bound ({bound.method})",
                f"{bound.mean_alloc_pct:.3f}",
                "0.000",
                "-",
                f"{bound.peak_alloc_pct:.2f}",
                "-",
                "-",
                "-",
                "-",
            ]
        )
    text = _table(rows)
    if isinstance(bound, TimedBound):
        text += (
            "\nbound: at each instant the most any placement of the pods alive then "
            "could allocate\n  (docs/simulate.md); solved for "
            f"{len(bound.solved)} of {bound.spans} spans in {bound.solve_s:.1f} s "
            "(elsewhere what is asked);\n  gap = bound - policy mean, in points"
        )
    elif isinstance(bound, str):
        text += f"\nbound: not computed: {bound}"
    return text + "\n\n" + TIMED_COLUMNS + (TIMED_GAP if with_bound else "")


TIMED_COLUMNS = """\
columns (means over the seeds; the arrival window: first arrival to last):
  mean alloc%   time-weighted mean of the allocated GPU share (GPU-milli held / the
                cluster's), over the arrival window
  mean demand%  the same for what was asked: what would run if nothing failed
  peak alloc%   the highest allocated GPU share at any time
  failed pods   pods that found no node, by kind (share: a fraction of one GPU; Ngpu:
                N whole GPUs; cpu: no GPU), per seed
  failed GPU%   the GPU-milli of the failed pods, as a % of all the GPU-milli asked
  moves         rebalancing moves made per seed (rows policy+moves: --rebalance-moves)
  seeds         replays the row averages"""
TIMED_GAP = """
  gap           the bound's mean alloc% minus the policy's, in points (row bound: the
                upper bound, docs/simulate.md)"""


def _asked(r: TimelineResult) -> int:
    return r.asked_gpu_milli


# The departures table's columns after the policy (and gap), as ``timed_means`` names them.
_TIMED_KEYS = (
    "mean_alloc_pct",
    "mean_demand_pct",
    "peak_alloc_pct",
    "failed_pods",
    "failed_gpu_pct",
    "moves",
    "seeds",
)


def _timed_cells(runs: list[TimelineResult], bound: TimedBound | str | None) -> dict[str, str]:
    """One policy's row of the departures table, as printed: its means over the seeds
    (``gap`` with a bound). ``timed_means`` reads its numbers from these very cells."""
    kinds = Counter[str]()
    for r in runs:
        kinds.update(r.failed)
    alloc = mean(r.mean_alloc_pct for r in runs)
    failed = ", ".join(f"{k} {v / len(runs):g}" for k, v in sorted(kinds.items()))
    failed_gpu = mean(100.0 * r.failed_gpu_milli / max(_asked(r), 1) for r in runs)
    cells = {
        "mean_alloc_pct": f"{alloc:.3f}",
        "mean_demand_pct": f"{mean(r.mean_demand_pct for r in runs):.3f}",
        "peak_alloc_pct": f"{mean(r.peak_alloc_pct for r in runs):.2f}",
        "failed_pods": failed or "0",
        "failed_gpu_pct": f"{failed_gpu:.2f}",
        "moves": f"{mean(r.moves for r in runs):g}",
        "seeds": str(len(runs)),
    }
    if isinstance(bound, TimedBound):
        cells["gap"] = f"{bound.mean_alloc_pct - alloc:.3f}"
    return cells


def timed_means(
    results: dict[str, list[TimelineResult]], bound: TimedBound | str | None = None
) -> dict[str, dict[str, Any]]:
    """Each policy's means as the departures table prints them (the same numbers, as
    numbers): ``failed_pods`` by kind, per seed; ``gap`` with a bound."""
    out: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        cells = _timed_cells(runs, bound)
        row: dict[str, Any] = {
            k: float(v) for k, v in cells.items() if k not in ("failed_pods", "seeds")
        }
        kinds = [] if cells["failed_pods"] == "0" else cells["failed_pods"].split(", ")
        row["failed_pods"] = {k: float(v) for k, v in (p.rsplit(" ", 1) for p in kinds)}
        row["seeds"] = len(runs)
        out[name] = row
    return out


def timed_json(
    results: dict[str, list[TimelineResult]], bound: TimedBound | str | None = None
) -> str:
    """Each policy's runs; ``means``: each policy's row of the table (``timed_means``);
    with ``bound`` also the key ``bound`` (its mean and peak, or ``unavailable``: why
    not)."""
    out: dict[str, Any] = {k: [asdict(r) for r in v] for k, v in results.items()}
    out["means"] = timed_means(results, bound)
    if isinstance(bound, TimedBound):
        out["bound"] = {
            **asdict(bound),
            "mean_alloc_pct": round(bound.mean_alloc_pct, 4),
            "peak_alloc_pct": round(bound.peak_alloc_pct, 3),
            "solve_s": round(bound.solve_s, 2),
        }
    elif isinstance(bound, str):
        out["bound"] = {"unavailable": bound}
    return json.dumps(out, indent=2)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def summary(
    results: dict[str, list[RunResult]], bounds: list[SeedBound] | str | None = None
) -> dict[str, Any]:
    """Means over seeds per policy. ``bounds``: the upper bound's per seed (adds
    ``bound`` and each policy's ``gap_pct_at``, bound minus policy, in points), or why
    there is none (a message, kept as ``bound.unavailable``)."""
    pol: dict[str, Any] = {}
    for name, runs in results.items():
        levels = sorted(runs[0].alloc_pct_at)
        pol[name] = {
            "alloc_pct_at": {
                str(lv): round(mean(r.alloc_pct_at[lv] for r in runs), 3) for lv in levels
            },
            "frag_pct_at": {
                str(lv): round(mean(r.frag_pct_at[lv] for r in runs), 3) for lv in levels
            },
            "failed_at_100": _mean_failed(runs, 100),
            "moves": round(mean(r.moves for r in runs), 1),
            "moves_at_100": round(mean(r.moves_at.get(100, r.moves) for r in runs), 1),
            "seeds": [r.seed for r in runs],
            "by_seed": {
                str(r.seed): {
                    "alloc_pct_at": {
                        str(lv): round(r.alloc_pct_at[lv], 3)
                        for lv in REPORT_LEVELS
                        if lv in r.alloc_pct_at
                    },
                    "pods": r.pods,
                    "moves": r.moves,
                }
                for r in runs
            },
        }
    out: dict[str, Any] = {"policies": pol}
    if isinstance(bounds, str):
        out["bound"] = {"unavailable": bounds}
    elif bounds:
        b = out["bound"] = bound_summary(bounds)
        for v in pol.values():
            v["gap_pct_at"] = {
                lv: round(b["alloc_pct_at"][lv] - a, 3)
                for lv, a in v["alloc_pct_at"].items()
                if lv in b["alloc_pct_at"]
            }
        if bounds[0].online_at or bounds[0].first_failed_pct:
            _add_online(out, pol, online_summary(bounds))
    return out


def _add_online(out: dict[str, Any], pol: dict[str, Any], on: dict[str, Any]) -> None:
    """The online bound's row (``online_bound``) and, per policy, its first failure, its
    own online bound and its gap to it (``online_gap_pct_at``), means and per seed."""
    out["online_bound"] = {k: v for k, v in on.items() if k != "policies"}
    for name, v in pol.items():
        o = on["policies"].get(name)
        if o is None:
            continue
        v["first_failed_pct"] = o["first_failed_pct"]
        v["online_bound_pct_at"] = o["online_bound_pct_at"]
        v["online_gap_pct_at"] = {
            lv: None if x is None else round(x - v["alloc_pct_at"][lv], 3)
            for lv, x in o["online_bound_pct_at"].items()
        }
        for seed, one in v["by_seed"].items():
            one.update(o["by_seed"].get(seed, {}))


def _mean_failed(runs: Sequence[RunResult], level: int) -> dict[str, float]:
    kinds = sorted({k for r in runs for k in r.failed_at.get(level, {})})
    return {k: round(mean(r.failed_at.get(level, {}).get(k, 0) for r in runs), 1) for k in kinds}


def as_json(s: dict[str, Any]) -> str:
    return json.dumps(s, indent=2)


GAP_LEVELS = (100, 130)


def as_text(s: dict[str, Any]) -> str:
    """The policies' table; with the bound, its row and each policy's gap to it (points)
    and a line on how it was computed."""
    bound = s.get("bound") or {}
    gaps = [f"gap@{lv}%" for lv in GAP_LEVELS] if "alloc_pct_at" in bound else []
    head = (
        ["policy"]
        + [f"alloc@{lv}%" for lv in REPORT_LEVELS]
        + gaps
        + ["frag@100%", "moves", "seeds"]
    )
    rows = [head]
    nan = float("nan")
    for name, v in s["policies"].items():
        a, g = v["alloc_pct_at"], v.get("gap_pct_at", {})
        rows.append(
            [name]
            + [f"{a.get(str(lv), nan):.2f}" for lv in REPORT_LEVELS]
            + [f"{g.get(str(lv), nan):.2f}" for lv in GAP_LEVELS if gaps]
            + [f"{v['frag_pct_at'].get('100', nan):.2f}", f"{v['moves']:g}", str(len(v["seeds"]))]
        )
    if gaps:
        a = bound["alloc_pct_at"]
        rows.append(
            [f"bound ({bound['method']})"]
            + [f"{a.get(str(lv), nan):.2f}" for lv in REPORT_LEVELS]
            + ["0.00" for _ in GAP_LEVELS]
            + ["-", "-", str(len(bound["seeds"]))]
        )
    online = s.get("online_bound") or {}
    if gaps and online.get("forced_to_pct"):
        a = online["alloc_pct_at"]
        rows.append(
            [f"online bound (all placed by {online['forced_to_pct']}%)"]
            + [_pct(a.get(str(lv))) for lv in REPORT_LEVELS]
            + ["-" for _ in GAP_LEVELS]
            + ["-", "-", str(len(bound["seeds"]))]
        )
    text = _table(rows)
    if gaps:
        solved = sum(len(v["solved_levels"]) for v in bound["by_seed"].values())
        what = (
            "the integer program's dual bound (HiGHS)"
            if bound["method"] == "mip"
            else "the linear relaxation, certified by weak duality"
        )
        text += (
            f"\nbound: the most GPU allocation any placement of the arrived pods could "
            f"reach\n  ({what}; docs/simulate.md);\n  solved at {solved} level(s) in "
            f"{bound['solve_s']:.1f} s (at the others some policy placed every GPU pod);"
            f"\n  gap = bound - policy, in points"
        )
        if online:
            text += "\n" + _online_text(s, online)
    elif "unavailable" in bound:
        text += f"\nbound: not computed: {bound['unavailable']}"
    if s.get("cpu_pods") == "swarm":
        text += f"\n{CPU_PODS_SWARM}"
    return text + "\n\n" + COLUMNS + (GAP if gaps else "")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _online_text(s: dict[str, Any], online: dict[str, Any]) -> str:
    """The online bound's lines: its row's meaning, and each policy's own ceiling."""
    lines = []
    if online.get("forced_to_pct"):
        lines.append(
            f"online bound: the same, for policies that placed every pod arrived by "
            f'{online["forced_to_pct"]}%\n  (a placement holding them all; "-": they '
            f"do not all fit); solved in {online['solve_s']:.1f} s with the ceilings"
        )
    for name, v in s["policies"].items():
        if "online_bound_pct_at" not in v:
            continue
        when = _first_failure(v)
        at = v["online_bound_pct_at"]
        ceil = ", ".join(f"{_pct(at.get(str(lv)))} at {lv}%" for lv in GAP_LEVELS)
        gap = ", ".join(_pct(v["online_gap_pct_at"].get(str(lv))) for lv in GAP_LEVELS)
        lines.append(f"online ceiling: {name}: {when} => at most {ceil} (gap {gap})")
    return "\n".join(lines)


def _first_failure(v: dict[str, Any]) -> str:
    """A policy's first failure, its mean over the seeds; where some failed no pod, the
    mean of those that did and how many (its JSON mean is null: no mean of them all)."""
    first = v["first_failed_pct"]
    if first is not None:
        return f"first failure at {first:.2f}% arrived"
    each = [one.get("first_failed_pct") for one in v["by_seed"].values()]
    failed = [x for x in each if x is not None]
    if not failed:
        return "no pod failed"
    return (
        f"first failure at {mean(failed):.2f}% arrived on {len(failed)} of {len(each)} "
        "seeds (none failed on the others)"
    )


COLUMNS = """\
columns (means over the seeds; pods arrive until their GPU asks add up to 130% of the
cluster's GPUs, none leaves):
  alloc@N%   GPU allocation ratio: the GPU-milli held by placed pods, as a % of the
             cluster's, when the arrived GPU load reached N% of the cluster's GPUs
  frag@100%  fragmented GPU, as a % of the cluster's GPU, at 100% arrived load: free
             GPU that the trace's typical tasks cannot use (FGD's measure)
  moves      defragmenting moves made per replay (0 without --rebalance-moves)
  seeds      replays the row averages"""
CPU_PODS_SWARM = (
    "CPU-only pods: placed by a model of Swarm's scheduler in every policy's replay "
    "(--cpu-pods swarm;\n  docs/simulate.md)"
)
GAP = """
  gap@N%     the bound's alloc@N% minus the policy's, in points (row bound: the most
             any placement of the arrived pods could allocate, docs/simulate.md)"""


def plot(s: dict[str, Any], out: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Left: the whole replay; right: the saturated end, where the policies differ.
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [1, 1.2]})
    lows = []
    for name, v in s["policies"].items():
        pts = sorted((int(k), val) for k, val in v["alloc_pct_at"].items())
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(xs, ys, label=name, marker=".")
        tail = [(x, y) for x, y in pts if x >= 85]
        zoom.plot([x for x, _ in tail], [y for _, y in tail], label=name, marker=".")
        lows += [y for _, y in tail]
        if tail:
            zoom.annotate(
                f"{tail[-1][1]:.2f}",
                tail[-1],
                textcoords="offset points",
                xytext=(4, 0),
                va="center",
                fontsize=8,
            )
    if "alloc_pct_at" in s.get("bound", {}):
        pts = sorted((int(k), val) for k, val in s["bound"]["alloc_pct_at"].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "k--", label="upper bound")
        tail = [(x, y) for x, y in pts if x >= 85]
        zoom.plot([x for x, _ in tail], [y for _, y in tail], "k--", label="upper bound")
        lows += [y for _, y in tail]
    ax.set_xlabel("arrived GPU load (% of cluster GPU)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    zoom.set_xlabel("arrived GPU load (%), saturated end")
    zoom.set_title("where the policies differ", fontsize=10)
    if lows:
        zoom.set_ylim(max(0.0, min(lows) - 1), min(100.0, max(lows) + 1))
    zoom.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    # A PNG at the path given, whatever its name ends with (without a format, a name with
    # no suffix was written as NAME.png while the path said was NAME).
    fig.savefig(out, format="png", dpi=120, metadata={"Title": title} if title else None)
    plt.close(fig)
