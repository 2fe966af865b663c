"""Preemption's room (``preemptroom.Room``) beside holders not listed: placement keeps
the holding of a service not listed while the list left one out, and what it reserves
is unknown, so its node's whole CPU and memory are counted for it, unless a task that
may be its own runs there (counted then by the task's reservations).

Before, each such holder counted the whole node (two on one node: twice), and any task
of a service not listed on the node was taken for the holder's, even one whose gate
names another service: the holder then counted nothing there. Now the holders not
listed on a node whose tasks do not run there count its whole once; a task of a
service not listed is taken for a holder's only when its gate names that holder, or
names none (then it may be any one's, as before)."""

from __future__ import annotations

from dataclasses import replace

from support.forged import R4090_F, P, reserving, sw_node, sw_svc

from swarmgpu.manager.placement import Holding, gate_constraint
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.swarm.client import SwarmTask

R = tuple(g.uuid for g in R4090_F.gpus)
NODE = replace(sw_node("n-4090", "gpu-node-2"), cpu_milli=8000, memory_mib=16000)


def _holders(*names: str) -> dict[str, dict[str, Holding]]:
    return {"n-4090": {n: Holding(n, "n-4090", R[i:i + 1], (1000,))
                       for i, n in enumerate(names)}}


def _task(sid: str, gate: str = "") -> SwarmTask:
    """A task of service ``sid`` (not listed) running on n-4090, its gate naming ``gate``."""
    return SwarmTask(f"t-{sid}", sid, "n-4090", 1, "running", "running", (),
                     cpu_milli=2000, memory_mib=4000,
                     constraints=(gate_constraint(P, gate),) if gate else ())


def test_two_holders_not_listed_on_one_node_count_its_whole_once() -> None:
    room = Room.of([NODE], [], [], _holders("first", "third"), prefix=P)
    assert room.left["n-4090"] == (0, 0)  # (before: (-8000, -16000), the whole twice)


def test_a_task_whose_gate_names_another_service_is_not_the_holders() -> None:
    """first holds a GPU, not listed, no task of it there; a task of another service not
    listed (its gate names other) runs there: first's whole is counted beside it, and a
    preemptor reserving one CPU fits nowhere there. Before, first counted nothing: the
    node had 6 CPUs left, and a preemptor was sent where first's task may run."""
    room = Room.of([NODE], [], [_task("id-other", "other")], _holders("first"), prefix=P)
    assert room.left["n-4090"] == (-2000, -4000)
    high = reserving(sw_svc("high", {f"{P}gpus": "1"}), 1000)
    assert not room.fits(high, "n-4090", (), 1)


def test_a_holders_own_task_counts_what_it_reserves() -> None:
    for gate in ("first", ""):  # its gate names it, or names none: it may be first's
        room = Room.of([NODE], [], [_task("id-first", gate)], _holders("first"), prefix=P)
        assert room.left["n-4090"] == (6000, 12000), gate
    # two holders, one task that may be either's: the other's reservation is unknown
    room = Room.of([NODE], [], [_task("id-first")], _holders("first", "third"), prefix=P)
    assert room.left["n-4090"] == (-2000, -4000)
