"""Running policies over seeds (both cores) and reporting means as text, JSON or a plot."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from statistics import mean
from typing import Any

from swarmgpu.sim.replay import RunResult, replay
from swarmgpu.sim.trace import load_nodes, load_pods

REPORT_LEVELS = (50, 100, 130)


def _one(args: tuple[str, str, str, int, bool, float | None]) -> RunResult:
    nodes_path, pods_path, policy, seed, departures, moves = args
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    if departures:
        raise NotImplementedError("--departures: the time-axis replay is not written yet")
    if moves:
        from swarmgpu.sim.rebalance import move_rescue

        return replay(nodes, pods, policy, seed, rebalancer=move_rescue, moves_per_100=moves)
    return replay(nodes, pods, policy, seed)


def run_many(nodes_path: str, pods_path: str, policies: Sequence[str], seeds: Sequence[int],
             *, departures: bool = False, moves: float | None = None,
             workers: int | None = None) -> dict[str, list[RunResult]]:
    jobs = [(nodes_path, pods_path, p, s, departures, moves) for p in policies for s in seeds]
    n = workers or min(len(jobs), os.cpu_count() or 1)
    if n <= 1:
        results = [_one(j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=n) as ex:
            results = list(ex.map(_one, jobs))
    out: dict[str, list[RunResult]] = {p: [] for p in policies}
    for r in results:
        out[r.policy].append(r)
    return out


def summary(results: dict[str, list[RunResult]]) -> dict[str, Any]:
    pol: dict[str, Any] = {}
    for name, runs in results.items():
        levels = sorted(runs[0].alloc_pct_at)
        pol[name] = {
            "alloc_pct_at": {str(lv): round(mean(r.alloc_pct_at[lv] for r in runs), 3)
                             for lv in levels},
            "frag_pct_at": {str(lv): round(mean(r.frag_pct_at[lv] for r in runs), 3)
                            for lv in levels},
            "failed_at_100": _mean_failed(runs, 100),
            "moves": round(mean(r.moves for r in runs), 1),
            "seeds": [r.seed for r in runs],
        }
    return {"policies": pol}


def _mean_failed(runs: Sequence[RunResult], level: int) -> dict[str, float]:
    kinds = sorted({k for r in runs for k in r.failed_at.get(level, {})})
    return {k: round(mean(r.failed_at.get(level, {}).get(k, 0) for r in runs), 1) for k in kinds}


def as_json(s: dict[str, Any]) -> str:
    return json.dumps(s, indent=2)


def as_text(s: dict[str, Any]) -> str:
    head = ["policy"] + [f"alloc@{lv}%" for lv in REPORT_LEVELS] + ["frag@100%", "moves", "seeds"]
    rows = [head]
    for name, v in s["policies"].items():
        a = v["alloc_pct_at"]
        rows.append([name] + [f"{a.get(str(lv), float('nan')):.2f}" for lv in REPORT_LEVELS]
                    + [f"{v['frag_pct_at'].get('100', float('nan')):.2f}", f"{v['moves']:g}",
                       str(len(v["seeds"]))])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def plot(s: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, v in s["policies"].items():
        pts = sorted((int(k), val) for k, val in v["alloc_pct_at"].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name, marker=".")
    ax.set_xlabel("arrived GPU load (% of cluster GPU)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
