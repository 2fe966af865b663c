"""Shared GPUs stay within their share: each holder's memory use against its share.

The agents list every GPU process with its container (``swarmgpu_gpu_process_memory_used_mib``,
swarmgpu.agent.procattr); the ledger says what share each service holds of which GPU.
``attribute`` (pure) puts the two together per (service, node, GPU); a holder whose
processes use more than share x the GPU's memory is *over its share*.

Attribution is checked against Swarm, never taken from the node: a process counts for a
service only when its container is the container of a task of that service that Swarm
itself places on that very node (``Status.ContainerStatus.ContainerID`` and ``NodeID``
from the daemon's own read of the task list, ``owners``). Whatever answers on a node's
metrics port can claim any service or task in its labels; a claim is at most checked
against Swarm's answer, and a process that fails the check is *unattributed*: reported
(log, audit, the map, ``swarmgpu_unattributed_gpu_memory_mib``), counted for nobody.

``Watch`` keeps, across cycles, since when each holder has been over: it logs the start
and the end (naming the service), and says which tasks have been over for a whole
window, for ``placement.overshare: restart``, which re-reads Swarm before it acts.

Only GPUs whose agent listed processes are judged: a node served by dcgm-exporter, or
an agent without NVML, says nothing about processes, and nothing is inferred there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from loguru import logger

from swarmgpu.core.config import parse_priority_classes
from swarmgpu.core.metrics_in import GpuMetrics
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import quoted
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.commands.audit import Finding
from swarmgpu.manager.engine.actuator import Why, Writes
from swarmgpu.manager.engine.stop import (
    BudgetEnded,
    Stopped,
    StopRequest,
    read_cut,
    undoing,
)
from swarmgpu.manager.nodes.sync import Snapshot, facts_by_node
from swarmgpu.manager.placement import Holding, gate_key, read_ledger
from swarmgpu.manager.rebalance.admission import over_budget_on
from swarmgpu.manager.rebalance.context import MOVED_AT, OPT_OUT, by_service, why_not_movable
from swarmgpu.manager.rebalance.mover import rebalancing, verify_scope
from swarmgpu.manager.rebalance.record import moving, read_records, unreadable_records
from swarmgpu.manager.services.coolmark import off_node, on_node
from swarmgpu.manager.services.jobshare import job_modes, job_note
from swarmgpu.manager.services.onereplica import one_node
from swarmgpu.manager.services.requests import GpuRequest, parse_all
from swarmgpu.manager.services.restartlist import mark_records, record_restart
from swarmgpu.manager.services.restartrefusal import refused
from swarmgpu.manager.services.sharing import share_mib
from swarmgpu.manager.services.tenants import Tenants
from swarmgpu.manager.web.cluster_view import gpu_metrics
from swarmgpu.swarm.client import (
    BudgetCut,
    SwarmClient,
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
)
from swarmgpu.swarm.specread import UnreadSpec, spec_object
from swarmgpu.swarm.swarmnode import unread_source

if TYPE_CHECKING:
    from swarmgpu.core.config import Config


@dataclass(frozen=True)
class ServiceUse:
    """What one service's processes use of one GPU, against its share of it."""

    service: str
    node_id: str
    hostname: str
    gpu: int
    uuid: str
    used_mib: int
    share_mib: int  # 0: the service holds nothing on this GPU
    milli: int
    tasks: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()
    containers: tuple[str, ...] = ()  # checked: Swarm's containers of ``tasks`` on this node

    @property
    def over(self) -> bool:
        return self.used_mib > self.share_mib

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.service, self.node_id, self.uuid)

    def describe(self) -> str:
        held = (f"its share is {self.share_mib} MiB ({self.milli / 1000:g} GPU)"
                if self.milli else "it holds no share of that GPU")
        return (f"uses {self.used_mib} MiB of GPU {self.gpu} ({self.uuid}) on "
                f"{self.hostname}; {held}")


class Owner(NamedTuple):
    """A container's task, service and node, as Swarm's own task list says."""

    task: str
    service: str
    node_id: str
    container: str  # the full id


@dataclass(frozen=True)
class Unattributed:
    """A GPU process the daemon could not tie to a task Swarm runs there: counted for
    nobody, and reported."""

    node_id: str
    hostname: str
    gpu: int
    uuid: str
    pid: int
    used_mib: int
    container: str  # as the agent named it (12 characters)
    claimed: str  # the service the agent's line named ("" if none)
    why: str

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.node_id, self.uuid, self.pid, self.container)

    def describe(self) -> str:
        claim = f", named {self.claimed!r} by the node" if self.claimed else ""
        return (f"pid {self.pid} (container {self.container or 'none'}{claim}) uses "
                f"{self.used_mib} MiB of GPU {self.gpu} ({self.uuid}) on {self.hostname}: "
                f"{self.why}")


@dataclass(frozen=True)
class Attribution:
    uses: list[ServiceUse]
    unattributed: list[Unattributed]


MIN_CONTAINER_ID = 12  # the short id: shorter ones could match several containers


def owners(services: Sequence[SwarmService], tasks: Sequence[SwarmTask]) -> dict[str, Owner]:
    """Container id (its first 12 characters, as the agent reports it) -> its task,
    service and node, from Swarm's own task list: the agent needs no engine access, and
    its word on who owns a process is never needed."""
    names = {s.id: s.name for s in services}
    return {t.container_id[:MIN_CONTAINER_ID]: Owner(t.id, names[t.service_id], t.node_id,
                                                     t.container_id)
            for t in tasks
            if len(t.container_id) >= MIN_CONTAINER_ID and t.service_id in names}


def _check(container: str, claimed: str, claimed_task: str, nid: str,
           containers: Mapping[str, Owner]) -> Owner | str:
    """The owner Swarm names for a process on node ``nid``, or why there is none."""
    if len(container) < MIN_CONTAINER_ID:
        return "no container id" if not container else "container id too short to check"
    own = containers.get(container[:MIN_CONTAINER_ID])
    if own is None or not own.container.startswith(container):
        return "its container is no task Swarm knows"
    if own.node_id != nid:
        return f"its container is a task of {own.service} that Swarm runs on another node"
    if claimed and claimed != own.service:
        return f"its container is a task of {own.service}, not of {claimed}"
    if claimed_task and claimed_task != own.task:
        return f"its container is task {own.task}, not {claimed_task}"
    return own


def attribute(nodes: Sequence[SwarmNode], ledger: Mapping[str, Mapping[str, Holding]],
              facts: Mapping[str, NodeFacts],
              metrics: Mapping[str, Mapping[str, GpuMetrics]],
              containers: Mapping[str, Owner] | None = None) -> Attribution:
    """Per (service, node, GPU) with known processes: use and share (pure), counting only
    processes whose container Swarm places on that node (``containers``: ``owners``).
    A process outside any container that claims nothing (the host's own) is nobody's
    and not reported; any other that fails the check is ``Unattributed``."""
    containers = containers or {}
    hosts = {n.id: n.hostname for n in nodes}
    out: list[ServiceUse] = []
    stray: list[Unattributed] = []
    for nid, per_uuid in sorted(metrics.items()):
        f = facts.get(nid)
        if f is None:
            continue
        gpus = {g.uuid: g for g in f.gpus}
        held: dict[str, dict[str, int]] = {}  # uuid -> service -> milli
        for svc, per_node in ledger.items():
            h = per_node.get(nid)
            if h is not None:
                for u, m in zip(h.uuids, h.milli, strict=True):
                    held.setdefault(u, {})[svc] = m
        for uuid, gm in sorted(per_uuid.items()):
            g = gpus.get(uuid)
            if g is None or not gm.processes:
                continue
            use: dict[str, tuple[float, set[str], list[int], set[str]]] = {}
            for p in gm.processes:
                if not (p.container or p.service or p.task):
                    continue  # a host process: nobody's
                own = _check(p.container, p.service, p.task, nid, containers)
                if isinstance(own, str):
                    stray.append(Unattributed(nid, hosts.get(nid, nid), g.index, uuid, p.pid,
                                              round(p.used_mib), p.container[:12], p.service,
                                              own))
                    continue
                mib, tasks, pids, cids = use.setdefault(own.service, (0.0, set(), [], set()))
                tasks.add(own.task)
                cids.add(own.container[:MIN_CONTAINER_ID])
                pids.append(p.pid)
                use[own.service] = (mib + p.used_mib, tasks, pids, cids)
            for svc in sorted(set(use) | set(held.get(uuid, {}))):
                milli = held.get(uuid, {}).get(svc, 0)
                mib, tasks, pids, cids = use.get(svc, (0.0, set(), [], set()))
                out.append(ServiceUse(svc, nid, hosts.get(nid, nid), g.index, uuid,
                                      round(mib), share_mib(milli, g.memory_mib) if milli
                                      else 0, milli,
                                      tuple(sorted(tasks)), tuple(sorted(pids)),
                                      tuple(sorted(cids))))
    return Attribution(out, stray)


def findings(uses: Iterable[ServiceUse], unattributed: Iterable[Unattributed] = (),
             jobs: Mapping[str, str] | None = None, prefix: str = "swarmgpu.") -> list[Finding]:
    """The audit's view: holders over their share (``jobs``: ``job_note``), stray processes."""
    stray = [Finding("unattributed-gpu-process", x.hostname,
                     f"{x.describe()}; counted for no service, so no over-share action",
                     key=x.uuid, actual=f"{x.used_mib} MiB", advisory=True, node=x.node_id)
             for x in unattributed]
    return stray + [Finding("over-share", u.service,
                    f"{u.describe()}: over its share (tasks {', '.join(u.tasks) or '?'}); "
                    + job_note(jobs, u.service, prefix)
                    + "size the application to SWARMGPU_GPU_MEMORY_MIB, or install HAMi-core "
                    "on the node for a hard limit (docs/requests.md, Shared GPUs)",
                    key=u.uuid, expected=f"<= {u.share_mib} MiB", actual=f"{u.used_mib} MiB")
            for u in uses if u.over]


@dataclass
class Watch:
    """Since when each holder has been over its share; logs starts and ends."""

    clock: Callable[[], float] = time.time
    since: dict[tuple[str, str, str], float] = field(default_factory=dict)
    last: list[ServiceUse] = field(default_factory=list)
    # the unattributed processes logged, while they are read
    unattributed: SaidOnce[tuple[str, str, int, str]] = field(default_factory=SaidOnce)

    def update(self, uses: Sequence[ServiceUse],
               unattributed: Sequence[Unattributed] = ()) -> None:
        now = self.clock()
        stray = {x.key: x for x in unattributed}
        self.unattributed.begin()
        for sk, x in stray.items():
            if self.unattributed.fresh(sk):  # once per process, not every cycle
                logger.warning("unattributed GPU process: {}; it counts for no service",
                               x.describe())
        self.unattributed.end()
        over = {u.key: u for u in uses if u.over}
        # A window ends where its GPU was read without it (the holder holds and uses it no
        # more: re-placed, or removed), or its node was read not at all; a GPU not read
        # this cycle keeps its holders' windows. Judged by holder alone, a removed
        # service's window stayed open for good while its GPU had other holders.
        gpus_read = {(u.node_id, u.uuid) for u in uses}
        nodes_read = {u.node_id for u in uses}
        for k, u in over.items():
            if k not in self.since:
                self.since[k] = now
                logger.bind(service=u.service).warning(
                    "over its GPU share: service {} {} (tasks {}, pids {})", u.service,
                    u.describe(), ",".join(u.tasks) or "?", ",".join(map(str, u.pids)))
        for k in list(self.since):
            if k not in over and ((k[1], k[2]) in gpus_read or k[1] not in nodes_read):
                del self.since[k]
                logger.bind(service=k[0]).info("back within its GPU share: service {} on "
                                               "{}", k[0], k[1][:12])
        self.last = list(uses)

    def forget(self, key: tuple[str, str, str]) -> None:
        """A restarted holder starts a new window (its old reading is stale)."""
        self.since.pop(key, None)
        self.last = [u for u in self.last if u.key != key]

    def due(self, window_s: float) -> list[ServiceUse]:
        """Holders over their share for at least ``window_s``."""
        now = self.clock()
        return [u for u in self.last
                if u.over and now - self.since.get(u.key, now) >= window_s]


def annotate(doc: dict[str, Any], uses: Sequence[ServiceUse],
             unattributed: Sequence[Unattributed] = ()) -> None:
    """Add each holder's own memory use and an over-share flag to the map document, and
    to each GPU the processes no task Swarm runs there accounts for."""
    by = {(u.node_id, u.uuid, u.service): u for u in uses}
    stray: dict[tuple[str, str], list[Unattributed]] = {}
    for x in unattributed:
        stray.setdefault((x.node_id, x.uuid), []).append(x)
    for n in doc.get("nodes", []):
        for g in n.get("gpus", []):
            xs = stray.get((n.get("id"), g.get("uuid")))
            if xs:
                g["unattributed"] = [{"pid": x.pid, "memory_used_mib": x.used_mib,
                                      "container": x.container, "claimed_service": x.claimed,
                                      "why": x.why} for x in xs]
            for h in g.get("holders", []):
                u = by.get((n.get("id"), g.get("uuid"), h.get("service")))
                if u is not None:
                    h["memory_used_mib"] = u.used_mib
                    h["memory_share_mib"] = u.share_mib
                    h["over_share"] = u.over


def attribution_now(snap: Snapshot, facts: Mapping[str, NodeFacts],
                    metrics: Mapping[str, Mapping[str, GpuMetrics]],
                    prefix: str) -> Attribution:
    """This cycle's attribution, checked against the snapshot's own task list."""
    return attribute(snap.nodes, read_ledger(snap.nodes, prefix), facts, metrics,
                     owners(snap.services, snap.tasks))


def audit_check(cfg: Config) -> Callable[[Snapshot], list[Finding]]:
    """For `swarmgpu audit`: scrape the agents as the daemon does, judge every holder."""
    def check(snap: Snapshot) -> list[Finding]:
        att = attribution_now(snap, facts_by_node(snap), gpu_metrics(snap.nodes, cfg),
                              cfg.sync.prefix)
        return findings(att.uses, att.unattributed, job_modes(snap.services, cfg), cfg.sync.prefix)

    return check


# --- placement.overshare: restart ------------------------------------------------------


def _gist(why: str) -> str:
    """``why`` as compared with the reason said last: a cool-down without its seconds
    left (``why_not_movable``'s "cooling down (Ns left of Ms)"), which change every cycle
    while the reason does not."""
    return "cooling down" if why.startswith("cooling down (") else why


class Restarter:
    """Restarts the task of a holder over its share, and nothing else.

    Swarm cannot restart one task (``service update --force`` replaces every replica),
    and the daemon cannot reach a worker's engine. So it uses placement's own gate: the
    gate node label ``<p>service.<svc>`` is removed from that node, Swarm's constraint
    enforcer stops the service's task there at once (one replica per node: exactly the
    offender), and the gate is put back as soon as that task is no longer meant to
    run; its replacement starts on the same node with the same GPUs and env (a global
    service's too: judged as its repin is, never refused as a move elsewhere). Other
    services on the GPU (the neighbours) and other replicas are never touched.

    Within the mover's budgets (rebalance.*): a restart counts as a move on its node for
    ``max_moves_per_cycle`` and ``max_moves_per_node`` (the rebalancer's moves in flight
    included, as its mover counts them: ``admission.over_budget_on``; the health policy's
    evacuations have their own budget) and for the per-service cooldown (it
    sets ``<p>state.moved-at``); never a ``rebalance: never`` service, one with a move in
    flight, or one not converged (rebalance.context.why_not_movable). Top-level
    ``dry_run`` logs what it would do.

    ``stop``: the daemon's stop request. Asked during the wait, the wait ends, the gate
    reopens (an undo: ``stop.undoing``), one line says so, and ``Stopped`` ends the step.
    """

    def __init__(self, swarm: SwarmClient, cfg: Config, *,
                 clock: Callable[[], float] = time.time, wait_s: float = 15.0,
                 stop: StopRequest | None = None) -> None:
        self.swarm, self.cfg, self.clock, self.wait_s = swarm, cfg, clock, wait_s
        self.stop = stop or StopRequest()  # (none: never asked)
        self.tenants = Tenants.from_config(cfg)  # who may opt out (``Tenants.enforced``)
        # a label's class read as placement reads it (else "gold" read as no request)
        self.classes = parse_priority_classes(cfg.preemption.priority_classes)
        self.said: dict[tuple[str, str, str], str] = {}  # last "not done" said (_gist)
        # service id -> the cool-down mark of a restart whose mark write raised (its
        # outcome unknown: a write cut at the cycle's slack may have landed) and whose
        # gate was never closed: that mark, read back on the service, stands for no
        # restart (``_cut_mark``)
        self.unsure: dict[str, str] = {}

    def run(self, due: Sequence[ServiceUse], snap: Snapshot,
            restarted: Callable[[tuple[str, str, str]], None] = lambda key: None) -> int:
        p = self.cfg.sync.prefix
        by_name = {s.name: s for s in snap.services}
        ledger = read_ledger(snap.nodes, p)
        # Read back: a cut mark Swarm does not show (not landed, or a later one written
        # over it) is forgotten; one it shows is this Restarter's, no restart after it.
        self.unsure = {s.id: self.unsure[s.id] for s in snap.services
                       if s.id in self.unsure and s.labels.get(p + MOVED_AT) == self.unsure[s.id]}
        # Said once while due: a holder no longer due (back within, or removed) is
        # forgotten, or every removed stack's reason stayed for good.
        keys = {u.key for u in due}
        self.said = {k: why for k, why in self.said.items() if k in keys}
        if not due:
            return 0
        # Moves in flight count against the budget: the daemon's own records of them,
        # not services' move labels (a stack can write those, and would ration restarts);
        # the rebalancer's, as its mover counts them (health's have their own budget).
        try:
            swarm_labels = self.swarm.swarm_labels()
            bad = unreadable_records(swarm_labels, p)  # each counts, its scope unknown
            flying = verify_scope(read_records(swarm_labels, p), snap.services, p,
                                  rebalancing, bad, snap.unkeyed.services).in_flight()
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmError as exc:
            logger.warning("over-share restarts wait: cannot read the move records ({})", exc)
            return 0
        recs = mark_records(swarm_labels, p, self.cfg)  # (a mark's: ``enforced``)
        done_on: list[set[str]] = []  # a restart is a move on its one node
        by_node = {n.id: n for n in snap.nodes}
        mine = by_service(snap.tasks)  # each service's own tasks: one walk, not one each
        n, once = 0, set[str]()  # (services restarted this cycle: a replica each, at most)
        for u in due:
            s = by_name.get(u.service)
            if s is None or not u.milli:
                continue  # holds nothing here: a restart would not bring it within a share
            req = parse_all(s.labels, prefix=p, classes=self.classes)
            tasks: Sequence[SwarmTask] = mine.get(s.id, ())  # (its mark by node: ``enforced``)
            judged, gpu = ((s, req if isinstance(req, GpuRequest) else None)
                           if self.tenants is None else self.tenants.enforced(
                               s, req, p + OPT_OUT, p + MOVED_AT, on_node(tasks, u.node_id),
                               recs, off_node(tasks, u.node_id)))
            # an unread node's labels are written by none: its gate stays
            refusal = refused(judged, gpu, ledger.get(u.service, {}), p)
            again = "another replica restarted this cycle" if s.id in once else None
            held, down = ledger.get(u.service, {}), None
            if self.tenants is not None and not self.tenants.of_service(s).may_opt_out:
                judged, tasks, held, down = one_node(
                    judged, tasks, held, u.node_id, self.clock(),
                    self.cfg.rebalance.move_timeout_s, recs.restarts)
            why = unread_source(by_node, u.node_id) or refusal or again or down or why_not_movable(
                self._cut_mark(judged, p), gpu, tasks, held, p, self.clock(),
                self.cfg.rebalance.cooldown_s, same_node=s.mode == "global",  # (as a repin)
                moving=s.name in moving([s], swarm_labels, p) or s.id in bad)
            b = over_budget_on({u.node_id}, flying, done_on, self.cfg.rebalance, len(bad))
            why = why or (b.why if b is not None else None)
            if why is None:
                why = self._recheck(s, u)
            if why is not None:
                self._not_done(u, why, warn=why == refusal)
                continue
            self.said.pop(u.key, None)
            if self.cfg.dry_run:
                logger.bind(service=u.service).info(
                    "dry-run: would restart {}'s task on {} ({})", u.service, u.hostname,
                    u.describe())
                continue
            done_on.append({u.node_id})
            once.add(s.id)
            if self._bounce(s, u, MOVED_AT):
                restarted(u.key)
                n += 1
        return n

    def _cut_mark(self, s: SwarmService, prefix: str) -> SwarmService:
        """``s`` as its cool-down is judged: without the mark of a restart whose mark write
        raised before its gate closed (``unsure``, read back on ``s`` this cycle): no
        restart followed it, so it holds the next one back for nothing."""
        if s.id not in self.unsure:
            return s
        return replace(s, labels={k: v for k, v in s.labels.items() if k != prefix + MOVED_AT})

    def _not_done(self, u: ServiceUse, why: str, warn: bool) -> None:
        """Say why ``u``'s restart is not done, once per reason while it is due (not
        every cycle; a cool-down once for the whole of it: ``_gist``); ``warn``: its
        service's refusal (``refused``), which no cycle lifts, as a warning with the
        fixes."""
        gist = _gist(why)
        if self.said.get(u.key) == gist:
            return
        self.said[u.key] = gist
        log = logger.bind(service=u.service)
        if warn:
            log.warning("over-share restart of {} on {} not done: {}; until then it stays "
                        "over its share: size it to its share (SWARMGPU_GPU_MEMORY_MIB), or "
                        "install HAMi-core on the node for a hard limit (docs/requests.md, "
                        "Shared GPUs)", u.service, u.hostname, why)
        else:
            log.info("over-share restart of {} on {} not done: {}", u.service, u.hostname,
                     why)

    def _recheck(self, s: SwarmService, u: ServiceUse) -> str | None:
        """Why the over-share reading no longer holds by a fresh read of Swarm's tasks:
        the gate is closed only while Swarm still runs, on that node, a task of ``s``
        whose container is one the reading was checked against."""
        if not u.containers:
            return "none of its use was checked against Swarm's tasks"
        try:
            fresh = self.swarm.tasks({"service": s.id})
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmError as exc:
            return f"cannot re-read its tasks from Swarm: {exc}"
        if not any(t.service_id == s.id and t.node_id == u.node_id
                   and t.desired_state == "running"
                   and t.container_id[:MIN_CONTAINER_ID] in u.containers for t in fresh):
            return (f"Swarm no longer runs the task(s) {', '.join(u.tasks) or '?'} on "
                    f"{u.hostname}")
        return None

    def _bounce(self, s: SwarmService, u: ServiceUse, moved_at: str) -> bool:
        p = self.cfg.sync.prefix
        gate = gate_key(p, s.name)
        log = logger.bind(service=s.name)
        # each task's ServiceID on Swarm's answer decides (``repin.own_tasks``): an engine
        # or proxy that dropped the filter would have another's task hold the gate shut
        old = {t.id for t in self.swarm.tasks({"service": s.id})
               if t.service_id == s.id and t.node_id == u.node_id
               and t.desired_state == "running"}
        # Every write through the actuator's gate; the step's dry-run check ran first.
        writes = Writes(self.swarm, dry_run=self.cfg.dry_run, who="over-share restart",
                        prefix=p)
        why = Why("operator", f"placement.overshare: restart (over its GPU share on "
                              f"{u.hostname}: {u.describe()})")
        at = f"{self.clock():.0f}"
        before: list[str | None] = [None]  # the mark it replaces, as the write read it

        def mark(spec: Mapping[str, Any]) -> Mapping[str, Any]:
            new = dict(spec)
            labels = spec_object(spec.get("Labels"), "Labels")
            before[0] = labels.get(p + moved_at)
            new["Labels"] = {**labels, p + moved_at: at}
            return new

        # The cooldown mark first: a write of the spec after the replacement task exists
        # would leave that task, while it waits for the old one's reservations, of an
        # older revision, which Swarm's scheduler never tries again (swarmkit 807f25e).
        try:
            writes.service_spec(s.id, mark)
        except UnreadSpec as exc:  # as Swarm has it now: this restart's alone, none made
            log.warning("over-share restart of {} on {} not done: its spec cannot be read: "
                        "{}", s.name, u.hostname, exc)
            return False
        except SwarmError:
            # Its outcome unknown (a write cut at the cycle's slack may have landed), the
            # gate never closed: the next cycle reads the mark back (``_cut_mark``).
            self.unsure[s.id] = at
            raise
        self.unsure.pop(s.id, None)
        try:  # (each way out but the write's answer raises: ``closed`` is that answer)
            # its mark the daemon's own: recorded first (unrecorded: its owner's, no restart)
            unstored = record_restart(writes, p, s.id, at, self.clock())
            closed = not unstored and writes.node_labels(
                u.node_id, lambda cur: {k: v for k, v in cur.items() if k != gate}, why)
        except BudgetEnded:  # refused before it was sent: none closed; the daemon goes on
            self.unsure[s.id] = at  # (read back next cycle: no write past the budget)
            raise
        except Stopped:  # refused before it was sent: none closed, and the daemon stops
            self._take_back(writes, s, u, moved_at, at, before[0],
                            "the daemon's stop came before its gate closed")
            raise
        except BaseException:  # its outcome unknown: the gate may be shut
            self._reopen(writes, u, gate, ended=True)
            raise
        if not closed:
            # No gate there to close (placement released it this cycle, say): no restart
            # made, none to reopen (one written would let a task onto GPUs the ledger no
            # longer holds for it), and its mark would hold the next one back for nothing.
            self._take_back(writes, s, u, moved_at, at, before[0], unstored or
                            "no gate of it there to close (placement released it, or it "
                            "was removed)")
            return False
        try:
            stopped = self._wait_gone(s, u, old)
        except BaseException:
            self._reopen(writes, u, gate, ended=True)
            raise
        reopened = self._reopen(writes, u, gate, ended=stopped)
        if stopped:
            # Its mark stays: the enforcer may yet stop the task on the closed gate's
            # event, and a spec write then left its replacement of an older revision,
            # never tried again (as above); a later restart waits the cool-down instead.
            log.warning("over-share restart of {} on {} cut short by the daemon's stop: "
                        "gate {}; its task may not have been restarted, and its cool-down "
                        "mark stays (rebalance.cooldown_s before the next restart)", s.name,
                        u.hostname, "reopened" if reopened else "left closed")
            raise Stopped(self.stop)
        log.warning("restarted {}'s task on {} (over its GPU share: {}; tasks {})", s.name,
                    u.hostname, u.describe(), ",".join(u.tasks) or "?")
        return True

    def _take_back(self, writes: Writes, s: SwarmService, u: ServiceUse, moved_at: str,
                   at: str, before: str | None, cause: str) -> None:
        """``s``'s mark ``at`` taken back (``before`` put back), its gate never closed
        (``cause``: why): no restart was made, and kept it held the next one back (the
        next leader's too). An undo, let through once the daemon is stopping; a spec
        write is safe here, no task of it being replaced. Failed: this daemon reads it
        back (``unsure``)."""
        self.unsure[s.id] = at
        key = self.cfg.sync.prefix + moved_at

        since: list[str | None] = []  # (the mark found written since, if one was)

        def back(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
            labels = dict(spec_object(spec.get("Labels"), "Labels"))
            since[:] = [] if labels.get(key) == at else [labels.get(key)]
            if since:
                return None  # written since: not this restart's to take back
            labels.pop(key)
            return {**spec, "Labels": labels | ({key: before} if before is not None else {})}

        try:
            with undoing():
                landed = writes.service_spec(s.id, back)
        except (SwarmError, UnreadSpec) as exc:
            logger.bind(service=s.name).warning(
                "over-share restart of {} on {} not made (its gate never closed); its "
                "cool-down mark not taken back ({}): the next restart waits "
                "rebalance.cooldown_s unless this daemon goes on", s.name, u.hostname, exc)
            return
        # Said as it went: a mark written since (another daemon's restart) stays, and
        # a write refused (dry run) took nothing back.
        done = ("its cool-down mark taken back" if landed else
                f"its cool-down mark left: {key} was "
                f"{'removed' if since[0] is None else 'written'} since, not this restart's "
                f"to take back" if since else
                "its cool-down mark not taken back (the write was refused)")
        logger.bind(service=s.name).warning(
            "over-share restart of {} on {} not made: {}; {}", s.name, u.hostname, cause, done)

    def _reopen(self, writes: Writes, u: ServiceUse, gate: str, ended: bool) -> bool:
        """Reopen ``u``'s gate, closed for its restart, whatever happened: a closed gate
        keeps the service down until a daemon plans it open again. An undo, let through
        past the cycle's budget and once the daemon is stopping (the write gate refused
        both: it stayed shut). Failed (its slack cut it, say): said, and raised unless
        the step ends anyway (``ended``: the stop, the budget), whose end is raised (else
        a stopping daemon's step ended as the engine's fault); False then. Written only
        where the gate is absent, as the restart left it; one written since is left (said
        unless open)."""
        found: list[str] = []  # (the gate's value found there, if any)

        def reopen(cur: Mapping[str, str]) -> Mapping[str, str] | None:
            # Only as the restart left it (absent): one written since (an operator's,
            # another daemon's placement) is theirs, and "true" over it would undo it.
            found[:] = [cur[gate]] if gate in cur else []
            return None if found else {**cur, gate: "true"}

        try:
            with undoing():
                writes.node_labels(u.node_id, reopen)
        except SwarmError as exc:
            logger.bind(service=u.service).warning(
                "over-share restart of {} on {}: its gate {} not reopened ({}); its task "
                "waits until the leader's next cycle, whose placement reopens it",
                u.service, u.hostname, gate, exc)
            if not ended:
                raise
            return False
        if found and found[0] != "true":
            logger.bind(service=u.service).warning(
                "over-share restart of {} on {}: its gate {} not reopened: it was written "
                "{} since it was closed, left as written", u.service, u.hostname, gate,
                quoted(found[0], 40))
            return False
        return True

    def _wait_gone(self, s: SwarmService, u: ServiceUse, old: set[str]) -> bool:
        """Wait, ``wait_s`` at most, until none of the tasks ``old`` is meant to run; True
        when the daemon's stop was asked meanwhile (the wait ends at once)."""
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            try:
                live = {t.id for t in self.swarm.tasks({"service": s.id})
                        if t.service_id == s.id and t.id in old
                        and t.desired_state == "running"}
            except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
                raise read_cut() from exc
            if not live:
                return False
            if self.stop.wait(0.2):
                return True
        logger.bind(service=s.name).warning(
            "restart of {} on {}: its task still runs after {:.0f}s; gate reopened anyway",
            s.name, u.hostname, self.wait_s)
        return False
