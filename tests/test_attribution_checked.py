"""A GPU process counts for a service only where Swarm says so (manager.services.overshare):
its container must be a task of that service that Swarm places on that very node. A
node's metrics line naming a service is a claim, never trusted on its own; a forged one
acts on nobody and is reported unattributed (issue 20, finding 2)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from loguru import logger
from support.gpu_nodes import DGX_A100
from support.overshare import G1, G2, F, metrics_for
from support.placement import DGX, R4090, svc

from swarmgpu.core.config import Config
from swarmgpu.core.samples import GpuProcess
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import MOVE_STATE, Holding, assign_key, gate_key
from swarmgpu.manager.rebalance.mover import MoveState, record_key
from swarmgpu.manager.services.overshare import (
    Restarter,
    ServiceUse,
    Watch,
    annotate,
    attribute,
    findings,
    owners,
)
from swarmgpu.swarm.client import SwarmService, SwarmTask

P = "swarmgpu."
VICTIM = svc("victim", {P + "gpu-fraction": "0.5"}, sid="sid-victim")
OTHER = svc("other", {P + "gpu-fraction": "0.5"}, sid="sid-other")
C_VICTIM_HERE, C_VICTIM_THERE, C_OTHER = "a" * 64, "b" * 64, "c" * 64
TASKS = [SwarmTask("t-victim", VICTIM.id, DGX.id, 1, "running", "running", (),
                   container_id=C_VICTIM_HERE),
         SwarmTask("t-victim2", VICTIM.id, R4090.id, 2, "running", "running", (),
                   container_id=C_VICTIM_THERE),
         SwarmTask("t-other", OTHER.id, DGX.id, 1, "running", "running", (),
                   container_id=C_OTHER)]
LED = {"victim": {DGX.id: Holding("victim", DGX.id, (G1.uuid,), (500,))},
       "other": {DGX.id: Holding("other", DGX.id, (G2.uuid,), (500,))}}
OWNERS = owners([VICTIM, OTHER], TASKS)
BIG = 80000  # MiB: far over a half-GPU share


def _judge(*procs: GpuProcess) -> tuple[dict[str, ServiceUse], list[Any]]:
    att = attribute([DGX], LED, {DGX.id: F}, metrics_for({G1.uuid: procs}), OWNERS)
    return {u.service: u for u in att.uses}, att.unattributed


def test_a_line_naming_a_service_without_a_container_acts_on_nobody() -> None:
    uses, stray = _judge(GpuProcess(66, BIG, None, "", "t-victim", "victim"))
    assert not uses["victim"].over and uses["victim"].used_mib == 0
    (x,) = stray
    assert (x.claimed, x.used_mib, x.why) == ("victim", BIG, "no container id")
    (f,) = [f for f in findings(uses.values(), stray)]
    assert f.kind == "unattributed-gpu-process" and f.advisory and "named 'victim'" in f.message
    assert f.node == x.node_id  # the node's ID: hostnames may repeat


def test_a_container_swarm_does_not_know_acts_on_nobody() -> None:
    uses, stray = _judge(GpuProcess(66, BIG, None, "f" * 64, "t-victim", "victim"))
    assert not uses["victim"].over
    assert [x.why for x in stray] == ["its container is no task Swarm knows"]


def test_a_victims_container_from_another_node_acts_on_nobody() -> None:
    # The victim does run a task, with this container, but Swarm runs it on R4090.
    uses, stray = _judge(GpuProcess(66, BIG, None, C_VICTIM_THERE, "t-victim2", "victim"))
    assert not uses["victim"].over
    assert [x.why for x in stray] == [
        "its container is a task of victim that Swarm runs on another node"]


def test_another_services_container_named_as_the_victim_acts_on_nobody() -> None:
    uses, stray = _judge(GpuProcess(66, BIG, None, C_OTHER, "t-victim", "victim"))
    assert not uses["victim"].over and "other" not in uses
    assert [x.why for x in stray] == ["its container is a task of other, not of victim"]
    # The right service but another task's id: a claim that does not match Swarm's.
    uses, stray = _judge(GpuProcess(66, BIG, None, C_VICTIM_HERE, "t-other", "victim"))
    assert not uses["victim"].over
    assert [x.why for x in stray] == ["its container is task t-victim, not t-other"]


def test_a_short_container_id_is_not_matched() -> None:
    # The agent's page carries 12 characters; fewer could match several containers.
    uses, stray = _judge(GpuProcess(66, BIG, None, "a" * 6))
    assert not uses["victim"].over
    assert [x.why for x in stray] == ["container id too short to check"]


def test_an_honest_process_still_counts_and_host_processes_are_nobodys() -> None:
    uses, stray = _judge(GpuProcess(10, BIG, None, C_VICTIM_HERE, "t-victim", "victim"),
                         GpuProcess(11, 500, None, C_VICTIM_HERE[:12]),  # no engine access
                         GpuProcess(12, 999))  # the host's own: not reported
    v = uses["victim"]
    assert (v.over, v.used_mib, v.tasks, v.pids) == (True, BIG + 500, ("t-victim",), (10, 11))
    assert v.containers == (C_VICTIM_HERE[:12],) and stray == []


def test_unattributed_shows_in_the_map_and_is_logged_once() -> None:
    uses, stray = _judge(GpuProcess(66, BIG, None, C_OTHER, "", "victim"))
    doc: dict[str, Any] = {"nodes": [{"id": DGX.id, "gpus": [{"uuid": G1.uuid, "holders": [
        {"service": "victim"}]}]}]}
    annotate(doc, list(uses.values()), stray)
    g = doc["nodes"][0]["gpus"][0]
    assert g["unattributed"] == [{"pid": 66, "memory_used_mib": BIG, "container": "c" * 12,
                                  "claimed_service": "victim",
                                  "why": "its container is a task of other, not of victim"}]
    assert g["holders"][0]["over_share"] is False
    w = Watch(clock=lambda: 0.0)
    w.update(list(uses.values()), stray)
    w.update(list(uses.values()), stray)
    assert list(w.unattributed) == [stray[0].key] and w.due(0) == []


def test_an_unattributed_process_is_logged_once_while_it_lasts() -> None:
    """Said once while it is read, again once a cycle read it no more and it came back."""
    uses, stray = _judge(GpuProcess(66, BIG, None, C_OTHER, "", "victim"))
    w = Watch(clock=lambda: 0.0)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING",
                      filter=lambda r: "unattributed GPU process" in r["message"])
    try:
        for seen in (stray, stray, [], stray, stray):
            w.update(list(uses.values()), seen)
    finally:
        logger.remove(sink)
    assert len(lines) == 2 and all("pid 66" in ln for ln in lines), lines
    assert list(w.unattributed) == [stray[0].key]


class _Swarm:
    """swarmgpu's own boundary (SwarmClient): tasks as Swarm answers now; every write
    is recorded."""

    def __init__(self, tasks: list[SwarmTask], labels: Mapping[str, str] | None = None) -> None:
        self.now = tasks
        self.labels = dict(labels or {})  # the swarm object's own (the move records)
        self.writes: list[tuple[str, str]] = []
        self.node_labels: dict[str, dict[str, str]] = {}  # as the snapshot had them

    def swarm_labels(self) -> Mapping[str, str]:
        return self.labels

    def tasks(self, filters: Mapping[str, Any] | None = None) -> list[SwarmTask]:
        sid = (filters or {}).get("service")
        return [t for t in self.now if sid is None or t.service_id == sid]

    def update_node_labels(self, node_id: str,
                           fn: Callable[[Mapping[str, str]], Mapping[str, str] | None]) -> bool:
        # read-modify-write as the client's: the restart's gate closed only where it is
        self.writes.append(("node", node_id))
        new = fn(self.node_labels.get(node_id, {}))
        if new is None:
            return False
        self.node_labels[node_id] = dict(new)
        return True

    def update_service_spec(self, sid: str,
                            fn: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> None:
        self.writes.append(("service", sid))

    def update_swarm_labels(self, fn: Callable[[Mapping[str, str]],
                                               Mapping[str, str] | None]) -> bool:
        # (the restart's record, ``restartlist``: the swarm object's, not a write counted)
        new = fn(self.labels)
        if new is not None:
            self.labels = dict(new)
        return new is not None


def _restart_case(fresh: list[SwarmTask], others: Sequence[SwarmService] = (),
                  records: Mapping[str, str] | None = None, unread: str = "",
                  **budgets: int) -> tuple[_Swarm, int, list[str]]:
    base = Config()
    cfg = replace(base, dry_run=False, placement=replace(base.placement, overshare="restart"),
                  rebalance=replace(base.rebalance, **budgets))
    held = Holding("victim", DGX.id, (G1.uuid,), (500,))
    dgx = replace(DGX, labels={assign_key(P, "victim"): held.label_value(),
                               gate_key(P, "victim"): "true"}, unread=unread)
    victim = VICTIM
    tasks = [TASKS[0]]
    snap = Snapshot([dgx], [victim, *others], tasks, {})
    att = attribute([dgx], {"victim": {DGX.id: held}}, {DGX.id: DGX_A100.facts()},
                    metrics_for({G1.uuid: (GpuProcess(10, BIG, None, C_VICTIM_HERE),)}),
                    owners([victim], tasks))
    (u,) = att.uses
    assert u.over
    swarm = _Swarm(fresh, records)
    swarm.node_labels[dgx.id] = dict(dgx.labels)
    r = Restarter(swarm, cfg, wait_s=0.0)  # type: ignore[arg-type]
    n = r.run([u], snap)
    return swarm, n, list(r.said.values())


def test_a_restart_rechecks_swarm_before_it_writes() -> None:
    # Swarm has replaced the task since the reading: nothing is written.
    moved = SwarmTask("t-new", VICTIM.id, DGX.id, 1, "running", "running", (),
                      container_id="d" * 64)
    swarm, n, why = _restart_case([moved])
    assert (n, swarm.writes, why) == (0, [], ["Swarm no longer runs the task(s) t-victim on "
                                              "gpu-node-1"])
    # Swarm still runs the very container that was over its share: the gate is bounced.
    swarm, n, why = _restart_case([TASKS[0]])
    assert n == 1 and ("node", DGX.id) in swarm.writes and why == []



def test_no_restart_on_a_node_whose_answer_cannot_be_read() -> None:
    """gpu-node-1's engine answer unread in part (SwarmNode.unread): none of its labels is
    written, so its gate cannot be closed; nothing is written for the restart (before,
    the cooldown mark landed and the refused gate write failed the step)."""
    unread = "node gpu-node-1: Description.Resources is str 'x'"
    swarm, n, why = _restart_case([TASKS[0]], unread=unread)
    assert (n, swarm.writes) == (0, [])
    assert why == [unread]


def test_forged_move_labels_do_not_ration_restarts() -> None:
    # Moves in flight count against the restart budget by the daemon's own records on
    # the swarm object; services that carry a move label of their own making do not.
    forged = [svc(f"forger{i}", {P + MOVE_STATE: '{"id":"x"}'}, sid=f"sid-f{i}")
              for i in range(Config().rebalance.max_moves_per_cycle + 2)]
    swarm, n, why = _restart_case([TASKS[0]], others=forged)
    assert n == 1 and ("node", DGX.id) in swarm.writes and why == []
    # The daemon's own records of moves in flight do fill the budget.
    movers, full = _in_flight(Config().rebalance.max_moves_per_cycle)
    swarm, n, why = _restart_case([TASKS[0]], others=movers, records=full)
    assert n == 0 and swarm.writes == [] and any("budget" in w for w in why)


def _in_flight(n: int, trigger: str = "hotspot", source: str = "a", target: str = "b"
               ) -> tuple[list[SwarmService], dict[str, str]]:
    """``n`` moves in flight, ``source`` -> ``target``: their services and the daemon's
    records of them (the swarm object's labels)."""
    services = [svc(f"mover{i}", {}, sid=f"sid-m{i}") for i in range(n)]
    return services, {record_key(P, s.id): MoveState(
        id=f"m{i}", service=s.name, source=source, source_host=source, source_uuids=(),
        source_milli=(), target=target, target_host=target, target_uuids=(), target_milli=(),
        surge=True, replicas=1, max_replicas=0, started_at=0.0, trigger=trigger, reason="r",
        service_id=s.id).to_json() for i, s in enumerate(services)}


def test_a_health_move_in_flight_leaves_the_restart_budget_alone() -> None:
    """The health policy's evacuations have their own budget
    (``health.evacuations_per_cycle``), as for the rebalancer's moves (``rebalancing``):
    one in flight spent the only restart of ``max_moves_per_cycle: 1``."""
    movers, health = _in_flight(1, trigger="health")
    swarm, n, why = _restart_case([TASKS[0]], others=movers, records=health,
                                  max_moves_per_cycle=1)
    assert n == 1 and ("node", DGX.id) in swarm.writes and why == []


def test_a_restart_holds_max_moves_per_node_as_a_move_on_its_node() -> None:
    """A restart on a node counts there as a move (source and target that node, once):
    a move in flight to the node fills ``max_moves_per_node: 1`` (it was not counted),
    one between two other nodes does not."""
    movers, there = _in_flight(1, target=DGX.id)
    swarm, n, why = _restart_case([TASKS[0]], others=movers, records=there,
                                  max_moves_per_cycle=2, max_moves_per_node=1)
    assert n == 0 and swarm.writes == [] and why == [
        "budget: 1 move(s) per node per cycle"]
    movers, elsewhere = _in_flight(1)
    swarm, n, why = _restart_case([TASKS[0]], others=movers, records=elsewhere,
                                  max_moves_per_cycle=2, max_moves_per_node=1)
    assert n == 1 and why == []


def test_a_service_whose_move_record_cannot_be_read_is_not_restarted() -> None:
    """A record that cannot be read (a field of the wrong type) may be a move still under
    way: the over-share restart leaves its service alone, as one with a move in flight
    (before: ``moving()`` read no move and the gate was bounced mid-move)."""
    key = record_key(P, VICTIM.id)
    _, mine = _in_flight(1)
    (text,) = mine.values()
    bad = {key: json.dumps({**json.loads(text), "service": "victim", "service_id": VICTIM.id,
                            "reason": 7})}
    swarm, n, why = _restart_case([TASKS[0]], records=bad, max_moves_per_cycle=5)
    assert n == 0 and swarm.writes == [] and len(why) == 1 and "move" in why[0], why
