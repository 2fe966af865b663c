"""One write per node per cycle, and gates opened in the cycle that wrote the device map.

The daemon's cycle (label sync, then placement) over ``TaskSwarm``: the SwarmClient
methods the daemon calls, answered from in-memory Swarm objects, with Swarm's task
behaviour as far as gates go (a replica is a task from the moment its service exists;
a ForceUpdate replaces the waiting tasks, optionally only after ``lag`` task lists: the
updater has not acted yet; a change of the task template replaces a waiting task; a
scheduler pass runs a waiting task on a node whose gate is open, one replica a node, at
each task list and after each service write; one of an older revision than its service
that a pass finds no node for is never tried again: ``support.scheduler``). Every write
is recorded in order, and ``_cycle`` checks that none of the daemon's left a task
waiting for good.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from support.forged import sw_node, sw_svc
from support.gpu_nodes import DGX_A100, RTX4090
from support.scheduler import SpecVersions

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.placement import PlacementStep
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import (
    assign_key,
    devices_key,
    gate_key,
)
from swarmgpu.manager.placement.records import PlacementPlan, ServicePlan, SpecWrites, Status
from swarmgpu.manager.placement.restarts import HOLD_HINT
from swarmgpu.manager.placement.specwrite import service_compute
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmError, SwarmNode, SwarmService, SwarmTask, service_from_api
from swarmgpu.swarm.unkeyed import Unkeyed

P = "swarmgpu."
FACTS = {"n-dgx": DGX_A100.facts(), "n-4090": RTX4090.facts()}
HOSTS = {"n-dgx": "gpu-node-1", "n-4090": "gpu-node-2"}


class TaskSwarm:
    """In-memory Swarm at swarmgpu's client boundary; writes recorded as (kind, id)."""

    def __init__(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
                 lag: int = 0) -> None:
        self._nodes = {n.id: n for n in nodes}
        self._services = {s.id: s for s in services}
        self.versions = SpecVersions()  # Swarm's rule on a waiting task of an older spec
        self.daemon_stranded: set[str] = set()  # tasks a write of the daemon left for good
        self._tasks: dict[str, list[SwarmTask]] = {s.id: self._fresh(s) for s in services}
        self._pending: list[tuple[int, SwarmService]] = []  # (lists to wait, service)
        self.lag = lag
        self.calls: list[tuple[str, str]] = []
        self.task_lists = 0
        self.fail_node_writes: set[str] = set()
        self.fail_service_writes: set[str] = set()  # the engine answers these with an error
        self.conflict_once: set[str] = set()  # nodes another writer changes mid-write
        self.writes = 0

    def _fresh(self, s: SwarmService) -> list[SwarmTask]:
        out = [SwarmTask(f"t-{s.name}-{s.force_update}-{k}", s.id, "", k, "pending", "running",
                         s.env, force_update=s.force_update)
               for k in range(1, (s.replicas or 0) + 1)]
        for t in out:  # made at the service's version now (the updater's, when lagging)
            self.versions.made_at(t.id, self._services[s.id].version)
        return out

    def is_leader(self) -> bool:
        return True

    def nodes(self) -> list[SwarmNode]:
        return list(self._nodes.values())

    def node(self, node_id: str) -> SwarmNode:
        return self._nodes[node_id]

    def services(self) -> list[SwarmService]:
        return list(self._services.values())

    def unkeyed(self) -> Unkeyed:
        return Unkeyed()  # every entry has its ID

    def service(self, service_id: str) -> SwarmService:
        return self._services[service_id]

    def swarm_labels(self) -> Mapping[str, str]:
        return {}

    def update_swarm_labels(self, compute: Callable[[Mapping[str, str]],
                                                    Mapping[str, str] | None],
                            **_: Any) -> bool:
        return False  # the learned workload model: not what these tests count

    def tasks(self, filters: Mapping[str, Any] | None = None, *,
              states: Any = None, read: Any = None) -> list[SwarmTask]:
        self.task_lists += 1
        due = [s for n, s in self._pending if n <= 0]
        self._pending = [(n - 1, s) for n, s in self._pending if n > 0]
        for s in due:  # the updater acts: the old tasks go, new ones from the spec
            self._tasks[s.id] = self._fresh(s)
        self._schedule()
        return [t for s in self._services.values() for t in self._tasks.get(s.id, [])]

    def _schedule(self) -> None:
        """A pass of the scheduler: a waiting task runs where its gate is open; one it
        finds no node for is dropped for good once its service is newer (SpecVersions)."""
        gates: dict[str, list[str]] = {}
        for nid, n in self._nodes.items():
            for k, v in n.labels.items():
                if k.startswith(P + "service.") and v == "true":
                    gates.setdefault(k.removeprefix(P + "service."), []).append(nid)
        for s in self._services.values():
            for i, t in enumerate(self._tasks.get(s.id, [])):
                if t.state != "pending" or not self.versions.tries(t.id):
                    continue
                used = {x.node_id for x in self._tasks[s.id]}  # one replica a node
                free = [nid for nid in gates.get(s.name, []) if nid not in used]
                if free:  # the scheduler starts it
                    self._tasks[s.id][i] = replace(t, node_id=free[0], state="running")
                else:
                    self.versions.no_node(t.id, s.version)

    def left_by_daemon(self) -> list[str]:
        """The waiting tasks a write of the daemon left for good: not tried again, and no
        ForceUpdate on its way to replace them (the updater's ``lag``)."""
        return [t.id for s in self._services.values() for t in self._tasks.get(s.id, [])
                if t.id in self.stranded() and t.id in self.daemon_stranded
                and t.force_update == s.force_update]

    def stranded(self) -> list[str]:
        """The waiting tasks no scheduler pass tries again (pending for good)."""
        return [t.id for ts in self._tasks.values() for t in ts
                if t.state == "pending" and not self.versions.tries(t.id)]

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **_: Any) -> bool:
        n = self._nodes[node_id]
        new = compute(dict(n.labels))
        if new is not None and node_id in self.conflict_once:
            # Another writer landed first (a version conflict): SwarmClient re-reads the
            # node and asks ``compute`` again.
            self.conflict_once.discard(node_id)
            n = self._nodes[node_id] = replace(n, labels={**n.labels, "other": "writer"},
                                               version=n.version + 1)
            new = compute(dict(n.labels))
        if new is None or dict(new) == dict(n.labels):
            return False
        if node_id in self.fail_node_writes:
            raise SwarmError(f"node {node_id}: update failed")
        self.calls.append(("node", node_id))
        self.writes += 1
        self._nodes[node_id] = replace(n, labels=dict(new), version=n.version + 1)
        return True

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **_: Any) -> bool:
        s = self._services[service_id]
        new = compute(copy.deepcopy(dict(s.spec)))
        if new is None or new == s.spec:
            return False
        if service_id in self.fail_service_writes:
            raise SwarmError("500 Server Error: rpc error: update out of sequence")
        self.calls.append(("service", service_id))
        self.writes += 1
        s2 = self._services[service_id] = service_from_api(
            {"ID": s.id, "Spec": new, "Version": {"Index": s.version + 1}})
        if s2.force_update != s.force_update:
            self._pending.append((self.lag, s2))
            if not self.lag:
                self._tasks[s2.id] = self._fresh(s2)
                self._pending.pop()
        elif new.get("TaskTemplate") != s.spec.get("TaskTemplate"):
            # the orchestrator replaces a waiting task whose own spec changed
            self._tasks[s2.id] = [self._fresh(s2)[i] if t.state == "pending" and not t.node_id
                                  else t for i, t in enumerate(self._tasks.get(s2.id, []))]
        before = set(self.versions.dropped)
        self._schedule()  # any event of the cluster may come before the daemon's next write
        self.daemon_stranded |= self.versions.dropped - before
        return True

    def redeploy(self, service_id: str, labels: Mapping[str, str]) -> None:
        """The owner's ``docker stack deploy`` of the service with other labels (its
        event not seen by the daemon's snapshot); its waiting tasks stay."""
        s = self._services[service_id]
        spec = copy.deepcopy(dict(s.spec))
        spec["Labels"] = dict(labels)
        self._services[service_id] = service_from_api(
            {"ID": s.id, "Spec": spec, "Version": {"Index": s.version + 1}})
        self._schedule()

    def bump_force(self, service_id: str) -> None:
        """Someone else's ``docker service update --force``: new tasks, no device map."""
        s = self._services[service_id]
        spec = copy.deepcopy(dict(s.spec))
        spec["TaskTemplate"]["ForceUpdate"] = s.force_update + 1
        s2 = self._services[service_id] = service_from_api(
            {"ID": s.id, "Spec": spec, "Version": {"Index": s.version + 1}})
        self._tasks[s.id] = self._fresh(s2)


def _daemon(sw: TaskSwarm, tmp: Path, *, dry_run: bool = False) -> Daemon:
    cfg = Config(dry_run=dry_run, state_dir=str(tmp),
                 sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none"))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.use([PlacementStep(d)])
    return d


def _cycle(d: Daemon, sw: TaskSwarm) -> None:
    """The daemon's cycle on a snapshot read the way ``take_snapshot`` reads it, with
    the agents' facts given (no HTTP here)."""
    now = time.time()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks({"desired-state": "running"}),
                    {nid: FactsResult(nid, HOSTS[nid], "", f, None, now)
                     for nid, f in FACTS.items()})
    d.run_steps(snap)
    assert not sw.left_by_daemon(), sw.left_by_daemon()


def _snapshot(sw: TaskSwarm) -> Snapshot:
    now = time.time()
    return Snapshot(sw.nodes(), sw.services(), sw.tasks({"desired-state": "running"}),
                    {nid: FactsResult(nid, HOSTS[nid], "", f, None, now)
                     for nid, f in FACTS.items()})


def _cluster(lag: int = 0) -> TaskSwarm:
    # A user's own labels on both nodes: never removed or overwritten.
    nodes = [sw_node("n-dgx", HOSTS["n-dgx"], {"team": "ml"}),
             sw_node("n-4090", HOSTS["n-4090"], {"team": "cv"})]
    return TaskSwarm(nodes, [sw_svc("train", {f"{P}gpus": "1", "owner": "me"})], lag=lag)


def _gate_node(sw: TaskSwarm, name: str) -> str | None:
    on = [n.id for n in sw.nodes() if n.labels.get(gate_key(P, name)) == "true"]
    assert len(on) <= 1
    return on[0] if on else None


def test_a_new_service_is_placed_with_one_write_per_node_and_per_service(
        tmp_path: Path) -> None:
    sw = _cluster()
    d = _daemon(sw, tmp_path)
    _cycle(d, sw)
    # Each object written once: both nodes (label sync's labels; on the chosen one also
    # the ledger and the gate, in the same write) and the service (its device map).
    assert sorted(sw.calls) == [("node", "n-4090"), ("node", "n-dgx"), ("service", "id-train")]
    nid = _gate_node(sw, "train")
    assert nid is not None  # the gate opened in this cycle
    node = sw.node(nid)
    assert node.labels[assign_key(P, "train")]  # the ledger, in the same write
    assert node.labels[f"{P}gpu.count"] == "8"  # label sync's labels, in the same write
    assert {n.labels["team"] for n in sw.nodes()} == {"ml", "cv"}  # the user's kept
    svc = sw.service("id-train")
    assert svc.labels["owner"] == "me" and svc.labels[devices_key(P, nid)]
    # The replica runs, and was created after its device map: pinned, not void.
    (t,) = [t for t in sw.tasks() if t.service_id == "id-train"]
    assert t.state == "running" and t.node_id == nid and t.force_update == svc.force_update
    # Converged: the next cycle writes nothing.
    sw.calls.clear()
    _cycle(d, sw)
    assert sw.calls == []


def test_the_service_write_lands_before_the_node_write_that_opens_its_gate(
        tmp_path: Path) -> None:
    sw = _cluster()
    _cycle(_daemon(sw, tmp_path), sw)
    nid = _gate_node(sw, "train")
    assert nid is not None
    order = [c[1] for c in sw.calls]
    other = next(n for n in HOSTS if n != nid)
    # The node placement opens nothing on: label sync's write in phase 1, before the
    # service; the gated node after it.
    assert order.index(other) < order.index("id-train") < order.index(nid)


def test_a_task_older_than_the_map_keeps_the_gate_closed_until_the_next_cycle(
        tmp_path: Path) -> None:
    """The updater has not replaced the waiting task when placement lists the tasks:
    the gate stays closed (the ledger is written), and opens in the next cycle."""
    sw = _cluster(lag=1)
    d = _daemon(sw, tmp_path)
    _cycle(d, sw)
    assert _gate_node(sw, "train") is None
    assert any(assign_key(P, "train") in n.labels for n in sw.nodes())
    (t,) = [t for t in sw.tasks() if t.service_id == "id-train"]  # replaced only now
    assert t.state == "pending"
    sw.calls.clear()
    _cycle(d, sw)
    nid = _gate_node(sw, "train")
    assert nid is not None and sw.calls == [("node", nid)]
    (t,) = [t for t in sw.tasks() if t.service_id == "id-train"]
    assert t.state == "running" and t.force_update == sw.service("id-train").force_update


def test_someone_elses_force_update_does_not_pass_for_the_map(tmp_path: Path) -> None:
    """A ``--force`` between the snapshot and placement's write creates a task with the
    ForceUpdate the plan expects but no device map. Placement's forcing write, planned
    from the ForceUpdate before it, is refused (``placement.planned``) and no gate opens;
    the next cycle plans from the spec as it is and forces once, and only a task with
    the value that write landed opens the gate."""
    sw = _cluster(lag=1)
    d = _daemon(sw, tmp_path)
    now = time.time()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(),
                    {nid: FactsResult(nid, HOSTS[nid], "", f, None, now)
                     for nid, f in FACTS.items()})
    sw.bump_force("id-train")  # after the snapshot: its task has ForceUpdate 1, no map
    d.run_steps(snap)
    assert sw.service("id-train").force_update == 1
    assert _gate_node(sw, "train") is None
    assert all(t.state == "pending" for t in sw.tasks() if t.service_id == "id-train")
    _cycle(d, sw)
    assert sw.service("id-train").force_update == 2
    assert _gate_node(sw, "train") is None


def test_a_stale_snapshot_of_the_daemons_own_force_forces_no_second_update(
        tmp_path: Path) -> None:
    """The daemon's own write of the device map and its ForceUpdate, then a cycle on a
    snapshot that missed it (the cache's event lost): planned from that snapshot, the
    map is due again and its write bumped ForceUpdate once more on the spec as it is
    (Swarm replaced the tasks twice). The write is refused: ForceUpdate moved since."""
    sw = _cluster(lag=1)
    d = _daemon(sw, tmp_path)
    stale = _snapshot(sw)
    _cycle(d, sw)
    assert sw.service("id-train").force_update == 1
    sw.calls.clear()
    d.run_steps(stale)
    assert sw.service("id-train").force_update == 1
    assert ("service", "id-train") not in sw.calls


def test_a_job_keeps_the_next_cycle_path(tmp_path: Path) -> None:
    """A job's tasks have desired state "complete": the list of running tasks would not
    show a waiting one, so its gate is never opened by that list."""
    job = sw_svc("batch", {f"{P}gpus": "1"},
               mode={"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}})
    sw = TaskSwarm([sw_node(nid, host) for nid, host in HOSTS.items()], [job])
    sw._tasks[job.id] = [SwarmTask("t-job", job.id, "", 1, "pending", "complete", job.env)]
    d = _daemon(sw, tmp_path)
    _cycle(d, sw)
    assert _gate_node(sw, "batch") is None


def test_dry_run_writes_nothing_and_holds_nothing(tmp_path: Path) -> None:
    sw = _cluster()
    d = _daemon(sw, tmp_path, dry_run=True)
    _cycle(d, sw)
    _cycle(d, sw)
    assert sw.calls == [] and d.labels.held is None


def test_a_failed_node_write_is_reported_for_label_sync_and_opens_nothing(
        tmp_path: Path) -> None:
    sw = _cluster()
    sw.fail_node_writes = {"n-dgx", "n-4090"}
    d = _daemon(sw, tmp_path)
    now = time.time()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(),
                    {nid: FactsResult(nid, HOSTS[nid], "", f, None, now)
                     for nid, f in FACTS.items()})
    report = d.run_steps(snap)
    assert sw.calls == [("service", "id-train")]  # the map; no gate, no ledger anywhere
    assert _gate_node(sw, "train") is None
    assert sorted(e.split(":")[0] for e in report.errors) == ["gpu-node-1", "gpu-node-2"]
    assert report.writes == 0 and d.labels.held is None


def test_label_writes_land_when_a_step_fails(tmp_path: Path) -> None:
    """Held label writes are written even when placement raises before taking them."""
    sw = _cluster()
    d = _daemon(sw, tmp_path)

    class Broken(Step):  # takes label sync's held writes, as placement does
        name = "broken"
        requires = frozenset({Slot.SNAPSHOT, Slot.HELD})
        provides: frozenset[Slot] = frozenset()

        def run(self, session: CycleSession) -> None:
            raise RuntimeError("planner bug")

    d.use([Broken()])
    now = time.time()
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(),
                    {nid: FactsResult(nid, HOSTS[nid], "", f, None, now)
                     for nid, f in FACTS.items()})
    with pytest.raises(RuntimeError):
        d.run_steps(snap)
    assert sorted(sw.calls) == [("node", "n-4090"), ("node", "n-dgx")]
    assert d.labels.held is None


def test_label_sync_alone_writes_before_the_steps(tmp_path: Path) -> None:
    """Without placement nothing is held: label sync writes first, as it always did."""
    sw = _cluster()
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none"))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    seen: list[list[tuple[str, str]]] = []

    class Look(Step):  # requires nothing of label sync: its writes are not held
        name = "look"
        requires = frozenset({Slot.SNAPSHOT})
        provides: frozenset[Slot] = frozenset()

        def run(self, session: CycleSession) -> None:
            seen.append(list(sw.calls))

    d.use([Look()])
    _cycle(d, sw)
    assert sorted(seen[0]) == [("node", "n-4090"), ("node", "n-dgx")]


def test_one_task_list_after_the_service_writes_and_none_without_a_gate_to_open(
        tmp_path: Path) -> None:
    sw = _cluster()
    d = _daemon(sw, tmp_path)
    lists = sw.task_lists
    _cycle(d, sw)
    # The snapshot's, one per node label sync writes (the node's tasks at write time:
    # tests/test_label_sync_new_service.py), and the one before the gates.
    assert sw.task_lists - lists == 2 + 2
    lists = sw.task_lists
    _cycle(d, sw)
    assert sw.task_lists - lists == 1 and sw.calls.count(("service", "id-train")) == 1


def test_version_conflicts_of_a_merged_node_write_count_in_label_conflicts(
        tmp_path: Path) -> None:
    """Label sync's change folded into placement's node write: a version conflict on it
    is counted in swarmgpu_label_conflicts, as label sync's own writes count theirs."""
    sw = _cluster()
    d = _daemon(sw, tmp_path)
    sw.conflict_once = {"n-dgx", "n-4090"}
    _cycle(d, sw)
    assert d.metrics.label_conflicts._value.get() == 2
    assert sorted(sw.calls) == [("node", "n-4090"), ("node", "n-dgx"), ("service", "id-train")]
    for n in sw.nodes():  # both changes landed over the other writer's, which is kept
        assert n.labels["other"] == "writer" and n.labels[f"{P}gpu.count"]
    assert _gate_node(sw, "train") is not None


def test_a_service_redeployed_with_another_request_gets_no_write_planned_for_the_old(
        tmp_path: Path) -> None:
    """The owner re-deploys with 2 GPUs after the snapshot that planned 1 (an event the
    cache missed): the plan's device map, gate and ledger for one GPU are not written on
    the new spec; the service is read afresh and the next cycle places its 2 GPUs."""
    sw = _cluster()
    d = _daemon(sw, tmp_path)
    snap = _snapshot(sw)
    sw.redeploy("id-train", {f"{P}gpus": "2", "owner": "me"})
    version = sw.service("id-train").version
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    try:
        d.run_steps(snap)
    finally:
        logger.remove(sink)
    (said,) = [x for x in lines if "changed since the snapshot" in x]
    assert said.startswith("placement: train ") and f"{P}gpus 1 -> 2" in said
    svc = sw.service("id-train")
    assert svc.version == version  # nothing written on the new spec
    assert not [k for k in svc.labels if k.startswith(f"{P}devices.")]
    assert _gate_node(sw, "train") is None
    assert not any(assign_key(P, "train") in n.labels for n in sw.nodes())
    assert ("service", "id-train") not in sw.calls
    assert d.cache.pending == 1  # marked for a fresh read
    # From the spec as it is now: two GPUs, on the node that has them.
    _cycle(d, sw)
    nid = _gate_node(sw, "train")
    assert nid == "n-dgx"
    assert len(sw.service("id-train").labels[devices_key(P, nid)].split(",")) == 2


def test_the_daemons_own_write_since_the_snapshot_does_not_stop_placements(
        tmp_path: Path) -> None:
    """What swarmgpu itself writes on a service (state labels, a device map of another
    node, MaxReplicas, a generic reservation, update parallelism) landed
    after the snapshot: placement's write from that snapshot still lands."""
    sw = _cluster()
    d = _daemon(sw, tmp_path)
    snap = _snapshot(sw)
    # (Not ForceUpdate: a forcing write is refused once it moved since the snapshot,
    # ``test_a_stale_snapshot_of_the_daemons_own_force_forces_no_second_update``.)
    own = SpecWrites(service_labels_set={f"{P}state.moved-at": "1", devices_key(P, "gone"): "x"},
                     set_max_replicas=1, set_update_parallelism=2,
                     set_generic=("NVIDIA-GPU", 1))
    assert sw.update_service_spec("id-train", service_compute(own))
    sw.calls.clear()
    d.run_steps(snap)
    nid = _gate_node(sw, "train")
    assert nid is not None and ("service", "id-train") in sw.calls
    assert sw.service("id-train").labels[devices_key(P, nid)]


def _svc_on(name: str, labels: Mapping[str, str], nid: str) -> SwarmService:
    """A gated service whose own constraint names node ``nid``."""
    spec = copy.deepcopy(dict(sw_svc(name, labels).spec))
    spec["TaskTemplate"]["Placement"]["Constraints"].append(f"node.id == {nid}")
    return service_from_api({"ID": f"id-{name}", "Spec": spec, "Version": {"Index": 1}})


def _relabel(sw: TaskSwarm, service_id: str, edit: Callable[[dict[str, str]], object]) -> None:
    """The owner's ``docker service update --label-add/--label-rm`` (its event missed)."""
    labels = dict(sw.service(service_id).labels)
    edit(labels)
    sw.redeploy(service_id, labels)


def test_a_release_planned_from_a_stale_spec_writes_nothing_of_the_service(
        tmp_path: Path) -> None:
    """The owner removes train's request and adds it back, both events missed, after the
    snapshot that saw it removed: the plan releases train's GPU and gives it to big.
    Train's spec asks for its GPU again, so nothing of the release is written (its
    ledger entry and gate stay while its task runs), and big is not placed on the GPU
    it would have freed; the next cycle, from a fresh read, keeps train where it is."""
    sw = _cluster()
    d = _daemon(sw, tmp_path)
    _cycle(d, sw)
    nid = _gate_node(sw, "train")
    assert nid is not None
    held = sw.node(nid).labels[assign_key(P, "train")]
    # big asks for the 7 whole GPUs of train's node (its 8th is MIG): only train's
    # release makes room for it
    big = _svc_on("big", {f"{P}gpus": "7"}, nid)
    sw._services[big.id] = big
    sw._tasks[big.id] = sw._fresh(big)
    _relabel(sw, "id-train", lambda labels: labels.pop(f"{P}gpus"))
    snap = _snapshot(sw)
    _relabel(sw, "id-train", lambda labels: labels.update({f"{P}gpus": "1"}))
    version = sw.service("id-train").version
    sw.calls.clear()
    d.run_steps(snap)
    assert sw.node(nid).labels.get(assign_key(P, "train")) == held
    assert sw.node(nid).labels.get(gate_key(P, "train")) == "true"
    assert sw.service("id-train").version == version  # nothing written on it
    assert assign_key(P, "big") not in sw.node(nid).labels
    assert _gate_node(sw, "big") is None
    _cycle(d, sw)  # from the spec as it is: train keeps its GPU, big waits
    assert sw.node(nid).labels.get(assign_key(P, "train")) == held
    assert assign_key(P, "big") not in sw.node(nid).labels


def test_a_failed_service_write_leaves_the_other_services_writes_on_its_node(
        tmp_path: Path) -> None:
    """train and eval are placed on one node; eval's service write fails (update out of
    sequence): eval's ledger entry and gate are left out, train's are written on the
    same node, the failure is logged naming eval, and the next cycle places eval."""
    sw = TaskSwarm([sw_node(nid, host) for nid, host in HOSTS.items()],
                   [_svc_on(name, {f"{P}gpus": "1"}, "n-dgx") for name in ("train", "eval")])
    sw.fail_service_writes = {"id-eval"}
    d = _daemon(sw, tmp_path)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="ERROR")
    try:
        _cycle(d, sw)
    finally:
        logger.remove(sink)
    labels = sw.node("n-dgx").labels
    assert labels.get(gate_key(P, "train")) == "true" and assign_key(P, "train") in labels
    assert gate_key(P, "eval") not in labels and assign_key(P, "eval") not in labels
    assert any("eval" in x and "update out of sequence" in x for x in lines), lines
    sw.fail_service_writes.clear()
    _cycle(d, sw)
    labels = sw.node("n-dgx").labels
    assert labels.get(gate_key(P, "eval")) == "true" and assign_key(P, "eval") in labels
    assert labels[assign_key(P, "eval")] != labels[assign_key(P, "train")]


def test_an_invalid_request_is_logged_once_while_it_lasts(tmp_path: Path) -> None:
    """A service whose labels stay invalid is said once, not every cycle; a new reason
    is said again, and so is the same one after the labels were fixed and broken again."""
    sw = TaskSwarm([sw_node(nid, host) for nid, host in HOSTS.items()],
                   [sw_svc("bad", {f"{P}gpus": "two"})])
    d = _daemon(sw, tmp_path)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")

    def said() -> list[str]:
        return [x for x in lines if x.startswith("invalid GPU request")]

    try:
        _cycle(d, sw)
        _cycle(d, sw)
        assert len(said()) == 1 and "'two'" in said()[0], lines
        sw.redeploy("id-bad", {f"{P}gpus": "three"})
        _cycle(d, sw)
        _cycle(d, sw)
        assert len(said()) == 2 and "'three'" in said()[1], lines
        sw.redeploy("id-bad", {f"{P}gpus": "1"})
        _cycle(d, sw)
        sw.redeploy("id-bad", {f"{P}gpus": "three"})
        _cycle(d, sw)
        assert len(said()) == 3, lines
    finally:
        logger.remove(sink)


def test_a_pending_service_is_logged_once_while_its_reason_lasts(tmp_path: Path) -> None:
    """A request no node can hold stays pending: said once, not every cycle; said again
    when its reason changes."""
    sw = TaskSwarm([sw_node(nid, host) for nid, host in HOSTS.items()],
                   [sw_svc("huge", {f"{P}gpus": "1", f"{P}gpu-memory": "80GiB"})])
    d = _daemon(sw, tmp_path)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")

    def said() -> list[str]:
        return [x for x in lines if x.startswith("pending:")]

    try:
        _cycle(d, sw)
        _cycle(d, sw)
        assert len(said()) == 1 and "best node" in said()[0], lines
        sw.redeploy("id-huge", {f"{P}gpus": "1", f"{P}gpu-memory": "90GiB"})
        _cycle(d, sw)
        assert len(said()) == 2, lines
    finally:
        logger.remove(sink)


def test_a_held_back_note_and_a_tenant_limit_are_logged_once_while_they_last(
        tmp_path: Path) -> None:
    """A service's held-back note is said when it appears or changes, not again while
    its service stays held; said again once the service was gone, or is not held (a
    note of a service not held is said every cycle). A tenant limit the same way."""
    step = PlacementStep(_daemon(_cluster(), tmp_path))

    def sp(name: str, held: str = "", note: str = "", limit: str = "") -> ServicePlan:
        return ServicePlan(name, f"id-{name}", GpuRequest(limits=(limit,)) if limit else None,
                           "1 GPU", Status.PLACED, "placed", held=(held,) if held else (),
                           warnings=(f"{HOLD_HINT}: {note} -- applied later",) if note else ())

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="INFO")
    cycles = [[sp("a", "x", "x", "over"), sp("b", "", "y")],
              [sp("a", "x", "x", "over"), sp("b", "", "y")],
              [sp("a", "x", "x2", "over"), sp("b", "", "y")],
              [sp("b", "", "y")],
              [sp("a", "x", "x2", "more")]]
    said: list[list[str]] = []
    try:
        for services in cycles:
            lines.clear()
            step._log(PlacementPlan(services=services))
            said.append([x.split(" --")[0].removeprefix(HOLD_HINT) for x in lines])
    finally:
        logger.remove(sink)
    assert said == [[": x", ": y", "a: over"], [": y"], [": x2", ": y"], [": y"],
                    [": x2", "a: more"]]


def test_no_waiting_replica_is_left_for_good_by_the_cycle_that_opens_its_gates(
        tmp_path: Path) -> None:
    """Two replicas over ``TaskSwarm``'s scheduler rule (``SpecVersions``: a waiting task
    of an older revision that a pass finds no node for is never tried again): the cycle
    that writes the device map replaces the waiting tasks at once (parallelism 0), the
    gates open for the new ones, both run, one a node, and the owner's parallelism goes
    back once they do; no write of the daemon leaves a task waiting for good (``_cycle``)."""
    nodes = [sw_node("n-dgx", HOSTS["n-dgx"]), sw_node("n-4090", HOSTS["n-4090"])]
    s = sw_svc("pair", {f"{P}gpus": "1"}, replicas=2)
    spec = copy.deepcopy(dict(s.spec))
    spec["UpdateConfig"] = {"Parallelism": 1}
    sw = TaskSwarm(nodes, [service_from_api({"ID": s.id, "Spec": spec,
                                             "Version": {"Index": 1}})])
    d = _daemon(sw, tmp_path)
    for _ in range(4):
        _cycle(d, sw)
    tasks = [t for t in sw.tasks() if t.service_id == s.id]
    assert [t.state for t in tasks] == ["running", "running"], (tasks, sw.stranded())
    assert (sw.service(s.id).spec.get("UpdateConfig") or {}).get("Parallelism") == 1
