"""An upgrade from a release that kept a move in its service's label alone (293896d,
before the move record on the swarm object) with a make-before-break move in flight:
the new daemon finds a move label with no record, reports it and removes it, and the
surge (replicas + 1, MaxReplicas 1) goes with it when swarmgpu's own ledger holds what
the label names and Swarm's PreviousSpec shows the update that made that surge. Before,
only the label went: the service ran one replica more for good. A label in that format is
anyone's text: one added later undoes nothing Swarm does not show it brought.
Pure, over the recording Swarm stand-in (tests/support/forged.py): victim moves from
gpu-node-1 to gpu-node-2."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from loguru import logger
from support.forged import V_UUID, P, RecordingSwarm, victim_cluster, victim_move

from swarmgpu.core.config import RebalanceConfig
from swarmgpu.manager.placement import MOVE_STATE, assign_key
from swarmgpu.manager.rebalance.mover import Mover, MoveState, read_records, record_key
from swarmgpu.swarm.client import service_from_api

CFG = RebalanceConfig(dry_run=False, move_timeout_s=120.0, make_before_break=True)
NEWER = ("service_id", "source_share", "target_share", "said")  # fields added since


def _as_the_old_release_left_it(sw: RecordingSwarm, sid: str) -> None:
    """The move this tree started, as 293896d kept it: no record, a label without the
    fields added since."""
    (st,) = read_records(sw.swarm_labels(), P).values()
    sw._swarm_labels.pop(record_key(P, sid))
    old = {k: v for k, v in json.loads(st.to_json()).items() if k not in NEWER}
    s = sw.service(sid)
    spec: dict[str, Any] = json.loads(json.dumps(dict(s.spec)))
    spec["Labels"][P + MOVE_STATE] = json.dumps(old)
    # (one write made the label and the surge then: Swarm's PreviousSpec is the spec
    # before the move, as this tree's start left it)
    sw._services[sid] = service_from_api({"ID": sid, "Spec": spec,
                                          "Version": {"Index": s.version + 1},
                                          "PreviousSpec": s.previous_spec})


def _started() -> RecordingSwarm:
    sw, now = victim_cluster({}), [1000.0]
    m = Mover(sw, CFG, prefix=P, dry_run=False,  # type: ignore[arg-type]
              clock=lambda: now[0])
    m.run_cycle([victim_move()], sw.nodes(), sw.services(), sw.tasks())
    s = sw.service("id-victim")
    assert s.replicas == 2 and s.max_replicas_per_node == 1  # the surge
    _as_the_old_release_left_it(sw, "id-victim")
    return sw


def _new_daemon(sw: RecordingSwarm) -> None:
    m = Mover(sw, CFG, prefix=P, dry_run=False,  # type: ignore[arg-type]
              clock=lambda: 2000.0)
    for _ in range(2):
        m.run_cycle([], sw.nodes(), sw.services(), sw.tasks())


def test_an_old_releases_move_in_flight_leaves_no_surge() -> None:
    sw = _started()
    _new_daemon(sw)
    s = sw.service("id-victim")
    assert P + MOVE_STATE not in s.labels
    assert s.replicas == 1 and not s.max_replicas_per_node


def test_a_label_naming_no_holding_of_the_ledger_scales_nothing() -> None:
    """The label is the service's own text: with no ledger entry of what it names (a
    stack's copy of an old label), only the label goes."""
    sw = _started()
    for n in sw.nodes():
        labels = {k: v for k, v in n.labels.items() if k != assign_key(P, "victim")}
        sw._nodes[n.id] = replace(n, labels=labels)
    _new_daemon(sw)
    s = sw.service("id-victim")
    assert P + MOVE_STATE not in s.labels
    assert s.replicas == 2 and s.max_replicas_per_node == 1


def _old_format_label(replicas: int, max_replicas: int) -> str:
    """A label in 293896d's format naming the victim's real holding (its ledger entry on
    gpu-node-1) as a make-before-break move's source: anyone who may label the service
    can write it."""
    st = MoveState(id="oldformat001", service="victim", source="n-dgx",
                   source_host="gpu-node-1", source_uuids=(V_UUID,), source_milli=(1000,),
                   target="n-4090", target_host="gpu-node-2", target_uuids=("GPU-x",),
                   target_milli=(1000,), surge=True, replicas=replicas,
                   max_replicas=max_replicas, started_at=1000.0, trigger="hotspot",
                   reason="forged")
    return json.dumps({k: v for k, v in json.loads(st.to_json()).items() if k not in NEWER})


def _scaled_then_labelled(sw: RecordingSwarm, label: str) -> None:
    """The operator scaled the victim to 2, one per node (``docker service update
    --replicas 2 --replicas-max-per-node 1``); then its owner added ``label``
    (``--label-add``): Swarm's PreviousSpec is the operator's spec."""
    s = sw.service("id-victim")
    spec: dict[str, Any] = json.loads(json.dumps(dict(s.spec)))
    spec["Mode"]["Replicated"]["Replicas"] = 2
    spec["TaskTemplate"]["Placement"]["MaxReplicas"] = 1
    operators = json.loads(json.dumps(spec))
    spec["Labels"][P + MOVE_STATE] = label
    sw._services["id-victim"] = service_from_api({
        "ID": "id-victim", "Spec": spec, "Version": {"Index": s.version + 2},
        "PreviousSpec": operators})


def test_a_forged_old_format_label_undoes_no_one_elses_scale_or_max_replicas() -> None:
    """Before, the label's word alone (with the owner's own ledger entry) had the daemon
    scale the service down by one and write the label's MaxReplicas (here: removed),
    undoing the operator's settings. Swarm's PreviousSpec shows the update that brought
    the label changed neither: only the label goes, said naming the service and label."""
    sw = victim_cluster({})
    _scaled_then_labelled(sw, _old_format_label(replicas=1, max_replicas=0))
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m.record["message"])), level="WARNING")
    try:
        _new_daemon(sw)
    finally:
        logger.remove(sink)
    s = sw.service("id-victim")
    assert P + MOVE_STATE not in s.labels
    assert s.replicas == 2 and s.max_replicas_per_node == 1
    (said,) = [ln for ln in lines if "PreviousSpec" in ln]
    assert "victim" in said and P + MOVE_STATE in said


def test_an_old_format_label_that_came_with_its_surge_is_undone_as_swarm_recorded() -> None:
    """The label and the surge in one update, as 293896d wrote them (here by the owner:
    Swarm cannot tell who): undone to the spec before that update, which is all the undo
    ever writes, whoever made it."""
    sw = victim_cluster({})
    s = sw.service("id-victim")
    spec: dict[str, Any] = json.loads(json.dumps(dict(s.spec)))
    before = json.loads(json.dumps(spec))
    spec["Mode"]["Replicated"]["Replicas"] = 2
    spec["TaskTemplate"]["Placement"]["MaxReplicas"] = 1
    spec["Labels"][P + MOVE_STATE] = _old_format_label(replicas=1, max_replicas=0)
    sw._services["id-victim"] = service_from_api({
        "ID": "id-victim", "Spec": spec, "Version": {"Index": s.version + 1},
        "PreviousSpec": before})
    _new_daemon(sw)
    s = sw.service("id-victim")
    assert P + MOVE_STATE not in s.labels
    assert s.replicas == 1 and not s.max_replicas_per_node
