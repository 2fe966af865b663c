"""Every write that restarts a task is a decision, logged with its reason; anything else
that would change a running task's spec is held back and reported.

The daemon (its real cycle and steps) over an in-memory Swarm at swarmgpu's client
boundary that replaces tasks as Swarm does: a service write replaces each task whose
task spec it changes (a change of placement alone leaves a running task whose node
satisfies it: ``swarm.taskspec``), a node label write stops the tasks whose constraints
the node no longer satisfies, and a waiting task runs on a node that satisfies its
constraints (a scheduler pass at each task list and after each service write; a waiting
task of an older revision than its service that a pass finds no node for is never tried
again: ``support.scheduler``, and ``check`` finds none left so). Every running task so
stopped is a restart, counted by the model; the
test walks the daemon through its write paths -- placement of a held stack, an
upgrade's new env lines, the operator's word, an ungated task, a preemption (a stop
and a move), the over-share restart, a service removed -- and checks each restart
against the decisions the actuator's gate logged, and that none was refused.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

import pytest
from loguru import logger
from support.forged import DGX_F, R4090_F, RecordingSwarm, closed_port, sw_node, sw_svc
from support.scheduler import SpecVersions
from support.write_paths import reread, svc

from swarmgpu.core.config import (
    AgentsConfig,
    Config,
    PlacementConfig,
    PreemptionConfig,
    RebalanceConfig,
    SyncConfig,
)
from swarmgpu.manager.cycle.placement import audit_checks
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.agentbook import AgentRecord
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import (
    Holding,
    assign_key,
    devices_key,
    env_template_per_node,
    gate_constraint,
    gate_key,
    hold_constraint,
)
from swarmgpu.manager.placement.envs import VOID_LINE
from swarmgpu.swarm.client import SwarmError, SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.constraints import node_satisfies, parse_all
from swarmgpu.swarm.taskspec import restarts_on

P = "swarmgpu."
R_UUIDS = tuple(g.uuid for g in R4090_F.gpus)
D_UUIDS = tuple(g.uuid for g in DGX_F.gpus if not g.mig_enabled)
KINDS = ("place", "move", "preempt", "evacuate", "operator", "release")


class ModelSwarm(RecordingSwarm):
    """RecordingSwarm whose tasks follow Swarm's rules (module docstring); ``restarts``:
    (object written, service id, node id) for every running task a write stopped."""

    def __init__(self, nodes: list[SwarmNode], services: list[SwarmService],
                 tasks: list[SwarmTask]) -> None:
        super().__init__(nodes, services, tasks)
        self.restarts: list[tuple[str, str, str]] = []
        self.writes_of: dict[str, set[int]] = {}  # object id -> its writes that restarted
        self._made: dict[str, Mapping[str, Any]] = {  # task id -> the spec it was made from
            t.id: copy.deepcopy(dict(self.service(t.service_id).spec)) for t in tasks}
        self.versions = SpecVersions()  # Swarm's rule on a waiting task of an older spec
        for t in tasks:
            self.versions.made_at(t.id, self.service(t.service_id).version)
        self._n = 0

    def _new_task(self, s: SwarmService, slot: int | None) -> None:
        self._n += 1
        t = SwarmTask(f"t{self._n}-{s.name}", s.id, "", slot, "pending", "running", s.env,
                      force_update=s.force_update)
        self._tasks.append(t)
        self._made[t.id] = copy.deepcopy(dict(s.spec))
        self.versions.made_at(t.id, s.version)

    def _stop(self, t: SwarmTask, by: str) -> None:
        self._tasks.remove(t)
        if t.state == "running":
            self.restarts.append((by, t.service_id, t.node_id))
            self.writes_of.setdefault(by, set()).add(self.writes)
        if t.service_id in self._services:
            self._new_task(self._services[t.service_id], t.slot)

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **kw: Any) -> bool:
        if not super().update_service_spec(service_id, compute, **kw):
            return False
        sv = self.service(service_id)
        new = sv.spec
        mine = sorted((t for t in self._tasks if t.service_id == service_id),
                      key=lambda t: t.slot or 0)
        for t in mine[sv.replicas or 0:]:  # a scale-down stops the last slots (no restart)
            self._tasks.remove(t)
        for k in range(len(mine) + 1, (sv.replicas or 0) + 1):  # a scale-up adds slots
            self._new_task(sv, k)
        for t in [t for t in self._tasks if t.service_id == service_id]:
            node = self._nodes.get(t.node_id)
            if restarts_on(self._made[t.id], new, [node] if node else []) or (
                    not node and self._made[t.id].get("TaskTemplate") != new.get("TaskTemplate")):
                self._stop(t, service_id)
        self._schedule()  # any event of the cluster may come before the daemon's next write
        return True

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **kw: Any) -> bool:
        if not super().update_node_labels(node_id, compute, **kw):
            return False
        node = self.node(node_id)
        for t in [t for t in self._tasks if t.node_id == node_id and t.state == "running"]:
            if not node_satisfies(self._cons(t), node):  # Swarm's constraint enforcer
                self._stop(t, node_id)
        return True

    def _cons(self, t: SwarmTask) -> list[Any]:
        tt = self._made[t.id].get("TaskTemplate") or {}
        return parse_all((tt.get("Placement") or {}).get("Constraints") or [])[0]

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: AbstractSet[str] | None = None) -> list[SwarmTask]:
        self._schedule()
        return super().tasks(filters, states=states)

    def _schedule(self) -> None:
        """The scheduler: waiting tasks run where they may; one it finds no node for is
        dropped for good once its service is newer (``SpecVersions``)."""
        for i, t in enumerate(self._tasks):
            if t.state != "pending" or not self.versions.tries(t.id):
                continue
            used = {x.node_id for x in self._tasks if x.service_id == t.service_id}
            for n in self._nodes.values():
                if n.role == "worker" and n.id not in used and node_satisfies(self._cons(t), n):
                    self._tasks[i] = replace(t, node_id=n.id, state="running")
                    break
            else:
                if t.service_id in self._services:
                    self.versions.no_node(t.id, self._services[t.service_id].version)

    def stranded(self) -> list[str]:
        """The waiting tasks no scheduler pass tries again (pending for good)."""
        return [t.id for t in self._tasks
                if t.state == "pending" and not self.versions.tries(t.id)]

    def drop_service(self, service_id: str) -> None:
        del self._services[service_id]
        self._tasks = [t for t in self._tasks if t.service_id != service_id]

    def running_on(self, service_id: str) -> dict[str, str]:
        return {t.node_id: t.id for t in self.tasks() if t.service_id == service_id
                and t.state == "running"}


@pytest.fixture
def logs() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="DEBUG")
    yield lines
    logger.remove(sink)


def daemon(sw: ModelSwarm, tmp: str, **cfg: Any) -> Daemon:
    from swarmgpu.manager.cycle.wiring import daemon_steps

    port = closed_port()
    config = Config(state_dir=tmp, sync=SyncConfig(watch_events=False),
                    agents=AgentsConfig(port=port, timeout_s=0.5, identity="none"), **cfg)
    d = Daemon(config, swarm=sw)  # type: ignore[arg-type]
    d.book.records["n-dgx"] = AgentRecord("gpu-node-1", last_ok=time.time(), facts=DGX_F)
    d.book.records["n-4090"] = AgentRecord("gpu-node-2", last_ok=time.time(), facts=R4090_F)
    d.use(daemon_steps(d))
    return d


def decided(lines: list[str], obj: str) -> list[str]:
    """The kinds of the decisions the gate logged for writes of ``obj`` (an id)."""
    pat = re.compile(r"decision \((\w+): .* for (?:service|node) " + re.escape(obj[:12]))
    return [m.group(1) for line in lines if (m := pat.search(line))]


def check(sw: ModelSwarm, lines: list[str]) -> None:
    """Every write that stopped a running task was logged by the gate as a decision of
    one of the kinds that may (one line per such write, at least); none was refused; no
    task waits for good (a write of its service left it of an older revision)."""
    assert not [x for x in lines if "refused a write" in x], lines
    sw.tasks()  # a scheduler pass on the state the test ends with
    assert not sw.stranded(), (sw.stranded(), sw.tasks())
    for obj, writes in sw.writes_of.items():
        kinds = [k for k in decided(lines, obj) if k in KINDS]
        assert len(kinds) >= len(writes), (obj, sorted(writes), decided(lines, obj),
                                           lines[-30:])


def world() -> ModelSwarm:
    """web: deployed as written with the hold (its task waits); half: a half GPU placed
    and running by an earlier release (the per-node template, no share env); loose: its
    swarmgpu.* labels only, its task running ungated."""
    half_h = Holding("half", "n-4090", R_UUIDS[:1], (500,))
    nodes = [sw_node("n-mgr", "manager", role="manager"), sw_node("n-dgx", "gpu-node-1"),
             sw_node("n-4090", "gpu-node-2", {assign_key(P, "half"): half_h.label_value(),
                                            gate_key(P, "half"): "true"})]
    web = svc("web", {f"{P}gpus": "1"}, ["V=1"], [hold_constraint(P)])
    half = svc("half", {f"{P}gpu-fraction": "0.5", devices_key(P, "n-4090"): R_UUIDS[0]},
               ["V=1", env_template_per_node(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID"],
               [gate_constraint(P, "half")])
    loose = svc("loose", {f"{P}gpus": "1"}, ["V=1"], [])
    tasks = [SwarmTask("t-web", web.id, "", 1, "pending", "running", ()),
             SwarmTask("t-half", half.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-loose", loose.id, "n-dgx", 1, "running", "running", ())]
    return ModelSwarm(nodes, [web, half, loose], tasks)


def test_placement_paths_restart_only_by_decision(tmp_path: Any, logs: list[str]) -> None:
    sw = world()
    d = daemon(sw, str(tmp_path))
    for _ in range(4):
        d.cycle()
    # web: the task made from the file never ran; its placed one runs with its devices.
    (node,) = sw.running_on("id-web")
    web = sw.service("id-web")
    assert devices_key(P, node) in web.labels and hold_constraint(P) not in web.constraints
    assert "place" in decided(logs, "id-web")
    # loose ran ungated: placed now, one restart, decided as such.
    assert [r for r in sw.restarts if r[1] == "id-loose"] == [("id-loose", "id-loose", "n-dgx")]
    assert "place" in decided(logs, "id-loose")
    # half: the newer share env lines would restart it: held, listed, not written.
    assert sw.running_on("id-half") == {"n-4090": "t-half"}
    by = {sp.name: sp for sp in d.last_session.placement.services}
    assert any(c.startswith("add env SWARMGPU_GPU_FRACTION=") for c in by["half"].held)
    assert "SWARMGPU_GPU_FRACTION" not in " ".join(sw.service("id-half").env)
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {})
    found = [f for check_ in audit_checks(Config()) for f in check_(snap)]
    assert [f.subject for f in found if f.kind == "held-change"] == ["half"] * 4
    check(sw, logs)
    assert sum(r[1] == "id-half" for r in sw.restarts) == 0
    # The operator's word writes it: one restart, the operator's decision.
    from swarmgpu.manager.services.release import release_held

    n = len(sw.restarts)
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {
        nid: FactsResult(nid, r.hostname, "fake", r.facts, None, time.time())
        for nid, r in d.book.records.items()})
    (r,) = release_held(sw, snap, d.cfg, ["half"], dry_run=False)  # type: ignore[arg-type]
    assert r.written and any("SWARMGPU_GPU_FRACTION" in c for c in r.changes), r
    assert [x[1] for x in sw.restarts[n:]] == ["id-half"]
    assert "operator" in decided(logs, "id-half")
    for _ in range(2):
        d.cycle()
    assert not {sp.name: sp for sp in d.last_session.placement.services}["half"].held
    check(sw, logs)
    # A service removed: its gate is released (nothing of it runs), no restart.
    n = len(sw.restarts)
    sw.drop_service("id-web")
    d.cycle()
    assert gate_key(P, "web") not in sw.node(node).labels and sw.restarts[n:] == []
    assert "release" in decided(logs, node)
    # Nothing that runs was restarted without a decision, in all of it.
    check(sw, logs)


def test_apply_writes_nothing_on_a_service_redeployed_since_it_was_read(
        tmp_path: Any) -> None:
    """``swarmgpu apply --service`` plans from what it read; the owner re-deploys with a
    quarter GPU before its write: the held changes planned for the half are not written,
    and the error names what changed."""
    from swarmgpu.manager.services.release import release_held

    sw = world()
    d = daemon(sw, str(tmp_path))
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {
        nid: FactsResult(nid, r.hostname, "fake", r.facts, None, time.time())
        for nid, r in d.book.records.items()})
    sw.update_service_spec("id-half", lambda spec: {
        **spec, "Labels": {**spec["Labels"], f"{P}gpu-fraction": "0.25"}})
    (r,) = release_held(sw, snap, d.cfg, ["half"], dry_run=False)  # type: ignore[arg-type]
    assert not r.written and r.changes  # it had something to write
    assert r.error is not None and f"{P}gpu-fraction 0.5 -> 0.25" in r.error, r
    assert "SWARMGPU_GPU_FRACTION" not in " ".join(sw.service("id-half").env)
    assert sw.restarts == []


def _busy_4090(high: Mapping[str, str], small_gpus: int) -> ModelSwarm:
    """batch holds RTX 4090s on n-4090 (and the DGX is full of 'big'); high wants 2."""
    small_h = Holding("batch", "n-4090", R_UUIDS[:small_gpus], (1000,) * small_gpus)
    big_h = Holding("big", "n-dgx", D_UUIDS, (1000,) * len(D_UUIDS))
    fill_h = Holding("filler", "n-4090", R_UUIDS[small_gpus:],
                     (1000,) * (8 - small_gpus))
    labels = {assign_key(P, "batch"): small_h.label_value(), gate_key(P, "batch"): "true"}
    if small_gpus < 8:
        labels |= {assign_key(P, "filler"): fill_h.label_value(),
                   gate_key(P, "filler"): "true"}
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", {assign_key(P, "big"): big_h.label_value(),
                                           gate_key(P, "big"): "true"}),
             sw_node("n-4090", "gpu-node-2", labels)]
    services = [sw_svc("batch", {f"{P}gpus": str(small_gpus), f"{P}priority": "0",
                               devices_key(P, "n-4090"): ",".join(R_UUIDS[:small_gpus])}),
                sw_svc("big", {f"{P}gpus": str(len(D_UUIDS)), f"{P}priority": "50",
                             f"{P}preemptible": "false",
                             devices_key(P, "n-dgx"): ",".join(D_UUIDS)}),
                sw_svc("high", {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", **high})]
    tasks = [SwarmTask("t-batch", "id-batch", "n-4090", 1, "running", "running", ()),
             SwarmTask("t-big", "id-big", "n-dgx", 1, "running", "running", ()),
             SwarmTask("t-high", "id-high", "", 1, "pending", "running", ())]
    if small_gpus < 8:
        services.append(sw_svc("filler", {f"{P}gpus": str(8 - small_gpus),
                                        f"{P}priority": "50", f"{P}preemptible": "false",
                                        devices_key(P, "n-4090"):
                                            ",".join(R_UUIDS[small_gpus:])}))
        tasks.append(SwarmTask("t-filler", "id-filler", "n-4090", 1, "running", "running",
                               ()))
    return ModelSwarm(nodes, services, tasks)


def test_a_preemption_is_a_decision(tmp_path: Any, logs: list[str]) -> None:
    sw = _busy_4090({f"{P}priority": "100"}, 8)
    d = daemon(sw, str(tmp_path), preemption=PreemptionConfig(dry_run=False))
    for _ in range(3):
        d.cycle()
    assert ("n-4090", "id-batch", "n-4090") in sw.restarts  # its gate closed: stopped
    assert "preempt" in decided(logs, "n-4090")
    assert "n-4090" in sw.running_on("id-high")
    check(sw, logs)


def test_a_preemption_by_a_move_is_a_decision(tmp_path: Any, logs: list[str]) -> None:
    """batch (2 GPUs) fits on the DGX (emptied here): high takes its RTX 4090s, and
    batch is moved there, make-before-break, through the mover."""
    sw = _busy_4090({f"{P}priority": "100"}, 2)
    sw.drop_service("id-big")
    sw._nodes["n-dgx"] = replace(sw.node("n-dgx"), labels={})
    port = closed_port()
    d = daemon(sw, str(tmp_path), preemption=PreemptionConfig(dry_run=False),
               rebalance=RebalanceConfig(dry_run=False, policies="",
                                         metrics_url_template=f"http://{{addr}}:{port}/m",
                                         scrape_timeout_s=0.5))
    for _ in range(8):
        d.cycle()
    check(sw, logs)
    # batch now runs on the DGX, its source gate closed by the move (a decision), and
    # high runs on the RTX 4090s it made room on.
    assert set(sw.running_on("id-batch")) == {"n-dgx"}, sw.restarts
    assert "move" in decided(logs, "n-4090"), logs[-40:]
    assert "n-4090" in sw.running_on("id-high")


def test_the_over_share_restart_is_the_operators_word(tmp_path: Any,
                                                      logs: list[str]) -> None:
    from swarmgpu.manager.rebalance.context import MOVED_AT
    from swarmgpu.manager.services.overshare import Restarter, ServiceUse

    sw = _busy_4090({f"{P}priority": "0"}, 8)
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, wait_s=1.0)  # type: ignore[arg-type]
    u = ServiceUse("batch", "n-4090", "gpu-node-2", 0, R_UUIDS[0], 30000, 20000, 1000,
                   ("t-batch",), (), ())
    assert r._bounce(sw.service("id-batch"), u, MOVED_AT)
    assert sw.restarts == [("n-4090", "id-batch", "n-4090")]
    assert decided(logs, "n-4090") == ["operator"]
    check(sw, logs)


def test_the_over_share_restart_marks_its_service_before_its_task_is_replaced(
        tmp_path: Any, logs: list[str]) -> None:
    """The cooldown mark (``moved-at``) is a write of the service's labels alone. Written
    after the gate reopened, it left the replacement task -- still waiting for a node
    while the old task gives back what it reserves -- of an older revision, which Swarm's
    scheduler never tries again (moby/swarmkit 807f25e, ``noSuitableNode``). Written
    before the gate closes, the replacement is made from the marked spec."""
    from swarmgpu.manager.rebalance.context import MOVED_AT
    from swarmgpu.manager.services.overshare import Restarter, ServiceUse

    sw = _busy_4090({f"{P}priority": "0"}, 8)
    cfg = Config(state_dir=str(tmp_path), placement=PlacementConfig(overshare="restart"))
    r = Restarter(sw, cfg, wait_s=1.0, clock=lambda: 1234.0)  # type: ignore[arg-type]
    u = ServiceUse("batch", "n-4090", "gpu-node-2", 0, R_UUIDS[0], 30000, 20000, 1000,
                   ("t-batch",), (), ())
    n = len(sw.calls)
    assert r._bounce(sw.service("id-batch"), u, MOVED_AT)
    mine = sw.calls[n:]
    assert mine.index(("service", "id-batch")) < mine.index(("node", "n-4090")), mine
    assert sw.service("id-batch").labels[P + MOVED_AT] == "1234"
    assert sw.restarts == [("n-4090", "id-batch", "n-4090")]
    check(sw, logs)


def _label_rm(sw: ModelSwarm, service_id: str, *keys: str) -> None:
    """``docker service update --label-rm KEY``: the labels go, nothing else changes."""
    sw.update_service_spec(service_id, lambda spec: {
        **spec, "Labels": {k: v for k, v in spec["Labels"].items() if k not in keys}})


def test_a_service_whose_request_labels_are_removed_runs_again_without_a_gpu(
        tmp_path: Any, logs: list[str]) -> None:
    """``--label-rm swarmgpu.gpu-fraction`` on a placed, running service: its holding and
    gate are released and swarmgpu's own lines leave its spec (its gate constraint, its
    device map; its device template becomes void), so its task runs again, without a
    GPU, after one restart decided as a release. Its own env lines stay."""
    sw = world()
    d = daemon(sw, str(tmp_path))
    for _ in range(2):
        d.cycle()
    n, w = len(sw.restarts), len(sw.calls)
    _label_rm(sw, "id-half", f"{P}gpu-fraction")
    for _ in range(3):
        d.cycle()
    assert sw.calls[w:].count(("service", "id-half")) == 2  # the label-rm, then one write
    half = sw.service("id-half")
    assert gate_constraint(P, "half") not in half.constraints
    assert not [k for k in half.labels if k.startswith(P)], half.labels
    assert half.env == ("V=1", VOID_LINE, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
    labels = sw.node("n-4090").labels
    assert gate_key(P, "half") not in labels and assign_key(P, "half") not in labels
    assert len(sw.running_on("id-half")) == 1, sw.tasks()
    assert [r[1] for r in sw.restarts[n:]] == ["id-half"]
    assert "release" in decided(logs, "id-half")
    check(sw, logs)


def test_a_release_whose_spec_write_failed_is_finished_next_cycle(
        tmp_path: Any, logs: list[str]) -> None:
    """The spec write of a release fails after its gates closed: the next cycle writes
    it (the gate in its spec says what is left to do, with no ledger entry)."""
    sw = world()
    d = daemon(sw, str(tmp_path))
    for _ in range(2):
        d.cycle()
    _label_rm(sw, "id-half", f"{P}gpu-fraction")
    write = sw.update_service_spec
    failing = {"id-half"}

    def flaky(service_id: str, compute: Callable[[Mapping[str, Any]], Any],
              **kw: Any) -> bool:
        if service_id in failing:
            failing.discard(service_id)
            raise SwarmError("rpc error: code = Unavailable")
        return write(service_id, compute, **kw)

    sw.update_service_spec = flaky  # type: ignore[method-assign]
    d.cycle()
    assert not failing and gate_constraint(P, "half") in sw.service("id-half").constraints
    assert assign_key(P, "half") not in sw.node("n-4090").labels
    for _ in range(2):
        d.cycle()
    assert gate_constraint(P, "half") not in sw.service("id-half").constraints
    assert len(sw.running_on("id-half")) == 1
    check(sw, logs)


def test_an_invalid_request_keeps_its_holding_gate_and_spec(tmp_path: Any,
                                                            logs: list[str]) -> None:
    """A typo is no request removed: what the broken label held is kept, its task runs."""
    sw = world()
    d = daemon(sw, str(tmp_path))
    for _ in range(2):
        d.cycle()
    n = len(sw.restarts)
    sw.update_service_spec("id-half", lambda spec: {
        **spec, "Labels": {**spec["Labels"], f"{P}gpu-fraction": "half"}})
    for _ in range(2):
        d.cycle()
    half = sw.service("id-half")
    assert gate_constraint(P, "half") in half.constraints
    assert devices_key(P, "n-4090") in half.labels
    assert sw.node("n-4090").labels.get(gate_key(P, "half")) == "true"
    assert sw.running_on("id-half") == {"n-4090": "t-half"} and sw.restarts[n:] == []


def test_a_new_leaders_daemon_over_facts_read_in_another_order_writes_no_spec(
        tmp_path: Any, logs: list[str]) -> None:
    """A daemon restarted, or another manager's once it leads: no memory of the one before,
    its agents' GPUs and MIG devices listed in another order. Over services the first
    daemon settled it restarts nothing and writes no service spec."""
    sw = world()
    d = daemon(sw, str(tmp_path / "a"))
    for _ in range(4):
        d.cycle()
    n, before = len(sw.restarts), [c for c in sw.calls if c[0] == "service"]
    d = daemon(sw, str(tmp_path / "b"))
    for nid, rec in list(d.book.records.items()):
        d.book.records[nid] = replace(rec, facts=reread(rec.facts))
    for _ in range(3):
        d.cycle()
    assert sw.restarts[n:] == [] and [c for c in sw.calls if c[0] == "service"] == before
    by = {sp.name: sp for sp in d.last_session.placement.services}
    assert {k: sp.status for k, sp in by.items()} == dict.fromkeys(("web", "half", "loose"),
                                                                   "placed")
    assert by["half"].held  # (what an upgrade would restart it for: still held)
    check(sw, logs)
