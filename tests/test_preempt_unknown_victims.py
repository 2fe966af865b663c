"""A preemptor whose only victims sit in a queue whose use is not known this cycle
(``queues.unknown_of``: its counted use too low, so no guarantee is judged by it)
preempts nothing, and now its plan says why (the map, `plan`, `status`) and the daemon's
log says it once while it lasts (``preempt_notes.UnknownVictims``). Before, only a
preemptor of the unknown queue itself was noted (``note_unknown_use``): this one stayed
pending with no word of the preemption it did not make."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.forged import RecordingSwarm
from support.isolation import BAD, FACTS, queue_count_raises, settled_all
from support.loglines import log_lines
from support.placement import P, svc

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import PlacementPlan, Planner
from swarmgpu.swarm.client import SwarmNode, SwarmService

QUOTAS = {"q": (4000, None), "p": (8000, None)}


def _held_back(monkeypatch: pytest.MonkeyPatch) -> tuple[
        Planner, list[SwarmNode], list[SwarmService]]:
    """Queue q (guarantee 4) holds both nodes' 16 GPUs (a-bad 4, q-big 8, q-four 4);
    b-new (queue p, guarantee 8) wants 4. Known, q is 12 above its guarantee and b-new
    reclaims from it; a-bad's count raises, so q's use is unknown and it reclaims none."""
    q = {f"{P}queue": "q"}
    services = [svc(BAD, {f"{P}gpus": "4", **q}), svc("q-big", {f"{P}gpus": "8", **q}),
                svc("q-four", {f"{P}gpus": "4", **q})]
    planner = Planner(queues=QUOTAS)
    nodes, services, plan = settled_all(planner, services)
    assert all(sp.status == "placed" for sp in plan.services), plan.services
    queue_count_raises(monkeypatch)
    services.append(svc("b-new", {f"{P}gpus": "4", f"{P}queue": "p"}))
    return planner, nodes, services


def _said(plan: PlacementPlan, name: str) -> list[str]:
    (sp,) = [sp for sp in plan.services if sp.name == name]
    return [w for w in sp.warnings if w.startswith("preemption:")]


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def test_a_preemptor_held_back_by_its_victims_unknown_queue_says_why(
        monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> None:
    planner, nodes, services = _held_back(monkeypatch)
    sw = RecordingSwarm(nodes, services, [])
    snap = Snapshot(nodes, services, [], {}, swarm_labels={})
    pre = Preempter(Config())  # preemption.dry_run (the default): decided, said, not made
    for _ in range(2):
        plan = planner.plan(nodes, services, [], FACTS)
        (row,) = [r for r in plan.queues if r["queue"] == "q"]
        assert row["used_unknown"], row
        assert pre.cycle(sw, snap, plan, FACTS) == []
        (said,) = _said(plan, "b-new")
        assert "b-new preempts nothing" in said and "queue q" in said, said
        assert "not known this cycle" in said and BAD in said and "fix:" in said, said
    logged = [ln for ln in lines if "b-new preempts nothing" in ln]
    assert len(logged) == 1, logged  # once while it lasts, not every cycle
    # `plan` and `status` (``preview``) say it too
    plan = planner.plan(nodes, services, [], FACTS)
    Preempter(Config()).preview(snap, plan, FACTS)
    assert any("b-new preempts nothing" in w for w in _said(plan, "b-new"))
    # the queue's use known again: it reclaims, and nothing of the unknown is said
    monkeypatch.undo()
    plan = planner.plan(nodes, services, [], FACTS)
    (done,) = pre.cycle(sw, snap, plan, FACTS)
    assert done.service == "b-new" and {v.service for v in done.victims} <= {
        BAD, "q-big", "q-four"}, done
    assert not any("preempts nothing" in w for w in _said(plan, "b-new"))


def test_a_preemptor_left_only_the_unknown_queues_victims_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-a holds a-bad (queue q, its use unknown) and k1 (queue k, 4 above a guarantee
    of 1); b-first and b-second (queue p, guarantee 8) want 4 GPUs each. b-first
    reclaims k1; all that is left b-second is a-bad, of the unknown queue. Before, the
    round the note reads chose anew with q's use known: b-first took a-bad there (q
    furthest above its guarantee), b-second k1, so b-second's victims were never q's and
    it stayed pending with no word. Now that round takes the preemptions made as they
    were, then looks at the others."""
    quotas = {**QUOTAS, "k": (1000, None)}
    services = [svc(BAD, {f"{P}gpus": "4", f"{P}queue": "q"}),
                svc("filler", {f"{P}gpus": "7", f"{P}preemptible": "false"}),
                svc("k1", {f"{P}gpus": "4", f"{P}queue": "k"}),
                svc("zk-small", {f"{P}gpus": "1", f"{P}queue": "k"})]
    planner = Planner(queues=quotas)
    nodes, services, plan = settled_all(planner, services)
    assert all(sp.status == "placed" for sp in plan.services), plan.services
    queue_count_raises(monkeypatch)
    services += [svc(n, {f"{P}gpus": "4", f"{P}queue": "p"}) for n in ("b-first", "b-second")]
    snap = Snapshot(nodes, services, [], {}, swarm_labels={})
    plan = planner.plan(nodes, services, [], FACTS)
    (done,) = Preempter(Config()).cycle(RecordingSwarm(nodes, services, []), snap, plan, FACTS)
    assert done.service == "b-first" and [v.service for v in done.victims] == ["k1"], done
    (said,) = _said(plan, "b-second")
    assert "b-second preempts nothing" in said and "queue q" in said, said
    assert not any("preempts nothing" in w for w in _said(plan, "b-first"))
