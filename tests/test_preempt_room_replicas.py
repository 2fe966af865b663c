"""A packed holder's replicas Swarm has put on its node but not started yet (task state
assigned, accepted, preparing or starting; desired running) reserve their CPU there in
preemption's ``Room``, as Swarm's ResourceFilter counts them: ``Room.of`` counts each
task Swarm means to run (``tasks.meant_to_run``: by desired state, whatever its state),
not its running ones alone. So a preemptor is not sent into the CPU those replicas will
take, and the holder's stop frees all of it. Pure: ``Room.of`` over forged services."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from support.forged import reserving, sw_node, sw_svc

from swarmgpu.manager.placement import Holding
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.swarm.client import SwarmTask

P = "swarmgpu."


@dataclass(frozen=True)
class Victim:
    """A victim as ``Room`` reads it: its service's name."""

    service: str


@pytest.mark.parametrize("state", ["assigned", "accepted", "preparing", "starting"])
def test_a_packed_holders_replicas_not_yet_running_reserve_their_cpu(state: str) -> None:
    """n-a (4000 CPU milli): packed (1000 a task) holds 3 replicas; one runs, two are
    ``state``. 1000 is left: high (1500) fits only once packed goes, which frees 3000."""
    node = replace(sw_node("n-a", "gpu-node-1"), cpu_milli=4000)
    packed = reserving(sw_svc("packed", {f"{P}gpus": "1"}, replicas=3), 1000)
    high = reserving(sw_svc("high", {f"{P}gpus": "1", f"{P}priority": "100"}), 1500)
    h = Holding("packed", "n-a", ("G0", "G1", "G2"), (1000,) * 3, slots=(1, 2, 3))
    tasks = [SwarmTask(f"t-{k}", packed.id, "n-a", k, "running" if k == 1 else state,
                       "running", (), cpu_milli=1000) for k in (1, 2, 3)]
    room = Room.of([node], [packed, high], tasks, {"n-a": {"packed": h}})
    assert room.left["n-a"][0] == 1000
    assert room.frees("packed", "n-a") == (3000, 0)
    assert not room.fits(high, "n-a", (), 1)
    assert room.fits(high, "n-a", [Victim("packed")], 1)
