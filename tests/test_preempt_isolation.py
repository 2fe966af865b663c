"""One preemption that raises past a SwarmError (a bug, or input no one foresaw) is its
own loss only: the cycle's other preemptions are still made, the step ends normally
(the later steps and the next cycle run), the traceback is logged once while it lasts,
and a victim whose move or stop was half made is judged from Swarm next cycle. Before:
the exception left ``Preempter.cycle``, and the daemon's cycle with it, every cycle.

No real input is known to make the mover or a stop raise so: the faults are injected
(monkeypatch)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from support.forged import DGX_F, R4090_F, RecordingSwarm, sw_node, sw_svc
from support.loglines import log_lines

from swarmgpu.core.config import Config, PreemptionConfig, RebalanceConfig
from swarmgpu.manager.cycle.placement import make_plan
from swarmgpu.manager.cycle.preempt_budget import SpentHour
from swarmgpu.manager.cycle.preemption import Preempter
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, assign_key, devices_key, gate_key
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE
from swarmgpu.manager.rebalance.mover import Mover, read_records
from swarmgpu.manager.rebalance.moves import Move
from swarmgpu.swarm.client import SwarmService, SwarmTask

P = "swarmgpu."
R = tuple(g.uuid for g in R4090_F.gpus)  # 8 RTX 4090s on n-4090
FACTS = {"n-dgx": DGX_F, "n-4090": R4090_F}


def _two_preemptions() -> RecordingSwarm:
    """a and b (priority 0, 2 GPUs each, any product) and filler (not preemptible, 4)
    fill n-4090; the DGX has whole GPUs free for a and b; h1 and h2 (priority 100) each
    want 2 RTX 4090s: two preemptions, a for h1 and b for h2."""
    held = {"a": R[:2], "b": R[2:4], "filler": R[4:]}
    labels: dict[str, str] = {}
    for name, uuids in held.items():
        h = Holding(name, "n-4090", uuids, tuple(1000 for _ in uuids))
        labels |= {assign_key(P, name): h.label_value(), gate_key(P, name): "true"}
    nodes = [
        sw_node("n-mgr", "manager", role="manager"),
        sw_node("n-dgx", "gpu-node-1"),
        sw_node("n-4090", "gpu-node-2", labels),
    ]
    svcs = [
        sw_svc(
            name,
            {
                f"{P}gpus": str(len(uuids)),
                devices_key(P, "n-4090"): ",".join(uuids),
                **({f"{P}priority": "50", f"{P}preemptible": "false"} if name == "filler" else {}),
            },
        )
        for name, uuids in held.items()
    ]
    svcs += [
        sw_svc(h, {f"{P}gpus": "2", f"{P}gpu-product": "*RTX 4090*", f"{P}priority": "100"})
        for h in ("h1", "h2")
    ]
    tasks = [
        SwarmTask(
            f"t-{s.name}",
            s.id,
            "" if s.name.startswith("h") else "n-4090",
            1,
            "pending" if s.name.startswith("h") else "running",
            "running",
            (),
        )
        for s in svcs
    ]
    return RecordingSwarm(nodes, svcs, tasks)


def _preempter(sw: RecordingSwarm, moves: bool) -> tuple[Preempter, Snapshot, Any]:
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    rb = (
        RebalanceConfig(dry_run=False, max_moves_per_cycle=4, max_moves_per_node=4)
        if moves
        else RebalanceConfig()
    )
    cfg = Config(rebalance=rb, preemption=PreemptionConfig(dry_run=False))
    return Preempter(cfg), snap, make_plan(snap, cfg)


def _stored_hour(sw: RecordingSwarm) -> int:
    hour = SpentHour(P)
    hour.read(sw.swarm_labels(), 5000.0, ())
    return len(hour.all)


def _logged(lines: list[str], what: str) -> list[str]:
    return [ln for ln in lines if what in ln]


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def _raising_start(monkeypatch: pytest.MonkeyPatch, victim: str, *, after_first: bool) -> None:
    """``Mover.start`` raises a TypeError for ``victim``'s move: before anything is
    written, or (``after_first``) after the move record, its first write."""
    real = Mover.start

    def start(self: Mover, m: Move, svc: SwarmService, plan_failed: Any = frozenset()) -> Any:
        if m.service != victim:
            return real(self, m, svc, plan_failed)
        if after_first:
            self.writes.swarm_labels(lambda cur: {**cur, f"{P}state.moves.{svc.id}": "{}"})
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(Mover, "start", start)


def test_a_victims_move_that_raises_before_a_write_is_stopped_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """a's move raised with nothing written: a is stopped instead (as a move that failed
    to start), b's move for h2 still starts, and the step ends normally."""
    sw = _two_preemptions()
    _raising_start(monkeypatch, "a", after_first=False)
    pre, snap, plan = _preempter(sw, moves=True)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert sorted(p.service for p in done) == ["h1", "h2"]
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-a").labels
    assert gate_key(P, "a") not in sw.node("n-4090").labels
    assert {st.service for st in read_records(sw.swarm_labels(), P).values()} == {"b"}
    assert _stored_hour(sw) == 2
    (said,) = _logged(lines, "failed unexpectedly")
    assert "Traceback" in said and "TypeError: 'NoneType' object" in said


def test_a_victims_move_that_raises_after_its_first_write_is_judged_from_swarm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """a's move raised after its record: it may be under way, so a is not stopped too
    (its record is the rebalancer's mover's to go on with or roll back), it is counted
    in the hour (stored before that write), and h1 waits for the move as for any."""
    sw = _two_preemptions()
    _raising_start(monkeypatch, "a", after_first=True)
    pre, snap, plan = _preempter(sw, moves=True)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert sorted(p.service for p in done) == ["h1", "h2"]
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-a").labels
    assert gate_key(P, "a") in sw.node("n-4090").labels
    assert _stored_hour(sw) == 2 and pre.moving == {"h1": {"a"}, "h2": {"b"}}


def test_a_victims_move_that_keeps_raising_is_logged_once_while_it_does(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    sw = _two_preemptions()
    _raising_start(monkeypatch, "a", after_first=False)
    monkeypatch.setattr(Preempter, "_stop", lambda *a: False)  # a stays, tried again
    pre, _snap, _plan = _preempter(sw, moves=True)
    for t in (5000.0, 5100.0):
        _, snap, plan = _preempter(sw, moves=True)
        pre.cycle(sw, snap, plan, FACTS, now=t)  # type: ignore[arg-type]
    assert len(_logged(lines, "failed unexpectedly")) == 1


class _RaisingStop(RecordingSwarm):
    """The stop path's faults for victim a: its node read (nothing written yet), or its
    node write after its spec write landed (``half``), raise a TypeError."""

    def __init__(self, half: bool) -> None:
        c = _two_preemptions()
        super().__init__(c.nodes(), c.services(), c.tasks())
        self.half = half
        self.armed = True

    def node(self, node_id: str) -> Any:
        if self.armed and not self.half:
            self.armed = False
            raise TypeError("'NoneType' object is not subscriptable")
        return super().node(node_id)

    def update_node_labels(self, node_id: str, compute: Any, **kw: Any) -> bool:
        if (
            self.armed
            and self.half
            and gate_key(P, "a") in self._nodes[node_id].labels
            and gate_key(P, "a") not in (compute(self._nodes[node_id].labels) or {})
        ):
            self.armed = False
            raise TypeError("'NoneType' object is not subscriptable")
        return super().update_node_labels(node_id, compute, **kw)


def test_a_victims_stop_that_raises_before_a_write_leaves_it_and_gives_the_hour_back(
    lines: list[str],
) -> None:
    """a's stop raised before anything was written: a is left as it was, its reserved
    second given back, h1 tried again next cycle; b is still stopped for h2."""
    sw = _RaisingStop(half=False)
    pre, snap, plan = _preempter(sw, moves=False)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [p.service for p in done] == ["h2"]
    assert gate_key(P, "a") in sw.node("n-4090").labels
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-a").labels
    assert gate_key(P, "b") not in sw.node("n-4090").labels
    assert _stored_hour(sw) == 1 and "h1" not in pre.preemptor_at
    (said,) = _logged(lines, "failed unexpectedly")
    assert "Traceback" in said and "stopping a for h1" in said


def test_a_victims_stop_half_made_is_counted_and_judged_from_swarm_next_cycle() -> None:
    """a's spec write landed (its record, its device list gone), its gate write raised:
    b is still stopped; a's second stays counted (the stop may have landed: the safe
    side), and next cycle placement finds a still holding its GPUs, so it keeps them:
    its device list written back and the record removed, never left stopped with
    nobody placed."""
    sw = _RaisingStop(half=True)
    pre, snap, plan = _preempter(sw, moves=False)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [p.service for p in done] == ["h2"]
    assert gate_key(P, "a") in sw.node("n-4090").labels
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-a").labels
    assert _stored_hour(sw) == 2 and "id-a" not in pre.victim_at
    _, _, again = _preempter(sw, moves=False)
    a = {sp.name: sp for sp in again.services}["a"]
    assert a.status == "placed" and f"{P}{PREEMPTED_STATE}" in a.service_labels_remove
    assert a.service_labels_set.get(devices_key(P, "n-4090")) == ",".join(R[:2])


def test_a_preemptor_whose_choice_raises_preempts_nothing_alone(
    monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """Choosing h1's victims raises: h1 preempts nothing this cycle, h2 still does."""
    from swarmgpu.manager.placement import preempt

    real = preempt.choose_preemptions.__globals__["_best_preemption"]

    def best(rd: Any, s: SwarmService, r: Any, *more: Any) -> Any:
        if s.name == "h1":
            raise KeyError("gpu-node-9")
        return real(rd, s, r, *more)

    monkeypatch.setitem(preempt.choose_preemptions.__globals__, "_best_preemption", best)
    sw = _two_preemptions()
    pre, snap, plan = _preempter(sw, moves=False)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [p.service for p in done] == ["h2"]
    (said,) = _logged(lines, "failed unexpectedly")
    assert "Traceback" in said and "victims for h1" in said
    h1 = next(sp for sp in plan.services if sp.name == "h1")  # the map says it too
    assert [w for w in h1.warnings if "choosing victims for h1" in w and "fix:" in w]


def _raising_choice(monkeypatch: pytest.MonkeyPatch, preemptor: str) -> None:
    """Choosing ``preemptor``'s victims raises a KeyError (a bug, or input no one
    foresaw); the others' choices are as before."""
    from swarmgpu.manager.placement import preempt

    real = preempt.choose_preemptions.__globals__["_best_preemption"]

    def best(rd: Any, s: SwarmService, r: Any, *more: Any) -> Any:
        if s.name == preemptor:
            raise KeyError("gpu-node-9")
        return real(rd, s, r, *more)

    monkeypatch.setitem(preempt.choose_preemptions.__globals__, "_best_preemption", best)


@pytest.mark.parametrize("dry", [True, False])
def test_plan_and_status_show_a_preemptors_choice_that_raises_and_the_rest(
    monkeypatch: pytest.MonkeyPatch, dry: bool
) -> None:
    """`plan` and `status` (``plan_as_daemon``) isolate a preemptor whose choice raises
    as the daemon's cycle does: h1's plan says what failed, that it preempts nothing and
    the fix; h2's preemption is still noted, and the whole plan is there. Before: the
    exception left ``plan_as_daemon``, and both commands failed with a traceback."""
    from swarmgpu.manager.commands.plan import render_plan
    from swarmgpu.manager.cycle.oneshot_plan import plan_as_daemon

    _raising_choice(monkeypatch, "h1")
    from swarmgpu.manager.nodes.agent_client import FactsResult

    sw = _two_preemptions()
    facts = {nid: FactsResult(nid, f.hostname, "", f, None, 1.0) for nid, f in FACTS.items()}
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), facts,
                    swarm_labels=sw.swarm_labels())
    got = plan_as_daemon(snap, Config(preemption=PreemptionConfig(dry_run=dry)))
    by = {sp.name: sp for sp in got.services}
    assert set(by) == {"a", "b", "filler", "h1", "h2"}
    (said,) = [w for w in by["h1"].warnings if "h1" in w]
    assert "KeyError" in said and "gpu-node-9" in said and "preempts nothing" in said
    assert "fix:" in said
    assert [w for w in by["h2"].warnings if "for h2" in w], by["h2"].warnings
    text = render_plan(got.services, ungranted=[], workload={}, health=[], moves=None,
                       listen="x")
    assert f"note: {said}" in text and "h2: pending" in text
    from swarmgpu.manager.web.cluster_view import build_cluster, render_status

    status = render_status(build_cluster(snap, got, prefix=P)).splitlines()
    at = next(k for k, ln in enumerate(status) if ln.startswith("  h1: "))
    assert status[at + 1] == f"    {said}", status[at:at + 2]
    assert any(ln.startswith("  h2: ") for ln in status)


class _NodeWriteFails(RecordingSwarm):
    """Victim a's gate write fails with an engine error (a timeout after the engine may
    have made it, an engine error) once its spec write landed."""

    def __init__(self) -> None:
        c = _two_preemptions()
        super().__init__(c.nodes(), c.services(), c.tasks())
        self.armed = True

    def update_node_labels(self, node_id: str, compute: Any, **kw: Any) -> bool:
        from swarmgpu.swarm.client import SwarmError

        if self.armed and gate_key(P, "a") in self._nodes[node_id].labels and gate_key(
            P, "a"
        ) not in (compute(self._nodes[node_id].labels) or {}):
            self.armed = False
            raise SwarmError("engine timed out: read timeout")
        return super().update_node_labels(node_id, compute, **kw)


def test_a_victims_gate_write_that_fails_after_its_spec_write_keeps_its_second_spent() -> None:
    """a's spec write landed (its record, its device list gone), its gate write failed
    with an engine error: its outcome is unknown (a timeout after the engine made it
    stopped a), so a's second of the hour stays spent, as a stop half made by any other
    fault (judged next cycle: below). Before: the second was given back, and a stop
    that had landed went uncounted (max_per_hour exceeded)."""
    sw = _NodeWriteFails()
    pre, snap, plan = _preempter(sw, moves=False)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert [p.service for p in done] == ["h2"]
    assert f"{P}{PREEMPTED_STATE}" in sw.service("id-a").labels
    assert gate_key(P, "a") in sw.node("n-4090").labels
    assert _stored_hour(sw) == 2 and len(pre.spent.all) == 2


class _GateAnswerLost(_NodeWriteFails):
    """a's gate write lands, but its answer is lost (an engine timeout after it)."""

    def update_node_labels(self, node_id: str, compute: Any, **kw: Any) -> bool:
        from swarmgpu.swarm.client import SwarmError

        if self.armed and gate_key(P, "a") not in (compute(self._nodes[node_id].labels) or {}):
            self.armed = False
            RecordingSwarm.update_node_labels(self, node_id, compute, **kw)
            raise SwarmError("engine timed out: read timeout")
        return super().update_node_labels(node_id, compute, **kw)


@pytest.mark.parametrize(("sw", "hour"), [
    (_NodeWriteFails(), [5000.0, 5030.0]),  # never landed: given back, a stopped again
    (_GateAnswerLost(), [5000.0, 5000.0]),  # landed: a stopped, counted once
])
def test_a_victims_half_made_stop_is_spent_next_cycle_only_if_its_gate_closed(
        sw: _NodeWriteFails, hour: list[float]) -> None:
    """Next cycle, a's half made stop is judged from Swarm: a still holding its GPUs on
    the node (its ledger entry and gate there, the one write that removes both never
    landed) and its task meant to run all along, no eviction happened, and its second
    is given back to the hour (h1 stops it again, counted then); gone from the node,
    it was stopped and stays counted. Before, the second stayed spent either way: a
    victim whose gate never closed counted against max_per_hour, and twice once h1
    stopped it again."""
    pre, snap, plan = _preempter(sw, moves=False)
    pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert sorted(pre.spent.all) == [5000.0, 5000.0]
    _, snap, plan = _preempter(sw, moves=False)
    pre.cycle(sw, snap, plan, FACTS, now=5030.0)  # type: ignore[arg-type]
    assert sorted(pre.spent.all) == hour
    stored = SpentHour(P)
    stored.read(sw.swarm_labels(), 5030.0, ())
    assert sorted(stored.all) == hour


class _RecordAnswerLost(RecordingSwarm):
    """The write of victim a's move record lands, but its answer is lost (an engine
    timeout): a SwarmError after the engine made it."""

    def __init__(self) -> None:
        c = _two_preemptions()
        super().__init__(c.nodes(), c.services(), c.tasks())
        self.armed = True

    def update_swarm_labels(self, compute: Any, **kw: Any) -> bool:
        from swarmgpu.swarm.client import SwarmUnavailable

        key, before = f"{P}state.moves.id-a", dict(self._swarm_labels)
        landed = super().update_swarm_labels(compute, **kw)
        if self.armed and key in self._swarm_labels and key not in before:
            self.armed = False
            raise SwarmUnavailable("engine timed out: read timeout")
        return landed


def test_a_victims_move_whose_record_write_answer_is_lost_is_not_stopped_too() -> None:
    """a's move record was written, its answer lost: the move may be under way (its
    record is the authority: the rebalancer's mover goes on with it or rolls it back),
    so a is not stopped under it, it counts in the hour (stored before that write), and
    h1 waits for the move. Before: any SwarmError from the move's start stopped a
    too, its move in flight: its source closed twice over, a roll-back reopening GPUs
    given to h1."""
    sw = _RecordAnswerLost()
    pre, snap, plan = _preempter(sw, moves=True)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert sorted(p.service for p in done) == ["h1", "h2"]
    assert "id-a" in read_records(sw.swarm_labels(), P)
    assert f"{P}{PREEMPTED_STATE}" not in sw.service("id-a").labels
    assert gate_key(P, "a") in sw.node("n-4090").labels
    assert _stored_hour(sw) == 2 and pre.moving == {"h1": {"a"}, "h2": {"b"}}


def _one_preemptor_two_victims(b_labels: dict[str, str]) -> RecordingSwarm:
    """big (priority 100) wants 4 RTX 4090s: a and b (priority 0, 2 GPUs each) are its
    victims on n-4090 (filler holds the other 4, not preemptible); the DGX has room
    for a to move there. A move record that cannot be read fills the move budget."""
    c = _two_preemptions()
    svcs = [s for s in c.services() if s.name in ("a", "b", "filler")]
    svcs = [replace(s, labels={**s.labels, **b_labels}) if s.name == "b" else s for s in svcs]
    big = sw_svc("big", {f"{P}gpus": "4", f"{P}gpu-product": "*RTX 4090*",
                         f"{P}priority": "100"})
    tasks = [t for t in c.tasks() if t.service_id in {s.id for s in svcs}]
    tasks.append(SwarmTask("t-big", big.id, "", 1, "pending", "running", ()))
    sw = RecordingSwarm(c.nodes(), [*svcs, big], tasks)
    sw._swarm_labels[f"{P}state.moves.id-gone"] = "{"  # unreadable: a move in flight
    return sw


def test_a_preemption_whose_victims_move_waits_stops_none_of_its_victims() -> None:
    """big needs a's and b's GPUs. a's move waits for the move budget; b (opted out of
    moves) would be stopped. Before: b was stopped alone, big still could not run (a
    kept its GPUs), and placement gave b its GPUs back the next cycle: stopped and
    restarted for nothing, again after each settle time. Now the preemption waits as a
    whole: nothing stopped, nothing of the hour spent, tried again next cycle."""
    sw = _one_preemptor_two_victims({f"{P}rebalance": "never"})
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    cfg = Config(rebalance=RebalanceConfig(dry_run=False, max_moves_per_cycle=1,
                                           max_moves_per_node=4),
                 preemption=PreemptionConfig(dry_run=False))
    pre, plan = Preempter(cfg), make_plan(snap, cfg)
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    (big,) = [sp for sp in plan.services if sp.name == "big"]
    assert [w for w in big.warnings if "waits" in w], big.warnings
    assert done == [] and _stored_hour(sw) == 0 and "big" not in pre.preemptor_at
    for name in ("a", "b"):
        assert gate_key(P, name) in sw.node("n-4090").labels, name
        assert f"{P}{PREEMPTED_STATE}" not in sw.service(f"id-{name}").labels, name
    assert read_records(sw.swarm_labels(), P) == {}


class _VictimStopFails(RecordingSwarm):
    """big's preemption of a and b (both stopped: moves are off); b's stop fails: its
    spec write (an engine error), or its holding changed since the decision (``moved``:
    b holds other GPUs of the node by the time the stop reads it)."""

    def __init__(self, fault: str) -> None:
        c = _one_preemptor_two_victims({})
        super().__init__(c.nodes(), c.services(), c.tasks(), c.swarm_labels())
        self._swarm_labels.pop(f"{P}state.moves.id-gone")
        self.fault = fault

    def node(self, node_id: str) -> Any:
        n = super().node(node_id)
        if self.fault == "moved" and node_id == "n-4090":
            h = Holding("b", "n-4090", R[6:], (1000, 1000))
            return replace(n, labels={**n.labels, assign_key(P, "b"): h.label_value()})
        return n

    def update_service_spec(self, service_id: str, compute: Any, **kw: Any) -> bool:
        from swarmgpu.swarm.client import SwarmError

        if self.fault == "spec" and service_id == "id-b":
            raise SwarmError("engine answered 500: rpc error")
        return super().update_service_spec(service_id, compute, **kw)


@pytest.mark.parametrize("fault", ["spec", "moved"])
def test_a_preemption_whose_second_victim_cannot_be_stopped_stops_neither(fault: str) -> None:
    """big needs a's and b's GPUs; b's stop fails. Before: a was stopped alone (its gate
    closed), big still could not run (b kept its GPUs), and placement gave a its GPUs
    back the next cycle: stopped and restarted for nothing. Now the victims' gates close
    in one node write, after every victim's holding is read again and its spec written:
    a fault before it stops none, gives the hour back, and big tries again next cycle."""
    sw = _VictimStopFails(fault)
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    pre, plan = Preempter(cfg), make_plan(snap, cfg)
    (chosen,) = pre.decide(snap, plan, FACTS, None, 5000.0)
    assert sorted(v.service for v in chosen.victims) == ["a", "b"]
    done = pre.cycle(sw, snap, plan, FACTS, now=5000.0)  # type: ignore[arg-type]
    assert done == [] and "big" not in pre.preemptor_at and pre.victim_at == {}
    labels = sw._nodes["n-4090"].labels
    for name in ("a", "b"):
        assert gate_key(P, name) in labels and assign_key(P, name) in labels, name
    assert _stored_hour(sw) == 0 and list(pre.spent.all) == []
    # Next cycle placement keeps a where it runs (its spec labels, if written, restored).
    snap = Snapshot(sw.nodes(), sw.services(), sw.tasks(), {}, swarm_labels=sw.swarm_labels())
    a = {sp.name: sp for sp in make_plan(snap, cfg).services}["a"]
    assert a.status == "placed" and [pl.node_id for pl in a.placements] == ["n-4090"]
    assert not a.force_update and (a.decision is None or a.decision[0] == "none")


def test_a_job_whose_progress_raises_leaves_the_preemptions_made() -> None:
    """a, holding 2 GPUs, is a job whose run's progress cannot be read (its restart policy
    not a mapping): placement fails it alone and keeps its GPUs (``placement.isolate``).
    Preemption's pass over every job (``jobs.done_idle``) read it again without that
    isolation and raised: nothing was preempted, the daemon's cycle failed at this step
    every cycle (the steps after it never ran) and `plan` and `status` raised. Now both
    preemptions are made, a a victim as any failed plan (stopped, never moved)."""
    sw = _two_preemptions()
    svcs = [replace(s, mode="replicated-job", replicas=None, total_completions=1,
                    max_concurrent=1, spec={**s.spec, "TaskTemplate": {
                        **s.spec["TaskTemplate"], "RestartPolicy": "none"}})
            if s.name == "a" else s for s in sw.services()]
    tasks = [replace(t, desired_state="complete") if t.id == "t-a" else t for t in sw.tasks()]
    snap = Snapshot(sw.nodes(), svcs, tasks, {}, swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    plan = make_plan(snap, cfg)
    assert [sp.status for sp in plan.services if sp.name == "a"] == ["failed"]
    chosen = Preempter(cfg).decide(snap, plan, FACTS, None, 5000.0)
    assert [(p.service, [v.service for v in p.victims], sorted(p.moves)) for p in chosen] \
        == [("h1", ["a"], []), ("h2", ["b"], ["b"])]


def test_a_holder_whose_spec_read_raises_leaves_the_preemptions_made() -> None:
    """filler's Resources are not a mapping (a spec no docker CLI makes): placement fails
    it alone and keeps its GPUs (``placement.isolate``). With no task of it on its node,
    preemption's CPU count (``preemptroom.Room.of``) read its reservation from that spec
    and raised: nothing was preempted, the daemon's cycle failed at that step every
    cycle and `plan` and `status` raised. Now its reservation there counts its node's
    whole (tests/test_unread_answers.py), and these preemptors reserve no CPU."""
    sw = _two_preemptions()
    svcs = [replace(s, spec={**s.spec, "TaskTemplate": {**s.spec["TaskTemplate"],
                                                         "Resources": "lots"}})
            if s.name == "filler" else s for s in sw.services()]
    tasks = [t for t in sw.tasks() if t.id != "t-filler"]  # (restarting: on no node)
    snap = Snapshot(sw.nodes(), svcs, tasks, {}, swarm_labels=sw.swarm_labels())
    cfg = Config(preemption=PreemptionConfig(dry_run=False))
    plan = make_plan(snap, cfg)
    assert [sp.status for sp in plan.services if sp.name == "filler"] == ["failed"]
    chosen = Preempter(cfg).decide(snap, plan, FACTS, None, 5000.0)
    assert sorted((p.service, v.service) for p in chosen for v in p.victims) == [
        ("h1", "a"), ("h2", "b")]
