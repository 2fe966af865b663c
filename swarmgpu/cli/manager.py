"""Commands for a manager: `run` (the daemon), `audit`, `plan`, `render`, `status`."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

import click
from loguru import logger

from swarmgpu.cli.config import CONFIG_HELP, ConfigPath, load_cfg
from swarmgpu.cli.exitcodes import CONFIG_ERROR
from swarmgpu.cli.logs import setup_logging
from swarmgpu.cli.said import say_error
from swarmgpu.core.config import Config, parse_priority_classes, queue_quotas

if TYPE_CHECKING:
    from swarmgpu.manager.services.tenants import Tenants

ENGINE_WAIT_S = 60.0  # how long `run` waits for an unreachable engine before exit 2


@click.command()
@click.option(
    "--config",
    "config_path",
    default=None,
    type=ConfigPath(),
    help=CONFIG_HELP,
)
@click.option("--once", is_flag=True,
              help="Run one cycle and exit; with no engine budget (docs/systemd.md) "
              "unless $WATCHDOG_USEC sets a watchdog.")
@click.option("--dry-run", is_flag=True, default=None, help="Plan and log; never write.")
def run(config_path: str | None, once: bool, dry_run: bool | None) -> None:
    """The manager daemon: sync GPU labels, place GPU services, rebalance."""
    from swarmgpu.manager.cycle.pipeline import PipelineError
    from swarmgpu.manager.cycle.wiring import daemon_steps
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.swarm.client import SwarmError

    # A config error exits CONFIG_ERROR: the unit's RestartPreventExitStatus= (no restart
    # mends it); notes are said at every start.
    cfg = load_cfg(config_path, config_exit=CONFIG_ERROR, dry_run=dry_run or None)
    setup_logging(cfg.log.level, cfg.log.format)
    if not once:  # (no ping follows a one-shot: it ends instead)
        _watchdog_fits(cfg.sync.interval_s)
    _held = _one_daemon(cfg.state_dir)  # kept open (referenced) until the process ends
    # No reload, and no end: a SIGHUP while starting (waiting for the engine) ended the
    # daemon, which systemd counts as a clean stop and does not restart. Ignored until
    # the daemon's own handler logs it (Daemon._install_signals).
    if threading.current_thread() is threading.main_thread():  # only it may set one
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # A daemon started beside its engine (or its socket proxy, in the stack) waits a
    # while for it rather than exiting at once into a restart loop; --once does not.
    deadline = time.monotonic() + (0 if once else ENGINE_WAIT_S)
    pause = 1.0
    while True:
        try:
            d = Daemon(cfg)
            break
        except SwarmError as exc:
            if time.monotonic() + pause > deadline:
                logger.error("{}", exc)
                sys.exit(2)
            logger.warning("waiting for the engine ({}); retry in {:g} s", exc, pause)
            time.sleep(pause)
            pause = min(pause * 2, 8.0)
    try:
        pipeline = d.use(daemon_steps(d))
    except PipelineError as exc:  # refused before any cycle: say which step and why
        logger.error("the daemon's steps cannot run in this order: {}", exc)
        sys.exit(2)
    for line in pipeline.describe():
        logger.debug("step {}", line)
    if once:
        report = d.once()
        if d.stopped_by is not None:  # as the daemon: exit 0, what was left is said
            click.echo(
                f"stopped by {d.stopped_by}: the cycle ended early, without its "
                f"further writes and node reads (in the log above); the next "
                f"cycle plans them afresh",
                err=True,
            )
            return
        if report.aborted:  # the engine could not be asked or read: said in the log
            sys.exit(2)
        if not report.leader:
            click.echo("not the Swarm leader: nothing done", err=True)
        click.echo(
            f"cycle done: {report.writes} label write(s), {len(report.errors)} error(s)", err=True
        )
        return
    d.run_forever()


def _watchdog_fits(interval_s: float) -> None:
    """Exit CONFIG_ERROR when the unit's WatchdogSec= cannot hold the daemon's cycles
    (``cycle.budget.watchdog_problem``), before the engine is waited for."""
    from swarmgpu.core.sdnotify import watchdog_s
    from swarmgpu.manager.cycle.budget import watchdog_problem

    problem = watchdog_problem(interval_s, watchdog_s())
    if problem is not None:
        logger.error("{}", problem)
        sys.exit(CONFIG_ERROR)  # the unit's: no restart mends it either


def _one_daemon(state_dir: str) -> IO[str] | None:
    """This run's lock on ``state_dir`` (core.runlock), taken before the engine is asked;
    exit 2 when another run holds it. A directory that cannot hold it (read-only, not a
    directory) is said and the run goes on: it ran so before, saving no state."""
    from swarmgpu.core.runlock import LOCK_FILE, Held, hold

    try:
        return hold(state_dir)
    except Held as exc:
        logger.error("{}", exc)
        sys.exit(2)
    except OSError as exc:
        logger.warning(
            "cannot lock {}/{} ({}): a second swarmgpu run beside this one would not be "
            "refused; make state_dir a directory this daemon may write",
            state_dir,
            LOCK_FILE,
            exc.strerror or exc,
        )
        return None


@click.command()
@click.option("--config", "config_path", default=None, type=ConfigPath(), help=CONFIG_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="The findings as JSON, with the counts needing action and advisory, "
                   "and the exit code.")
@click.option("--strict", is_flag=True, help="Advisories count as findings too (exit 1).")
def audit(config_path: str | None, as_json: bool, strict: bool) -> None:
    """What needs action: GPU labels against the agents' facts, agents that cannot be
    read, GPU requests and constraints, the GPU ledger, GPU access without a grant,
    move records.

    Exit 0: clean, or advisories only; 1: findings needing action (--strict: any
    finding); 2: could not run.
    """
    from swarmgpu.core.peertext import escaped
    from swarmgpu.manager.commands.audit import audit as run_audit
    from swarmgpu.manager.commands.audit import (
        exit_code,
        identity_check,
        plan_basis,
        render_table,
    )
    from swarmgpu.manager.nodes.agentbook import load_saved
    from swarmgpu.manager.nodes.sync import take_snapshot
    from swarmgpu.manager.services.tenants import Tenants, specs_of
    from swarmgpu.swarm.client import SwarmError, manager_client

    cfg = load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    tenants = Tenants.from_config(cfg)  # built once, handed to each reader (as the daemon)
    try:
        swarm = manager_client(cfg)
        snap = take_snapshot(swarm, cfg, tenants=specs_of(tenants))
    except SwarmError as exc:
        say_error(f"cannot read the swarm: {escaped(exc)}")
        sys.exit(2)
    from swarmgpu.manager.nodes.gpuhealth import apply_saved  # failed/degraded GPUs as findings

    apply_saved(snap.nodes, snap.facts, cfg.health, cfg.sync.prefix, cfg.state_dir)
    checks = []
    plans = None
    try:
        from swarmgpu.manager.cycle.placement import OnePlan, audit_checks

        plans = OnePlan(cfg, swarm, tenants)  # one plan a run, read by both its checks
        checks = audit_checks(cfg, tenants, plans)
    except ImportError:
        pass
    from swarmgpu.manager.services.overshare import audit_check

    checks.append(audit_check(cfg))  # holders over their GPU share (agents' processes)
    checks.append(identity_check(cfg.agents.identity, cfg.agents.token_file))
    from swarmgpu.manager.cycle.grants import audit_check as ungranted_check

    checks.append(ungranted_check(cfg, swarm, tenants, plans))  # GPUs seen without a grant
    from swarmgpu.manager.rebalance.mover import forged_check

    # move labels the daemon did not write; its records left past their timeout
    checks.append(
        forged_check(
            cfg.sync.prefix,
            move_timeout_s=cfg.rebalance.move_timeout_s,
            cycle_s=cfg.sync.interval_s,
        )
    )
    findings = run_audit(
        snap,
        prefix=cfg.sync.prefix,
        saved_agents=load_saved(cfg.state_dir),
        extra_checks=checks,
        generic_resource_kind=cfg.placement.generic_resource_kind,
        node_lost_grace_s=cfg.health.node_lost_grace_s,
        agent_service=cfg.agents.service, classes=cfg.preemption.classes,
    )
    code = exit_code(findings, strict=strict)
    # where the plan took its model and holds from (Swarm's labels, read only)
    basis = None if plans is None or plans.made is None else \
        plan_basis(plans.made.workload, plans.holds, cfg.sync.prefix)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "findings": [f.to_dict() for f in findings],
                    "action": sum(not f.advisory for f in findings),
                    "advisory": sum(f.advisory for f in findings),
                    "exit": code,
                    **({"plan": basis} if basis is not None else {}),
                },
                indent=2,
            )
        )
    else:
        click.echo(render_table(findings, snap, cfg.sync.prefix))
        if basis is not None:
            click.echo(escaped(basis["said"]))
    sys.exit(code)


def _snapshot(cfg: Config, tenants: Tenants | None, offline: str = "") -> Any:
    """One read of the swarm as the daemon's (``tenants``: the command's, built once);
    ``offline``: what the command can do without the engine, said when it is away."""
    from swarmgpu.core.peertext import escaped
    from swarmgpu.manager.nodes.sync import take_snapshot
    from swarmgpu.manager.services.tenants import specs_of
    from swarmgpu.swarm.client import SwarmError, manager_client

    try:
        snap = take_snapshot(manager_client(cfg), cfg, tenants=specs_of(tenants))
    except SwarmError as exc:
        say_error(f"cannot read the swarm: {escaped(exc)}{offline}")
        sys.exit(2)
    from swarmgpu.manager.nodes.gpuhealth import apply_saved  # as the daemon sees GPU health

    apply_saved(snap.nodes, snap.facts, cfg.health, cfg.sync.prefix, cfg.state_dir)
    return snap


@click.command()
@click.option("--config", "config_path", default=None, type=ConfigPath(), help=CONFIG_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="Each service's plan as JSON, with the moves (null where the daemon's "
                   "were not read: moves_unread says why), workload model, queues, "
                   "GPU health and ungranted GPU access.")
def plan(config_path: str | None, as_json: bool) -> None:
    """What placement would do for every annotated service, and why. Writes nothing."""
    from swarmgpu.manager.commands.plan import entries, plan_exit, render_plan, silent_rows
    from swarmgpu.manager.cycle.grants import ImageEnvs, find, rows
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon
    from swarmgpu.manager.nodes.agentbook import load_saved
    from swarmgpu.manager.nodes.gpuhealth import health_rows
    from swarmgpu.manager.rebalance.attribution import service_states
    from swarmgpu.manager.rebalance.record import moving
    from swarmgpu.manager.services.tenants import Tenants
    from swarmgpu.swarm.client import manager_client

    cfg = load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    tenants = Tenants.from_config(cfg)  # built once, handed to each reader (as the daemon)
    snap = _snapshot(cfg, tenants)
    swarm = manager_client(cfg)
    p = plan_as_daemon(snap, cfg, swarm, tenants)  # the daemon's planner and preemption
    ungranted = rows(find(cfg, snap, p, ImageEnvs(swarm)))
    got = _daemon_moves(cfg)
    moves, unread_moves = (got, None) if not isinstance(got, str) else (None, got)
    # A move in flight shows as Rebalancing, a proposed idle clean-up as IdleCleanup.
    idle = [
        str(m.get("service"))
        for m in entries(moves or {}, "proposed")
        if m.get("trigger") == "consolidation"
    ]
    states = service_states(
        p.services, moving(snap.services, snap.swarm_labels, cfg.sync.prefix), idle
    )
    p.services = [replace(sp, state=states.get(sp.name, sp.state)) for sp in p.services]
    # no stand-in facts here: the age of a silent node's last ones, from the daemon's record
    silent = silent_rows(snap, load_saved(cfg.state_dir), cfg.health.node_lost_grace_s)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "services": [sp.to_dict() for sp in p.services],
                    "moves": moves,
                    "moves_unread": unread_moves,  # why moves is null, as the text says
                    "workload": p.workload,
                    "queues": p.queues,
                    "gpu_health": health_rows(snap.facts),
                    "ungranted": ungranted,
                    "unread_nodes": [n.unread for n in snap.nodes if n.unread],
                    "unkeyed": list(snap.unkeyed.said()),  # (swarm.unkeyed)
                    "silent_agents": silent,
                },
                indent=2,
            )
        )
    else:
        click.echo(
            render_plan(
                p.services,
                ungranted=ungranted,
                workload=p.workload,
                health=health_rows(snap.facts),
                moves=moves,
                listen=cfg.http.listen,
                moves_unread=unread_moves,
                unread=[*snap.unkeyed.said(), *(n.unread for n in snap.nodes if n.unread)],
                nodes=[(n.hostname, n.id) for n in snap.nodes],
                silent=silent,
            )
        )
    if code := plan_exit(p.services):
        sys.exit(code)


def _daemon_moves(cfg: Config) -> dict[str, Any] | str:
    """The leader daemon's move proposals, or why they were not read (``daemonmoves``)."""
    from swarmgpu.cli.daemonmoves import daemon_moves

    return daemon_moves(cfg)


# Swarm names a stack's services and networks STACK_NAME and takes only a DNS name
# component (swarmkit's validateAnnotations): the stack name's part of that rule, with
# room for "_" and a one-letter service within its 63.
_SWARM_STACK = re.compile(r"[a-zA-Z0-9][-_a-zA-Z0-9]{0,60}", re.ASCII)


def _stack_name(given: str | None, first_file: str) -> str:
    """-n, else the first file's name up to its first dot. One docker stack deploy
    refuses is refused, exit 2: empty, or only spaces and quotes (docker/cli's
    validateStackName; -n '' fell back to the file's name, silently), or one Swarm
    refuses its services' names for ('bad name' passed --check, the deploy failed)."""
    from swarmgpu.core.peertext import escaped

    name = given if given is not None else Path(first_file).stem.split(".")[0]
    said = f"-n {given!r}" if given is not None else \
        f"{escaped(first_file)} (no -n): its name gives {name!r}"
    if all(c.isspace() or c in "'\"" for c in name):
        why = "docker stack deploy refuses one empty or of only spaces and quotes"
    elif not _SWARM_STACK.fullmatch(name):
        why = ("Swarm names its services and networks NAME_SERVICE and refuses each not "
               "valid as a DNS name component: ASCII letters and digits, '-' or '_' "
               "between them, at most 63 in all")
    else:
        return name
    click.echo(f"swarmgpu render: {said}: invalid stack name ({why}); give the name you "
               "deploy it with: -n NAME", err=True)
    sys.exit(2)


@click.command()
@click.argument(
    "stack_file", required=False, type=click.Path(exists=True, dir_okay=False, allow_dash=True)
)
@click.option(
    "--compose-file",
    "-c",
    "compose_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="A stack file instead of the argument (- reads it from stdin); repeat it to merge "
    "several as `docker stack deploy -c A -c B` does (later files over earlier ones).",
)
@click.option(
    "--stack",
    "-n",
    "stack_name",
    default=None,
    help="Stack name used with `docker stack deploy` (default: the first file's name).",
)
@click.option("-o", "--output", default=None, type=click.Path(), help="Output file (default -).")
@click.option("--config", "config_path", default=None, type=ConfigPath(), help=CONFIG_HELP)
@click.option(
    "--check",
    is_flag=True,
    help="Only check the stack, offline (no Docker): every error, then exit.",
)
@click.option(
    "--skip-interpolation",
    "--no-interpolate",
    "skip_interpolation",
    is_flag=True,
    help="Substitute no variables (docker stack deploy runs in another "
    "environment): a $ in a value render places by is then an error.",
)
def render(
    stack_file: str | None,
    compose_files: tuple[str, ...],
    stack_name: str | None,
    output: str | None,
    config_path: str | None,
    check: bool,
    skip_interpolation: bool,
) -> None:
    """Rewrite a stack with GPU placement resolved, for `docker stack deploy -c -`.

    The whole file is checked first, before Docker is asked anything: on any error
    every one is printed (service and key named), nothing is written, exit 1. Compose's
    GPU reservations (deploy.resources.reservations.devices, and generic_resources of a
    GPU kind) become swarmgpu.gpus; the rendered file says so in a comment.
    Variables (${VAR}, $VAR, $$) are substituted from this environment as `docker stack
    deploy` run here substitutes them, and checked and placed by as substituted.
    Several files (-c A -c B) are each substituted, then merged as `docker stack
    deploy` merges them; a field whose merge render has no rule for is an error.
    A stack file is read only if it is a regular file of at most 8 MiB (exit 2
    otherwise); - reads it from stdin (with -n NAME).
    """
    from swarmgpu.core.peertext import escaped
    from swarmgpu.manager.commands.render import StackError, check_stack, render_stack
    from swarmgpu.manager.services.tenants import Tenants

    if stack_file is not None and compose_files:
        raise click.UsageError("give the stack file as the argument or with -c, not both")
    files = [stack_file] if stack_file is not None else list(compose_files)
    if not files:
        raise click.UsageError("no stack file: give one, or -c FILE for each file")
    if files.count("-") > 1:  # one stdin: the second read would find it empty
        raise click.UsageError("stdin (-) once: give the other files by their paths")
    if "-" in files[:1] and stack_name is None:  # no file name to name the stack after
        raise click.UsageError("the stack read from stdin (-) needs its name: -n NAME")
    if check and output is not None:  # ignored, it wrote no file where one was asked for
        click.echo(
            f"swarmgpu render: --check writes no stack, so -o {escaped(output)} would write "
            "nothing; leave out -o, or --check to render",
            err=True,
        )
        sys.exit(2)
    output = "-" if output is None else output
    cfg = load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    name = _stack_name(stack_name, files[0])
    tenants = Tenants.from_config(cfg)  # built once: the check's and the planner's
    # docker stack deploy substitutes from its environment: in the pipeline, this one
    environ = None if skip_interpolation else dict(os.environ)
    source, *rest = (_read_stack_file(f) for f in files)
    names = ["stdin (-)" if f == "-" else f for f in files]  # how errors name each
    more = list(zip(names[1:], rest, strict=True))
    stack_file = " + ".join(names)  # how every line below names the stack
    checked = check_stack(
        source,
        where=names[0],
        more=more,
        prefix=cfg.sync.prefix,
        zone_label=cfg.placement.zone_label,
        generic_kind=cfg.placement.generic_resource_kind,
        classes=parse_priority_classes(cfg.preemption.priority_classes),
        tenants=tenants,
        stack_name=name,
        queues=frozenset(queue_quotas(cfg.queues)),  # (the planner's, without tenants)
        environ=environ,
        env_base=os.path.dirname(os.path.abspath(files[0])),
    )
    if checked.errors:
        _render_errors(stack_file, checked.errors)
    if check:
        for note in checked.notes:
            click.echo(f"swarmgpu render: {escaped(note)}", err=True)
        how = (
            "variables not substituted (--skip-interpolation)"
            if environ is None
            else "variables substituted from this environment, as docker stack deploy run "
            "with it would"
        )
        # a service of gpus: "0" is placed by swarmgpu but asks for no GPU: counted apart
        gpu = len(checked.requests) - len(checked.no_gpu)
        no_gpu = f", {len(checked.no_gpu)} placed without a GPU" if checked.no_gpu else ""
        click.echo(
            f"swarmgpu render: {escaped(stack_file)}: valid "
            f"({len(checked.stack['services'])} service(s), {gpu} GPU request(s){no_gpu}), "
            f"fits docker/cli's compose schema 3.8; {how}",
            err=True,
        )
        return
    from swarmgpu.manager.cycle.placement import one_shot_planner
    from swarmgpu.manager.nodes.sync import facts_by_node
    from swarmgpu.manager.rebalance.record import moving
    from swarmgpu.swarm.client import manager_client

    if output != "-" and (why := _unwritable(output)):  # said before the swarm is read
        click.echo(f"swarmgpu render: -o {escaped(output) or repr('')}: {why}", err=True)
        sys.exit(2)
    # --check reads no swarm (it returned above): the way to check a stack offline
    snap = _snapshot(cfg, tenants, "; to check the stack without Docker: swarmgpu render --check")
    # The daemon's planner (config, stored workload model): render chooses as it would.
    planner = one_shot_planner(cfg, manager_client(cfg), snap, tenants)
    try:
        text, p = render_stack(
            source,
            name,
            snap.nodes,
            snap.services,
            snap.tasks,
            facts_by_node(snap),
            prefix=cfg.sync.prefix,
            zone_label=cfg.placement.zone_label,
            planner=planner,
            moving=moving(snap.services, snap.swarm_labels, cfg.sync.prefix),
            environ=environ,
            more=more,
            base=os.path.dirname(os.path.abspath(files[0])),
            stopping=snap.stopping,
            rejected=snap.rejected,
            unkeyed=snap.unkeyed,
            # the daemon's agents' nodes (live services), whatever the stack renames
            agents=snap.agent_nodes(planner.agent_service),
        )
    except StackError as exc:  # only what needs the swarm: count: all with no GPU node
        _render_errors(stack_file, exc.errors)
    for line in text.splitlines()[2:]:  # what render changed, as the file's comment says
        if not line.startswith("# "):
            break
        click.echo(f"swarmgpu render: {line[2:]}", err=True)  # escaped in the file already
    for sp in p.services:
        if sp.name.startswith(name + "_") and sp.status != "placed":
            click.echo(
                f"swarmgpu render: {escaped(sp.name)} is {sp.status}: {escaped(sp.reason)}",
                err=True,
            )
    if output == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text)
    except OSError as exc:  # the folder went while the swarm was read
        click.echo(
            f"swarmgpu render: -o {escaped(output)}: cannot write it "
            f"({escaped(exc.strerror or exc)})",
            err=True,
        )
        sys.exit(2)


def _unwritable(output: str) -> str | None:
    """Why render cannot write its stack at ``output``, or None."""
    from swarmgpu.core.peertext import escaped

    if not output:  # Path('') is '.', which was said to be "a folder"
        return "an empty path; give the file to write, or - for stdout"
    p = Path(output)
    if p.is_dir():
        return "a folder; give the file to write, or - for stdout"
    if not p.parent.is_dir():
        return f"no folder {escaped(str(p.parent))}; create it or give another path"
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return "cannot write there; give a path you may write, or - for stdout"
    return None


def _read_stack_file(path: str) -> str:
    """The stack file's text, read as every file swarmgpu is named (core.yamlfile: a
    regular file, at most 8 MiB, UTF-8; a FIFO is refused unopened, where a plain open
    waited for a writer for ever), or stdin for ``-``, as bounded. Exit 2 otherwise."""
    from swarmgpu.core.peertext import escaped
    from swarmgpu.core.yamlfile import read_yaml_text
    from swarmgpu.manager.commands.render import StackError

    stdin = path == "-"
    try:
        return read_yaml_text(
            "-" if stdin else path,
            "stdin (-)" if stdin else path,
            StackError,
            fmt="stack",
            other=", or - to read it from stdin",
            stream=sys.stdin.buffer if stdin else None,
        )
    except StackError as exc:
        click.echo(f"swarmgpu render: {escaped(exc)}", err=True)
        sys.exit(2)


def _render_errors(stack_file: str, errors: list[str]) -> NoReturn:
    from swarmgpu.core.peertext import escaped  # a hostile file's names reach these lines

    for e in errors:
        click.echo(f"swarmgpu render: {escaped(e)}", err=True)
    click.echo(
        f"swarmgpu render: {escaped(stack_file)}: {len(errors)} error(s); nothing written", err=True
    )
    sys.exit(1)


@click.command()
@click.option("--config", "config_path", default=None, type=ConfigPath(), help=CONFIG_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="The document /api/v1/cluster serves (schema swarmgpu.cluster/v1), built "
              "here; last_cycle and last_cycle_at read from the daemon's /healthz on "
              "http.listen, null where none answers there (last_cycle_unread says why).")
def status(config_path: str | None, as_json: bool) -> None:
    """The cluster at a glance: nodes x GPUs, memory, holders, pending requests."""
    from swarmgpu.cli.lastcycle import last_cycle
    from swarmgpu.manager.commands.audit import audit as run_audit
    from swarmgpu.manager.commands.plan import silent_rows
    from swarmgpu.manager.cycle.grants import ImageEnvs, find, rows
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon
    from swarmgpu.manager.nodes.agentbook import load_saved
    from swarmgpu.manager.services.tenants import Tenants
    from swarmgpu.manager.web.cluster_view import build_cluster, gpu_metrics, render_status

    cfg = load_cfg(config_path)
    setup_logging("WARNING", cfg.log.format)
    tenants = Tenants.from_config(cfg)  # built once, handed to each reader (as the daemon)
    snap = _snapshot(cfg, tenants)
    saved = load_saved(cfg.state_dir)
    from swarmgpu.swarm.client import manager_client

    swarm = manager_client(cfg)
    p = plan_as_daemon(snap, cfg, swarm, tenants)  # as the daemon's map: its preemption too
    doc = build_cluster(
        snap, p,
        prefix=cfg.sync.prefix,
        metrics=gpu_metrics(snap.nodes, cfg),
        saved_agents=saved,
        findings=run_audit(
            snap,
            prefix=cfg.sync.prefix,
            saved_agents=saved,
            generic_resource_kind=cfg.placement.generic_resource_kind,
            node_lost_grace_s=cfg.health.node_lost_grace_s,
            agent_service=cfg.agents.service, classes=cfg.preemption.classes,
        ),
        ungranted=rows(find(cfg, snap, p, ImageEnvs(swarm))),
        generic_resource_kind=cfg.placement.generic_resource_kind,
        agent_service=cfg.agents.service,
        node_lost_grace_s=cfg.health.node_lost_grace_s,
    )
    if as_json:  # (the table shows neither: no wait on a daemon that hangs)
        # The daemon keeps these in memory (observe.current); this process runs none of
        # its cycles: they are the daemon's own words, from its /healthz.
        doc.update(last_cycle(cfg))
    # no stand-in facts here: a silent node's last ones' age, as plan says it (--json:
    # the nodes' unreachable findings say it)
    click.echo(json.dumps(doc, indent=2) if as_json else render_status(doc, silent_rows(
        snap, saved, cfg.health.node_lost_grace_s, reader="status")))


@click.command("apply")
@click.option(
    "--service",
    "services",
    multiple=True,
    required=True,
    metavar="NAME",
    help="A service whose held-back changes to write (repeatable).",
)
@click.option("--config", "config_path", default=None, type=ConfigPath(), help=CONFIG_HELP)
@click.option("--dry-run", is_flag=True, default=None, help="Say what would change; write nothing.")
def apply_cmd(services: tuple[str, ...], config_path: str | None, dry_run: bool | None) -> None:
    """Write the spec changes swarmgpu holds back for a running service.

    swarmgpu never restarts a running task for a change that is no placement decision
    (a newer release's env lines, a template, a reservation): `plan` and `audit` list
    them as held. This writes them now; the service's tasks restart once (Swarm's
    rolling update). Node labels are left to the daemon.
    """
    from swarmgpu.core.peertext import escaped
    from swarmgpu.manager.services.release import release_held
    from swarmgpu.manager.services.tenants import Tenants
    from swarmgpu.swarm.client import manager_client

    cfg = load_cfg(config_path, dry_run=dry_run or None)
    setup_logging("WARNING", cfg.log.format)
    tenants = Tenants.from_config(cfg)  # built once, handed to each reader (as the daemon)
    snap = _snapshot(cfg, tenants)
    failed = False
    for r in release_held(manager_client(cfg), snap, cfg, services,
                          dry_run=cfg.dry_run, tenants=tenants):
        # Env lines, constraints and reasons come from the stack: shown escaped.
        if r.error:
            failed = True
            click.echo(f"swarmgpu apply: {escaped(r.error)}", err=True)
        elif not r.changes:
            click.echo(f"{escaped(r.service)}: nothing held back")
        else:
            verb = "written" if r.written else "would write" if cfg.dry_run else "not written"
            failed |= not (r.written or cfg.dry_run)
            click.echo(escaped(f"{r.service}: {verb}: {'; '.join(r.changes)}"))
    sys.exit(1 if failed else 0)
