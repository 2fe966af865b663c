"""One label-sync cycle: snapshot -> plans -> actuator. No scheduling here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from swarmgpu.core.config import Config
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.core.statefile import save_said
from swarmgpu.core.tenants import TenantSpec
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.engine.actuator import Actuator, ApplyResult
from swarmgpu.manager.engine.stop import NotRead, StopRequest
from swarmgpu.manager.engine.writes import HeldNodeWrites, HeldWrite, write_each
from swarmgpu.manager.nodes.agent_client import FactsResult, fetch_all
from swarmgpu.manager.nodes.agentbook import AgentBook, stale_nodes
from swarmgpu.manager.nodes.gpuhealth import HealthBook
from swarmgpu.manager.nodes.gpuowners import conflicts as uuid_conflicts
from swarmgpu.manager.placement.cpunodes import agent_nodes, expects_agent
from swarmgpu.manager.placement.jobs import JOB_MODES, job_raw_read, job_task_read
from swarmgpu.manager.placement.keys import ASSIGNED_STATES, STOPPING_STATES, stopping
from swarmgpu.manager.services.tenants import Tenants, specs_of
from swarmgpu.swarm.agentservice import claimed_agent_service, missing_agent_service
from swarmgpu.swarm.cache import SwarmCache
from swarmgpu.swarm.client import (
    SwarmClient,
    SwarmError,
    SwarmNode,
    SwarmService,
    SwarmTask,
    meant_filter,
)
from swarmgpu.swarm.identity import IdentityError, agent_auth
from swarmgpu.swarm.labels import (
    NodeLabelPlan,
    plan_node_labels,
)
from swarmgpu.swarm.swarmnode import node_names
from swarmgpu.swarm.unkeyed import UNKEYED_FIX, Unkeyed


@dataclass(frozen=True)
class Snapshot:
    """One consistent read of the cluster, planned from as a whole."""

    nodes: list[SwarmNode]
    services: list[SwarmService]
    tasks: list[SwarmTask]
    facts: dict[str, FactsResult]
    taken_at: float = field(default_factory=time.time)
    # The swarm object's labels (the second read of ``take_snapshot``, with the keys only
    # the first had): the daemon's own records, which only the manager API can write
    # (``rebalance.record.moving`` reads the moves in flight from them).
    swarm_labels: Mapping[str, str] = field(default_factory=dict)
    # Tasks Swarm is stopping that still use their node (``keys.stopping``): counted as
    # using its CPU, memory, host ports and GPUs, never as their service's meant tasks.
    stopping: list[SwarmTask] = field(default_factory=list)
    # Tasks Swarm is stopping that its constraint enforcer rejected (a closed gate): their
    # GPUs held while their container may still run (``keys.rejected_running``), no more
    rejected: list[SwarmTask] = field(default_factory=list)
    # The nodes and services the engine listed without an ID (``swarm.unkeyed``): left
    # out of ``nodes`` and ``services``, said each cycle
    unkeyed: Unkeyed = field(default_factory=Unkeyed)
    # The operator's tenants (config ``tenants``, () without): a service named as
    # ``agents.service`` that one of them matches is a tenant's, not the agents'
    # (``agent_nodes``)
    tenants: tuple[TenantSpec, ...] = ()
    # ``agent_nodes`` per agents' service name, walked once per snapshot (label sync,
    # placement, rebalance, audit and the map all ask it of the same one)
    _agents: dict[str, frozenset[str]] = field(default_factory=dict, init=False,
                                               repr=False, compare=False)

    @property
    def services_left_out(self) -> bool:
        """The engine's service list left one out (``unkeyed``): a service not listed may
        still run, so what names it (a hold, a record) is not taken for gone."""
        return bool(self.unkeyed.services)

    def agent_nodes(self, name: str) -> frozenset[str]:
        """``cpunodes.agent_nodes`` of this snapshot's services and tasks (``name``:
        ``agents.service``), walked once per name."""
        got = self._agents.get(name)
        if got is None:
            got = self._agents[name] = agent_nodes(self.services, self.tasks, name,
                                                   self.tenants)
        return got


def take_snapshot(
    swarm: SwarmClient,
    cfg: Config,
    cache: SwarmCache | None = None,
    stop: StopRequest | None = None,
    tenants: tuple[TenantSpec, ...] | None = None,
) -> Snapshot:
    """One read of the cluster. With ``cache`` (the daemon's, fed by the event stream)
    nodes and services come from it, re-listed only when it must (swarm.cache); tasks
    have no events and are listed each time: those desired running or ready, a job's
    that the daemon reads (``jobs.job_task_read``: not its other runs' completed ones,
    left unparsed), and those Swarm is stopping that still use their node
    (``keys.stopping``) or that its constraint enforcer rejected (``Snapshot.rejected``).
    A ``stop`` asked during the agents' reads ends it with ``Stopped`` (``fetch_all``).
    ``tenants``: ``tenant_specs(cfg)`` parsed once by a caller that reads many snapshots
    of one config (the daemon); None: parsed here.

    The swarm object's labels are read just before and just after the services: a
    move's record is written before its service's label and removed after it, so the
    record of a label the services show is in one of the two reads (in the first when
    the move ended in between, in the second when it started). A forged label has none.
    Through the cache the services are as fresh as these reads for every move: only the
    daemon writes move labels and records, and each of its writes marks its object for
    a fresh read (``SwarmClient.on_write``)."""
    before = swarm.swarm_labels()
    nodes, services = cache.read() if cache is not None else (swarm.nodes(), swarm.services())
    # Desired running or ready (a restart's or an update's new task before it starts):
    # Swarm's scheduler counts both on their node (``keys.MEANT_STATES``).
    tasks = swarm.tasks({"desired-state": meant_filter()})
    runs = {s.id: s.job_iteration for s in services if s.mode in JOB_MODES}
    if runs:  # a job's tasks have desired state "complete": its progress is read from them
        listed = {t.id for t in tasks}  # a job's task desired ready is in both lists
        # (Swarm keeps every task of a job's runs: those not read are not parsed either)
        tasks += [
            t
            for t in swarm.tasks({"service": sorted(runs)}, read=job_raw_read(runs))
            if t.service_id in runs and job_task_read(t, runs[t.service_id])
            and t.id not in listed
        ]
    left_out = swarm.unkeyed()  # (the last full lists', which the cache holds)
    if left_out.services:
        tasks += _left_out_jobs(swarm, services, tasks)
    listed = {t.id for t in tasks}
    # (the list holds every ended task Swarm keeps: only those still on a node parsed)
    ended = swarm.tasks({"desired-state": list(STOPPING_STATES)},
                        states=ASSIGNED_STATES | {"rejected"})
    leaving = [t for t in ended if stopping(t) and t.id not in listed]
    # (every one the enforcer rejected that Swarm keeps: the planner reads their time)
    rejected = [t for t in ended if t.node_id and t.rejected_until is not None
                and t.id not in listed]
    after = swarm.swarm_labels()
    return Snapshot(
        nodes,
        services,
        tasks,
        fetch_agents(swarm, cfg, nodes, stop),
        swarm_labels={**before, **after},
        stopping=leaving,
        rejected=rejected,
        unkeyed=left_out,
        tenants=tenant_specs(cfg) if tenants is None else tenants,
    )


def _left_out_jobs(swarm: SwarmClient, services: list[SwarmService],
                   tasks: list[SwarmTask]) -> list[SwarmTask]:
    """The tasks on a node (``ASSIGNED_STATES``) with desired state complete of the
    services no list shows while one was left out (``swarm.unkeyed``): a job's running
    tasks, which the desired running list omits and no listed job's list holds. Swarm
    counts their reservations and host ports on their node; without them placement
    counted none and chose nodes Swarm then refused. Their spec is their own (each task
    carries its Resources); the ports of one not running yet are unknown (the list's
    message says the service is left out)."""
    known = {s.id for s in services}
    listed = {t.id for t in tasks}
    return [t for t in swarm.tasks({"desired-state": ["complete"]}, states=ASSIGNED_STATES)
            if t.service_id not in known and t.id not in listed]


def tenant_specs(cfg: Config) -> tuple[TenantSpec, ...]:
    """The operator's tenants of ``cfg`` (() without a ``tenants`` section)."""
    return specs_of(Tenants.from_config(cfg))


def facts_by_node(
    snap: Snapshot, fallback: Mapping[str, NodeFacts] | None = None
) -> dict[str, NodeFacts]:
    """Facts per node id; an unreachable agent's last good facts stand in."""
    out: dict[str, NodeFacts] = {}
    for node_id, res in snap.facts.items():
        if res.facts is not None:
            out[node_id] = res.facts
        elif fallback and node_id in fallback:
            out[node_id] = fallback[node_id]
    return out


def fetch_agents(
    swarm: SwarmClient, cfg: Config, nodes: list[SwarmNode], stop: StopRequest | None = None,
    missed: dict[str, NotRead] | None = None,
) -> dict[str, FactsResult]:
    """Every node's facts with this cycle's agent identity (TLS context, token); when
    that cannot be built, every node says why instead of the cycle failing. ``missed``:
    the nodes read are returned, those the budget cut noted there (``fetch_all``)."""
    try:
        auth = agent_auth(swarm, cfg.agents)
    except (IdentityError, SwarmError, OSError) as exc:
        now, mono = time.time(), time.monotonic()
        msg = f"agent identity unusable: {exc}"
        return {n.id: FactsResult(n.id, n.hostname, "", None, msg, now, fetched_mono=mono)
                for n in nodes}
    return fetch_all(nodes, cfg.agents, auth.tls, auth.token, stop, missed)


def is_gpu_node(node: SwarmNode, book: AgentBook, prefix: str, kind: str = "",
                agents: AbstractSet[str] = frozenset()) -> bool:
    """A node we expect an agent on: Swarm says it has GPUs (``gpu_hint``; ``kind``:
    ``placement.generic_resource_kind``; ``agents``: the nodes running the agents'
    service, ``cpunodes.agent_nodes``) or an agent answered once."""
    rec = book.records.get(node.id)
    return expects_agent(node, rec is not None and rec.last_ok is not None, prefix, kind, agents)


UNKEYED_SAID = 5  # left-out entries logged each cycle; the others counted in one line


def said_unkeyed(unkeyed: Unkeyed) -> list[str]:
    """The entries the lists left out (``swarm.unkeyed``), logged as errors: every cycle
    they last (no key to say one once by). The first ``UNKEYED_SAID``, then the others'
    count: a proxy that strips every ID would log each node's every cycle."""
    said = list(unkeyed.said())
    if len(said) > UNKEYED_SAID:
        said[UNKEYED_SAID:] = [f"and {len(said) - UNKEYED_SAID} more entries the engine's "
                               f"lists give without an ID, left out; {UNKEYED_FIX}"]
    for line in said:
        logger.error("{}", line)
    return said


@dataclass
class CycleReport:
    leader: bool = True
    plans: list[NodeLabelPlan] = field(default_factory=list)
    writes: int = 0
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    # the engine could not be asked or read (errors says why): no step ran to its end
    aborted: bool = False


class LabelSync:
    def __init__(
        self, swarm: SwarmClient, cfg: Config, metrics: DaemonMetrics, book: AgentBook
    ) -> None:
        self.swarm = swarm
        self.cfg = cfg
        self.metrics = metrics
        self.book = book
        self.actuator = Actuator(
            swarm,
            metrics,
            dry_run=cfg.dry_run,
            prefix=cfg.sync.prefix,
            allow_disruptive=cfg.sync.allow_disruptive,
        )
        self.health = HealthBook(cfg.health, cfg.sync.prefix, metrics.registry)
        self.health.load(cfg.state_dir)  # a restarted daemon keeps its hysteresis
        self.held: HeldNodeWrites | None = None  # this cycle's writes, while held
        # This cycle's report as its writes land: what a cycle ended at its budget keeps
        # (the daemon clears it before each cycle)
        self.report: CycleReport | None = None
        self._uuid_said: SaidOnce[tuple[str, str]] = SaidOnce()  # (node id, uuid) said
        # (node id, hash of a warning) said of it last cycle: a node's problem that lasts
        # is said once, again when it changes or comes back (hash: an agent's text)
        self._node_said: SaidOnce[tuple[str, int]] = SaidOnce()
        self._save_said: SaidOnce[str] = SaidOnce()  # gpu-health.json could not be saved
        self._service_said: SaidOnce[str] = SaidOnce()  # agents.service names no service

    def cycle(self, snapshot: Snapshot, *, hold: bool = False) -> CycleReport:
        """Plan every node's labels and write them; with ``hold``, the writes are kept
        in ``self.held`` for placement to fold into its own write of the same node (one
        write per node per cycle), and ``flush`` writes what it did not take."""
        report = self.report = CycleReport(errors=said_unkeyed(snapshot.unkeyed))
        self.held = None  # never a previous cycle's: this one plans every node afresh
        read = self._apply_health(snapshot)
        prefix, kind = self.cfg.sync.prefix, self.cfg.placement.generic_resource_kind
        agents = snapshot.agent_nodes(self.cfg.agents.service)
        unreachable = unread = held = 0
        any_gpu = False  # a GPU node after this cycle's answers (``_agent_service_missing``)
        todo: list[tuple[NodeLabelPlan, SwarmNode, NodeFacts | None]] = []
        self._node_said.begin()
        for node in snapshot.nodes:
            log = logger.bind(node=node.hostname)
            warn = self._once(node.id, log)
            if self._unread(node, warn, report):
                continue
            result = snapshot.facts.get(node.id)
            expected = is_gpu_node(node, self.book, prefix, kind, agents)
            if result is not None:
                self.book.record(result, read.get(node.id))
            facts = result.facts if result else None
            any_gpu |= expected or facts is not None  # an answer now sets its last_ok
            if facts is None:
                err = self._unanswered(result)
                # (with no facts, only the labels no node carries go: ``plan_node_labels``)
                plan = plan_node_labels(node, None, services=snapshot.services,
                                        tasks=snapshot.tasks, prefix=prefix,
                                        allow_disruptive=self.cfg.sync.allow_disruptive,
                                        facts_error=err, never=self.actuator.never)
                if expected:
                    unreachable += 1
                    warn("agent unreachable, {}: {}", self._left(plan), err, key=err)
                    report.errors.append(f"{node.hostname}: {err}")
                elif result is not None and result.listening:
                    # Something answers on the agent port, but not with facts the daemon
                    # can read (a first agent in plain HTTP, a certificate refused...).
                    unreachable += 1
                    warn("agent cannot be read: {}", err)
                    report.errors.append(f"{node.hostname}: {err}")
                else:
                    log.debug("no agent (not a GPU node?): {}", err)
                report.plans.append(plan)
                held += self._keep(plan, node, None, todo, warn)  # (its strays' removal)
                continue
            for e in facts.errors:
                warn("agent reports: {}", e)
            plan = plan_node_labels(
                node,
                facts,
                services=snapshot.services,
                tasks=snapshot.tasks,
                prefix=prefix,
                allow_disruptive=self.cfg.sync.allow_disruptive,
                never=self.actuator.never,
            )
            report.plans.append(plan)
            if plan.skipped:  # its GPUs cannot be read: left as they are, as unreachable
                unread += 1
                warn("{}; {}", plan.skipped, self._left(plan), key=plan.skipped)
                report.errors.append(f"{node.hostname}: {plan.skipped}")
            held += self._keep(plan, node, facts, todo, warn)

        self._node_said.end()
        self.book.keep({n.id for n in snapshot.nodes})
        if hold and not self.cfg.dry_run:
            self.held = self._hold(todo, snapshot, report)
        else:
            self._write_now(todo, snapshot, report)
        self._warn_uuid_conflicts(snapshot)
        self._agent_service_missing(snapshot, any_gpu)
        self._count(snapshot, unreachable, unread, held)
        self._identity_off()
        return report

    def _count(self, snapshot: Snapshot, unreachable: int, unread: int, held: int) -> None:
        """This cycle's node gauges. The stale facts' too: counted here, every cycle as
        leader, not by placement's step, which ``placement.enabled: false`` leaves out
        (the gauge read 0 while the cycle's errors said them stale)."""
        m = self.metrics
        m.agents_unreachable.set(unreachable)
        m.nodes_gpus_unread.set(unread)
        m.held_changes.set(held)
        m.facts_stale.set(len(stale_nodes(self.book, snapshot.facts,
                                          self.cfg.health.node_lost_grace_s)))

    def _apply_health(self, snapshot: Snapshot) -> dict[str, NodeFacts | None]:
        """GPU health states (docs/health.md) applied to ``snapshot``'s facts: a failed
        GPU is unhealthy in the facts every later step of this cycle reads (labels,
        placement), so it is never given out. Returns the facts as the agents gave them
        (the facts watch compares a new answer with those, not with the states)."""
        read = {nid: r.facts for nid, r in snapshot.facts.items()}
        snapshot.facts.update(self.health.apply(snapshot.nodes, snapshot.facts))
        save_said(self._save_said, "GPU health", self.cfg.state_dir, self.health.save)
        return read

    def _unanswered(self, result: FactsResult | None) -> str | None:
        """Why a node has no facts this cycle; where its last ones are stale, said too
        (the cycle's errors: /healthz's and the daemon's log)."""
        if result is None:
            return "not fetched"
        if not stale_nodes(self.book, {result.node_id: result},
                           self.cfg.health.node_lost_grace_s):
            return result.error
        return (f"{result.error or 'no facts from the agent'}; its last facts are "
                "health.node_lost_grace_s old: nothing new is placed on it")

    def stand_by(self) -> None:
        """Not the leader: the gauges of what this daemon's cycles saw read 0 (the
        leader's daemon says them; frozen, this term's last values stood beside its)."""
        m = self.metrics
        for gauge in (m.agents_unreachable, m.nodes_gpus_unread, m.held_changes,
                      m.facts_stale):
            gauge.set(0)
        self.health.stand_by()

    @staticmethod
    def _unread(node: SwarmNode, warn: Callable[..., None], report: CycleReport) -> bool:
        """A node whose engine answer cannot be read in part (``SwarmNode.unread``): said,
        and no plan for it: its labels as Swarm has them are not known, so none is
        written and none removed (its holdings kept)."""
        if node.unread:
            warn("{}", node.unread)
            report.errors.append(node.unread)
        return bool(node.unread)

    def _left(self, plan: NodeLabelPlan) -> str:
        """What a node whose GPUs are not known (``plan.skipped``) keeps: every label,
        but those no node carries, which its plan removes all the same."""
        if not plan.remove:
            return "labels left as they are"
        verb = "would be removed (dry run)" if self.cfg.dry_run else "removed"
        return (f"{', '.join(plan.remove)} {verb} (no node carries them), the other "
                "labels left as they are")

    def _keep(self, plan: NodeLabelPlan, node: SwarmNode, facts: NodeFacts | None,
              todo: list[tuple[NodeLabelPlan, SwarmNode, NodeFacts | None]],
              warn: Callable[..., None]) -> int:
        """Note ``plan``'s held changes and queue its write (none when it changes
        nothing: no round trip either); the number of changes held back."""
        for h in plan.held:
            warn("held label change {}: {} -> {}: {}", h.key, h.old, h.new, h.reason)
        if not plan.empty:
            todo.append((plan, node, facts))
        return len(plan.held)

    def _agent_service_missing(self, snapshot: Snapshot, any_gpu: bool) -> None:
        """``agents.service`` names no service while GPU nodes exist (``any_gpu``: the
        cycle's loop found one, ``is_gpu_node``), or names a tenant's service (which
        marks no node): said once while it lasts (``swarm.agentservice``); nothing stops
        for it."""
        name = self.cfg.agents.service
        note = (missing_agent_service(snapshot.services, name) if any_gpu else None) or \
            claimed_agent_service(snapshot.services, name, snapshot.tenants)
        self._service_said.begin()
        if note is not None and self._service_said.fresh(note):
            logger.warning("{}", note)
        self._service_said.end()

    def _identity_off(self) -> None:
        off = self.cfg.agents.identity == "none"
        self.metrics.identity_off.set(1 if off else 0)
        if off:  # every cycle: a setting like this must not be forgotten once started
            logger.warning(
                "agents.identity is none: facts are read over plain HTTP and "
                "anything on a node's port {} can answer for it; set "
                "agents.identity: swarm-pki (docs/security.md)",
                self.cfg.agents.port,
            )

    def _once(self, node_id: str, log: Any) -> Callable[..., None]:
        """A warning about ``node_id`` said unless it was said last cycle too. ``key``:
        what makes it the same warning, where the text says more (what a node left as
        it is had removed: gone the next cycle, and the episode goes on)."""

        def warn(msg: str, *args: object, key: object = None) -> None:
            same = (msg, *map(str, args)) if key is None else (msg, str(key))
            if self._node_said.fresh((node_id, hash(same))):
                log.warning(msg, *args)

        return warn

    def _warn_uuid_conflicts(self, snapshot: Snapshot) -> None:
        """A GPU UUID in two nodes' facts: said once when it starts (gpuowners)."""
        facts = {nid: r.facts for nid, r in snapshot.facts.items() if r.facts is not None}
        host = node_names(snapshot.nodes)  # "host (ID)" where two nodes share a hostname
        found = {(c.node_id, c.uuid): c for c in uuid_conflicts(facts)}
        said = self._uuid_said
        said.begin()
        for key in sorted(found):
            if said.fresh(key):
                c = found[key]
                logger.bind(node=host.get(c.node_id, c.node_id[:12])).warning(
                    "{} {}", host.get(c.node_id, c.node_id[:12]), c.message(host)
                )
        said.end()

    def flush(self) -> None:
        """Write what is held and nobody took (each node alone, as without holding)."""
        held, self.held = self.held, None
        if held is not None:
            held.flush()

    def _write_now(
        self,
        todo: list[tuple[NodeLabelPlan, SwarmNode, NodeFacts | None]],
        snapshot: Snapshot,
        report: CycleReport,
    ) -> None:
        def write(item: tuple[NodeLabelPlan, SwarmNode, NodeFacts | None]) -> ApplyResult:
            plan, node, facts = item
            return self.actuator.apply_labels(
                plan, node, facts, snapshot.services, snapshot.tasks
            )

        # Each node's write is its own read-modify-write: different nodes, in parallel;
        # each counted once made, those made before a stop or the budget ended it too.
        write_each(todo, write, taken=lambda _item, res: _count(report, res))

    def _hold(
        self,
        todo: list[tuple[NodeLabelPlan, SwarmNode, NodeFacts | None]],
        snapshot: Snapshot,
        report: CycleReport,
    ) -> HeldNodeWrites:
        act = self.actuator
        held: dict[str, HeldWrite] = {}
        for plan, node, facts in todo:

            def done(
                landed: bool, error: str | None, plan: NodeLabelPlan = plan, node: SwarmNode = node
            ) -> None:
                _count(report, act.record(node, plan, landed, error))

            # retries of the folded write count as label sync's own do (label_conflicts)
            held[node.id] = HeldWrite(
                act.label_compute(node, facts, snapshot.services, snapshot.tasks),
                done,
                act.metrics.label_conflicts.inc,
            )
        by_id = {node.id: (plan, node, facts) for plan, node, facts in todo}

        def alone(node_id: str, _: HeldWrite) -> None:
            plan, node, facts = by_id[node_id]
            _count(
                report,
                act.apply_labels(plan, node, facts, snapshot.services, snapshot.tasks),
            )

        return HeldNodeWrites(held, alone)


_report_lock = threading.Lock()


def _count(report: CycleReport, res: ApplyResult) -> None:
    """One node's write in the cycle's report (writes land from several threads)."""
    with _report_lock:
        if res.written:
            report.writes += 1
        if res.error:
            report.errors.append(f"{res.hostname}: {res.error}")
