"""A recording stand-in for the Swarm client and forged Swarm objects (nodes,
services, ledger labels, a snapshot over the two GPU nodes' facts): the daemon's steps
over a cluster a test writes.

First written in tests/test_forged_state.py."""

from __future__ import annotations

import copy
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from loguru import logger

from support.gpu_nodes import DGX_A100, RTX4090
from swarmgpu.core.config import AgentsConfig, Config, RebalanceConfig, SyncConfig
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import (
    Holding,
    assign_key,
    devices_key,
    env_template,
    gate_constraint,
    gate_key,
)
from swarmgpu.manager.placement.preempted import Preempted
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move, Outcome, Trigger
from swarmgpu.manager.services.overshare import ServiceUse
from swarmgpu.swarm.client import (
    SwarmError,
    SwarmNode,
    SwarmNotFound,
    SwarmService,
    SwarmTask,
    SwarmUnavailable,
    service_from_api,
)
from swarmgpu.swarm.unkeyed import Unkeyed

P = "swarmgpu."
DGX_F, R4090_F = DGX_A100.facts(), RTX4090.facts()
V_UUID = DGX_F.gpus[0].uuid  # the victim's GPU (node n-dgx)
T_UUID = R4090_F.gpus[0].uuid  # the third service's GPU (node n-4090)
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}
# victim_cluster's third over its share on n-4090's GPU 0: 30000 MiB used of 20000 asked
THIRD = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                   ("t-third",), (), ("c" * 12,))


class RecordingSwarm:
    """The SwarmClient methods the daemon calls, over in-memory objects; writes recorded
    as (method, object id, what changed)."""

    def __init__(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
                 tasks: Sequence[SwarmTask], swarm_labels: Mapping[str, str] | None = None
                 ) -> None:
        self._nodes = {n.id: n for n in nodes}
        self._services = {s.id: s for s in services}
        self._tasks = list(tasks)
        self._swarm_labels = dict(swarm_labels or {})
        self.calls: list[tuple[str, str]] = []
        self.writes = 0  # what SwarmClient counts (the label actuator reads it)
        self.left_out = Unkeyed()  # the entries its lists leave out (``unkeyed``)

    # reads
    def is_leader(self) -> bool:
        return True

    def self_node_id(self) -> str:
        return "n-mgr"

    def nodes(self) -> list[SwarmNode]:
        return list(self._nodes.values())

    def unkeyed(self) -> Unkeyed:
        return self.left_out

    def nodes_with_label(self, key: str) -> list[SwarmNode]:
        """The engine's ``node.label`` filter: the nodes carrying ``key``, any value."""
        return [n for n in self._nodes.values() if key in n.labels]

    def node(self, node_id: str) -> SwarmNode:
        if node_id not in self._nodes:
            raise SwarmNotFound(f"node {node_id} not found")  # the engine's 404
        return self._nodes[node_id]

    def services(self) -> list[SwarmService]:
        return list(self._services.values())

    def service(self, service_id: str) -> SwarmService:
        if service_id not in self._services:
            raise SwarmNotFound(f"service {service_id} not found")  # the engine's 404
        return self._services[service_id]

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None, read: Any = None) -> list[SwarmTask]:
        # ``read`` picks of the API's objects; these are parsed already, and the snapshot
        # reads its answer as if none were left out (``jobs.job_task_read``)
        f = dict(filters or {})
        sids = f.get("service")
        sids = [sids] if isinstance(sids, str) else sids  # the engine takes one or a list
        want = f.get("desired-state")
        want = [want] if isinstance(want, str) else want  # one or several, OR'd (Moby)
        return [t for t in self._tasks
                if (sids is None or t.service_id in sids)
                and (want is None or t.desired_state in want)
                and (states is None or t.state in states)]

    def swarm_labels(self) -> Mapping[str, str]:
        return dict(self._swarm_labels)

    def image_env(self, ref: str) -> tuple[str, ...] | None:
        return None  # no image is on this stand-in's engine (unknown: cycle.grants)

    # writes: compute() contract of SwarmClient (None or unchanged: no write)
    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **_: Any) -> bool:
        n = self.node(node_id)
        new = compute(dict(n.labels))
        if new is None or dict(new) == dict(n.labels):
            return False
        self._write("node", node_id)
        self._nodes[node_id] = replace(n, labels=dict(new), version=n.version + 1)
        return True

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **_: Any) -> bool:
        s = self.service(service_id)
        spec = copy.deepcopy(dict(s.spec))
        new = compute(spec)
        if new is None or new == s.spec:
            return False
        self._write("service", service_id)
        # (Swarm keeps the spec an update replaced as PreviousSpec)
        self._services[service_id] = service_from_api(
            {"ID": s.id, "Spec": new, "Version": {"Index": s.version + 1},
             "PreviousSpec": s.spec})
        return True

    def update_swarm_labels(self, compute: Callable[[Mapping[str, str]],
                                                    Mapping[str, str] | None],
                            **_: Any) -> bool:
        new = compute(dict(self._swarm_labels))
        if new is None or dict(new) == self._swarm_labels:
            return False
        self._write("swarm", "swarm")
        self._swarm_labels = dict(new)
        return True

    def _write(self, kind: str, what: str) -> None:
        self.writes += 1
        self.calls.append((kind, what))

    # test helpers
    def run_task(self, t: SwarmTask) -> None:
        self._tasks.append(t)

    def stop_tasks(self, service_id: str, node_id: str) -> None:
        self._tasks = [t for t in self._tasks
                       if not (t.service_id == service_id and t.node_id == node_id)]


def sw_node(nid: str, host: str, labels: Mapping[str, str] | None = None,
          role: str = "worker") -> SwarmNode:
    return SwarmNode(id=nid, hostname=host, addr="127.0.0.1", role=role, state="ready",
                     availability="active", labels=dict(labels or {}), engine_labels={},
                     version=1, generic_resources={}, discrete_resources={},
                     cpu_milli=64000, memory_mib=256000)


def sw_svc(name: str, labels: Mapping[str, str], *, replicas: int = 1, gated: bool = True,
         mode: dict[str, Any] | None = None) -> SwarmService:
    """A service as Swarm returns it: gated (swarmgpu's env line and gate constraint) or
    plain; ``mode`` replaces replicated ``replicas`` (global, a job)."""
    spec: dict[str, Any] = {
        "Name": name, "Labels": dict(labels),
        "TaskTemplate": {"ContainerSpec": {"Image": "busybox",
                                           "Env": [env_template(P)] if gated else []},
                         "Placement": {"Constraints": [gate_constraint(P, name)]
                                       if gated else []}},
        "Mode": mode or {"Replicated": {"Replicas": replicas}},
    }
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def reserving(s: SwarmService, cpu_milli: int) -> SwarmService:
    """``s`` whose tasks reserve ``cpu_milli`` (Swarm's ResourceFilter)."""
    tt = dict(s.spec["TaskTemplate"])
    tt["Resources"] = {"Reservations": {"NanoCPUs": cpu_milli * 1_000_000}}
    return replace(s, spec={**s.spec, "TaskTemplate": tt})


def held_labels(service: str, nid: str, uuid: str, milli: int = 1000) -> dict[str, str]:
    """The node labels of ``service`` holding ``milli`` of GPU ``uuid``: ledger and gate."""
    return {assign_key(P, service): Holding(service, nid, (uuid,), (milli,)).label_value(),
            gate_key(P, service): "true"}


def snapshot(nodes: list[SwarmNode], services: list[SwarmService], tasks: list[SwarmTask],
             ) -> Snapshot:
    """A sync snapshot of these objects, both GPU nodes' agents answering with FACTS."""
    facts = {nid: FactsResult(nid, nid, "", f, None, 1.0) for nid, f in FACTS.items()}
    return Snapshot(nodes, services, tasks, facts, swarm_labels={})


def victim_stopping_on_4090s(taken_at: float, high: bool = True,
                             unkeyed: Unkeyed | None = None) -> tuple[Snapshot, SwarmService]:
    """high's victim still stopping on two RTX 4090s (its pinned line), its record naming
    high at 995 on that node; filler holds the other six; high pending (``high``: listed,
    else not; ``unkeyed``: the services the list left out). Returns the snapshot taken at
    ``taken_at`` (the swarm object's preemption hour counting that stop, as the daemon
    stores it before the victim's writes) and the victim."""
    record = Preempted("high", 100, 995.0, "n-4090").to_json()
    victim = replace(sw_svc("victim", {f"{P}gpus": "2", f"{P}state.preempted": record}),
                     replicas=0)
    filler = sw_svc("filler", {f"{P}gpus": "6"})
    h = Holding("filler", "n-4090", R_UUIDS[2:], (1000,) * 6)
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "filler"): h.label_value(),
                                              gate_key(P, "filler"): "true"})]
    line = "NVIDIA_VISIBLE_DEVICES=" + ",".join(R_UUIDS[:2])
    t_v = SwarmTask("t-v", victim.id, "n-4090", 1, "running", "shutdown", (line,))
    services, tasks = [victim, filler], [SwarmTask("t-f", filler.id, "n-4090", 1, "running",
                                                   "running", ())]
    if high:
        services.append(sw_svc("high", {f"{P}gpus": "2", f"{P}priority": "100",
                                        f"{P}gpu-product": "*RTX 4090*"}))
        tasks.append(SwarmTask("t-h", services[-1].id, "", 1, "pending", "running", ()))
    snap = replace(snapshot(nodes, services, tasks), stopping=[t_v], taken_at=taken_at,
                   swarm_labels={f"{P}state.preemptions": "995"})
    if unkeyed is not None:
        snap = replace(snap, unkeyed=unkeyed)
    return snap, victim


def held_on_4090s(names: Sequence[str]) -> tuple[list[SwarmNode], list[SwarmService]]:
    """Each of ``names`` (8 at most) holding one RTX 4090 of n-4090 in turn at priority 0,
    by its ledger entry and device map: the nodes (n-dgx, n-4090) and those services."""
    uuids = R_UUIDS[:len(names)]
    labels: dict[str, str] = {}
    for name, u in zip(names, uuids, strict=True):
        labels |= held_labels(name, "n-4090", u)
    nodes = [sw_node("n-dgx", "gpu-node-1"), sw_node("n-4090", "gpu-node-2", labels)]
    held = [sw_svc(n, {f"{P}gpus": "1", devices_key(P, "n-4090"): u, f"{P}priority": "0"})
            for n, u in zip(names, uuids, strict=True)]
    return nodes, held


def victim_cluster(attacker_labels: Mapping[str, str]) -> RecordingSwarm:
    """victim holds DGX GPU 0 and runs; third holds RTX 4090 GPU 0 and runs; the attacker
    is a plain service whose own labels are ``attacker_labels``."""
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", held_labels("victim", "n-dgx", V_UUID)),
             sw_node("n-4090", "gpu-node-2", held_labels("third", "n-4090", T_UUID))]
    victim = sw_svc("victim", {f"{P}gpus": "1", devices_key(P, "n-dgx"): V_UUID})
    third = sw_svc("third", {f"{P}gpus": "1", devices_key(P, "n-4090"): T_UUID})
    attacker = sw_svc("attacker", attacker_labels, gated=False)
    tasks = [SwarmTask("t-victim", victim.id, "n-dgx", 1, "running", "running", ()),
             SwarmTask("t-third", third.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-attacker", attacker.id, "n-mgr", 1, "running", "running", ())]
    return RecordingSwarm(nodes, [victim, third, attacker], tasks)


def victim_move() -> Move:
    f = R4090_F
    return Move(service="victim", service_id="id-victim", source_node="n-dgx",
                source_host="gpu-node-1", source_uuids=(V_UUID,), source_milli=(1000,),
                target_node="n-4090", target_host="gpu-node-2", target_gpus=(1,),
                target_uuids=(f.gpus[1].uuid,), target_milli=(1000,),
                trigger=Trigger.HOTSPOT, window_s=5.0, reason="test", gain="test")


def victim_source_closed(sw: RecordingSwarm | None = None, step_s: float = 5.0,
                         ) -> tuple[RecordingSwarm, list[float], Mover]:
    """The victim's move (gpu-node-1 to gpu-node-2) without make-before-break, its source
    closed (step 3, ``step_s`` after its start) and its old task stopped by the constraint
    enforcer: the Swarm, the clock the mover reads (``now[0]``) and the mover. ``sw``: the
    victim cluster in a stand-in of the caller's own (by default ``victim_cluster({})``)."""
    sw, now = sw or victim_cluster({}), [1000.0]
    cfg = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=False)
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    now[0] += step_s
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert gate_key(P, "victim") not in sw.node("n-dgx").labels
    sw.stop_tasks("id-victim", "n-dgx")
    return sw, now, m


def repin_move() -> Move:
    """third from GPU 0 to GPU 2 of its own node (the RTX 4090)."""
    return Move(service="third", service_id="id-third", source_node="n-4090",
                source_host="gpu-node-2", source_uuids=(T_UUID,), source_milli=(1000,),
                target_node="n-4090", target_host="gpu-node-2", target_gpus=(2,),
                target_uuids=(R4090_F.gpus[2].uuid,), target_milli=(1000,),
                trigger=Trigger.HOTSPOT, window_s=5.0, reason="test", gain="test")


def repin_gate_closed(cfg: RebalanceConfig) -> tuple[RecordingSwarm, list[float]]:
    """third's repin (``repin_move``) started under ``cfg`` and at step 2: the ledger
    names its new GPU, its gate closed. The Swarm and the clock a mover reads (``now[0]``)."""
    sw, now = victim_cluster({}), [1000.0]
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([repin_move()], sw.nodes(), sw.services(), sw.tasks())
    new = repin_move().target_uuids[0]
    assert sw.node("n-4090").labels[assign_key(P, "third")] == new  # step 2
    assert gate_key(P, "third") not in sw.node("n-4090").labels
    return sw, now


def outcomes_of_a_cycle(sw: RecordingSwarm, cfg: RebalanceConfig, now: list[float],
                        ) -> list[tuple[Outcome, str]]:
    """A cycle of a fresh mover under ``cfg`` at ``now[0]``, no new moves: what it ended
    (the outcome and detail of each)."""
    m = Mover(sw, cfg, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    return [(r.outcome, r.detail) for r in m.recent]


def warned_cycles(sw: RecordingSwarm, m: Mover, now: list[float], unlisted: str = "",
                  ) -> list[str]:
    """Three cycles of ``m`` 5 s apart, no new moves, their service list lacking
    ``unlisted`` (when named): what they logged at WARNING or above."""
    said: list[str] = []
    sink = logger.add(lambda msg: said.append(f"{msg.record['level'].name} {msg}"),
                      level="WARNING")
    try:
        for _ in range(3):
            now[0] += 5.0
            listed = [s for s in sw.services() if not unlisted or s.name != unlisted]
            m.run_cycle([], sw.nodes(), listed, sw.tasks())
    finally:
        logger.remove(sink)
    return said


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RecordDropFails(RecordingSwarm):
    """A RecordingSwarm whose next ``fail`` writes of the swarm labels that remove a move
    record raise (the engine's error); ``landed``: the write is made first (its answer
    lost: a timeout after the engine made it)."""

    fail = 0
    landed = False

    @classmethod
    def over(cls, base: RecordingSwarm, landed: bool) -> RecordDropFails:
        """``base``'s nodes, services and tasks; a failing drop is made first when
        ``landed``."""
        sw = cls(base.nodes(), base.services(), base.tasks())
        sw.landed = landed
        return sw

    def update_swarm_labels(self, compute: Callable[[Mapping[str, str]],
                                                    Mapping[str, str] | None],
                            **kw: Any) -> bool:
        head = f"{P}state.moves."
        new = compute(dict(self._swarm_labels))
        drops = new is not None and (sum(k.startswith(head) for k in new)
                                     < sum(k.startswith(head) for k in self._swarm_labels))
        if self.fail and drops:
            self.fail -= 1
            if self.landed:
                super().update_swarm_labels(compute, **kw)
            raise SwarmError("swarm update: the engine answered 500 (test)")
        return super().update_swarm_labels(compute, **kw)


def record_put_answer_lost(sw: RecordingSwarm) -> None:
    """The next write that adds a move record is made, then raises (its answer lost)."""
    real, once = sw.update_swarm_labels, [True]

    def labels(compute: Any, **kw: Any) -> bool:
        before = read_records(sw.swarm_labels(), P)
        landed = real(compute, **kw)
        if once[0] and len(read_records(sw.swarm_labels(), P)) > len(before):
            once[0] = False
            raise SwarmUnavailable("Docker Engine unreachable: read timed out")
        return landed

    sw.update_swarm_labels = labels  # type: ignore[method-assign]


def start_with_its_record_answer_lost(sw: RecordingSwarm, mover: Mover, move: Move,
                                      now: list[float]) -> None:
    """``mover`` starts ``move`` and its record write is made, its answer lost (the
    start raised); then three cycles, a second apart on ``now`` (the mover's clock):
    the record is gone by then (``recover`` dropped it)."""
    record_put_answer_lost(sw)
    mover.run_cycle([move], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) != {}  # it landed
    for _ in range(3):
        now[0] += 1.0
        mover.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert read_records(sw.swarm_labels(), P) == {}


class NodeWritesFail(RecordingSwarm):
    """A RecordingSwarm whose writes of the nodes in ``fail_nodes`` (the first write of
    each in ``fail_once``) and of the services in ``fail_specs`` (ids) raise (the
    engine's error, nothing made), and whose reads of the services in ``unreadable``
    (ids) raise too."""

    fail_nodes: frozenset[str] = frozenset()
    fail_once: frozenset[str] = frozenset()
    fail_specs: frozenset[str] = frozenset()
    unreadable: frozenset[str] = frozenset()

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **kw: Any) -> bool:
        if node_id in self.fail_nodes or node_id in self.fail_once:
            self.fail_once = self.fail_once - {node_id}
            raise SwarmError(f"node {node_id} update: the engine answered 500 (test)")
        return super().update_node_labels(node_id, compute, **kw)

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **kw: Any) -> bool:
        if service_id in self.fail_specs:
            raise SwarmError(f"service {service_id} update: the engine answered 500 (test)")
        return super().update_service_spec(service_id, compute, **kw)

    def service(self, service_id: str) -> SwarmService:
        if service_id in self.unreadable:
            raise SwarmError(f"service {service_id}: the engine answered 500 (test)")
        return super().service(service_id)


def offline_daemon(sw: RecordingSwarm, state_dir: str, dry_run: bool = False) -> Any:
    """The real daemon over ``sw`` with every step it runs (``daemon_steps``), its agents
    on a closed port (none answers): gpu-node-1's (n-dgx's) last facts stand in, the DGX's."""
    from swarmgpu.manager.cycle.wiring import daemon_steps  # (the daemon's whole import)
    from swarmgpu.manager.daemon import Daemon
    from swarmgpu.manager.nodes.agentbook import AgentRecord
    port = closed_port()
    cfg = Config(dry_run=dry_run, state_dir=state_dir, sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(port=port, timeout_s=0.5, identity="none"),
                 rebalance=RebalanceConfig(move_timeout_s=0.0, scrape_timeout_s=0.5,
                                           metrics_url_template=f"http://{{addr}}:{port}/m"))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.book.records["n-dgx"] = AgentRecord("gpu-node-1", last_ok=time.time(), facts=DGX_F)
    d.use(daemon_steps(d))
    return d
