"""Commands for a GPU node: `facts`, `agent`, `doctor`, `node-config`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from swarmgpu.cli.logs import setup_logging


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


@click.command()
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


@click.command()
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


@click.command()
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


@click.command("node-config")
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
