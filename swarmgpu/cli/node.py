"""Commands for a GPU node: `facts`, `agent`, `doctor`, `node-config`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from swarmgpu.cli.config import ConfigPath
from swarmgpu.cli.exitcodes import CONFIG_ERROR
from swarmgpu.cli.logs import setup_logging
from swarmgpu.cli.said import say_error
from swarmgpu.cli.strictopts import STRICT_INT
from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.strictnum import NumberText, parse_float

if TYPE_CHECKING:
    from swarmgpu.core.model import NodeFacts
    from swarmgpu.swarm.identity import ReloadingServerContext

DEFAULT_AGENTS_SERVICE = AgentsConfig.service  # the daemon's own defaults
DEFAULT_LABEL_PREFIX = SyncConfig.prefix
MAX_REFRESH_S = 86400  # a day: a longer period is a typo (the watchdog is 2x it + 30 s)
# A shorter period read the source in a busy loop, and its facts were stale (older than
# twice the period) by the time most requests read them.
MIN_REFRESH_S = 1


def _source_options(f: Any) -> Any:
    f = click.option("--source", default="nvml", show_default=True, metavar="SPEC",
                     help="nvml (this node's driver) | gfd:PATH | file:PATH | topo:PATH")(f)
    return _source_detail_options(f)


def _source_detail_options(f: Any) -> Any:
    """What a source spec alone cannot say (open_source's keywords); shared by every
    command that opens a source, so `doctor --source topo:` takes what `facts` does."""
    f = click.option("--hostname", default=None,
                     help="Node hostname to report (default: this host's name).")(f)
    f = click.option("--product", default=None, help="GPU product, for topo: sources.")(f)
    f = click.option("--memory-mib", type=STRICT_INT, default=None,
                     help="Memory per GPU in MiB, for topo: sources.")(f)
    f = click.option("--mig", "mig_layout", default=None,
                     help="MIG layout for topo: sources (see docs/facts-schema.md).")(f)
    return f


def _open(source: str, hostname: str | None, product: str | None, memory_mib: int | None,
          mig_layout: str | None) -> Any:
    from swarmgpu.agent.facts import SourceError
    from swarmgpu.agent.facts.registry import open_source
    from swarmgpu.core.peertext import escaped

    try:
        return open_source(source, hostname=hostname, product=product,
                           memory_mib=memory_mib, mig_layout=mig_layout)
    except SourceError as exc:
        say_error(escaped(exc))
        sys.exit(2)


@click.command()
@_source_options
@click.option("--json", "as_json", is_flag=True, help="Print the JSON the agent serves.")
def facts(source: str, hostname: str | None, product: str | None, memory_mib: int | None,
          mig_layout: str | None, as_json: bool) -> None:
    """Print the GPU facts the agent would serve."""
    from swarmgpu.core.model import FactsError
    from swarmgpu.core.peertext import escaped

    src = _open(source, hostname, product, memory_mib, mig_layout)
    try:
        nf = src.read()
    except FactsError as exc:
        click.echo(f"swarmgpu facts: {escaped(exc)}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(nf.to_dict(), indent=2))
    else:
        click.echo(_facts_text(nf))
    if nf.gpus_unread:
        # Printed as the agent serves them, yet not read: a script must tell them from
        # facts read (node-config refuses the same facts with 2).
        click.echo(f"swarmgpu facts: the GPUs could not be read: {escaped('; '.join(nf.errors))}",
                   err=True)
        sys.exit(2)


def _facts_text(nf: NodeFacts) -> str:
    """`facts`' text: the node, its GPUs and links, errors and the labels sync writes."""
    from swarmgpu.core.peertext import escaped
    from swarmgpu.swarm.labels import GPUS_UNREAD_FIX, desired_labels

    # A file or GFD source is others' text: every line shows its control characters escaped.
    lines = [f"host {nf.hostname}  driver {nf.driver_version}  cuda {nf.cuda_driver_version}  "
             f"source {nf.source}"]
    for g in nf.gpus:
        mig = f"  MIG {[m.profile for m in g.mig_devices]}" if g.mig_enabled else ""
        health = "" if g.healthy else f"  UNHEALTHY: {g.error}"
        lines.append(f"  GPU{g.index} {g.product} {g.memory_mib} MiB {g.uuid} "
                     f"numa={g.numa_node}{mig}{health}")
    if nf.links:
        lines.append("links:")
        for i, row in enumerate(nf.links):
            lines.append(f"  GPU{i} " + " ".join(f"{x:>5}" for x in row))
    lines += [f"  error: {e}" for e in nf.errors]
    lines.append("labels:")
    if nf.gpus_unread:  # label sync writes none: count=0 would stop the node's GPU tasks
        lines.append("  none written: its GPUs cannot be read (the error above), so label "
                     f"sync leaves the node's labels as they are; fix: {GPUS_UNREAD_FIX}")
    else:
        lines += [f"  {k}={v}" for k, v in sorted(desired_labels(nf).items())]
    return "\n".join(escaped(line) for line in lines)


@click.command()
@_source_options
@click.option("--listen", default="127.0.0.1:9401", show_default=True,
              help="HOST:PORT to serve on (loopback by default; managers must reach it: "
              "e.g. 0.0.0.0:9401 or the node's cluster address).")
@click.option("--metrics-profile", default=None, type=click.Path(),
              help="YAML profile of scripted utilisation (demos, tests).")
@click.option("--refresh-s", "refresh_text", default="30", show_default=True,
              help="Seconds between fact reads (at least 1, at most 86400).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Log lines as text, or one JSON object each.")
@click.option("--docker-host", default=None,
              help="Optional: this node's Docker engine (e.g. unix:///var/run/docker.sock), "
                   "to name the Swarm task of each GPU process here. Without it the agent "
                   "reports container ids and the daemon names them from Swarm's task "
                   "list, so the agent needs no engine access.")
@click.option("--proc-root", default="/proc", show_default=True,
              help="The host's /proc (GPU process PIDs are the host's; in a container "
                   "mount it, e.g. /host/proc). A container's own /proc is warned of at "
                   "start.")
@click.option("--identity", type=click.Choice(["auto", "swarm-pki", "none"]), default="auto",
              show_default=True, envvar="SWARMGPU_AGENT_IDENTITY",
              help="swarm-pki: serve HTTPS with this node's Swarm certificate and give "
                   "/facts and per-process metrics only to a swarm-manager certificate of "
                   "this swarm (fails without the certificate). auto: swarm-pki where the "
                   "certificate is found, else plain HTTP with a warning. none: plain HTTP.")
@click.option("--data-root", default="/var/lib/docker", show_default=True,
              envvar="SWARMGPU_AGENT_DATA_ROOT",
              help="The engine's data root (docker info -f '{{.DockerRootDir}}'): the node "
                   "certificate is read from its swarm/certificates, or from systemd's "
                   "$CREDENTIALS_DIRECTORY when LoadCredential= put it there.")
@click.option("--tls-cert", default=None, type=click.Path(),
              help="The node certificate, instead of the one under --data-root "
                   "(swarm-node.crt). Re-read when it changes (rotation).")
@click.option("--tls-key", default=None, type=click.Path(),
              help="Its key (swarm-node.key).")
@click.option("--tls-ca", default=None, type=click.Path(),
              help="The swarm root CA that client certificates must chain to "
                   "(swarm-root-ca.crt; default: beside --tls-cert, else under --data-root).")
@click.option("--token-file", default=None, type=click.Path(),
              help="A bearer token (one line, at least 16 characters: openssl rand -hex "
                   "32): with swarm-pki it opens /metrics without per-process detail "
                   "(Prometheus); with none it is required on /facts and /metrics. A "
                   "client's wrong tokens are limited (then 429).")
@click.option("--allowed-hosts", default="", envvar="SWARMGPU_AGENT_ALLOWED_HOSTS",
              help="Extra host names (comma-separated) a plain-HTTP agent without a token "
                   "answers to. IP addresses, localhost, this host's name and the --listen "
                   "host always work; any other Host is refused (421): DNS rebinding.")
@click.option("--trusted-proxies", default="", envvar="SWARMGPU_AGENT_TRUSTED_PROXIES",
              help="Reverse proxies in front (comma-separated IP addresses or networks, "
                   "e.g. 10.0.0.5, 10.1.0.0/24), as the daemon's http.trusted_proxies: "
                   "from these alone X-Forwarded-For is read, for whose wrong tokens a "
                   "request counts; else every client shares the proxy's.")
def agent(source: str, hostname: str | None, product: str | None, memory_mib: int | None,
          mig_layout: str | None, listen: str, metrics_profile: str | None, refresh_text: str,
          log_format: str, docker_host: str | None, proc_root: str, identity: str,
          data_root: str, tls_cert: str | None, tls_key: str | None, tls_ca: str | None,
          token_file: str | None, allowed_hosts: str, trusted_proxies: str) -> None:
    """Serve this node's GPU facts and metrics over HTTP (/facts, /metrics, /healthz)."""
    from swarmgpu.agent import server as agent_mod

    refresh_s = _refresh_period(refresh_text)
    try:
        agent_mod.parse_listen(listen)
    except ValueError as exc:
        click.echo(f"swarmgpu agent: --listen: {exc}", err=True)
        sys.exit(CONFIG_ERROR)
    from swarmgpu.core.configvalues import host_names_problem
    from swarmgpu.core.forwarded import parse_trusted

    if bad := host_names_problem("--allowed-hosts", allowed_hosts):
        click.echo(f"swarmgpu agent: {bad}", err=True)
        sys.exit(CONFIG_ERROR)
    try:
        proxies = parse_trusted(trusted_proxies)
    except ValueError as exc:
        click.echo(f"swarmgpu agent: --trusted-proxies: {exc}", err=True)
        sys.exit(CONFIG_ERROR)
    setup_logging("INFO", log_format)
    src = _open(source, hostname, product, memory_mib, mig_layout)
    sampler = None
    if metrics_profile:
        from swarmgpu.agent.facts.profile import ProfileError, ProfileSampler
        from swarmgpu.core.model import FactsError
        from swarmgpu.core.peertext import escaped

        try:  # the profile is per GPU: the facts are read now (refused: said, not a trace)
            sampler = ProfileSampler(metrics_profile, src.read()).sample
        except (ProfileError, FactsError) as exc:
            click.echo(f"swarmgpu agent: {escaped(exc)}", err=True)
            sys.exit(2)
    from swarmgpu.agent.procattr import Attributor, engine_labels
    from swarmgpu.swarm.identity import (
        AGENT_TOKENS_FIX,
        IdentityError,
        TokenRefused,
        read_agent_token,
    )

    try:
        tls = agent_tls(identity, data_root, tls_cert, tls_key, tls_ca, listen=listen)
        # At least MIN_TOKEN_CHARS: the token opens /metrics (and /facts without TLS)
        # from anywhere, and a short one is guessed.
        token = read_agent_token(token_file) if token_file else None
    except TokenRefused as exc:
        click.echo(f"swarmgpu agent: --token-file: {exc} ({AGENT_TOKENS_FIX})", err=True)
        sys.exit(CONFIG_ERROR)  # its content is wrong (a path or permission: 2, may mend)
    except (IdentityError, OSError) as exc:
        click.echo(f"swarmgpu agent: {exc}", err=True)
        sys.exit(2)
    _warn_blind_proc_root(proc_root)
    try:
        agent_mod.serve(src, listen, sampler=sampler, refresh_s=refresh_s,
                        attribute=Attributor(engine_labels(docker_host) if docker_host
                                             else None, proc_root), tls=tls, token=token,
                        extra_hosts=allowed_hosts, trusted_proxies=proxies)
    except agent_mod.ListenError as exc:
        click.echo(f"swarmgpu agent: {exc}", err=True)
        sys.exit(2)
    # Stopped (SIGTERM/SIGINT). NVML is shut down only if that is done within 2 s, then
    # the process ends without the exit hooks: a call hung in the driver (a GPU fallen
    # off the bus) holds the session lock and the GPU-read and sampler threads the hooks
    # join, and Docker or systemd would SIGKILL the agent after the grace period.
    from swarmgpu.agent.facts import nvml_session

    nvml_session.shutdown_within(nvml_session.EXIT_WAIT_S)
    _exit_now(0)


def _refresh_period(text: str) -> float:
    """``--refresh-s`` as seconds, refused before anything starts: the server's own errors
    were tracebacks, and a NaN or huge period left the refresher spinning or dead (its
    wait cannot take it); float() read '1_0' as 10 (``core.strictnum``). Exit 78: no
    restart mends an option (the unit's RestartPreventExitStatus=78)."""
    span = f"seconds between fact reads, at least {MIN_REFRESH_S} and at most {MAX_REFRESH_S}"
    try:
        value = parse_float(text)
    except NumberText as e:
        click.echo(f"swarmgpu agent: --refresh-s {text}: {e} ({span})", err=True)
        sys.exit(CONFIG_ERROR)
    if not MIN_REFRESH_S <= value <= MAX_REFRESH_S:
        click.echo(f"swarmgpu agent: --refresh-s {value:g}: {span} (e.g. 30)", err=True)
        sys.exit(CONFIG_ERROR)
    return value


def _warn_blind_proc_root(proc_root: str) -> None:
    """Said at start: a --proc-root that hides other containers' processes leaves every
    GPU process unattributed, which nothing else would say (swarmgpu.agent.procroot)."""
    from loguru import logger

    from swarmgpu.agent.procroot import FIX, proc_root_view

    pv = proc_root_view(proc_root)
    if pv.blind:
        logger.warning("--proc-root {}: {}; no GPU process of another container can be "
                       "attributed to its service, so shared GPUs are not watched: {} "
                       "(swarmgpu doctor: agent.proc-root)", proc_root, pv.found, FIX)


def _exit_now(code: int) -> None:
    """End the process now, the logs flushed, skipping the exit hooks (which would wait
    on a thread hung in NVML for as long as it hangs)."""
    from loguru import logger

    logger.complete()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def agent_tls(identity: str, data_root: str, cert: str | None, key: str | None,
              ca: str | None, *, listen: str = "") -> ReloadingServerContext | None:
    """The agent's TLS, or None for plain HTTP (said, naming ``listen``, the address
    served); raises IdentityError with the fix."""
    from swarmgpu.swarm.identity import IdentityError, ReloadingServerContext, node_cert_paths

    if bool(cert) != bool(key):
        raise IdentityError("--tls-cert and --tls-key go together")
    if identity == "none":
        if cert:
            raise IdentityError("--tls-cert needs --identity swarm-pki (or auto)")
        _log_plain("--identity none", listen)
        return None
    found_crt, found_key, found_ca = node_cert_paths(data_root)
    crt, k = (Path(cert), Path(key)) if cert and key else (found_crt, found_key)
    beside = crt.parent / found_ca.name
    root_ca = Path(ca) if ca else beside if beside.exists() else found_ca
    if not crt.exists():
        if identity == "auto" and not cert:
            _log_plain(f"no Swarm node certificate at {crt}", listen)
            return None
        raise IdentityError(
            f"no Swarm node certificate at {crt}: is this node a Swarm member, and is "
            "--data-root the engine's (docker info -f '{{.DockerRootDir}}')? Under systemd "
            "pass it with LoadCredential=; --identity none serves plain HTTP (not recommended)")
    if not root_ca.exists():
        raise IdentityError(f"no swarm root CA at {root_ca} (swarm-root-ca.crt); pass --tls-ca")
    return ReloadingServerContext(crt, k, root_ca)


def _log_plain(why: str, listen: str) -> None:
    from loguru import logger

    # who can read it: on loopback (the default) no one on the network does
    who = f"anyone who reaches {listen}" if listen else "anyone who reaches it"
    logger.warning("agent serves plain HTTP ({}): {} can read /facts and /metrics, and the "
                   "daemon (agents.identity swarm-pki, the default) refuses it; run it on a "
                   "Swarm member with its node certificate (docs/security.md)", why, who)


@click.command()
@click.option("--root", default="/", show_default=True, type=click.Path(),
              help="Root of the node's file system (for checking a mounted image).")
@click.option("--json", "as_json", is_flag=True,
              help="The checks as JSON (each: id, status, found, why, fix, details).")
@click.option("--source", default=None, metavar="SPEC",
              help="Fact source to compare with: nvml | gfd:PATH | file:PATH | topo:PATH "
                   "(default: nvml when --root is /).")
@click.option("--grants", type=click.Choice(["env", "mounts"]), default="env",
              show_default=True,
              help="How the daemon grants GPUs (its placement.grants): checks the toolkit "
                   "reads them that way.")
@click.option("--proc-root", default=None, metavar="DIR",
              help="The agent's --proc-root, to check it shows the host's processes "
                   "(agent.proc-root; default: /proc when --root is /). Run where the "
                   "agent runs: docker exec AGENT swarmgpu doctor --proc-root /host/proc.")
@click.option("--agents-service", default=None, metavar="NAME",
              help="The daemon's agents.service, checked on a manager (agents.service): "
                   "the service exists and runs a task on each GPU-labelled node; '' "
                   "where the agents run outside Swarm (systemd). Default: the --config "
                   f"file's, else {DEFAULT_AGENTS_SERVICE}.")
@click.option("--config", "config_path", default=None, type=ConfigPath(),
              help="The daemon's YAML config (checked as `swarmgpu config check` does): "
                   "its agents.service, unless --agents-service is given, its "
                   "sync.prefix (label sync's labels mark GPU nodes), its "
                   "placement.generic_resource_kind (a node advertising it is a GPU "
                   "node) and its agents settings (each agent read as the daemon reads "
                   "it: agents.answers).")
@_source_detail_options
def doctor(root: str, as_json: bool, source: str | None, grants: str, proc_root: str | None,
           agents_service: str | None, config_path: str | None, hostname: str | None,
           product: str | None, memory_mib: int | None, mig_layout: str | None) -> None:
    """Check this node's GPU container setup and explain each problem and its fix."""
    from swarmgpu.agent.doctor import FactsRead, factsread, run_doctor
    from swarmgpu.agent.procroot import proc_root_view

    cfg = _daemon_config(config_path)
    agents_service, prefix, kind = daemon_keys(agents_service, config_path, cfg)
    read = FactsRead(None)
    docker_info = None
    if source or root == "/":
        src = _open(source or "nvml", hostname, product, memory_mib, mig_layout)
        # bounded: a hung driver must not hang the doctor (gpu.facts says it did not answer)
        read = factsread.read_facts_within(src, source or "nvml", factsread.FACTS_DEADLINE_S)
    docker_error = None
    if root == "/":
        docker_info, docker_error = _docker_info()
    scheme = None
    if root == "/":
        from swarmgpu.swarm.identity import probe_agent_scheme

        scheme = probe_agent_scheme()
    text, code = run_doctor(root, facts=read.facts, docker_info=docker_info, as_json=as_json,
                            agent_probed=root == "/", agent_scheme=scheme, grants=grants,
                            facts_error=read.error, engine_probed=root == "/",
                            docker_error=docker_error, facts_hung=read.hung,
                            proc_root=proc_root_view(proc_root or "/proc")
                            if proc_root or root == "/" else None,
                            agents_service=agents_service if root == "/" else None,
                            swarm=swarm_read(docker_info, docker_error, agents_service, prefix,
                                             kind, cfg) if root == "/" else None)
    click.echo(text)
    if read.hung:
        # Exit now: the exit hooks would wait on the hung read (NVML's shutdown takes the
        # lock its init holds; the GPU-read pool joins its threads), for as long as it hangs.
        _exit_now(code)
    sys.exit(code)


def _daemon_config(config_path: str | None) -> Config | None:
    """The daemon's config file (``doctor --config``), loaded and checked as every
    command loads it (an error ends the doctor, exit 2); None without one."""
    if config_path is None:
        return None
    from swarmgpu.cli.config import load_cfg

    return load_cfg(config_path)


def daemon_keys(given: str | None, config_path: str | None,
                cfg: Config | None = None) -> tuple[str, str, str]:
    """The ``agents.service`` the doctor checks, ``sync.prefix`` (a node carrying label
    sync's labels under it is GPU-labelled) and ``placement.generic_resource_kind`` (a
    node advertising it is a GPU node, as to the daemon: ``gpu_hint``):
    ``--agents-service`` where given, else the daemon's config file's (``--config``:
    loaded and checked as every command loads it, whenever given; an error ends the
    doctor, exit 2), else the daemon's defaults."""
    cfg = cfg if cfg is not None else _daemon_config(config_path)
    if cfg is None:
        return (DEFAULT_AGENTS_SERVICE if given is None else given), DEFAULT_LABEL_PREFIX, ""
    return ((cfg.agents.service if given is None else given), cfg.sync.prefix,
            cfg.placement.generic_resource_kind)


def _docker_info() -> tuple[Any, str | None]:
    """``docker info`` of this node's dockerd, read as the daemon reads the engine
    (``answerjson.strict_api``: a key twice, an answer past the bound or its deadline,
    refused, its version's too), or why not: dockerd down is itself a finding
    (docker.engine)."""
    from swarmgpu.swarm.answerjson import (
        AnswerTooLarge,
        AnswerTooSlow,
        RepeatedAnswer,
        strict_api,
    )

    refused = (RepeatedAnswer, AnswerTooLarge, AnswerTooSlow)
    try:
        import docker

        api = strict_api(lambda **kw: docker.from_env(timeout=5, **kw).api)
        info = api.info()
    except refused as exc:  # (docker.engine names the fix)
        return None, f"docker info: {exc}"
    except Exception as exc:
        if isinstance(exc.__cause__, refused):  # (its version, asked as it is made)
            return None, f"docker info: {exc.__cause__}"
        # where it asked, as plan and audit say it: a DOCKER_HOST left elsewhere shows
        from swarmgpu.swarm.engineaddr import engine_endpoint

        return None, f"at {engine_endpoint(None)}: {str(exc) or type(exc).__name__}"
    if not isinstance(info, dict):  # (every check reads it as one: a list failed doctor)
        return None, (f"docker info: the engine's answer is no JSON object (a "
                      f"{type(info).__name__}): it is not read")
    return info, None


def swarm_read(docker_info: Any, docker_error: str | None, name: str, prefix: str,
               kind: str, cfg: Config | None = None) -> Any:
    """Swarm's nodes, services and tasks for the ``agents.service`` check, and each
    node's agent's answer to a read as the daemon's (``agents.answers``; ``cfg``: the
    daemon's config, else its defaults, whose tenants may not match the agents'
    service), read where this engine is a manager (``docker info``'s
    ``Swarm.ControlAvailable``); else why not (``prefix``: ``sync.prefix``; ``kind``:
    ``placement.generic_resource_kind``). Not read with the key off ('')."""
    from swarmgpu.agent.doctor import SwarmRead
    from swarmgpu.agent.doctor.infoparts import info_part, part_problem

    if not name:
        return SwarmRead()
    if docker_info is None:
        return SwarmRead(error=f"dockerd did not answer ({docker_error or 'not asked'})")
    unread = part_problem(docker_info, "Swarm") or part_problem(
        docker_info, "Swarm.ControlAvailable")
    if unread is not None:  # (agents.service fails, naming it with the fix)
        return SwarmRead(error=f"{unread}: whether this node is a manager is not known")
    if not info_part(docker_info, "Swarm.ControlAvailable"):
        return SwarmRead(error="this node is no Swarm manager (a worker cannot list "
                               "services)")
    from swarmgpu.swarm.client import SwarmClient, SwarmError

    try:
        client = SwarmClient(timeout_s=10)
        services = client.services()
        ids = [sv.id for sv in services if sv.name == name]
        tasks = client.tasks({"service": ids, "desired-state": "running"}) if ids else []
        nodes = client.nodes()
        unkeyed = client.unkeyed().said()
    except SwarmError as exc:
        return SwarmRead(error=str(exc))
    from swarmgpu.manager.nodes.sync import tenant_specs

    return SwarmRead(nodes, services, tasks, prefix=prefix, kind=kind, unkeyed=unkeyed,
                     agents=agent_answers(client, cfg or Config(), nodes),
                     tenants=tenant_specs(cfg) if cfg is not None else ())


def agent_answers(client: Any, cfg: Config, nodes: list[Any]) -> dict[str, Any]:
    """node id -> its agent's answer (``AgentAnswer``), each read as the daemon reads it
    (``sync.fetch_agents``: its identity, deadline and checks)."""
    from swarmgpu.agent.doctor import AgentAnswer
    from swarmgpu.manager.nodes.agent_client import UNTOLD_NODE, WRONG_NODE
    from swarmgpu.manager.nodes.sync import fetch_agents

    return {nid: AgentAnswer(r.facts.hostname, len(r.facts.gpus)) if r.facts is not None
            else AgentAnswer(cause=r.cause or peer_text(r.error or "", 160), fix=r.fix,
                             wrong=r.cause in WRONG_NODE, untold=r.cause == UNTOLD_NODE)
            for nid, r in fetch_agents(client, cfg, nodes).items()}


@click.command("node-config")
@_source_options
@click.option("--kind", default="NVIDIA-GPU", show_default=True,
              help="Swarm generic resource kind to advertise GPUs as.")
@click.option("--grants", type=click.Choice(["env", "mounts"]), default="env",
              show_default=True,
              help="How the daemon grants GPUs (its placement.grants); mounts adds the "
                   "toolkit keys that make them the only way to a GPU.")
def node_config_cmd(source: str, hostname: str | None, product: str | None,
                    memory_mib: int | None, mig_layout: str | None, kind: str,
                    grants: str) -> None:
    """Print the daemon.json and toolkit config.toml fragments for this node's GPUs."""
    from swarmgpu.agent.nodeconfig import node_config
    from swarmgpu.core.model import FactsError
    from swarmgpu.core.peertext import escaped

    src = _open(source, hostname, product, memory_mib, mig_layout)
    try:
        nf = src.read()
        if not nf.gpus and nf.errors:
            # The source said why it has no GPUs (no driver, no NVML): that, not
            # "the facts list no GPUs", is what the operator must fix.
            raise FactsError(f"{source} gives no GPUs: {'; '.join(nf.errors)}; or describe "
                             "the GPUs with --source gfd:FILE or topo:FILE "
                             "(docs/facts-schema.md)")
        # The facts' hostname is a file's or GFD's text, as in `facts`: each line escaped.
        text = node_config(nf, kind=kind, grants=grants)
        click.echo("\n".join(escaped(line) for line in text.split("\n")))
    except (FactsError, ValueError) as exc:
        click.echo(f"swarmgpu node-config: {escaped(exc)}", err=True)
        sys.exit(2)
