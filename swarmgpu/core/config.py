"""The daemon's configuration: one YAML file, every key defaulted and validated.

Errors name the key and the fix before anything runs. Common keys can be
overridden from the environment (``SWARMGPU_<SECTION>_<KEY>``, e.g.
``SWARMGPU_SYNC_INTERVAL_S=10``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from swarmgpu.core.commalist import ASCII_BLANKS, unseen, unseen_items
from swarmgpu.core.configpaths import path_problems
from swarmgpu.core.configvalues import (
    ENV_OVERRIDES,
    apply_env,
    at_most,
    coerce,
    host_names_problem,
    locate_in,
    not_text,
    service_name_problem,
    template_problem,
)
from swarmgpu.core.engineconfig import EngineConfig
from swarmgpu.core.forwarded import check_auth, parse_trusted
from swarmgpu.core.labelkeys import (
    docker_namespace,
    node_label_key_fault,
    usable_label_key,
    usable_resource_kind,
)
from swarmgpu.core.listenhost import listen_problem
from swarmgpu.core.peertext import quoted
from swarmgpu.core.rebalanceconfig import FLAT_KEYS, check_rebalance, move_flat_keys
from swarmgpu.core.rebalanceconfig import RebalanceConfig as RebalanceConfig
from swarmgpu.core.tenants import MAX_PRIORITY, MAX_QUOTA_GPUS, NAME_RE, parse_tenants
from swarmgpu.core.yamlfile import Lines, read_yaml_lines

MAX_GPUS = MAX_QUOTA_GPUS  # a queue's guarantee or max, and all guarantees together
MAX_SECONDS = 7 * 24 * 3600  # every *_s key: longer is a typo, and past the timers' range
# An agent's answer: an 8-GPU node's facts are about 7 KiB, its metrics less; below 64 KiB
# a real node is refused, above 64 MiB (read whole, agents.parallel at once) a hostile one
# is taken.
MIN_RESPONSE, MAX_RESPONSE = 64 * 1024, 64 * 1024 * 1024


class ConfigError(ValueError):
    """One or more problems, each naming its key and the fix; ``errors`` lists them all
    (``config check`` prints every one, so a file with three mistakes takes one run)."""

    def __init__(self, errors: str | list[str]) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class AgentsConfig:
    port: int = 9401
    """Port of every node's swarmgpu agent (or anything serving /facts)."""
    url_template: str = ""
    """Base URL of a node's agent; {addr}, {hostname}, {port} are filled in. Empty:
    'https://{addr}:{port}' with identity swarm-pki, 'http://{addr}:{port}' with none."""
    timeout_s: float = 3.0
    """Per-request deadline when fetching facts; a slow agent is 'unreachable'."""
    max_response_bytes: int = 4 * 1024 * 1024
    """Facts bigger than this are rejected (a broken or hostile agent); 64 KiB to 64 MiB."""
    parallel: int = 16
    """Agents fetched at once."""
    identity: str = "swarm-pki"
    """How the daemon knows which node answers, and the agent who asks: 'swarm-pki' (the
    agent serves HTTPS with its Swarm node certificate: chain to the swarm root CA, CN =
    the node's ID, O = this swarm's cluster ID, OU = a Swarm role; the daemon presents
    its manager certificate, which the agent requires for /facts) or 'none' (plain
    HTTP: anything on the port can answer, anyone can read; a warning every cycle,
    swarmgpu_agents_identity_off 1, an audit finding). docs/security.md."""
    token_file: str = ""
    """A file with a shared bearer token (e.g. a Docker secret) sent to every agent, which
    the agents require (swarmgpu agent --token-file). For set-ups that cannot use the
    node certificates; it proves 'one of ours', not which node."""
    ca_file: str = ""
    """The swarm root CA (PEM) for identity swarm-pki; empty: read it from the engine
    (GET /swarm, TLSInfo.TrustRoot), which follows CA rotation."""
    cert_file: str = ""
    """The certificate the daemon presents to agents (swarm-pki); empty: this manager's
    own node certificate, from systemd's credentials (LoadCredential=swarm-node.crt) or
    <DockerRootDir>/swarm/certificates/swarm-node.crt, re-read every few minutes."""
    key_file: str = ""
    """Its key; empty: beside the certificate (swarm-node.key)."""
    watch_s: float = 5.0
    """Seconds between light polls of every agent's facts between full cycles; a change
    starts a cycle at once (a fact change shows as a label within about this long after
    the agent sees it). 0 turns the watch off."""
    service: str = "swarmgpu_agent"
    """The agents' Swarm service (<stack>_agent): a node Swarm has given one of its tasks is
    a GPU node, whatever its labels (not a CPU-only node). "": none (systemd agents)."""

    def __post_init__(self) -> None:
        if not self.url_template:  # derived: switching identity on is one key
            scheme = "https" if self.identity == "swarm-pki" else "http"
            object.__setattr__(self, "url_template", scheme + "://{addr}:{port}")


@dataclass(frozen=True)
class SyncConfig:
    interval_s: float = 30.0
    """Seconds between full label-sync cycles (events also trigger a cycle)."""
    prefix: str = "swarmgpu."
    """Label prefix swarmgpu owns; every other label is left alone."""
    allow_disruptive: bool = False
    """Apply label changes that would stop running tasks (default: hold and report)."""
    watch_events: bool = True
    """Re-sync on node/service events, not only on the interval."""


@dataclass(frozen=True)
class PlacementConfig:
    enabled: bool = True
    """Place services that carry swarmgpu.* request labels."""
    adopt_ungated: bool = True
    """Add the gate constraint and device env to annotated services that lack them, and
    replace the hold constraint of a stack deployed as written with the gate (a task
    that runs restarts once only when it runs without a device list; other changes to a
    running task wait: docs/deploy.md); false: report them as pending instead."""
    zone_label: str = "topology.zone"
    """Node label naming a node's failure domain, for zone-prefer/zone-avoid/spread."""
    generic_resource_kind: str = ""
    """When set (e.g. NVIDIA-GPU, the kind your nodes advertise in node-generic-resources),
    whole-GPU services also reserve that many generic resources, so Swarm's own
    accounting keeps other services that reserve GPUs off them. Only with grants:
    mounts: Swarm appends DOCKER_RESOURCE_<KIND>=<its own pick> to each task, which the
    toolkit reads instead of NVIDIA_VISIBLE_DEVICES where swarm-resource names it (as
    node-config sets); placement's mount is read before it. Empty: no reservation.
    Experimental: on the test swarm, adding the reservation together with the task
    replacement got tasks rejected by Swarm's constraint enforcer; off by default."""
    workload: str = "auto"
    """The task mix the placement policy expects. 'auto': learned from the services the
    daemon sees (current and departed, decaying), kept in Swarm (a label on the swarm
    object), starting from a documented prior (openb's mix). A path: a YAML list of
    shapes ('- {gpus: 1, share: 0.5, cpu: 4, weight: 3}') pins the mix."""
    workload_window: int = 5000
    """'auto' learns over about this many recent tasks (an exponential window)."""
    residual_stop_weight: float = 0.01
    """Node choice's residual-waste model: the weight, beside the workload's task mix
    (whose weights sum to 1), of "no further task comes to this GPU". A GPU's free share
    that only tasks rarer than this fit (the 0.19 beside a 0.81 share, when 0.16 shares
    are rare) counts as mostly wasted; one that common tasks fit keeps its value; an
    untouched GPU counts none. 0: any free share some task fits counts as filled.
    docs/simulate.md, "swarmgpu's rule"."""
    overshare: str = "report"
    """A service using more GPU memory than its share (its processes, as the agents name
    them): `report` (audit finding, map badge, metrics, log line) or `restart` (also
    restart the offending task once it has been over for overshare_window_s, within the
    rebalancer's budgets; never a neighbour, never a `rebalance: never` service)."""
    overshare_window_s: float = 60.0
    """How long a task must stay over its share before `restart` acts."""
    ungranted: str = "report"
    """Services on GPU nodes that see GPUs placement did not grant them (their own
    NVIDIA_VISIBLE_DEVICES, a CUDA image's, DOCKER_RESOURCE_* lines, a device mount):
    `report` (an audit finding needing action, plan, status, the map, a log line) or
    `void` (also write NVIDIA_VISIBLE_DEVICES=void into their ContainerSpec.Env, nothing
    else: Swarm restarts their tasks once, without the GPUs). docs/security.md."""
    ungranted_exempt: str = "swarmgpu_agent"
    """Services allowed to see GPUs without a grant (a comma list of service-name globs):
    still listed, never voided. The default is the shipped stack's agent, which reads
    every GPU through NVML; add dcgm-exporter's service if you run it."""
    grants: str = "env"
    """How placement grants GPUs: `env` (the NVIDIA_VISIBLE_DEVICES template) or `mounts`
    (also a /dev/null mount under /var/run/nvidia-container-devices naming the same
    GPUs, for nodes whose toolkit ignores the variables of unprivileged containers, as
    `swarmgpu node-config --grants mounts` prints and `swarmgpu doctor --grants mounts`
    checks). docs/security.md, "GPU access only through a grant"."""


@dataclass(frozen=True)
class HttpConfig:
    listen: str = "127.0.0.1:9402"
    """Where the daemon serves /metrics, /healthz and the GPU map. Loopback by default;
    the stack opts in to 0.0.0.0:9402 (firewall it)."""
    allowed_hosts: str = ""
    """Extra host names (comma-separated) the HTTP server answers to. IP addresses,
    localhost and this machine's host name always work; any other Host header is
    refused (421), which stops DNS rebinding from a web page."""
    auth: str = "auto"
    """Who may read the map, /api and /metrics (/healthz is open). auto: on a listen
    address beyond loopback, a swarm-manager certificate (HTTPS on the same port), the
    token of token_file, its session cookie (the /login form) or a loopback client
    (SSH tunnel); on loopback, anyone local. required: the same, loopback clients
    included (behind a reverse proxy). off: anyone (warned at start)."""
    token_file: str = ""
    """File holding the bearer token for Prometheus and browsers (one line, e.g. the
    Docker secret /run/secrets/swarmgpu-http-token); read at start. At least 16
    characters (openssl rand -hex 32): a shorter one is refused when the config loads."""
    secure_cookie: str = "auto"
    """Whether the browser's session cookie is marked Secure (sent over HTTPS only).
    auto: when the daemon itself served the sign-in over HTTPS. always: on every
    answer, for a TLS-terminating reverse proxy in front (the daemon sees plain HTTP;
    X-Forwarded-Proto is anyone's to send, so it is not read)."""
    trusted_proxies: str = ""
    """Reverse proxies in front (comma-separated IP addresses or networks, e.g.
    10.0.0.5, 10.1.0.0/24): from these alone X-Forwarded-For is read, for whose wrong
    tokens a request counts (docs/security.md); else every client shares the proxy's."""


@dataclass(frozen=True)
class HistoryConfig:
    samples: int = 240
    """Samples kept per GPU for the map's charts, one per cycle (2 h at 30 s)."""
    max_gpus: int = 16384
    """GPUs kept; past it the one not seen for longest is dropped (docs/gpu-map.md)."""


@dataclass(frozen=True)
class HealthConfig:
    """GPU health states (docs/health.md): when a failed or degraded GPU counts as clean."""

    clean_window_s: float = 600.0
    """Seconds with nothing bad seen before a failed or degraded GPU is healthy again."""
    flap_window_s: float = 3600.0
    """Failures within this many seconds double the clean window (a flapping GPU)."""
    max_backoff: int = 8
    """The clean window grows to at most this many times clean_window_s."""
    evacuate: bool = True
    """The health rebalance policy moves each holder of a failed GPU to a healthy one
    (even in rebalance.dry_run); false: it only reports them, and they stay."""
    evacuations_per_cycle: int = 2
    """Health moves started per cycle (those in flight count), one per node."""
    evacuations_per_hour: int = 12
    """Health moves started per rolling hour at most: one bad node cannot start a storm."""
    node_lost_grace_s: float = 300.0
    """A GPU node whose agent has not answered for this long is reported failing (its
    facts stale); the loss alone moves none of its tasks."""


DEFAULT_PRIORITY_CLASSES = "critical=1000,inference=100,batch=0"


def parse_priority_classes(text: str) -> dict[str, int]:
    """``name=N,name=N`` -> {name: N}; ValueError naming the bad part."""
    out: dict[str, int] = {}
    for part in (p.strip(ASCII_BLANKS) for p in text.split(",")):
        if not part:
            continue
        if odd := unseen(part):  # (an NBSP around a name: a class no label could name)
            raise ValueError(f"{quoted(part)} has characters that are not printable ASCII "
                             f"({odd}); retype it as name=integer")
        name, eq, num = part.partition("=")
        # ASCII checked before lower(), which makes the Kelvin sign a k; "--5" no number.
        name, num = name.strip(ASCII_BLANKS), num.strip(ASCII_BLANKS)
        if not eq or not name.replace("-", "").replace("_", "").isalnum() \
                or not num.removeprefix("-").isdigit():
            raise ValueError(f"{quoted(part)} is not name=integer")
        name = name.lower()
        if len(num.lstrip("-")) > 6:  # a label's own number is no wider (requests._PRIO_RE)
            raise ValueError(f"{quoted(part)} is out of range; a priority is -999999 to 999999")
        if name.lstrip("-").isdigit():  # a label's value is read as a number first
            raise ValueError(f"{quoted(name)} is a number: swarmgpu.priority={name} reads as "
                             f"priority {int(name)}, never this class; name it with a letter")
        if name in out:  # a dict would keep the last one, silently
            raise ValueError(f"{quoted(name)} is given twice ({out[name]} and {int(num)}); "
                             "keep one")
        out[name] = int(num)
    return out


def queue_quotas(queues: Mapping[str, Any]) -> dict[str, tuple[int, int | None]]:
    """``queues:`` -> {name: (guaranteed, max or None)} in thousandths of a GPU; ValueError
    naming the bad queue."""
    out: dict[str, tuple[int, int | None]] = {}
    folded: dict[str, str] = {}
    for name, q in queues.items():
        # A name is swarmgpu.queue's text: 1 is refused, not read as "1" (a queue no
        # check had seen, beside a "1" it would have replaced).
        if not isinstance(name, str):
            raise ValueError(not_text(name, f"{name} (a queue name)"))
        other = folded.setdefault(name.lower(), name)
        if other != name:  # Kubernetes' and Kueue's names are lower case: never two so
            raise ValueError(f"{name}: the same name as queues.{other} but for case; a "
                             f"label's swarmgpu.queue={other} or ={name} would pick one by a "
                             "typo: rename one")
        if not isinstance(q, Mapping):
            raise ValueError(f"{name}: expected {{guaranteed: GPUs, max: GPUs}}, got {quoted(q)}")
        for key in q:
            if key not in ("guaranteed", "max"):
                close = difflib.get_close_matches(str(key), ("guaranteed", "max"), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{name}.{key}: unknown key{hint} (known: guaranteed, max)")
        for key in ("guaranteed", "max"):
            v = q.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                                  or not math.isfinite(v)):
                raise ValueError(f"{name}.{key}: expected a number of GPUs, got {quoted(v)}")
        g = float(q.get("guaranteed") or 0)
        m = None if q.get("max") is None else float(q["max"])
        if g < 0 or (m is not None and m < g) or g > MAX_GPUS \
                or (m is not None and m > MAX_GPUS):
            raise ValueError(f"{name}: need 0 <= guaranteed <= max (GPUs)")
        out[name] = (round(g * 1000), None if m is None else round(m * 1000))
    return out


@dataclass(frozen=True)
class PreemptionConfig:
    """Priority and preemption (docs/requests.md, "Priority and preemption")."""

    dry_run: bool = True
    """Decide and log preemptions, never stop a service (as rebalance.dry_run)."""
    priority_classes: str = DEFAULT_PRIORITY_CLASSES
    """Names accepted by swarmgpu.priority: a comma list of name=integer."""
    preemptible_below: int = 100
    """A service without swarmgpu.preemptible is preemptible below this priority."""
    max_per_hour: int = 10
    """Services stopped by preemption per hour, at most (0 turns preemption off)."""
    victim_cooldown_s: float = 600.0
    """A preempted service is not preempted again this long after it was."""
    settle_s: float = 30.0
    """After a preemption for a service, wait this long before another one for it."""

    @property
    def classes(self) -> dict[str, int]:
        """``priority_classes`` read (a checked config's: ValueError otherwise)."""
        return parse_priority_classes(self.priority_classes)


@dataclass(frozen=True)
class LogConfig:
    level: str = "INFO"
    format: str = "text"
    """'text' for a terminal, 'json' for journald and log collectors."""


@dataclass(frozen=True)
class Config:
    docker_host: str | None = None
    """Engine to talk to; default: DOCKER_HOST or the local socket."""
    dry_run: bool = False
    """Plan and log, never write."""
    state_dir: str = "/var/lib/swarmgpu"
    """Where the daemon keeps what it observed (agent last-seen times) for `audit`."""
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    rebalance: RebalanceConfig = field(default_factory=RebalanceConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    preemption: PreemptionConfig = field(default_factory=PreemptionConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    queues: dict[str, Any] = field(default_factory=dict)
    """GPU quotas per queue (swarmgpu.queue): name -> {guaranteed: GPUs, max: GPUs}."""
    tenants: dict[str, Any] = field(default_factory=dict)
    """Who may ask for what (core/tenants.py, docs/requests.md "Tenants"): name ->
    {stacks, services, max_priority, may_opt_out, queues, guaranteed, max,
    preemptions_per_hour}. Empty: every stack's labels are taken as they are."""
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        if not self.rebalance.metrics_url_template:  # derived from the agents' address
            object.__setattr__(self, "rebalance", dataclasses.replace(
                self.rebalance, metrics_url_template=_metrics_from(self.agents)))


def _metrics_from(agents: AgentsConfig) -> str:
    """The metrics template an empty rebalance.metrics_url_template stands for."""
    base = agents.url_template.replace("{port}", str(agents.port))
    return base.rstrip("/") + "/metrics"


def _check(cfg: Config, add: Callable[[str], None]) -> None:
    """Every problem of a built configuration, each given to ``add``."""
    if cfg.health.clean_window_s <= 0 or cfg.health.flap_window_s <= 0:
        add("health.clean_window_s and health.flap_window_s: must be > 0 seconds")
    if cfg.health.max_backoff < 1:
        add("health.max_backoff: must be >= 1")
    for key in ("evacuations_per_cycle", "evacuations_per_hour"):
        if getattr(cfg.health, key) < 0:
            add(f"health.{key}: must be >= 0 (0 stops health moves; health.evacuate: "
                "false reports only)")
    if cfg.health.node_lost_grace_s <= 0:
        add("health.node_lost_grace_s: must be > 0 seconds (default 300)")
    if cfg.placement.workload_window < 100:
        add("placement.workload_window: must be >= 100 tasks (default 5000)")
    # Upper bounds: agents.parallel is a thread count (min(parallel, nodes) threads).
    for where, most, what in (("agents.parallel", 256, "threads fetching agents at once"),
                              ("placement.workload_window", 10_000_000, "tasks"),
                              ("health.max_backoff", 1000, "times health.clean_window_s"),
                              ("health.evacuations_per_cycle", 1000, "moves"),
                              ("health.evacuations_per_hour", 10_000, "moves"),
                              ("preemption.max_per_hour", 10_000, "services stopped")):
        section, key = where.split(".")
        at_most(where, getattr(getattr(cfg, section), key), most, what, add)
    stop = cfg.placement.residual_stop_weight
    if not 0 <= stop <= 1:  # NaN fails both comparisons: refused too
        add(f"placement.residual_stop_weight: {quoted(stop)}; a weight from 0 to 1 (default 0.01)")
    if cfg.agents.port <= 0 or cfg.agents.port > 65535:
        add(f"agents.port: {cfg.agents.port} is not a TCP port (1-65535)")
    if cfg.agents.timeout_s <= 0:
        add("agents.timeout_s: must be > 0 seconds (e.g. 3)")
    if not MIN_RESPONSE <= cfg.agents.max_response_bytes <= MAX_RESPONSE:
        add(f"agents.max_response_bytes: {cfg.agents.max_response_bytes} is out of range; use "
            f"{MIN_RESPONSE} (64 KiB, about nine times an 8-GPU node's facts) to "
            f"{MAX_RESPONSE} (64 MiB; default {AgentsConfig.max_response_bytes})")
    if cfg.agents.parallel < 1:
        add("agents.parallel: must be >= 1")
    if bad := service_name_problem("agents.service", cfg.agents.service, "the shipped stack's "
                                   "is swarmgpu_agent (<stack>_agent); '' for none"):
        add(bad)
    if cfg.agents.identity not in ("none", "swarm-pki"):
        add(f"agents.identity: {quoted(cfg.agents.identity)}; use swarm-pki or none")
    if cfg.agents.identity == "swarm-pki" and not cfg.agents.url_template.startswith("https://"):
        add(
            f"agents.url_template: {quoted(cfg.agents.url_template)} is plain HTTP, but "
            "agents.identity is swarm-pki (the default), so agents serve HTTPS; remove "
            "agents.url_template (it then defaults to 'https://{addr}:{port}'), or set "
            "agents.identity: none to read agents over plain HTTP (not recommended)")
    if cfg.agents.identity == "swarm-pki" and cfg.rebalance.metrics_url_template.startswith(
            f"http://{{addr}}:{cfg.agents.port}/"):
        add("rebalance.metrics_url_template: the agents serve HTTPS "
            "(agents.identity swarm-pki); remove the key (it then defaults to "
            f"'https://{{addr}}:{cfg.agents.port}/metrics')")
    if bool(cfg.agents.cert_file) != bool(cfg.agents.key_file):
        add("agents.cert_file and agents.key_file: set both or neither "
            "(neither: this manager's own Swarm node certificate)")
    if cfg.agents.watch_s != 0 and cfg.agents.watch_s < 1:
        add("agents.watch_s: must be 0 (off) or >= 1 second (default 5)")
    bad = template_problem(cfg.agents.url_template, ("addr", "hostname", "port"))
    if bad:
        add(f"agents.url_template: {bad}")
    bad = template_problem(cfg.rebalance.metrics_url_template, ("addr", "hostname"))
    if bad and cfg.rebalance.metrics_url_template != _metrics_from(cfg.agents):
        add(f"rebalance.metrics_url_template: {bad}")  # not twice for the derived one
    elif "{addr}" not in cfg.agents.url_template and "{hostname}" not in cfg.agents.url_template:
        add("agents.url_template: must contain {addr} or {hostname}, e.g. 'http://{addr}:{port}'")
    if cfg.sync.interval_s < 1:
        add("sync.interval_s: must be >= 1 second (default 30)")
    p = cfg.sync.prefix
    if not p.endswith(".") or not usable_label_key(p + "x"):
        add(f"sync.prefix: {quoted(p)} must end with '.' and use only letters, digits, "
            "'-', '_', '.' (Swarm constraint keys cannot contain '/'); e.g. 'swarmgpu.'")
    reserved = docker_namespace(p)
    if reserved:
        add(f"sync.prefix: {quoted(p)} overlaps {reserved}*, reserved by Docker (com.docker.*, "
            "io.docker.*, org.dockerproject.*): swarmgpu would take com.docker.stack."
            "namespace and the like as its own; e.g. 'swarmgpu.'")
    if not 2 <= cfg.history.samples <= 100_000:
        add("history.samples: must be 2-100000 (default 240)")
    if not 1 <= cfg.history.max_gpus <= 1_000_000:
        add("history.max_gpus: must be 1-1000000 (default 16384)")
    if cfg.log.format not in ("text", "json"):
        add(f"log.format: {quoted(cfg.log.format)}; use 'text' or 'json'")
    if cfg.log.level.upper() not in ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR"):
        add(f"log.level: {quoted(cfg.log.level)}; use DEBUG, INFO, WARNING or ERROR")
    if bad := listen_problem("http.listen", cfg.http.listen, "127.0.0.1:9402"):
        add(bad)
    if cfg.http.auth not in ("auto", "required", "off"):
        add(f"http.auth: {quoted(cfg.http.auth)}; use auto (the default), required or off")
    if cfg.http.secure_cookie not in ("auto", "always"):
        add(f"http.secure_cookie: {quoted(cfg.http.secure_cookie)}; use auto (the default: "
            "Secure over the daemon's own HTTPS) or always (HTTPS ends at a proxy)")
    if bad := host_names_problem("http.allowed_hosts", cfg.http.allowed_hosts):
        add(bad)
    try:
        check_auth(parse_trusted(cfg.http.trusted_proxies), cfg.http.auth)
    except ValueError as exc:
        add(f"http.trusted_proxies: {exc}")
    check_rebalance(cfg.rebalance, add)
    _check_preemption(cfg.preemption, add)
    cfg.engine.problems("engine", add)
    if not isinstance(cfg.queues, Mapping):
        add(f"queues: expected a mapping of queue -> {{guaranteed, max}}, got {quoted(cfg.queues)}")
    else:
        try:
            queue_quotas(cfg.queues)
        except ValueError as e:
            add(f"queues.{e}")
    _check_tenants(cfg, add)
    if cfg.placement.overshare not in ("report", "restart"):
        add(f"placement.overshare: {quoted(cfg.placement.overshare)}; use 'report' or 'restart'")
    if cfg.placement.overshare_window_s <= 0:
        add("placement.overshare_window_s: must be > 0 seconds")
    if odd := unseen_items(cfg.placement.ungranted_exempt):  # a glob that matches no name
        add(f"placement.ungranted_exempt: {odd}; a service name is ASCII: retype it")
    if cfg.placement.ungranted not in ("report", "void"):
        add(f"placement.ungranted: {quoted(cfg.placement.ungranted)}; use 'report' or 'void'")
    if why := node_label_key_fault(cfg.placement.zone_label):  # only read, never a constraint
        add(f"placement.zone_label: {quoted(cfg.placement.zone_label)} is not a node label key: "
            f"{why}; e.g. topology.zone")
    elif p and cfg.placement.zone_label.startswith(p):  # swarm.labels.owned_by_label_sync
        add(f"placement.zone_label: {quoted(cfg.placement.zone_label)} is under sync.prefix "
            f"{quoted(p)}, "
            "whose node labels label sync owns: it would remove the zone from every node; "
            "pick a key outside the prefix, e.g. topology.zone")
    kind = cfg.placement.generic_resource_kind
    if kind and not usable_resource_kind(kind):  # reserved, it would match no node's kind
        add(f"placement.generic_resource_kind: {quoted(kind)} is not a kind dockerd's "
            "node-generic-resources can name (KIND=VALUE): letters, digits, '-', '_', '.', "
            "'/', first a letter or digit; e.g. NVIDIA-GPU, as the nodes advertise it")
    if cfg.placement.grants not in ("env", "mounts"):
        add(f"placement.grants: {quoted(cfg.placement.grants)}; use 'env' or 'mounts'")
    elif kind and usable_resource_kind(kind) and cfg.placement.grants == "env":
        # Swarm appends its own pick of that kind to each task's env, and the toolkit
        # reads it instead of the grant: swarm-resource names every advertised kind
        # (node-config; doctor requires it). Only a mount is read before it.
        add(f"placement.generic_resource_kind: {quoted(kind)} with placement.grants: env would "
            f"give each task Swarm's own pick of GPUs: Swarm appends "
            f"DOCKER_RESOURCE_{kind.upper()}=<its pick> to the task's env, which the NVIDIA "
            "toolkit reads instead of placement's NVIDIA_VISIBLE_DEVICES where swarm-resource "
            "names it (as `swarmgpu node-config` sets it); set placement.grants: mounts "
            "(the toolkit reads placement's mount first), or leave generic_resource_kind "
            "empty")


def _check_tenants(cfg: Config, add: Callable[[str], None]) -> None:
    try:
        classes = parse_priority_classes(cfg.preemption.priority_classes)
    except ValueError:
        classes = {}  # reported above
    specs, own, errors = parse_tenants(cfg.tenants, cfg.queues, classes,
                                       cfg.preemption.max_per_hour)
    for e in errors:
        add(e)
    queues = cfg.queues if isinstance(cfg.queues, Mapping) else {}  # else reported above
    with contextlib.suppress(ValueError):  # a bad queue is reported above
        total = sum(g for g, _ in {**queue_quotas(queues), **own}.values()) / 1000
        if total > MAX_GPUS:  # each queue is checked alone; together they must fit too
            add(f"queues: the guarantees sum to {total:.15g} GPUs, more than any cluster has "
                f"({MAX_GPUS}); a queue's guaranteed is GPUs, e.g. 8")
    # A queue is asked for by a swarmgpu.queue label, or is a tenant's first, which its
    # services without the label count against: only the former needs a label's name.
    firsts = {t.queues[0] for t in specs if t.queues}
    for name in queues:
        if isinstance(name, str) and not name.strip():
            # "" is how the planner says "no queue": a queue of that name would count
            # nothing against its quota and guarantee nothing (the fix64-reclaim reading)
            add(f"queues.{quoted(name)}: a queue needs a name (a blank one reads as no queue: "
                "its use would count against nothing), e.g. research")
        elif isinstance(name, str) and name not in firsts and not NAME_RE.fullmatch(name):
            add(f"queues.{name}: a queue name is what a swarmgpu.queue label can carry: "
                "letters, digits, . _ - (at most 63, first a letter or digit), e.g. research")


def _check_preemption(p: PreemptionConfig, add: Callable[[str], None]) -> None:
    try:
        parse_priority_classes(p.priority_classes)
    except ValueError as e:
        add(f"preemption.priority_classes: {e}; use e.g. {DEFAULT_PRIORITY_CLASSES!r}")
    if abs(p.preemptible_below) > MAX_PRIORITY:  # compared with a label's priority
        add(f"preemption.preemptible_below: {p.preemptible_below} is out of range; a "
            f"priority is -{MAX_PRIORITY} to {MAX_PRIORITY} (default 100)")
    if p.max_per_hour < 0:
        add("preemption.max_per_hour: must be >= 0 (0 turns preemption off)")
    if p.victim_cooldown_s < 0 or p.settle_s < 0:
        add("preemption.victim_cooldown_s and preemption.settle_s: must be >= 0 seconds")


def _build(cls: Any, data: Any, where: str, add: Callable[[str], None]) -> Any:
    """``cls`` from ``data``; a key that is unknown or of the wrong type is given to
    ``add`` and left at its default, so the checks after it still run."""
    if not isinstance(data, Mapping):
        add(f"{where or 'config'}: expected a mapping of keys, got {quoted(data)}")
        return cls()
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in hints:
            close = difflib.get_close_matches(str(key), hints, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            if not str(key).isprintable():  # a BOM, a zero-width or no-break space
                hint = f", written {str(key)!a}: it holds a character that does not " \
                    f"show{hint}"
            add(f"{path}: unknown key{hint} (known: {', '.join(sorted(hints))})")
            continue
        typ = hints[key]
        if dataclasses.is_dataclass(typ):
            kwargs[key] = _build(typ, value if value is not None else {}, path, add)
            continue
        if value is None and typing.get_origin(typ) is dict:  # its entries commented out
            value = {}
        try:
            kwargs[key] = coerce(value, typ, path)
        except ValueError as e:
            add(str(e))
            continue
        if typ is float and key.endswith("_s") and kwargs[key] > MAX_SECONDS:
            # 1.0e+12 overflowed APScheduler's and the sockets' timers at start.
            add(f"{path}: {kwargs.pop(key):g} seconds is more than a week ({MAX_SECONDS}); "
                "a duration is a number of seconds, e.g. 30")
    return cls(**kwargs)


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
) -> Config:
    """Load, apply env overrides, validate. Raises ConfigError naming key and fix, with
    every problem found (``errors``). ``notes``, when given, gets the deprecation notes
    (keys of an older layout, still read)."""
    cfg, errors = load_config_report(path, env, notes)
    if errors:
        raise ConfigError(errors)
    return cfg


def load_config_report(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
) -> tuple[Config, list[str]]:
    """The configuration (defaults where a key is wrong) and every problem in it, each
    located: ``FILE:LINE: key: what is wrong`` for a key of the file, ``SWARMGPU_X:
    key: ...`` for one the environment overrides. A file that is not YAML, or not a
    mapping, raises ConfigError: nothing else can be read. ``notes``, when given, gets a
    deprecation note per key of an older layout that is still read
    (``rebalance.hot_util_pct`` for ``rebalance.hotspot.util_pct``, ...)."""
    data: dict[str, Any] = {}
    lines: Lines = {}
    if path is not None:
        if not os.fspath(path):  # Path('') is '.', refused as "a directory"
            raise ConfigError("config file: an empty path; give the path of the YAML file")
        p = Path(path)
        loaded, lines = read_yaml_lines(p, f"config file {p}", ConfigError, sole=True)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p}: expected a mapping at the top level")
        data = loaded
    from_env = apply_env(data, os.environ if env is None else env, ENV_OVERRIDES)
    errors: list[str] = []
    if isinstance(data.get("rebalance"), dict):  # the flat keys of older releases
        moved = move_flat_keys(data["rebalance"], errors.append)
        if notes is not None:
            notes += moved
        for old, (policy, key) in FLAT_KEYS.items():  # a moved key's errors: its line
            if ("rebalance", old) in lines:
                lines.setdefault(("rebalance", policy, key), lines[("rebalance", old)])
    cfg: Config = _build(Config, data, "", errors.append)
    _check(cfg, errors.append)
    path_problems(cfg, path, errors.append, from_env)
    return cfg, [locate_in(e, path, lines, from_env) for e in errors]


TENANT_DEFAULTS = (
    "each tenant (docs/requests.md, \"Tenants\"), with its keys' defaults:",
    "  <name>: {stacks: [globs], services: [globs], max_priority: 0, may_opt_out: false,",
    "           queues: [], guaranteed: none, max: none,",
    "           preemptions_per_hour: half of preemption.max_per_hour, rounded up}",
    "  default: {max_priority: 0, may_opt_out: false}   # services no other tenant matches",
)


def describe_defaults() -> str:
    """A commented YAML of every key with its default (for docs and `config show`)."""
    lines: list[str] = []

    def walk(obj: Any, indent: int) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            pad = "  " * indent
            if dataclasses.is_dataclass(value):
                lines.append(f"{pad}{f.name}:")
                walk(value, indent + 1)
            else:
                # The declared default, not a value derived from other keys.
                shown = f.default if f.default is not dataclasses.MISSING else value
                dumped = yaml.safe_dump(shown).strip().removesuffix("...").strip()
                lines.append(f"{pad}{f.name}: {dumped}")
                if f.name == "tenants":  # a mapping of the operator's: its keys' defaults
                    lines.extend(f"{pad}# {line}" for line in TENANT_DEFAULTS)

    walk(Config(), 0)
    return "\n".join(lines) + "\n"
