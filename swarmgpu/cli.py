"""The `swarmgpu` command line."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from loguru import logger

from swarmgpu.core.config import Config, ConfigError, describe_defaults, load_config
from swarmgpu.logs import setup_logging
from swarmgpu.sim.traces import NAMES as TRACE_NAMES


def _load_checked(path: str | None) -> Config:
    """load_config, then what the layers above the configuration check: a pinned
    ``placement.workload`` file must parse (the workload model owns that format)."""
    cfg = load_config(path)
    if cfg.placement.workload != "auto":
        from swarmgpu.allocator.workload import WorkloadError, load_file

        try:
            load_file(cfg.placement.workload)
        except WorkloadError as exc:
            raise ConfigError(f"placement.workload: {exc} (or use 'auto')") from None
    return cfg


def _load_cfg(path: str | None, **overrides: Any) -> Config:
    try:
        cfg = _load_checked(path)
    except ConfigError as exc:
        click.echo(f"swarmgpu: configuration error: {exc}", err=True)
        sys.exit(2)
    import dataclasses

    for k, v in overrides.items():
        if v is not None:
            cfg = dataclasses.replace(cfg, **{k: v})
    return cfg


@click.group()
@click.version_option(package_name="swarmgpu")
def main() -> None:
    """GPU-aware placement for Docker Swarm."""


def _source_options(f: Any) -> Any:
    f = click.option("--source", required=True, metavar="SPEC",
                     help="nvml | gfd:PATH | file:PATH | topo:PATH")(f)
    f = click.option("--hostname", default=None,
                     help="Node hostname to report (default: this host's name).")(f)
    f = click.option("--product", default=None, help="GPU product, for topo: sources.")(f)
    f = click.option("--memory-mib", type=int, default=None,
                     help="Memory per GPU in MiB, for topo: sources.")(f)
    f = click.option("--mig", "mig_layout", default=None,
                     help="MIG layout for topo: sources (see docs/facts-schema.md).")(f)
    return f


def _open(source: str, hostname: str | None, product: str | None, memory_mib: int | None,
          mig_layout: str | None) -> Any:
    from swarmgpu.agent.facts import SourceError
    from swarmgpu.agent.facts.registry import open_source

    try:
        return open_source(source, hostname=hostname, product=product,
                           memory_mib=memory_mib, mig_layout=mig_layout)
    except SourceError as exc:
        click.echo(f"swarmgpu: {exc}", err=True)
        sys.exit(2)


@main.command()
@_source_options
@click.option("--json", "as_json", is_flag=True, help="Print the JSON the agent serves.")
def facts(source: str, hostname: str | None, product: str | None, memory_mib: int | None,
          mig_layout: str | None, as_json: bool) -> None:
    """Print the GPU facts the agent would serve."""
    from swarmgpu.core.model import FactsError
    from swarmgpu.swarm.labels import desired_labels

    src = _open(source, hostname, product, memory_mib, mig_layout)
    try:
        nf = src.read()
    except FactsError as exc:
        click.echo(f"swarmgpu facts: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(nf.to_dict(), indent=2))
        return
    click.echo(f"host {nf.hostname}  driver {nf.driver_version}  cuda {nf.cuda_driver_version}  "
               f"source {nf.source}")
    for g in nf.gpus:
        mig = f"  MIG {[m.profile for m in g.mig_devices]}" if g.mig_enabled else ""
        health = "" if g.healthy else f"  UNHEALTHY: {g.error}"
        click.echo(f"  GPU{g.index} {g.product} {g.memory_mib} MiB {g.uuid} "
                   f"numa={g.numa_node}{mig}{health}")
    if nf.links:
        click.echo("links:")
        for i, row in enumerate(nf.links):
            click.echo(f"  GPU{i} " + " ".join(f"{x:>5}" for x in row))
    for e in nf.errors:
        click.echo(f"  error: {e}")
    click.echo("labels:")
    for k, v in sorted(desired_labels(nf).items()):
        click.echo(f"  {k}={v}")


@main.command()
@_source_options
@click.option("--listen", default="127.0.0.1:9401", show_default=True,
              help="HOST:PORT to serve on (loopback by default; managers must reach it: "
              "e.g. 0.0.0.0:9401 or the node's cluster address).")
@click.option("--metrics-profile", default=None, type=click.Path(),
              help="YAML profile of scripted utilisation (demos, tests).")
@click.option("--refresh-s", default=30.0, show_default=True, help="Seconds between fact reads.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text")
@click.option("--docker-host", default=None,
              help="Optional: this node's Docker engine (e.g. unix:///var/run/docker.sock), "
                   "to name the Swarm task of each GPU process here. Without it the agent "
                   "reports container ids and the daemon names them from Swarm's task "
                   "list, so the agent needs no engine access.")
@click.option("--proc-root", default="/proc", show_default=True,
              help="The host's /proc (GPU process PIDs are the host's; in a container "
                   "mount it, e.g. /host/proc).")
@click.option("--tls-cert", default=None, type=click.Path(),
              help="Serve HTTPS with this node's Swarm certificate "
                   "(<data-root>/swarm/certificates/swarm-node.crt; agents.identity "
                   "swarm-pki). Re-read when it changes.")
@click.option("--tls-key", default=None, type=click.Path(),
              help="Its key (swarm-node.key); under systemd pass both with LoadCredential=.")
@click.option("--token-file", default=None, type=click.Path(),
              help="Require this bearer token on /facts and /metrics (agents.token_file).")
def agent(source: str, hostname: str | None, product: str | None, memory_mib: int | None,
          mig_layout: str | None, listen: str, metrics_profile: str | None, refresh_s: float,
          log_format: str, docker_host: str | None, proc_root: str, tls_cert: str | None,
          tls_key: str | None, token_file: str | None) -> None:
    """Serve this node's GPU facts and metrics over HTTP (/facts, /metrics, /healthz)."""
    from swarmgpu.agent import server as agent_mod

    setup_logging("INFO", log_format)
    src = _open(source, hostname, product, memory_mib, mig_layout)
    sampler = None
    if metrics_profile:
        from swarmgpu.agent.facts.profile import ProfileError, ProfileSampler

        try:
            sampler = ProfileSampler(metrics_profile, src.read()).sample
        except ProfileError as exc:
            click.echo(f"swarmgpu agent: {exc}", err=True)
            sys.exit(2)
    from swarmgpu.agent.procattr import Attributor, engine_labels
    from swarmgpu.swarm.identity import IdentityError, ReloadingServerContext, read_token

    if bool(tls_cert) != bool(tls_key):
        click.echo("swarmgpu agent: --tls-cert and --tls-key go together", err=True)
        sys.exit(2)
    try:
        tls = ReloadingServerContext(tls_cert, tls_key) if tls_cert and tls_key else None
        token = read_token(token_file) if token_file else None
    except (IdentityError, OSError) as exc:
        click.echo(f"swarmgpu agent: {exc}", err=True)
        sys.exit(2)
    agent_mod.serve(src, listen, sampler=sampler, refresh_s=refresh_s,
                    attribute=Attributor(engine_labels(docker_host) if docker_host else None,
                                         proc_root), tls=tls, token=token)


@main.command()
@click.option("--config", "config_path", default=None, type=click.Path(),
              help="YAML config (default: built-in defaults).")
@click.option("--once", is_flag=True, help="Run one cycle and exit.")
@click.option("--dry-run", is_flag=True, default=None, help="Plan and log; never write.")
def run(config_path: str | None, once: bool, dry_run: bool | None) -> None:
    """The manager daemon: sync GPU labels, place GPU services, rebalance."""
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.swarm.client import SwarmError

    cfg = _load_cfg(config_path, dry_run=dry_run or None)
    setup_logging(cfg.log.level, cfg.log.format)
    try:
        d = Daemon(cfg)
    except SwarmError as exc:
        logger.error("{}", exc)
        sys.exit(2)
    _attach_steps(d)
    if once:
        report = d.cycle()
        if not report.leader and report.errors:
            sys.exit(2)
        if not report.leader:
            click.echo("not the Swarm leader: nothing done", err=True)
        click.echo(f"cycle done: {report.writes} label write(s), {len(report.errors)} error(s)",
                   err=True)
        return
    d.run_forever()


def _attach_steps(d: Any) -> None:
    """Plug the planners (placement, rebalancing) and the cluster view into the cycle."""
    from swarmgpu.manager import observe, overshare, placement_step
    from swarmgpu.manager.rebalance.step import attach as attach_rebalance

    placement_step.attach(d)
    rebalancer = attach_rebalance(d)
    if rebalancer is not None:
        d.moves_view = rebalancer.to_dict
    observe.attach(d)
    overshare.attach(d)  # after observe, which judges each holder's use


@main.command()
@click.option("--config", "config_path", default=None, type=click.Path())
@click.option("--json", "as_json", is_flag=True)
@click.option("--strict", is_flag=True, help="Advisories count as findings too (exit 1).")
def audit(config_path: str | None, as_json: bool, strict: bool) -> None:
    """Compare GPU labels with the agents' facts.

    Exit 0: clean, or advisories only; 1: findings needing action (--strict: any
    finding); 2: could not run.
    """
    from swarmgpu.manager.agentbook import load_saved
    from swarmgpu.manager.audit import audit as run_audit
    from swarmgpu.manager.audit import exit_code, identity_check, render_table
    from swarmgpu.manager.sync import take_snapshot
    from swarmgpu.swarm.client import SwarmClient, SwarmError

    cfg = _load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    try:
        swarm = SwarmClient(cfg.docker_host)
        snap = take_snapshot(swarm, cfg)
    except SwarmError as exc:
        click.echo(f"swarmgpu audit: cannot read the swarm: {exc}", err=True)
        sys.exit(2)
    checks = []
    try:
        from swarmgpu.manager.placement_step import audit_checks

        checks = audit_checks(cfg)
    except ImportError:
        pass
    from swarmgpu.manager.overshare import audit_check

    checks.append(audit_check(cfg))  # holders over their GPU share (agents' processes)
    checks.append(identity_check(cfg.agents.identity, cfg.agents.token_file))
    findings = run_audit(snap, prefix=cfg.sync.prefix, saved_agents=load_saved(cfg.state_dir),
                         extra_checks=checks,
                         generic_resource_kind=cfg.placement.generic_resource_kind)
    code = exit_code(findings, strict=strict)
    if as_json:
        click.echo(json.dumps({
            "findings": [f.to_dict() for f in findings],
            "action": sum(not f.advisory for f in findings),
            "advisory": sum(f.advisory for f in findings),
            "exit": code,
        }, indent=2))
    else:
        click.echo(render_table(findings, snap, cfg.sync.prefix))
    sys.exit(code)


def _snapshot(cfg: Config) -> Any:
    from swarmgpu.manager.sync import take_snapshot
    from swarmgpu.swarm.client import SwarmClient, SwarmError

    try:
        return take_snapshot(SwarmClient(cfg.docker_host), cfg)
    except SwarmError as exc:
        click.echo(f"swarmgpu: cannot read the swarm: {exc}", err=True)
        sys.exit(2)


@main.command()
@click.option("--config", "config_path", default=None, type=click.Path())
@click.option("--json", "as_json", is_flag=True)
def plan(config_path: str | None, as_json: bool) -> None:
    """What placement would do for every annotated service, and why. Writes nothing."""
    from swarmgpu.manager.cluster_view import workload_lines
    from swarmgpu.manager.placement_step import make_plan
    from swarmgpu.manager.rebalance.attribution import service_states
    from swarmgpu.swarm.client import SwarmClient

    cfg = _load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    snap = _snapshot(cfg)
    p = make_plan(snap, cfg, swarm=SwarmClient(cfg.docker_host))
    moves = _daemon_moves(cfg)
    # A move in flight shows as Rebalancing, a proposed idle clean-up as IdleCleanup.
    idle = [str(m.get("service")) for m in (moves or {}).get("proposed", [])
            if m.get("trigger") == "consolidation"]
    states = service_states(p.services, {s.name: dict(s.labels) for s in snap.services},
                            idle, cfg.sync.prefix)
    for sp in p.services:
        sp.state = states.get(sp.name, sp.state)
    if not p.services and not as_json:
        click.echo("no service carries a swarmgpu GPU request")
    if as_json:
        click.echo(json.dumps({"services": [sp.to_dict() for sp in p.services],
                               "moves": moves, "workload": p.workload}, indent=2))
        return
    for sp in p.services:
        click.echo(f"{sp.name}: {sp.status} ({sp.state}) {sp.request_text}")
        for pl in sp.placements:
            slot = f" (slot {pl.slot})" if pl.slot is not None else ""
            click.echo(f"  {pl.hostname}{slot}: GPU {','.join(map(str, pl.gpus))} "
                       f"{','.join(pl.uuids)}")
        if sp.packed:
            click.echo(f"  replicas {sp.packed}")
        if sp.reason:
            click.echo(f"  why: {sp.reason}")
        for w in sp.warnings:
            click.echo(f"  note: {w}")
    for line in workload_lines(p.workload):
        click.echo(line)
    if moves is None:
        click.echo("moves: the daemon is not reachable on "
                   f"{cfg.http.listen}; move proposals need its metric windows")
        return
    if not moves.get("proposed"):
        click.echo("moves: none proposed" + (" (dry-run)" if moves.get("dry_run") else ""))
    for m in moves.get("proposed", []):
        click.echo(f"move {m['service']}: {m['from']} -> {m['to']} GPUs {m.get('gpus')} "
                   f"[{m['trigger']}, window {m.get('window')}] {m['reason']}; "
                   f"gain: {m.get('gain')}")
    for m in moves.get("recent", [])[-5:]:
        click.echo(f"recent {m['service']}: {m['from']} -> {m['to']}: {m['outcome']} "
                   f"({m['reason']})")


def _daemon_moves(cfg: Config) -> dict[str, Any] | None:
    """The leader daemon's move proposals (its metric windows live in its memory)."""
    import requests

    from swarmgpu.manager.rebalance.step import ROUTE

    try:
        r = requests.get(f"http://{cfg.http.listen}{ROUTE}", timeout=3)
        data = r.json() if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None
    return data if isinstance(data, dict) else None


@main.command()
@click.argument("stack_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--stack", "-n", "stack_name", default=None,
              help="Stack name used with `docker stack deploy` (default: file name).")
@click.option("-o", "--output", default="-", type=click.Path(), help="Output file (default -).")
@click.option("--config", "config_path", default=None, type=click.Path())
def render(stack_file: str, stack_name: str | None, output: str,
           config_path: str | None) -> None:
    """Rewrite a stack with GPU placement resolved, for `docker stack deploy -c -`."""
    from pathlib import Path

    from swarmgpu.manager.placement_step import facts_by_node
    from swarmgpu.manager.render import StackError, render_stack

    cfg = _load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    name = stack_name or Path(stack_file).stem.split(".")[0]
    snap = _snapshot(cfg)
    try:
        text, p = render_stack(Path(stack_file).read_text(), name, snap.nodes, snap.services,
                               snap.tasks, facts_by_node(snap), prefix=cfg.sync.prefix,
                               zone_label=cfg.placement.zone_label)
    except StackError as exc:
        click.echo(f"swarmgpu render: {exc}", err=True)
        sys.exit(2)
    for sp in p.services:
        if sp.name.startswith(name + "_") and sp.status != "placed":
            click.echo(f"swarmgpu render: {sp.name} is {sp.status}: {sp.reason}", err=True)
    if output == "-":
        click.echo(text, nl=False)
    else:
        Path(output).write_text(text)


@main.command()
@click.option("--config", "config_path", default=None, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="The same document as /api/v1/cluster.")
def status(config_path: str | None, as_json: bool) -> None:
    """The cluster at a glance: nodes x GPUs, memory, holders, pending requests."""
    from swarmgpu.manager.agentbook import load_saved
    from swarmgpu.manager.audit import audit as run_audit
    from swarmgpu.manager.cluster_view import build_cluster, gpu_metrics, render_status
    from swarmgpu.manager.placement_step import make_plan

    cfg = _load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    snap = _snapshot(cfg)
    saved = load_saved(cfg.state_dir)
    from swarmgpu.swarm.client import SwarmClient

    doc = build_cluster(snap, make_plan(snap, cfg, swarm=SwarmClient(cfg.docker_host)),
                        prefix=cfg.sync.prefix,
                        metrics=gpu_metrics(snap.nodes, cfg), saved_agents=saved,
                        findings=run_audit(snap, prefix=cfg.sync.prefix, saved_agents=saved,
                                           generic_resource_kind=cfg.placement.generic_resource_kind))
    click.echo(json.dumps(doc, indent=2) if as_json else render_status(doc))


@main.command()
@click.option("--root", default="/", show_default=True, type=click.Path(),
              help="Root of the node's file system (for checking a mounted image).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--source", default=None, metavar="SPEC",
              help="Fact source to compare with (default: nvml when --root is /).")
def doctor(root: str, as_json: bool, source: str | None) -> None:
    """Check this node's GPU container setup and explain each problem and its fix."""
    from swarmgpu.agent.doctor import run_doctor

    facts = None
    docker_info = None
    if source or root == "/":
        src = _open(source or "nvml", None, None, None, None)
        try:
            facts = src.read()
        except Exception as exc:  # a doctor must report, not crash
            click.echo(f"swarmgpu doctor: cannot read facts from {source or 'nvml'}: {exc}",
                       err=True)
    if root == "/":
        try:
            import docker

            docker_info = docker.from_env(timeout=5).info()
        except Exception:  # dockerd down is itself a finding the checks report
            docker_info = None
    scheme = None
    if root == "/":
        from swarmgpu.swarm.identity import probe_agent_scheme

        scheme = probe_agent_scheme()
    text, code = run_doctor(root, facts=facts, docker_info=docker_info, as_json=as_json,
                            agent_probed=root == "/", agent_scheme=scheme)
    click.echo(text)
    sys.exit(code)


@main.command("node-config")
@_source_options
@click.option("--kind", default="NVIDIA-GPU", show_default=True,
              help="Swarm generic resource kind to advertise GPUs as.")
def node_config_cmd(source: str, hostname: str | None, product: str | None,
                    memory_mib: int | None, mig_layout: str | None, kind: str) -> None:
    """Print the daemon.json and toolkit config.toml fragments for this node's GPUs."""
    from swarmgpu.agent.nodeconfig import node_config
    from swarmgpu.core.model import FactsError

    src = _open(source, hostname, product, memory_mib, mig_layout)
    try:
        click.echo(node_config(src.read(), kind=kind))
    except (FactsError, ValueError) as exc:
        click.echo(f"swarmgpu node-config: {exc}", err=True)
        sys.exit(2)


@main.group()
def config() -> None:
    """Check or show the daemon configuration."""


@config.command("check")
@click.argument("path", type=click.Path())
def config_check(path: str) -> None:
    """Validate a config file; exit 2 with the key and the fix when it is wrong."""
    try:
        _load_checked(path)
    except ConfigError as exc:
        click.echo(f"{path}: {exc}", err=True)
        sys.exit(2)
    click.echo(f"{path}: ok")


@config.command("show-defaults")
def config_defaults() -> None:
    """Print every key with its default."""
    click.echo(describe_defaults(), nl=False)


@main.command()
@click.option("--trace", default="default", show_default=True,
              type=click.Choice(TRACE_NAMES),
              help="Bundled openb trace (CC BY 4.0) for whichever of --nodes/--pods is not given.")
@click.option("--nodes", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Node CSV (openb columns); default: the bundled trace's GPU nodes.")
@click.option("--pods", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Pod CSV (openb columns); default: the bundled trace's pods.")
@click.option("--policy", "policies", default="swarmgpu", show_default=True,
              help="Comma-separated: swarmgpu,fgd,bestfit,dotprod,packing,random")
@click.option("--seeds", default="42", show_default=True, help="e.g. 42 or 42-51 or 42,43")
@click.option("--json", "as_json", is_flag=True)
@click.option("--plot", default=None, type=click.Path(), help="Write allocation-vs-load PNG.")
@click.option("--departures", is_flag=True, help="Replay with creation/deletion times.")
@click.option("--rebalance-moves", type=float, default=None,
              help="Allow defragmenting moves: at most this many per 100 arrived pods.")
@click.option("--speedup", type=float, default=1.0, show_default=True,
              help="With --departures: arrivals K times faster, lifetimes kept (more load).")
@click.option("--workload", default="online", show_default=True,
              type=click.Choice(["online", "oracle"]),
              help="swarmgpu's workload model: online = learned from arrivals so far, as the "
                   "daemon does; oracle = the whole trace's mix, as FGD's paper gives FGD.")
def simulate(trace: str, nodes: str | None, pods: str | None, policies: str, seeds: str,
             as_json: bool, plot: str | None, departures: bool, rebalance_moves: float | None,
             speedup: float, workload: str) -> None:
    """Replay a GPU cluster trace through the placement policies."""
    from swarmgpu.sim.cli_entry import parse_seeds, resolve_trace, run_simulate

    nodes, pods = resolve_trace(trace, nodes, pods)

    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        click.echo(f"swarmgpu simulate: --seeds: {exc}", err=True)
        sys.exit(2)
    text, code = run_simulate(nodes, pods, [p.strip() for p in policies.split(",") if p.strip()],
                              seed_list, as_json, plot, departures, rebalance_moves, speedup,
                              workload)
    click.echo(text)
    sys.exit(code)


@main.command("simulate-derive")
@click.option("--pods", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Pod CSV (openb columns) to derive from; default: the bundled default")
@click.option("--out", "out_dir", default="variants", show_default=True, type=click.Path(),
              help="Folder for openb_pod_list_<variant>.csv and manifest.json")
@click.option("--variant", "variants", multiple=True,
              help="e.g. gpushare60, multigpu30, gpuspec20, cpu250 (repeatable); "
                   "default: the twelve in docs/simulate.md")
@click.option("--seed", type=int, default=42, show_default=True)
def simulate_derive(pods: str | None, out_dir: str, variants: tuple[str, ...], seed: int) -> None:
    """Derive heavier openb workloads (more sharing, multi-GPU, model-pinned or CPU-only pods)."""
    from swarmgpu.sim.trace import TraceError
    from swarmgpu.sim.traces import bundled
    from swarmgpu.sim.variants import DEFAULT_VARIANTS, VariantError, write_variants

    source = pods or str(bundled("default")[1])
    try:
        made = write_variants(source, out_dir, list(variants) or list(DEFAULT_VARIANTS), seed)
    except (TraceError, VariantError) as exc:
        click.echo(f"swarmgpu simulate-derive: {exc}", err=True)
        sys.exit(2)
    for v in made["variants"].values():
        click.echo(f"{out_dir}/{v['file']}: {v['pods']} pods, sharing {v['share_request']:.1%} "
                   f"and multi-GPU {v['multi_request']:.1%} of the GPU request, "
                   f"{v['spec_pods']:.1%} of GPU pods model-pinned, {v['cpu_pods']:.1%} CPU-only")


if __name__ == "__main__":
    main()
