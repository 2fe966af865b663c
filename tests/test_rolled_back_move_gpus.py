"""A move between nodes whose roll-back is recorded (its record says ``direction:
back``, or its outcome said rolled back) no longer holds its target: the roll-back
closes the target and nothing of it runs there. Preemption read every recorded move's
target as taken (``record.move_gpus``) until the record went, so a record the daemon
could not drop yet (a failed write, a stop before the last step) kept those GPUs busy:
a preemptor that needed them beside a victim's preempted nothing. The roll-back
reopens the move's source instead, which a snapshot taken before it shows free: that
is what such a record holds. A repin's roll-back record names as target the GPUs it
returns to (``repin.swapped``): those it holds, as before."""

from __future__ import annotations

from dataclasses import replace

from support.forged import RecordingSwarm, sw_node, sw_svc, victim_cluster, victim_move
from support.move_then_preempt import FACTS, D, P, R, holds, snapshot_of

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.placement import MOVE_STATE, gate_key
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.record import MoveState, move_gpus, read_records, record_key
from swarmgpu.swarm.client import SwarmError, SwarmTask


def _moved(direction: str = "forward", said: str = "") -> MoveState:
    """``mover`` moved (or rolling back) from the DGX (D[:2]) to n-4090's R[2:4]."""
    return MoveState(
        id="m1", service="mover", source="n-dgx", source_host="gpu-node-1",
        source_uuids=D[:2], source_milli=(1000, 1000), target="n-4090",
        target_host="gpu-node-2", target_uuids=R[2:4], target_milli=(1000, 1000),
        surge=False, replicas=1, max_replicas=0, started_at=1000.0, trigger="consolidation",
        reason="test", direction=direction, service_id="id-mover", said=said)


def _labels(st: MoveState) -> dict[str, str]:
    return {record_key(P, "id-mover"): st.to_json()}


def test_a_move_in_flight_holds_its_target() -> None:
    assert move_gpus(_labels(_moved()), P) == {("n-4090", u) for u in R[2:4]}


def test_a_recorded_roll_back_holds_its_source_not_its_target() -> None:
    want = {("n-dgx", u) for u in D[:2]}
    assert move_gpus(_labels(_moved("back")), P) == want
    assert move_gpus(_labels(_moved(said="rolled-back")), P) == want
    # the roll-back found its source taken (failed, not reopened): it holds nothing
    assert move_gpus(_labels(_moved("back", said="failed")), P) == frozenset()


def test_a_repin_roll_back_holds_the_gpus_it_returns_to() -> None:
    back = replace(_moved("back"), source="n-4090", source_host="gpu-node-2",
                   source_uuids=R[4:6], target_uuids=R[2:4])
    assert move_gpus(_labels(back), P) == {("n-4090", u) for u in R[2:4]}


def test_a_preemptor_gets_the_gpus_a_rolled_back_move_left_free() -> None:
    """n-4090: small (priority 0) holds R[:2], filler (not preemptible) R[4:], R[2:4]
    free since ``mover``'s roll-back closed them; its record stays (its drop failed).
    high wants 4 RTX 4090s: small is stopped, its 2 GPUs with the 2 free ones."""
    labels = holds("n-4090", {"small": R[:2], "filler": R[4:]})
    nodes = [sw_node("n-mgr", "manager", role="manager"),
             sw_node("n-dgx", "gpu-node-1", holds("n-dgx", {"mover": D[:2]})),
             sw_node("n-4090", "gpu-node-2", labels)]
    small = sw_svc("small", {f"{P}gpus": "2"})
    filler = sw_svc("filler", {f"{P}gpus": "4", f"{P}priority": "50",
                               f"{P}preemptible": "false"})
    mover = sw_svc("mover", {f"{P}gpus": "2", f"{P}priority": "50",
                             f"{P}preemptible": "false"})
    high = sw_svc("high", {f"{P}gpus": "4", f"{P}gpu-product": "*RTX 4090*",
                           f"{P}priority": "100"})
    tasks = [SwarmTask("t-small", small.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-filler", filler.id, "n-4090", 1, "running", "running", ()),
             SwarmTask("t-mover", mover.id, "n-dgx", 1, "running", "running", ()),
             SwarmTask("t-high", high.id, "", 1, "pending", "running", ())]
    sw = RecordingSwarm(nodes, [small, filler, mover, high], tasks,
                        swarm_labels=_labels(_moved("back", said="rolled-back")))
    snap = snapshot_of(sw)
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    done = Preempter(cfg).cycle(sw, snap, make_plan(snap, cfg), FACTS,  # type: ignore[arg-type]
                                now=5000.0)
    assert [(p.service, [v.service for v in p.victims]) for p in done] == [
        ("high", ["small"])]


def test_a_roll_back_is_recorded_before_its_gates_move_on_every_path() -> None:
    """A move whose service lost its move label (a re-deploy) is rolled back by
    ``recover``, which recorded nothing: its gates moved (the target closed) while the
    record still said forward, and a spec write that then failed left that record, so
    the closed target read busy until the next cycle's try. Now every roll-back records
    ``back`` first, as the timeout's always did."""
    sw, now = victim_cluster({}), [1000.0]
    rb = RebalanceConfig(dry_run=False, move_timeout_s=120.0)
    m = Mover(sw, rb, prefix=P, dry_run=False, clock=lambda: now[0])  # type: ignore[arg-type]
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    target = victim_move().target_uuids
    assert sw.node("n-4090").labels[gate_key(P, "victim")] == "true"  # step 2 made
    victim = sw.service("id-victim")
    sw._services["id-victim"] = sw_svc("victim", {k: v for k, v in victim.labels.items()
                                                  if k != P + MOVE_STATE})  # re-deployed

    def refused(*_: object, **__: object) -> bool:
        raise SwarmError("service update: 500 Server Error")

    sw.update_service_spec = refused  # type: ignore[method-assign]
    now[0] += 5.0
    m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())
    assert gate_key(P, "victim") not in sw.node("n-4090").labels  # target closed
    (st,) = read_records(sw.swarm_labels(), P).values()  # its end's write failed
    assert st.direction == "back"
    assert not {("n-4090", u) for u in target} & move_gpus(sw.swarm_labels(), P)
