"""The rebalancer plans on the ledger placement's writes of this cycle left, as they
landed (``PlacementPlan.landed``, ``cycle.rebalance.ledger_after``), not as planned.
Pure: placement's writer (``apply_plan``) over a recording stand-in for Swarm.

- A release whose node write failed leaves its GPUs taken: no move is proposed onto them
  (before, the move was proposed: refused when the mover started it, or said as a move
  by a dry-run mover, which reads nothing before it says so).
- A release held back (its service cannot be read) leaves its GPUs taken.
- A release that landed stays landed when its service's spec write fails after it (before,
  the ledger showed the holding again).
- A ledger entry whose write failed may have landed: its GPUs stay taken.
- In dry-run nothing is written, and the rebalancer plans on what the plan says would be
  (its log's "would set ... remove ..."), as before.
- A ledger entry placement gave out on a node where a release's write failed is not
  written (nor its service's device map): it may name the GPUs the release still holds.
- A GPU's reading is split among the holders it was read under (the snapshot's ledger,
  ``Inputs.measured``): a share placed on that GPU in this cycle takes none of it
  (before, a hot GPU's one busy holder was judged to carry half its load, and moved
  onto a GPU it then made hot).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from support.forged import NodeWritesFail, sw_svc
from support.rebalance import CFG, FACTS, U2, P, cluster, hot_cycle

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.placement import apply_plan
from swarmgpu.manager.placement import (
    Holding,
    PlacementPlan,
    assign_key,
    gate_key,
    read_ledger,
)
from swarmgpu.manager.placement.records import ServicePlan, SpecWrites, Status
from swarmgpu.swarm.client import SwarmNode, SwarmService

WHOLE = tuple(g.uuid for g in FACTS["n1"].gpus if not g.mig_enabled)
Q_ON_N1 = Holding("q", "n1", WHOLE, (1000,) * len(WHOLE))


def _swarm(q_live: bool = False, q: bool = True,
           also: Sequence[SwarmService] = ()) -> NodeWritesFail:
    """The support cluster (a and b share a GPU of gpu-node-2), with q holding every
    whole GPU of gpu-node-1 (unless not ``q``; q a live service when ``q_live``, else
    gone)."""
    nodes, svcs, tasks = cluster()
    n1 = dataclasses.replace(nodes[0], labels={assign_key(P, "q"): Q_ON_N1.label_value(),
                                               gate_key(P, "q"): "true"} if q else {})
    names = [s.name for s in svcs] + (["q"] if q_live else [])
    return NodeWritesFail([n1, nodes[1]], [*(sw_svc(n, {f"{P}gpu-fraction": "0.5"})
                                             for n in names), *also], tasks)


def _release_q() -> PlacementPlan:
    """q's ledger entry and gate on gpu-node-1 go (q gone, or no longer annotated)."""
    return PlacementPlan(node_remove={"n1": [assign_key(P, "q"), gate_key(P, "q")]},
                         released=["q"])


def _rebalance(tmp_path: Path, sw: NodeWritesFail, before: list[SwarmNode],
               plan: PlacementPlan, *, dry_run: bool = False) -> list[tuple[str, str]]:
    """The daemon's rebalance step after placement (hotspot only, rebalance dry-run):
    twelve cycles with a hot GPU 0 on gpu-node-2, then one with ``plan`` applied;
    ``before``: the snapshot's nodes (taken before placement wrote). The moves proposed
    in that last cycle."""
    from swarmgpu.manager.cycle.rebalance import Rebalancer
    from swarmgpu.manager.daemon import Daemon

    cfg = Config(state_dir=str(tmp_path), dry_run=dry_run, rebalance=dataclasses.replace(
        CFG, dry_run=True, trust_unauthenticated_metrics=True, policies="hotspot"))
    rb = Rebalancer(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]

    def cycle(at: float, placement: PlacementPlan) -> list[tuple[str, str]]:
        return hot_cycle(rb, sw, before, at, placement)

    for t in range(12):
        assert cycle(float(t), PlacementPlan()) == []  # gpu-node-1 is q's
    return cycle(12.0, plan)


def test_a_release_that_landed_frees_its_gpus(tmp_path: Path) -> None:
    sw = _swarm()
    before = sw.nodes()
    plan = _release_q()
    assert apply_plan(sw, plan, dry_run=False, services=sw.services(), prefix=P) == 1
    assert _rebalance(tmp_path, sw, before, plan) == [("a", "gpu-node-1")]


def test_a_release_whose_write_failed_leaves_its_gpus_taken(tmp_path: Path) -> None:
    """gpu-node-1's write failed: q still holds its GPUs, no move goes there (before, a's
    move onto q's GPUs was proposed, and the dry-run mover said it as a move)."""
    sw = _swarm()
    sw.fail_nodes = frozenset({"n1"})
    before = sw.nodes()
    plan = _release_q()
    assert apply_plan(sw, plan, dry_run=False, services=sw.services(), prefix=P) == 0
    assert read_ledger(sw.nodes(), P)["q"] == {"n1": Q_ON_N1}  # as Swarm has it
    assert _rebalance(tmp_path, sw, before, plan) == []


def test_a_release_held_back_leaves_its_gpus_taken(tmp_path: Path) -> None:
    """q is live and cannot be read before its release is written (``cycle.releases``):
    nothing of its plan is written, its GPUs are no target."""
    sw = _swarm(q_live=True)
    sw.unreadable = frozenset({"id-q"})
    before = sw.nodes()
    plan = _release_q()
    assert apply_plan(sw, plan, dry_run=False, services=sw.services(), prefix=P) == 0
    assert _rebalance(tmp_path, sw, before, plan) == []


def test_in_dry_run_the_rebalancer_plans_on_what_the_plan_would_write(
        tmp_path: Path) -> None:
    """Top-level dry-run: nothing is written; the rebalancer (dry-run too) plans on the
    plan's writes as its log says they would land: q's release makes room."""
    sw = _swarm()
    before = sw.nodes()
    plan = _release_q()
    assert apply_plan(sw, plan, dry_run=True, services=sw.services(), prefix=P) == 0
    assert sw.calls == []
    assert _rebalance(tmp_path, sw, before, plan, dry_run=True) == [("a", "gpu-node-1")]


def test_a_plan_not_written_changes_nothing(tmp_path: Path) -> None:
    """A plan the writer never ran over (placement's step raised before it): nothing of
    it landed, q's GPUs stay taken."""
    sw = _swarm()
    before = sw.nodes()
    assert _rebalance(tmp_path, sw, before, _release_q()) == []


def _replace_a(sw: NodeWritesFail) -> PlacementPlan:
    """a re-placed from gpu-node-2 to gpu-node-1's GPU 0 (q not there): its release on
    gpu-node-2, its spec write (the new device map), its ledger entry and gate on
    gpu-node-1."""
    a = next(s for s in sw.services() if s.name == "a")
    new = Holding("a", "n1", (WHOLE[0],), (500,))
    sp = ServicePlan("a", a.id, None, "0.5", Status.PLACED, "Bound",
                     writes=SpecWrites(service_labels_set={f"{P}devices.n1": WHOLE[0]}))
    return PlacementPlan(
        services=[sp], node_remove={"n2": [assign_key(P, "a"), gate_key(P, "a")]},
        node_set={"n1": {assign_key(P, "a"): new.label_value(), gate_key(P, "a"): "true"}})


def test_a_release_that_landed_stays_landed_when_the_spec_write_fails() -> None:
    """a's release on gpu-node-2 landed, then its spec write failed (its ledger entry on
    gpu-node-1 is not written): the ledger has a nowhere, as Swarm has it (before, the
    plan's release was taken out with the rest, and a held gpu-node-2's GPU again)."""
    from swarmgpu.manager.cycle.rebalance import ledger_after

    sw = _swarm(q=False)
    sw.fail_specs = frozenset({"id-a"})
    before = sw.nodes()
    plan = _replace_a(sw)
    assert apply_plan(sw, plan, dry_run=False, services=sw.services(), prefix=P) == 1
    after = ledger_after(before, plan, P, read_ledger(before, P))
    assert after == read_ledger(sw.nodes(), P)
    assert "a" not in after


def test_a_ledger_entry_whose_write_failed_counts_as_taken() -> None:
    """gpu-node-1's write (a's new ledger entry) failed, its outcome unknown: its GPU may
    be a's now, so it is nobody else's target; the release on gpu-node-2 landed."""
    from swarmgpu.manager.cycle.rebalance import ledger_after

    sw = _swarm(q=False)
    sw.fail_nodes = frozenset({"n1"})
    before = sw.nodes()
    plan = _replace_a(sw)
    apply_plan(sw, plan, dry_run=False, services=sw.services(), prefix=P)
    after = ledger_after(before, plan, P, read_ledger(before, P))
    assert after["a"] == {"n1": Holding("a", "n1", (WHOLE[0],), (500,))}
    assert after["b"] == {"n2": Holding("b", "n2", (U2[0],), (500,))}


def _hot_alone(measured: bool) -> list[tuple[str, str]]:
    """a holds half of gpu-node-2's GPU 0, alone, and makes it hot (97%); placement gave
    the other half to c in this cycle (c has no task yet). The moves proposed, with the
    snapshot's ledger as the one the metrics were read under (``measured``) or not."""
    from support.rebalance import feed, node, running, service

    from swarmgpu.manager.rebalance.context import Inputs
    from swarmgpu.manager.rebalance.planner import plan_moves
    from swarmgpu.manager.rebalance.signals import Signals

    half = f"{P}gpu-fraction"
    n2 = {assign_key(P, "a"): f"{U2[0]}@500", gate_key(P, "a"): "true"}
    nodes = [node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)]
    svcs = [service("a", {half: "0.5"}), service("c", {half: "0.5"})]
    tasks = [running("a", "n2")]
    before = read_ledger(nodes, P)
    after = {**before, "c": {"n2": Holding("c", "n2", (U2[0],), (500,))}}
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {t: {0: 97.0} for t in times})
    prop = plan_moves(Inputs(nodes, svcs, tasks, FACTS, after, sig.gpus, sig.nodes, CFG,
                             times[-1], (), P, measured=before if measured else None))
    return [(m.service, m.target_host) for m in prop.moves]


def test_a_share_placed_since_the_reading_takes_none_of_its_load() -> None:
    """a carries all of its GPU's 97%: moved, it makes any target at 5% hot (102%), so it
    stays (before, the reading was split with c, placed after it: a was judged to carry
    48 points, and moved onto a GPU it then made hot)."""
    assert _hot_alone(measured=False) == [("a", "gpu-node-1")]  # the reading split with c
    assert _hot_alone(measured=True) == []


def test_the_cycle_splits_a_reading_among_the_holders_it_was_made_under(
        tmp_path: Path) -> None:
    """The daemon's step: placement gives c the other half of a's hot GPU in this cycle;
    a still carries all of the 97%, so it is not moved onto gpu-node-1's idle GPU, which
    it would make hot (before: moved, judged to carry half)."""
    from support.rebalance import node, running

    n2 = {assign_key(P, "a"): f"{U2[0]}@500", gate_key(P, "a"): "true"}
    sw = NodeWritesFail([node("n1", "gpu-node-1", {}), node("n2", "gpu-node-2", n2)],
                        [sw_svc(n, {f"{P}gpu-fraction": "0.5"}) for n in ("a", "c")],
                        [running("a", "n2")])
    before = sw.nodes()
    plan = PlacementPlan(node_set={"n2": {assign_key(P, "c"): f"{U2[0]}@500",
                                          gate_key(P, "c"): "true"}})
    assert apply_plan(sw, plan, dry_run=False, services=sw.services(), prefix=P) == 1
    assert _rebalance(tmp_path, sw, before, plan) == []


def test_no_ledger_entry_is_written_where_a_release_did_not_land() -> None:
    """q's release on gpu-node-1 failed (its first write there); r was given q's GPU 0
    there: neither r's ledger entry and gate nor its device map is written (before, both
    were: GPU 0 had two holders, q's entry still standing)."""
    from swarmgpu.manager.cycle.rebalance import ledger_after

    sw = _swarm(also=[sw_svc("r", {f"{P}gpus": "1"})])
    sw.fail_once = frozenset({"n1"})
    before = sw.nodes()
    new = Holding("r", "n1", (WHOLE[0],), (1000,))
    sp = ServicePlan("r", "id-r", None, "1", Status.PLACED, "Bound",
                     writes=SpecWrites(service_labels_set={f"{P}devices.n1": WHOLE[0]}))
    plan = _release_q()
    plan.services.append(sp)
    plan.node_set["n1"] = {assign_key(P, "r"): new.label_value(), gate_key(P, "r"): "true"}
    assert apply_plan(sw, plan, dry_run=False, services=sw.services(), prefix=P) == 0
    assert sw.calls == []
    assert read_ledger(sw.nodes(), P) == read_ledger(before, P)
    assert ledger_after(before, plan, P, read_ledger(before, P)) == read_ledger(before, P)
