"""`plan` and `status` while the service list left a preemption's victim out (listed
without an ID, ``swarm.unkeyed``): its ``state.preempted`` record is a label of its own
spec, the one place that names its preemptor. The daemon holds the victim's stopping
GPUs for that preemptor (its nomination, in memory); the one-shot read no record of a
service not listed, so it showed them held from all: the preemptor waiting for tasks
that stop, where the daemon places it. Now the one-shot reads such a service alone, by
its task's service ID (an inspect: nothing written), and holds as the daemon does;
one the engine answers unkeyed too stays held from all (nothing else names whose)."""

from __future__ import annotations

from dataclasses import replace

from support.forged import R_UUIDS, RecordingSwarm, victim_stopping_on_4090s

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement.nominated import Nomination
from swarmgpu.manager.placement.records import PlacementPlan
from swarmgpu.swarm.client import SwarmService, SwarmTask, SwarmUnavailable, SwarmUnkeyed
from swarmgpu.swarm.unkeyed import Unkeyed

LEFT = ("the engine's answer lists service 3 of 3 with ID None, not a non-empty text: "
        "it is left out")
HELD = frozenset(("n-4090", u) for u in R_UUIDS[:2])


def _left_out() -> tuple[Snapshot, SwarmService, RecordingSwarm]:
    """high's victim stops on two RTX 4090s, its record naming high; the list left the
    victim out. The engine stand-in answers the victim read alone."""
    snap, victim = victim_stopping_on_4090s(1000.0)
    listed = [s for s in snap.services if s.id != victim.id]
    sw = RecordingSwarm(snap.nodes, snap.services, snap.tasks)
    return replace(snap, services=listed, unkeyed=Unkeyed(services=(LEFT,))), victim, sw


def _statuses(plan: PlacementPlan) -> dict[str, str]:
    return {sp.name: sp.status.value for sp in plan.services}


def test_plan_holds_a_left_out_victims_gpus_for_its_preemptor_as_the_daemon_does() -> None:
    snap, victim, sw = _left_out()
    daemon = make_plan(snap, Config(), nominated=[
        Nomination("high", 100, "n-4090", R_UUIDS[:2], victims=(victim.id,))])
    one_shot = make_plan(snap, Config(), swarm=sw)
    assert daemon.stopping_waits == one_shot.stopping_waits == frozenset()
    assert one_shot.stopping_spared == daemon.stopping_spared == dict.fromkeys(HELD, "high")
    assert _statuses(one_shot) == _statuses(daemon)
    shown = plan_as_daemon(snap, Config(), sw)  # `plan` and `status`
    assert shown.stopping_spared == dict.fromkeys(HELD, "high")
    assert sw.writes == 0 and sw.calls == []  # read only


def test_a_left_out_victim_the_engine_answers_unkeyed_stays_held_from_all() -> None:
    snap, _victim, sw = _left_out()

    def unkeyed(service_id: str) -> SwarmService:
        raise SwarmUnkeyed(f"the engine answers service {service_id!r} with ID None")

    sw.service = unkeyed  # type: ignore[method-assign]
    assert make_plan(snap, Config(), swarm=sw).stopping_waits == HELD


def test_a_stopping_task_not_listed_is_read_only_while_the_list_left_one_out() -> None:
    snap, _victim, sw = _left_out()
    read: list[str] = []

    def service(service_id: str) -> SwarmService:
        read.append(service_id)
        return RecordingSwarm.service(sw, service_id)

    sw.service = service  # type: ignore[method-assign]
    plan = make_plan(replace(snap, unkeyed=Unkeyed()), Config(), swarm=sw)
    assert read == [] and plan.stopping_waits == HELD  # none left out: removed, as ever


def test_a_left_out_victims_read_answered_with_another_services_id_is_not_read() -> None:
    """The engine (or a proxy) answers the victim's inspect with filler's ID, listed and
    with a task of its own stopping on two of its GPUs. Before, that answer replaced
    filler's listed spec in the records read: filler's stopping GPUs were held for high,
    by a record filler never carried. An answer not of the ID asked is no read of it."""
    snap, victim, sw = _left_out()
    line = "NVIDIA_VISIBLE_DEVICES=" + ",".join(R_UUIDS[2:4])
    filler = next(s for s in snap.services if s.name == "filler")
    stop = SwarmTask("t-f-old", filler.id, "n-4090", 1, "running", "shutdown", (line,))
    snap = replace(snap, stopping=[*snap.stopping, stop])
    sw.service = lambda sid: replace(victim, id=filler.id)  # type: ignore[method-assign]
    plan = make_plan(snap, Config(), swarm=sw)
    assert plan.stopping_spared == {}
    assert plan.stopping_waits == HELD | {("n-4090", u) for u in R_UUIDS[2:4]}


def test_an_unreachable_engine_ends_the_left_out_victims_reads() -> None:
    """Two victims left out, the engine unreachable at the first read: the second is
    not read (before, each read waited out the client's timeout in turn, 30 s each, and
    `plan` or `status` stalled for all of them); both stay held from all."""
    snap, _victim, sw = _left_out()
    line = "NVIDIA_VISIBLE_DEVICES=" + ",".join(R_UUIDS[2:4])
    other = SwarmTask("t-o", "id-other", "n-4090", 1, "running", "shutdown", (line,))
    snap = replace(snap, stopping=[*snap.stopping, other])
    read: list[str] = []

    def unreachable(service_id: str) -> SwarmService:
        read.append(service_id)
        raise SwarmUnavailable("Docker Engine unreachable at unix:///x: timed out")

    sw.service = unreachable  # type: ignore[method-assign]
    plan = make_plan(snap, Config(), swarm=sw)
    assert len(read) == 1
    assert plan.stopping_waits == HELD | {("n-4090", u) for u in R_UUIDS[2:4]}
