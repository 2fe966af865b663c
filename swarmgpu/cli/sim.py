"""`swarmgpu simulate` and `simulate-derive`."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from swarmgpu.cli.strictopts import STRICT_FLOAT, STRICT_INT, StrictInt
from swarmgpu.core.commalist import comma_list
from swarmgpu.sim.traces import NAMES as TRACE_NAMES


@click.command()
@click.option(
    "--trace",
    default="default",
    show_default=True,
    type=click.Choice(TRACE_NAMES),
    help="Bundled openb trace (CC BY 4.0) for whichever of --nodes/--pods is not given.",
)
@click.option(
    "--nodes",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Node CSV (openb columns); default: the bundled trace's GPU nodes.",
)
@click.option(
    "--pods",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Pod CSV (openb columns); default: the bundled trace's pods.",
)
@click.option(
    "--policy",
    "policies",
    default="swarmgpu",
    show_default=True,
    help="Comma-separated: swarmgpu,fgd,bestfit,dotprod,packing,random",
)
@click.option(
    "--seeds",
    default="42",
    show_default=True,
    help="Whole numbers from 0, each once: e.g. 42 or 42-51 or 42,43",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="The same figures as JSON, unchanged by any other option.",
)
@click.option("--plot", default=None, type=click.Path(), help="Write allocation-vs-load PNG.")
@click.option("--departures", is_flag=True, help="Replay with creation/deletion times.")
@click.option(
    "--rebalance-moves",
    type=STRICT_FLOAT,
    default=None,
    help="Allow defragmenting moves: at most this many per 100 arrived pods.",
)
@click.option(
    "--move-limits",
    "move_limits",
    default="replay",
    show_default=True,
    type=click.Choice(["replay", "daemon"]),
    help="With --rebalance-moves: replay = the moves as allowed, in batches (as "
    "max_moves_per_cycle: 5); daemon = each mover's call a rebalance cycle under the "
    "daemon's budgets (max_moves_per_cycle 1, max_moves_per_node 1).",
)
@click.option(
    "--move-flight",
    "move_flight",
    type=STRICT_INT,
    default=0,
    show_default=True,
    help="With --move-limits daemon: arrivals each move stays in flight, counted by the "
    "budgets on its source and target node (0: it ends at once).",
)
@click.option(
    "--cpu-pods",
    "cpu_pods",
    default="policy",
    show_default=True,
    type=click.Choice(["policy", "swarm"]),
    help="Who places the trace's CPU-only pods: policy = swarmgpu's planner (as "
    'gpus: "0" services), each baseline\'s own allocator; swarm = a model of Swarm\'s '
    "scheduler (resource filter, then the node with the fewest tasks), for every policy "
    "alike. swarm not with --departures or --priorities.",
)
@click.option(
    "--speedup",
    type=STRICT_FLOAT,
    default=1.0,
    show_default=True,
    help="With --departures: arrivals K times faster, lifetimes kept (more load).",
)
@click.option(
    "--workload",
    default="online",
    show_default=True,
    type=click.Choice(["online", "oracle"]),
    help="swarmgpu's workload model: online = learned from arrivals so far, as the "
    "daemon does; oracle = the whole trace's mix, as FGD's paper gives FGD.",
)
@click.option(
    "--bound",
    "bound",
    default="lp",
    show_default=True,
    type=click.Choice(["lp", "mip", "off"]),
    help="The upper bound beside the table: the most GPU allocation any placement "
    "of the arrived pods could reach. lp = the certified linear relaxation "
    "(seconds per level); mip = the integer program (tighter, minutes); off.",
)
@click.option(
    "--online-at",
    "online_at",
    type=StrictInt(0, 130),
    default=95,
    show_default=True,
    help="F of the online bound's row: the most GPU allocation a policy that "
    "placed every pod arrived by F% could reach (each policy's own ceiling, "
    "from its first failure, is printed too); a multiple of 5 (the levels the "
    "replays record); 0 = no online bound.",
)
@click.option(
    "--priorities",
    "priority_share",
    type=STRICT_FLOAT,
    default=None,
    help="Give this share (0-1) of the GPU pods priority 100 and replay the "
    "departures timeline with a queue, without and with priorities "
    "(preemption on), and with tenants: wait per class, preemptions, "
    "allocation.",
)
@click.option(
    "--drain",
    "drain_s",
    type=STRICT_INT,
    default=0,
    show_default=True,
    help="With --priorities: after the last arrival, go on up to this many "
    "seconds of trace time while pods wait (they start as others leave).",
)
@click.option(
    "--progress/--no-progress",
    "show_progress",
    default=None,
    help="Progress on stderr (replays done, pods replayed, ETA). Default: on a "
    "terminal only; quiet in a pipe, a log or CI.",
)
def simulate(
    trace: str,
    nodes: str | None,
    pods: str | None,
    policies: str,
    seeds: str,
    as_json: bool,
    plot: str | None,
    departures: bool,
    rebalance_moves: float | None,
    move_limits: str,
    move_flight: int,
    cpu_pods: str,
    speedup: float,
    workload: str,
    bound: str,
    online_at: int,
    priority_share: float | None,
    drain_s: int,
    show_progress: bool | None,
) -> None:
    """Replay a GPU cluster trace through the placement policies.

    \b
    Output: a table, or --json (the same figures, unchanged by any other option).
    Columns of the table (each table also ends with these definitions):
      alloc@N%   GPU allocation ratio (GPU held / cluster GPU, %) when the arrived GPU
                 load reached N% of the cluster's GPUs; mean over the seeds
      frag@100%  fragmented GPU (free GPU the typical tasks cannot use, FGD's measure),
                 % of the cluster's GPU, at 100% arrived load
      moves      defragmenting moves per replay (--rebalance-moves)
      seeds      replays averaged
      gap@N%     the bound's alloc@N% minus the policy's, in points (--bound off: none)
    Row "online bound (all placed by F%)" (--online-at F): the most a policy that
    placed every pod arrived by F% could reach; "online ceiling" lines: each policy's
    own, from its first failure (docs/simulate.md, "The online bound").
    --departures: mean alloc%, gap (to the bound), mean demand%, peak alloc% (GPU share
    over the arrival window), failed pods by kind, failed GPU% (of the GPU asked), moves,
    seeds.
    --priorities: per run (without, with priorities, with tenants) and class, pods,
    started, mean/median/p95 wait (s), never started, preempted, mean alloc%, and the
    mean alloc% of the contended span (from the first cycle that left a pod waiting
    without priorities to that run's end, the same span in every run) and how much
    later each run's own window ended.

    \b
    Progress on stderr, on a terminal (or with --progress): replays done, the share of
    their pods replayed so far, an ETA. --plot: a PNG titled with the trace, policies,
    seeds and the arrival points; its path is printed on stderr. Exit 0 done, 2 bad
    options or trace (nothing replayed); --plot without matplotlib is refused before
    the replay."""
    from swarmgpu.sim.cli_entry import (
        ProgressLine,
        parse_seeds,
        resolve_trace,
        run_simulate,
        unused_option,
        wants_progress,
    )

    ctx = click.get_current_context()
    typed = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    given = {
        p.opts[0]
        for p in ctx.command.params
        if p.name and ctx.get_parameter_source(p.name) in typed
    } - ({"--progress"} if show_progress is False else set())  # --no-progress: quiet anyway
    why = unused_option(
        given,
        policies=comma_list(policies),
        departures=departures,
        priorities=priority_share is not None,
        bound=bound,
        online_at=online_at,
        cpu_pods=cpu_pods,
    )
    if why:
        click.echo(f"swarmgpu simulate: {why}", err=True)
        sys.exit(2)
    bundled_trace = pods is None and nodes is None
    nodes, pods = resolve_trace(trace, nodes, pods)

    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        click.echo(f"swarmgpu simulate: {exc}", err=True)  # exc names --seeds
        sys.exit(2)
    if priority_share is not None:
        from swarmgpu.sim.priorities import run_cli

        text, code = run_cli(
            nodes, pods, seed_list, priority_share, speedup, workload, as_json, drain_s
        )
        click.echo(text, err=code != 0)
        sys.exit(code)
    progress = ProgressLine(0) if wants_progress(show_progress, sys.stderr.isatty()) else None
    text, code = run_simulate(
        nodes,
        pods,
        comma_list(policies),
        seed_list,
        as_json,
        plot,
        departures,
        rebalance_moves,
        speedup,
        workload,
        progress,
        bound,
        trace=f"openb trace '{trace}'" if bundled_trace else "",
        online_at=online_at,
        cpu_pods=cpu_pods,
        move_limits=move_limits,
        move_flight=move_flight,
    )
    if code != 0:  # a usage error: on stderr, as click's own
        click.echo(f"swarmgpu simulate: {text}", err=True)
        sys.exit(code)
    click.echo(text)
    sys.exit(code)


@click.command("simulate-derive")
@click.option(
    "--pods",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Pod CSV (openb columns) to derive from; default: the bundled default",
)
@click.option(
    "--out",
    "out_dir",
    default="variants",
    show_default=True,
    type=click.Path(),
    help="Folder for openb_pod_list_<variant>.csv and manifest.json",
)
@click.option(
    "--variant",
    "variants",
    multiple=True,
    help="gpushareNN, multigpuNN, gpuspecNN (NN percent), cpuNNN (per mille of pods) or "
    "loadNNN (percent of the GPU request), e.g. gpushare60, cpu250, load150 (repeatable); "
    "default: the twelve in docs/simulate.md",
)
@click.option(
    "--seed",
    type=STRICT_INT,
    default=42,
    show_default=True,
    help="Seed of the derivation's draw: the same seed and pods give the same files.",
)
def simulate_derive(pods: str | None, out_dir: str, variants: tuple[str, ...], seed: int) -> None:
    """Derive heavier openb workloads (more sharing, multi-GPU, model-pinned or CPU-only
    pods, or more GPU request: loadNNN)."""
    from swarmgpu.sim.trace import TraceError
    from swarmgpu.sim.traces import bundled
    from swarmgpu.sim.variants import DEFAULT_VARIANTS, VariantError, write_variants

    if not out_dir:  # Path('') is the current folder: the lists written among its files
        click.echo("swarmgpu simulate-derive: --out '': an empty path; give a folder for "
                   "the derived lists (made if missing), e.g. --out variants", err=True)
        sys.exit(2)
    source = pods or str(bundled("default")[1])
    try:
        made = write_variants(source, out_dir, list(variants) or list(DEFAULT_VARIANTS), seed)
    except (TraceError, VariantError) as exc:
        click.echo(f"swarmgpu simulate-derive: {exc}", err=True)
        sys.exit(2)
    for v in made["variants"].values():
        click.echo(
            f"{Path(out_dir) / v['file']}: {v['pods']} pods, sharing {v['share_request']:.1%} "
            f"and multi-GPU {v['multi_request']:.1%} of the GPU request, "
            f"{v['spec_pods']:.1%} of GPU pods model-pinned, {v['cpu_pods']:.1%} CPU-only"
        )
