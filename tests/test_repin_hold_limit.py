"""A repin past its hold limit (``repin.py``: its end held while a task of its service
waits for a node beside a running one, at most ``move_timeout_s`` past its timeout) ends
where it is, not rolled back (a roll-back's spec write would leave the waiting task of
an older revision for good). Where its gate is closed and Swarm still wants the old
task on the node (made before the gate closed: the old GPUs' devices; a paused node,
whose tasks the constraint enforcer leaves, or one that does not answer), "where it is"
is that task on the old GPUs. Before, the end opened the gate on the ledger's new GPUs:
the old task ran on with the old ones, which the ledger called free (placement could
give them out: two holders on one GPU), and the device map named GPUs it did not use.
Now it ends as a repin on a paused node does: the ledger and device map back on the
GPUs its task has, gate open, its outcome saying so. Over the recording Swarm stand-in
(tests/support/forged.py): third repins from RTX 4090 GPU 0 to GPU 2."""

from __future__ import annotations

import dataclasses

from support.forged import T_UUID, P, outcomes_of_a_cycle, repin_gate_closed, sw_svc

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, assign_key, devices_key, gate_key
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.swarm.client import SwarmTask

RB = RebalanceConfig(dry_run=False, move_timeout_s=120.0)


def test_a_repin_past_its_hold_limit_whose_old_task_runs_on_ends_on_its_old_gpus() -> None:
    sw, now = repin_gate_closed(RB)  # step 2: the ledger on the new GPU, the gate closed
    # The operator pauses gpu-node-2 (its enforcer stops nothing: t-third runs on, on
    # GPU 0) and scales third to 2: the second replica waits for a node, beside it.
    sw._services["id-third"] = sw_svc("third", sw.service("id-third").labels, replicas=2)
    sw._nodes["n-4090"] = dataclasses.replace(sw._nodes["n-4090"], availability="pause")
    sw._tasks.append(SwarmTask("t-third-2", "id-third", "", 2, "pending", "running", ()))
    now[0] += RB.move_timeout_s + 1
    assert outcomes_of_a_cycle(sw, RB, now) == []  # held: its end waits for the waiting task
    now[0] += RB.move_timeout_s
    ((outcome, detail),) = outcomes_of_a_cycle(sw, RB, now)
    assert outcome is Outcome.FAILED, detail
    labels = sw.node("n-4090").labels
    assert labels[assign_key(P, "third")] == T_UUID, labels
    assert labels[gate_key(P, "third")] == "true"
    svc = sw.service("id-third").labels
    assert svc[devices_key(P, "n-4090")] == T_UUID and P + MOVE_STATE not in svc
    assert read_records(sw.swarm_labels(), P) == {}
    assert T_UUID in detail and "still" in detail and "left to placement" in detail, detail
    assert [t.id for t in sw.tasks() if t.node_id == "n-4090"] == ["t-third"]
