"""No rebalancer move lands on GPUs a preemption freed and holds for its preemptor while
it settles (``Inputs.held``, from the daemon's ``Preempter.nominated``): placement and
preemption respected the holds, the rebalancer's policies did not, so a move could take
them from the preemptor. Pure: real facts and metrics pages, ``plan_moves``."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from support.forged import RecordingSwarm, sw_node, sw_svc
from support.health import F2 as HF2
from support.health import U2 as HU2
from support.health import mark, setup
from support.health import plan as health_plan
from support.rebalance import CFG, F1, FACTS, P, cluster, feed, page
from support.rebalance import node as rebalance_node
from support.rebalance import running as rebalance_running
from support.rebalance import service as rebalance_service
from support.rebalance_fragmentation import U1, two_half_used
from support.rebalance_fragmentation import plan as frag_plan

from swarmgpu.core.config import Config, RebalanceConfig, SyncConfig
from swarmgpu.manager.cycle.preempt_step import PreemptStep
from swarmgpu.manager.cycle.rebalance import Rebalancer
from swarmgpu.manager.cycle.session import CycleSession
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import PlacementPlan, Planner, read_ledger
from swarmgpu.manager.placement.nominated import STOPPING_PRIORITY, Nomination
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.manager.rebalance import policies
from swarmgpu.manager.rebalance.context import Context, Inputs
from swarmgpu.manager.rebalance.moves import Move, Trigger
from swarmgpu.manager.rebalance.planner import plan_moves
from swarmgpu.manager.rebalance.scrape import judge
from swarmgpu.manager.rebalance.signals import Signals

WHOLE1 = [g.uuid for g in F1.gpus if not g.mig_enabled]  # gpu-node-1's whole A100s


def _held(nid: str, uuids: list[str]) -> dict[tuple[str, str], tuple[str, int]]:
    """``uuids`` on ``nid`` held for preemptor p (priority 100)."""
    return {(nid, u): ("p", 100) for u in uuids}


def _hot(held: Mapping[tuple[str, str], tuple[str, int]]) -> list[Move]:
    """a and b share gpu-node-2 GPU 0, hot for the whole window: one moves away."""
    nodes, svcs, tasks = cluster()
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {t: {0: 97.0} for t in times})
    return plan_moves(Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P), sig.gpus,
                             sig.nodes, CFG, times[-1], (), P, held=held)).moves


def test_a_hotspot_move_never_lands_on_gpus_held_for_a_preemptor() -> None:
    (m,) = _hot({})
    free = m.target_uuids[0]
    (m,) = _hot(_held("n1", [free]))
    assert m.trigger is Trigger.HOTSPOT and m.target_uuids[0] != free
    left = WHOLE1[-1]
    (m,) = _hot(_held("n1", [u for u in WHOLE1 if u != left]))
    assert m.target_uuids == (left,)
    assert _hot(_held("n1", WHOLE1)) == []  # nowhere else: no move


def test_a_fragmentation_move_never_lands_on_a_gpu_held_for_a_preemptor() -> None:
    (m,) = frag_plan(*two_half_used())
    assert (m.service, m.target_uuids) == ("b", (U1[1],))  # b joins a on gpu-node-1 GPU 1
    assert all(U1[1] not in x.target_uuids
               for x in frag_plan(*two_half_used(), held=_held("n1", [U1[1]])))


def test_a_health_move_never_lands_on_gpus_held_for_a_preemptor() -> None:
    """a's GPU failed; gpu-node-2 is full, so its target is on gpu-node-1, where every
    whole A100 but one is held for p."""
    nodes, svcs, tasks = setup({"a": [HU2[0]]})
    left = WHOLE1[-1]
    p = health_plan(nodes, svcs, tasks, mark(HF2, failed=[0]),
                    held=_held("n1", [u for u in WHOLE1 if u != left]))
    assert [(m.service, m.trigger, m.target_uuids) for m in p.moves] == [
        ("a", Trigger.HEALTH, (left,))]


def test_the_daemon_hands_the_rebalancer_the_gpus_its_preemptions_hold(tmp_path: Path
                                                                       ) -> None:
    """The daemon's steps: the rebalancer reads the preemption step's holds each cycle,
    as placement does (``cycle.wiring``)."""
    sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager")], [], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 rebalance=RebalanceConfig(policies=""))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    steps = daemon_steps(d)
    (rb,) = [s for s in steps if isinstance(s, Rebalancer)]
    (pre,) = [s for s in steps if isinstance(s, PreemptStep)]

    def held(plan: PlacementPlan | None = None) -> dict[tuple[str, str], tuple[str, int]]:
        return rb.held(rb.live_holds({"wide"}), plan)  # (the holds as they are now)

    assert held() == {}
    wide = Preemption("wide", "id-wide", 100, "n-dgx", "gpu-node-1", (),
                      held=tuple(WHOLE1[5:]))
    pre.preempter.took(wide, [], time.monotonic())  # in-memory times: monotonic
    assert held() == {("n-dgx", u): ("wide", 100) for u in WHOLE1[5:]}
    # A victim's GPU placement spared for a hold (its task still stops there) is held as
    # the stopping task's once that hold is not the rebalancer's (it ended since): before,
    # the rebalancer took plan.stopping_held alone, and a move could land on it.
    spared = {("n-dgx", WHOLE1[5]): "wide", ("n-dgx", WHOLE1[0]): "gone"}
    plan = PlacementPlan(stopping_spared=spared, stopping_held={
        k: (who, STOPPING_PRIORITY) for k, who in spared.items()})
    assert held(plan) == {("n-dgx", u): ("wide", 100) for u in WHOLE1[6:]} | {
        ("n-dgx", WHOLE1[5]): ("wide", STOPPING_PRIORITY),
        ("n-dgx", WHOLE1[0]): ("tasks stopping on n-dgx", STOPPING_PRIORITY)}


class _Seen:
    """A policy that keeps the GPUs each pass's inputs hold for preemptors."""

    name = "hotspot"

    def __init__(self) -> None:
        self.held: list[dict[tuple[str, str], tuple[str, int]]] = []

    def propose(self, ctx: Context) -> None:
        self.held.append(dict(ctx.inp.held))


def test_the_rebalancer_no_longer_honours_the_hold_of_a_removed_preemptor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """wide's and tall's preemptions hold GPUs; wide's service is removed. Placement
    filters holds by the snapshot's services, the rebalancer read them all: wide's GPUs
    stayed closed to its moves until the preemption step's next ``keep``. Now a pass
    holds tall's alone."""
    seen = _Seen()
    monkeypatch.setitem(policies.PLUGINS, "hotspot", lambda _rb: seen)
    sw = RecordingSwarm([sw_node("n-mgr", "manager", role="manager")],
                        [sw_svc("tall", {f"{P}gpus": "2", f"{P}priority": "100"})], [])
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 rebalance=RebalanceConfig(policies="hotspot"))
    steps = daemon_steps(Daemon(cfg, swarm=sw))  # type: ignore[arg-type]
    (rb,) = [s for s in steps if isinstance(s, Rebalancer)]
    (pre,) = [s for s in steps if isinstance(s, PreemptStep)]
    for name, gpus in (("wide", WHOLE1[5:]), ("tall", WHOLE1[2:4])):
        pre.preempter.took(Preemption(name, f"id-{name}", 100, "n-dgx", "gpu-node-1", (),
                                      held=tuple(gpus)), [], time.monotonic())
    session = CycleSession(Snapshot(sw.nodes(), sw.services(), sw.tasks(), {},
                                    swarm_labels=sw.swarm_labels(), taken_at=1000.0))
    session.facts, session.scrapes = {}, {}
    session.placement, session.planner = PlacementPlan(), Planner(prefix=P)
    reads: list[int] = []
    nominated = rb.nominated

    def counted() -> Sequence[Nomination]:
        reads.append(1)
        return nominated()

    rb.nominated = counted
    rb.run(session)
    assert seen.held == [{("n-dgx", u): ("tall", 100) for u in WHOLE1[2:4]}]
    assert len(reads) == 1  # one read a cycle, for held and held_shares both (were two)


def _defrag(held: Mapping[tuple[str, str], tuple[str, int]]) -> list[Move]:
    """gpu-node-2: a (1 GPU) on GPU 0; pending p wants all 8 of its GPUs."""
    n2 = {f"{P}assign.a": HU2[0], f"{P}service.a": "true"}
    nodes = [rebalance_node("n1", "gpu-node-1", {}), rebalance_node("n2", "gpu-node-2", n2)]
    svcs = [rebalance_service("a", {f"{P}gpus": "1"}),
            rebalance_service("p", {f"{P}gpus": "8"})]
    tasks = [rebalance_running("a", "n2")]
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    feed(sig, nodes, times, {})
    return [m for m in plan_moves(Inputs(nodes, svcs, tasks, FACTS, read_ledger(nodes, P),
                                         sig.gpus, sig.nodes, CFG, times[-1], ["p"], P,
                                         held=held)).moves
            if m.trigger is Trigger.DEFRAG]


def test_defrag_counts_gpus_held_for_another_preemptor_used_on_the_node_it_frees() -> None:
    """Its last check (the pending request fits on the node the moves free) counted a GPU
    held for another preemptor free: placement does not give it to p, so the move was
    wasted. Held for p itself, it is p's room."""
    assert [m.service for m in _defrag({})] == ["a"]
    assert _defrag({("n2", HU2[1]): ("q", 100)}) == []
    assert [m.service for m in _defrag({("n2", HU2[1]): ("p", 100)})] == ["a"]


def _defrag_many(held: Mapping[tuple[str, str], tuple[str, int]]) -> list[Move]:
    """gpu-node-2..5 (RTX 4090s, 8 each): one 1-GPU holding on GPU 0, GPU 1 ``held``;
    gpu-node-6: two 1-GPU holdings; gpu-node-1: 7 whole A100s free, where moves land.
    Pending p wants 8 GPUs."""
    facts = {"n1": F1}
    for k in range(2, 7):
        facts[f"n{k}"] = replace(HF2, hostname=f"gpu-node-{k}", gpus=tuple(
            replace(g, uuid=f"{g.uuid[:-2]}{k:02d}") for g in HF2.gpus))
    nodes = [rebalance_node("n1", "gpu-node-1", {})]
    svcs = [rebalance_service("p", {f"{P}gpus": "8"})]
    tasks = []
    for k in range(2, 7):
        u = [g.uuid for g in facts[f"n{k}"].gpus]
        mine = [f"a{k}"] if k < 6 else ["b", "c"]
        labels: dict[str, str] = {}
        for i, name in enumerate(mine):
            labels.update({f"{P}assign.{name}": u[i], f"{P}service.{name}": "true"})
            svcs.append(rebalance_service(name, {f"{P}gpus": "1"}))
            tasks.append(replace(rebalance_running(name, f"n{k}"), id=f"t-{name}"))
        nodes.append(rebalance_node(f"n{k}", f"gpu-node-{k}", labels))
    sig = Signals(CFG)
    times = [float(t) for t in range(13)]
    ledger = read_ledger(nodes, P)
    for t in times:
        scr = {n.id: judge(n, "http://x/metrics", page(facts[n.id], {}), t) for n in nodes}
        sig.observe(scr, facts, {n.id: n.hostname for n in nodes}, ledger, t)
    return [m for m in plan_moves(Inputs(nodes, svcs, tasks, facts, ledger, sig.gpus,
                                         sig.nodes, CFG, times[-1], ["p"], P,
                                         held=held)).moves
            if m.trigger is Trigger.DEFRAG]


def test_defrag_searches_without_gpus_held_for_another_preemptor() -> None:
    """Its search counted GPUs held for another preemptor free, so the cheapest plans
    (one move off gpu-node-2..5, each with a GPU held for q) used up every try and the
    workable one (two moves off gpu-node-6) was never tried."""
    heldq = {(f"n{k}", f"{HU2[1][:-2]}{k:02d}"): ("q", 100) for k in range(2, 6)}
    assert sorted(m.service for m in _defrag_many(heldq)) == ["b", "c"]
    assert len(_defrag_many({})) == 1  # unheld, one move off gpu-node-2 is cheapest


def test_defrag_never_moves_the_holder_of_a_live_hold() -> None:
    """a runs, converged, while a hold for it lives on gpu-node-1 (its preemption step
    cut at the cycle's budget before ``keep`` ended the hold). Defrag's movers' room
    holds every preemptor's GPUs from every mover, a's own too: sound only while a
    holder never moves. Before, a moved off gpu-node-2 for p (onto its own held GPU)."""
    assert [m.service for m in _defrag({})] == ["a"]
    assert _defrag({("n1", WHOLE1[0]): ("a", 100)}) == []
    assert [m.service for m in _defrag({("n1", WHOLE1[0]): ("q", 100)})] == ["a"]


def test_a_health_move_still_evacuates_the_holder_of_a_live_hold() -> None:
    """a's GPU failed while a hold for a itself lives on gpu-node-1 (defrag never moves
    such a holder): the health policy moves it all the same, onto its own held GPU."""
    nodes, svcs, tasks = setup({"a": [HU2[0]]})
    mine = WHOLE1[-1]
    held = _held("n1", [u for u in WHOLE1 if u != mine]) | {("n1", mine): ("a", 100)}
    p = health_plan(nodes, svcs, tasks, mark(HF2, failed=[0]), held=held)
    assert [(m.service, m.trigger, m.target_uuids) for m in p.moves] == [
        ("a", Trigger.HEALTH, (mine,))]
