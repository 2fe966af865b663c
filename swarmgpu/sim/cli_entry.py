"""What ``swarmgpu simulate`` does, as plain functions the click command calls."""

from __future__ import annotations

from swarmgpu.sim import report
from swarmgpu.sim.replay import POLICIES
from swarmgpu.sim.swarm_replay import WORKLOADS
from swarmgpu.sim.trace import TraceError
from swarmgpu.sim.traces import bundled


def resolve_trace(trace: str, nodes: str | None, pods: str | None) -> tuple[str, str]:
    """The node and pod files to replay: the bundled trace fills what was not given."""
    bundled_nodes, bundled_pods = bundled(trace)
    return (nodes or str(bundled_nodes), pods or str(bundled_pods))


def parse_seeds(text: str) -> list[int]:
    """``"42-51"`` -> 42..51; ``"1,5,7"`` and mixes like ``"1,3-4"`` work too."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise ValueError(f"--seeds {text!r}: {part!r} is not N or LOW-HIGH; "
                             "e.g. --seeds 42-51") from None
    if not out:
        raise ValueError(f"--seeds {text!r}: no seeds given; e.g. --seeds 42-51")
    return out


def run_simulate(nodes: str, pods: str, policies: list[str], seeds: list[int], as_json: bool,
                 plot: str | None, departures: bool = False,
                 rebalance_moves: float | None = None,
                 speedup: float = 1.0, workload: str = "online") -> tuple[str, int]:
    """Run the replay; returns (text to print, exit code)."""
    known = set(POLICIES) | {"fgd-unrounded"}
    bad = [p for p in policies if p not in known]
    if bad:
        return (f"unknown policy {', '.join(bad)}; choose from {', '.join(POLICIES)}", 2)
    if workload not in WORKLOADS:
        return (f"--workload {workload!r}: use one of {', '.join(WORKLOADS)}", 2)
    if rebalance_moves is not None and rebalance_moves < 0:
        return (f"--rebalance-moves {rebalance_moves:g}: must be >= 0 (moves per 100 pods)", 2)
    if departures:
        if plot:
            return ("--plot draws allocation against arrived load, which a replay with "
                    "--departures has no axis for; drop one of the two", 2)
        try:
            if speedup <= 0:
                return (f"--speedup {speedup:g}: must be > 0 (1 = the trace's own times)", 2)
            timed = report.run_timed(nodes, pods, policies, seeds, moves=rebalance_moves,
                                     speedup=speedup, workload=workload)
        except TraceError as e:
            return (str(e), 2)
        return (report.timed_json(timed) if as_json else report.timed_text(timed), 0)
    try:
        results = report.run_many(nodes, pods, policies, seeds, moves=rebalance_moves,
                                  workload=workload)
    except TraceError as e:
        return (str(e), 2)
    s = report.summary(results)
    if plot:
        report.plot(s, plot)
    return (report.as_json(s) if as_json else report.as_text(s), 0)
