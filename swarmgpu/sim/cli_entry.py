"""What ``swarmgpu simulate`` does, as plain functions the click command calls."""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TextIO

from swarmgpu.core.boundedfile import file_kind
from swarmgpu.sim import report
from swarmgpu.sim.bound import highs_missing
from swarmgpu.sim.bound_runs import BOUND_METHODS, ONLINE_AT
from swarmgpu.sim.bound_timed import TimedBound, timed_bound
from swarmgpu.sim.limits import MOVE_LIMITS
from swarmgpu.sim.replay import POLICIES
from swarmgpu.sim.runs import LEVEL_STEP, check_arrivals, speedup_problem
from swarmgpu.sim.swarm_replay import WORKLOADS
from swarmgpu.sim.swarm_sched import CPU_PODS
from swarmgpu.sim.trace import (
    TraceError,
    load_nodes,
    load_pods,
    load_trace,
    say_unplaceable,
)
from swarmgpu.sim.traces import bundled


def resolve_trace(trace: str, nodes: str | None, pods: str | None) -> tuple[str, str]:
    """The node and pod files to replay: the bundled trace fills what was not given."""
    bundled_nodes, bundled_pods = bundled(trace)
    return (nodes or str(bundled_nodes), pods or str(bundled_pods))


# Each mode's options it does not read: taken, they were ignored, and the table was
# read as a measure of what they ask (--speedup 2 without --departures: the same table).
_NOT_WITH_PRIORITIES = (
    "--policy",
    "--departures",
    "--rebalance-moves",
    "--move-limits",
    "--move-flight",
    "--cpu-pods",
    "--plot",
    "--bound",
    "--online-at",
    "--progress",
)


# --departures and --priorities place CPU-only pods as --cpu-pods policy does (swarmgpu's
# through its planner, as gpus: "0" services); Swarm's scheduler is not modelled there.
CPU_PODS_SWARM_ONLY = (
    "--cpu-pods swarm applies without --departures and --priorities (Swarm's scheduler "
    "is modelled in the replay to 130% arrived load; these replays place CPU-only pods as "
    "--cpu-pods policy does: swarmgpu's through its planner, as gpus: \"0\" services); "
    "drop --cpu-pods swarm"
)

# The daemon's budgets are modelled in the replay to 130% arrived load with moves only.
MOVE_LIMITS_NEED = (
    "--move-limits daemon applies with --rebalance-moves N (N > 0) and without "
    "--departures (the daemon's budgets are modelled in the replay to 130% arrived load); "
    "add --rebalance-moves or drop --move-limits"
)


def unused_option(
    given: Collection[str],
    *,
    policies: Sequence[str],
    departures: bool,
    priorities: bool,
    bound: str,
    online_at: int,
    cpu_pods: str = "policy",
) -> str | None:
    """Why the first option in ``given`` (those typed, by their flag; ``--progress`` when
    on) does nothing in the mode asked, or None. ``--policy swarmgpu`` and ``--cpu-pods
    policy`` with --priorities (the planner it replays, which places CPU-only pods as
    ``gpus: "0"`` services), ``--cpu-pods policy`` with --departures and ``--online-at 0``
    (no online bound) are what happens anyway; --plot with --departures is refused by
    ``run_simulate``."""
    if "--trace" in given and "--nodes" in given and "--pods" in given:
        return (
            "--trace applies without both --nodes and --pods (it fills the one not "
            "given); drop --trace"
        )
    if priorities:
        for opt in _NOT_WITH_PRIORITIES:
            if opt not in given or (opt == "--policy" and list(policies) == ["swarmgpu"]):
                continue
            if opt == "--online-at" and online_at == 0:
                continue
            if opt == "--cpu-pods" and cpu_pods == "policy":
                continue
            if opt == "--cpu-pods":
                return CPU_PODS_SWARM_ONLY
            return (
                f"{opt} applies without --priorities, which replays swarmgpu's planner "
                "with a queue alone (no other policy, bound, plot or progress); drop one of the two"
            )
    elif "--cpu-pods" in given and departures and cpu_pods != "policy":
        return CPU_PODS_SWARM_ONLY
    elif "--speedup" in given and not departures:
        return (
            "--speedup applies with --departures or --priorities (arrivals K times faster); "
            "the replay to 130% arrived load has no trace times: add one or drop --speedup"
        )
    if "--drain" in given and not priorities:
        return (
            "--drain applies with --priorities (pods waiting in its queue); add "
            "--priorities SHARE or drop --drain"
        )
    if "--online-at" in given and online_at and not priorities:
        if departures:
            return (
                "--online-at applies without --departures (the online bound is of the "
                "replay to 130% arrived load); drop one of the two"
            )
        if bound == "off":
            return (
                "--online-at applies with a bound (--bound lp or mip); drop --bound off "
                "or --online-at"
            )
    if "--workload" in given and not priorities and "swarmgpu" not in policies:
        return (
            "--workload applies with --policy swarmgpu (it is swarmgpu's workload model); "
            "add swarmgpu to --policy or drop --workload"
        )
    return None


MAX_SEEDS = 1000  # a replay per policy and seed, each seconds to minutes


def _seed(text: str, sign: bool = False) -> int:
    """One seed of ASCII digits (``sign``: a minus before them, said as below 0 later):
    int() reads any Unicode digit and underscores: fullwidth or Arabic-Indic 42 was
    seed 42, unsaid."""
    text = text.strip(" \t")  # "42 - 51": blanks around the dash, as int() took them
    digits = text[1:] if sign and text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(text)
    return int(text)


def parse_seeds(text: str) -> list[int]:
    """``"42-51"`` -> 42..51; ``"1,5,7"`` and mixes like ``"1,3-4"`` work too. A seed
    given twice (the same replay twice, counted twice in the means) is refused, and so
    are a negative one (the same replay as its positive) and more than MAX_SEEDS,
    before a range is built (``1-100000000`` would fill memory)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                a, b = _seed(lo), _seed(hi)
                if b < a:  # LOW-HIGH all right, backwards: said so, not "not LOW-HIGH"
                    raise ValueError(
                        f"--seeds {text!r}: {a} is above {b} in LOW-HIGH; e.g. --seeds {b}-{a}"
                    )
                if len(out) + b - a + 1 > MAX_SEEDS:
                    raise OverflowError
                out.extend(range(a, b + 1))
            else:
                out.append(_seed(part, sign=True))
        except ValueError as e:
            if str(e).startswith("--seeds"):
                raise
            raise ValueError(
                f"--seeds {text!r}: {part!r} is not N or LOW-HIGH in ASCII digits (0-9); "
                "e.g. --seeds 42-51"
            ) from None
        except OverflowError:
            raise ValueError(
                f"--seeds {text!r}: at most {MAX_SEEDS} seeds; e.g. --seeds 42-51"
            ) from None
    if len(out) > MAX_SEEDS:  # single seeds, comma after comma
        raise ValueError(f"--seeds {text!r}: at most {MAX_SEEDS} seeds; e.g. --seeds 42-51")
    # random.Random(-5) draws as Random(5): -5 was seed 5 under another name, and -5,5
    # the same replay counted twice in the means.
    if neg := [s for s in out if s < 0]:
        raise ValueError(
            f"--seeds {text!r}: {neg[0]} is below 0; a seed is a whole number from 0 (the "
            f"replay draws with seed {neg[0]} as with {-neg[0]}); e.g. --seeds 42-51"
        )
    twice = sorted({s for s in out if out.count(s) > 1})
    if twice:
        raise ValueError(
            f"--seeds {text!r}: {', '.join(map(str, twice))} more than once; give each seed once"
        )
    if not out:
        raise ValueError(f"--seeds {text!r}: no seeds given; e.g. --seeds 42-51")
    return out


PLOT_NEEDS = (
    "--plot needs matplotlib, which is not installed: "
    "pip install 'swarmgpu[sim]' (or pip install matplotlib)"
)


def plot_missing() -> str | None:
    """Why ``--plot`` cannot draw here, or None: asked before a replay of minutes."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return PLOT_NEEDS
    return None


def plot_unwritable(plot: str) -> str | None:
    """Why ``--plot PATH`` cannot be written, or None: asked before the replay, as after
    it savefig's error was a traceback and the replay's table lost."""
    if not plot:  # Path('') is '.': no folder was named
        return "--plot '': an empty path; give the PNG's file name, e.g. alloc.png"
    p = Path(plot)
    if p.is_dir():
        return f"--plot {plot}: a folder; give the PNG's file name, e.g. {p / 'alloc.png'}"
    # A FIFO or socket passed the write check, and savefig failed on it after the replay.
    with contextlib.suppress(OSError):
        mode = p.stat().st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            return (f"--plot {plot}: {file_kind(mode)}, not a regular file; give the path "
                    "of the PNG file to write")
    if not p.parent.is_dir():
        return f"--plot {plot}: no folder {p.parent}; create it or give another path"
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"--plot {plot}: cannot write there; give a path you may write"
    return None


class ProgressLine:
    """Progress of a run on stderr: replays done of all, the last one ended (policy and
    seed), time so far and an ETA from the mean time per replay so far; and, while the
    replays run, the share of their pods replayed (``within``), with an ETA from it, so
    that even a single seed shows how far it got. On a terminal one line rewritten in
    place (``within`` at most every ``redraw_s``); elsewhere (a log, CI, asked for with
    --progress) one line per replay and one per tenth of the pods."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        redraw_s: float = 0.25,
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.t0 = clock()
        self.done = 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.redraw_s = redraw_s
        self._drawn = float("-inf")
        self._share = 0.0
        self._next_tenth = 1

    def start(self, what: str) -> None:
        self._write(f"simulate: {what}: {self.total} replays (policy x seed) ...")

    def __call__(self, policy: str, seed: int) -> None:
        self.done += 1
        spent = self.clock() - self.t0
        left = self.total - self.done
        eta = f"ETA {_duration(spent / self.done * left)}" if left else "done"
        self._write(
            f"simulate: {self.done}/{self.total} {policy} seed {seed} ({_duration(spent)}); {eta}"
        )
        if not left and self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def within(self, share: float) -> None:
        """``share`` (0-1) of all the replays' pods replayed so far."""
        self._share = share = min(1.0, max(self._share, share))
        now = self.clock()
        if self.tty:
            if now - self._drawn < self.redraw_s:
                return
        elif share * 10 < self._next_tenth:
            return
        else:
            self._next_tenth = int(share * 10) + 1
        self._drawn = now
        spent = now - self.t0
        eta = f"ETA {_duration(spent * (1 - share) / share)}" if share > 0 else "ETA -"
        self._write(
            f"simulate: {self.done}/{self.total} replays done, {share:.0%} of their "
            f"pods ({_duration(spent)}); {eta}"
        )

    def _write(self, line: str) -> None:
        self.stream.write(f"\r\x1b[K{line}" if self.tty else line + "\n")
        self.stream.flush()


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def wants_progress(asked: bool | None, stderr_tty: bool) -> bool:
    """--progress / --no-progress when given; else on a terminal only (quiet in a pipe,
    a log or CI)."""
    return asked if asked is not None else stderr_tty


def seeds_text(seeds: Sequence[int]) -> str:
    """[42, 43, 44, 50] -> "42-44, 50"."""
    runs: list[list[int]] = []
    for s in sorted(set(seeds)):
        if runs and runs[-1][1] == s - 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def plot_title(trace: str, policies: Sequence[str], seeds: Sequence[int]) -> str:
    """What the --plot PNG shows, on it: trace, policies, seeds, the arrival points."""
    levels = f"{LEVEL_STEP}% to 130% of the cluster's GPU, every {LEVEL_STEP}%"
    return (
        f"{trace}: GPU allocation against arrived GPU load\n"
        f"policies {', '.join(policies)}; seeds {seeds_text(seeds)} (mean of "
        f"{len(set(seeds))}); arrival points {levels}"
    )


def run_simulate(
    nodes: str,
    pods: str,
    policies: list[str],
    seeds: list[int],
    as_json: bool,
    plot: str | None,
    departures: bool = False,
    rebalance_moves: float | None = None,
    speedup: float = 1.0,
    workload: str = "online",
    progress: ProgressLine | None = None,
    bound: str = "lp",
    trace: str = "",
    online_at: int = ONLINE_AT,
    cpu_pods: str = "policy",
    move_limits: str = "replay",
    move_flight: int = 0,
) -> tuple[str, int]:
    """Run the replay; returns (text to print, exit code). ``progress`` (if given) hears
    of every replay as it ends, and of the pods replayed while they run. ``bound``: the
    upper bound beside the no-departure table (``sim.bound_runs``; "off" for none);
    ``online_at``: F of its online bound's row (0: no online bound).
    ``trace``: what the --plot title calls the trace (default: the pod file's name).
    ``cpu_pods``: who places the CPU-only pods, ``policy`` (swarmgpu's planner as
    ``gpus: "0"`` services, each baseline's allocator; what --departures does) or
    ``swarm`` (a model of Swarm's scheduler, ``sim.swarm_sched``; not with --departures).
    ``move_limits``: ``replay`` (the moves as allowed) or ``daemon`` (each mover's call
    under the daemon's budgets, ``sim.limits``; not with --departures); ``move_flight``:
    arrivals each move stays in flight there."""
    known = set(POLICIES) | {"fgd-unrounded"}
    bad = [p for p in policies if p not in known]
    if bad:
        return (f"unknown policy {', '.join(bad)}; choose from {', '.join(POLICIES)}", 2)
    if not policies:  # a table of the bound alone
        return (f"--policy: no policy given; choose from {', '.join(POLICIES)}", 2)
    twice = sorted({p for p in policies if policies.count(p) > 1})
    if twice:  # the same replay twice, its row counting each seed twice
        return (f"--policy: {', '.join(twice)} more than once; give each policy once", 2)
    # checked with or without --departures, which alone uses it
    if (why := speedup_problem(speedup)) is not None:
        return (why, 2)
    if workload not in WORKLOADS:
        return (f"--workload {workload!r}: use one of {', '.join(WORKLOADS)}", 2)
    if cpu_pods not in CPU_PODS:
        return (f"--cpu-pods {cpu_pods!r}: use one of {', '.join(CPU_PODS)}", 2)
    if departures and cpu_pods != "policy":
        return (CPU_PODS_SWARM_ONLY, 2)
    if move_limits not in MOVE_LIMITS:
        return (f"--move-limits {move_limits!r}: use one of {', '.join(MOVE_LIMITS)}", 2)
    if move_limits != "replay" and (departures or not rebalance_moves):
        return (MOVE_LIMITS_NEED, 2)
    if move_flight < 0 or (move_flight and move_limits != "daemon"):
        return (
            f"--move-flight {move_flight}: arrivals a move stays in flight, >= 0, with "
            "--move-limits daemon (whose budgets count moves in flight); add it or drop "
            "--move-flight",
            2,
        )
    if bound not in BOUND_METHODS:
        return (f"--bound {bound!r}: use one of {', '.join(BOUND_METHODS)}", 2)
    # The row is solved at a level the replays record: another printed no row, silently.
    if online_at % LEVEL_STEP:
        return (
            f"--online-at {online_at}: a level the replays record, a multiple of "
            f"{LEVEL_STEP} (e.g. {LEVEL_STEP * round(online_at / LEVEL_STEP) or LEVEL_STEP}), "
            "or 0 for none",
            2,
        )
    # not (x >= 0): NaN too, which every comparison lets through; inf has no budget either
    if rebalance_moves is not None and not (
        math.isfinite(rebalance_moves) and rebalance_moves >= 0
    ):
        return (f"--rebalance-moves {rebalance_moves:g}: must be >= 0 (moves per 100 pods)", 2)
    if departures:
        if plot is not None:  # '' too: asked for, and never drawn
            return (
                "--plot draws allocation against arrived load, which a replay with "
                "--departures has no axis for; drop one of the two",
                2,
            )
        try:
            say_unplaceable(*load_trace(nodes, pods), nodes, pods)  # before the workers start
            if progress is not None:
                progress.total = len(policies) * len(seeds) * (2 if rebalance_moves else 1)
                progress.start("replays with departures")
            timed = report.run_timed(
                nodes,
                pods,
                policies,
                seeds,
                moves=rebalance_moves,
                speedup=speedup,
                workload=workload,
                progress=progress,
                within=progress.within if progress else None,
            )
            tbound: TimedBound | str | None = None
            if bound != "off":
                tbound = highs_missing() or timed_bound(
                    load_nodes(nodes), load_pods(pods), speedup, method=bound
                )
        except TraceError as e:
            return (str(e), 2)
        return (
            report.timed_json(timed, tbound) if as_json else report.timed_text(timed, tbound),
            0,
        )
    if plot is not None and (why := plot_missing() or plot_unwritable(plot)):  # '' too
        return (why, 2)
    missing = highs_missing() if bound != "off" else None
    solve = bound != "off" and missing is None
    try:
        node_list, pod_list = load_trace(nodes, pods)
        check_arrivals(node_list, pod_list, pods)  # refused before the workers start
        say_unplaceable(node_list, pod_list, nodes, pods)
        if progress is not None:
            progress.total = len(policies) * len(seeds) + (len(seeds) if solve else 0)
            progress.start(
                "replays to 130% arrived load" + (" and the upper bound per seed" if solve else "")
            )
        results = report.run_many(
            nodes,
            pods,
            policies,
            seeds,
            moves=rebalance_moves,
            workload=workload,
            progress=progress,
            within=progress.within if progress else None,
            cpu_pods=cpu_pods,
            move_limits=move_limits,
            move_flight=move_flight,
        )
        bounds = (
            report.run_bounds(nodes, pods, results, bound, progress=progress, online_at=online_at)
            if solve
            else missing
        )
    except TraceError as e:
        return (str(e), 2)
    s = report.summary(results, bounds)
    if cpu_pods != "policy":  # said only when asked: the default's output is unchanged
        s["cpu_pods"] = cpu_pods
    if plot:
        try:
            report.plot(s, plot, plot_title(trace or Path(pods).name, policies, seeds))
        except OSError as e:  # the folder went during the replay
            return (f"--plot {plot}: cannot write it ({e.strerror or e})", 2)
        print(f"simulate: plot written to {Path(plot).resolve()}", file=sys.stderr)
    return (report.as_json(s) if as_json else report.as_text(s), 0)
