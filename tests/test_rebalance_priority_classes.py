"""The rebalancer reads a service's labels as placement reads them: a
``swarmgpu.priority`` naming a class of the config's ``preemption.priority_classes``
(``gold`` here) is a valid request to its policies, the health evacuation and the
mover's admission too. Read with the built-in classes only, it was "no valid GPU
request": never moved, not even off a failed GPU (the health policy told the operator
to fix a label placement had read fine). Pure: ``plan_moves`` and ``admit``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.defrag_cluster import RTX, defrag_cluster
from support.forged import (
    T_UUID,
    RecordingSwarm,
    repin_move,
    snapshot,
    victim_cluster,
    victim_move,
)
from support.health import F1, F2, U2, mark, setup
from support.rebalance import CFG, P, observed
from support.rebalance import service as rebalance_service

from swarmgpu.core.config import (
    Config,
    PlacementConfig,
    PreemptionConfig,
    RebalanceConfig,
    parse_priority_classes,
)
from swarmgpu.manager.placement import read_ledger
from swarmgpu.manager.rebalance.admission import admit
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.mover import Mover
from swarmgpu.manager.rebalance.moves import HealthInputs, Move
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.policies.health import request_problem
from swarmgpu.manager.services.overshare import Restarter, ServiceUse
from swarmgpu.manager.services.requests import RequestError

CLASSES = parse_priority_classes("gold=500,batch=0")  # as the config gives them
GOLD = {f"{P}priority": "gold"}


def test_a_holder_of_a_failed_gpu_of_a_configured_class_is_evacuated() -> None:
    nodes, svcs, tasks = setup({"a": [U2[0]]}, svc_labels={"a": GOLD})
    inp = Inputs(nodes=nodes, services=svcs, tasks=tasks,
                 facts={"n1": F1, "n2": mark(F2, failed=[0])}, ledger=read_ledger(nodes, P),
                 gpus={}, node_signals={}, cfg=replace(CFG, dry_run=True), now=1000.0,
                 prefix=P, classes=CLASSES)
    p = plan_moves(inp, HealthInputs(left=2))
    assert [(m.service, m.source_node, m.target_node) for m in p.moves] == [("a", "n2", "n1")]
    assert Context.build(inp).requests["a"].priority == 500


def test_the_health_policy_names_only_a_label_placement_cannot_read() -> None:
    _, svcs, _ = setup({"a": [U2[0]]}, svc_labels={"a": GOLD})
    said = request_problem(svcs[0], P, CLASSES)
    assert "cannot be read" not in said, said
    wrong = replace(svcs[0], labels={**svcs[0].labels, f"{P}priority": "platinum"})
    assert "its GPU request cannot be read" in request_problem(wrong, P, CLASSES)


def _inputs() -> Inputs:
    """The defrag cluster (a2..a5 on GPU 0 of gpu-node-2..5, p pending for two RTX
    4090s), every service labelled with the configured class ``gold``."""
    pending = [rebalance_service("p", {f"{P}gpus": "2", **RTX})]
    nodes, svcs, tasks, facts = defrag_cluster(pending)
    svcs = [replace(s, labels={**s.labels, **GOLD}) for s in svcs]
    return observed(nodes, svcs, tasks, facts, classes=CLASSES)


def test_a_move_of_a_service_of_a_configured_class_is_proposed_and_admitted() -> None:
    inp = _inputs()
    moves = plan_moves(inp).moves
    assert moves and moves[0].service == "a2", [m.service for m in moves]
    ok, refused = admit(moves[:1], (), {s.name: s for s in inp.services}, inp.tasks,
                        inp.ledger, CFG, P, 12.0, classes=CLASSES)
    assert [m.service for m in ok] == ["a2"], refused
    assert isinstance(Context.build(replace(inp, classes=None)).requests.get("a2"),
                      type(None) | RequestError)  # the built-in classes have no gold


@pytest.mark.parametrize("move", [victim_move(), repin_move()], ids=["between-nodes", "repin"])
def test_the_mover_starts_a_move_of_a_service_of_a_configured_class(move: Move) -> None:
    """The start's own fresh reads (``startchecks.move_refusal``, ``Repin``) too."""
    base = victim_cluster({})
    svcs = [replace(s, labels={**s.labels, **GOLD}) for s in base.services()]
    cfg = RebalanceConfig(dry_run=False, max_moves_per_cycle=9, max_moves_per_node=9)

    def start(classes: dict[str, int] | None) -> str | None:
        sw = RecordingSwarm(base.nodes(), svcs, base.tasks())
        mover = Mover(sw, cfg, prefix=P, dry_run=False,  # type: ignore[arg-type]
                      clock=lambda: 1000.0, classes=classes)
        got = mover.start(move, sw.service(move.service_id))
        return None if got.ok else got.why

    assert start(CLASSES) is None
    assert start(None) == "no valid GPU request"  # the built-in classes: no gold


def test_a_share_over_its_size_of_a_configured_class_is_restarted(tmp_path: Path) -> None:
    """The over-share restart reads the class too: read as no request, a label of a class
    the config names kept a share over its size running on its neighbours' memory."""
    base = victim_cluster({})
    svcs = [replace(s, labels={**s.labels, **GOLD}) for s in base.services()]
    tasks = [replace(t, container_id="c" * 64) if t.id == "t-third" else t
             for t in base.tasks()]
    sw = RecordingSwarm(base.nodes(), svcs, tasks, base.swarm_labels())
    over = ServiceUse("third", "n-4090", "gpu-node-2", 0, T_UUID, 30000, 20000, 1000,
                      ("t-third",), (), ("c" * 12,))
    cfg = Config(state_dir=str(tmp_path), dry_run=False,
                 placement=PlacementConfig(overshare="restart"),
                 preemption=PreemptionConfig(priority_classes="gold=500,batch=0"))
    snap = snapshot(sw.nodes(), sw.services(), sw.tasks())
    assert Restarter(sw, cfg, wait_s=0.0).run([over], snap) == 1  # type: ignore[arg-type]
