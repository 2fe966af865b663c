"""``Mover.start`` asks Swarm's filters once more, of the service as it is read just
before the first write: a re-deploy between planning and start (a constraint the
target does not meet, a host-mode port a task there binds) would leave the moved task
pending there until ``move_timeout_s`` rolled the move back. Refused instead, naming
why, and nothing written. Pure, over the recording Swarm stand-in (support/forged.py).
"""

from __future__ import annotations

import copy
from typing import Any

from support.forged import P, RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Outcome

PORT = {"Protocol": "tcp", "TargetPort": 80, "PublishedPort": 8000, "PublishMode": "host"}


def _redeploy(sw: RecordingSwarm, sid: str, edit: Any) -> None:
    """The service's spec as a ``docker stack deploy`` since planning left it."""
    s = sw.service(sid)
    spec = copy.deepcopy(dict(s.spec))
    edit(spec)
    sw.update_service_spec(sid, lambda _cur: spec)


def _start(sw: RecordingSwarm) -> str | None:
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9)
    mover = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: 1000.0)
    got = mover.start(victim_move(), sw.service("id-victim"))
    if got.ok:
        return None
    assert [r.outcome for r in mover.recent] == [Outcome.REFUSED]
    assert read_records(sw.swarm_labels(), P) == {}
    return got.why


def test_a_move_still_allowed_starts() -> None:
    assert _start(victim_cluster({})) is None


def test_a_constraint_deployed_since_planning_refuses_the_start() -> None:
    sw = victim_cluster({})
    _redeploy(sw, "id-victim", lambda spec: spec["TaskTemplate"]["Placement"][
        "Constraints"].append("node.hostname==gpu-node-1"))
    why = _start(sw)
    assert why is not None and "gpu-node-2 does not satisfy victim's constraints" in why, why


def test_a_host_port_deployed_since_planning_refuses_the_start() -> None:
    """third's task on the target binds 8000 in host mode; victim now publishes it."""
    sw = victim_cluster({})
    _redeploy(sw, "id-third", lambda spec: spec.setdefault("EndpointSpec", {"Ports": [PORT]}))
    assert _start(sw) is None  # third alone publishing it: no clash
    sw = victim_cluster({})
    for sid in ("id-third", "id-victim"):
        _redeploy(sw, sid, lambda spec: spec.setdefault("EndpointSpec", {"Ports": [PORT]}))
    why = _start(sw)
    assert why is not None and "host-mode port 8000/tcp is taken by a task of third" in why, why




def test_a_service_whose_plan_failed_this_cycle_is_refused_at_start() -> None:
    """A caller that asks for a move of a service whose plan this cycle is failed
    (``placement.isolate``) gets it refused at the mover, with the plan named, and
    nothing written: its task would restart on a plan no one could make."""
    sw = victim_cluster({})
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9)
    mover = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: 1000.0)
    before = copy.deepcopy(dict(sw.service("id-victim").spec))
    got = mover.start(victim_move(), sw.service("id-victim"), frozenset({"victim"}))
    assert not got.ok and "plan status failed" in got.why, got.why
    assert [r.outcome for r in mover.recent] == [Outcome.REFUSED]
    assert read_records(sw.swarm_labels(), P) == {}
    assert dict(sw.service("id-victim").spec) == before


def test_a_target_gpu_a_stopping_task_still_uses_refuses_the_start() -> None:
    """The ledger shows the target GPU free, but a task Swarm is stopping there still
    runs on it (``plan.stopping_held``, handed to the mover as ``held``): the start is
    refused, naming it, and nothing is written. A GPU held for the moved service itself
    refuses nothing."""
    target = victim_move().target_uuids[0]
    sw = victim_cluster({})
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9)
    mover = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: 1000.0)
    mover.held = {("n-4090", target): ("tasks stopping on n-4090", 2**62)}
    before = copy.deepcopy(dict(sw.service("id-victim").spec))
    got = mover.start(victim_move(), sw.service("id-victim"))
    assert not got.ok and f"{target} on gpu-node-2 is held for tasks stopping" in got.why, got.why
    assert read_records(sw.swarm_labels(), P) == {}
    assert dict(sw.service("id-victim").spec) == before
    sw = victim_cluster({})
    mover = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                  clock=lambda: 1000.0)
    mover.held = {("n-4090", target): ("victim", 5)}
    assert mover.start(victim_move(), sw.service("id-victim")).ok
