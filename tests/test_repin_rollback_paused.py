"""A repin whose old task Swarm still wants on its node past ``move_timeout_s`` (its gate
closed at step 2, the old task not let go: its stop grace, an enforcer that has not
acted), then its node paused by the operator (``repin.py``). That task runs with the
repin's source GPUs. Before: a roll-back began (its record's GPU sets swapped, its
source the forward's target), closed the gate on the old GPUs, and once the node was
paused ``_paused`` handed the service back on the roll-back's *source*: the ledger and
device map named the new GPU, the gate open, while the running task used the old one
(which the ledger then called free: placement could give it out). Now a repin whose
old task Swarm still wants at its timeout ends at once on the GPUs that task has, as
its hold limit's end does; no roll-back is in flight with that task on the node. Over
the recording Swarm stand-in (tests/support/forged.py): third repins from RTX 4090 GPU 0
to GPU 2."""

from __future__ import annotations

import dataclasses

from support.forged import T_UUID, P, outcomes_of_a_cycle, repin_gate_closed

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, assign_key, devices_key, gate_key
from swarmgpu.manager.rebalance.mover import read_records
from swarmgpu.manager.rebalance.moves import Outcome

RB = RebalanceConfig(dry_run=False, move_timeout_s=120.0)


def test_a_repin_whose_old_task_stays_then_its_node_paused_ends_on_the_old_gpus() -> None:
    sw, now = repin_gate_closed(RB)  # step 2: the ledger on the new GPU, the gate closed
    # Swarm has not let t-third go (still desired running, on GPU 0) by the timeout.
    now[0] += RB.move_timeout_s + 1
    said = outcomes_of_a_cycle(sw, RB, now)
    # then the operator pauses gpu-node-2: its enforcer stops nothing there
    sw._nodes["n-4090"] = dataclasses.replace(sw._nodes["n-4090"], availability="pause")
    for _ in range(2):
        now[0] += 1
        said += outcomes_of_a_cycle(sw, RB, now)
    labels = sw.node("n-4090").labels
    assert labels[assign_key(P, "third")] == T_UUID, labels  # the GPU t-third uses
    assert labels[gate_key(P, "third")] == "true"
    svc = sw.service("id-third").labels
    assert svc[devices_key(P, "n-4090")] == T_UUID and P + MOVE_STATE not in svc
    assert read_records(sw.swarm_labels(), P) == {}
    assert [t.id for t in sw.tasks() if t.node_id == "n-4090"] == ["t-third"]
    ((outcome, detail),) = said
    assert outcome is Outcome.FAILED and T_UUID in detail and "still" in detail, detail
