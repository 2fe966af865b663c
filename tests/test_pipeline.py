"""The daemon's cycle as a pipeline of declared steps (swarmgpu.manager.cycle), built
through its public API: the order checked before any cycle, each step held to what it
declares, the daemon's own wiring valid for every config that changes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import (
    AgentsConfig,
    Config,
    PlacementConfig,
    RebalanceConfig,
    SyncConfig,
)
from swarmgpu.manager.cycle.pipeline import Pipeline, PipelineError, Step, check_order
from swarmgpu.manager.cycle.session import CycleSession, SessionError, Slot
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import SwarmUnavailable


class Fake(Step):
    """A step that writes what it provides and reads what it requires."""

    def __init__(self, name: str, requires: set[Slot], provides: set[Slot],
                 log: list[str] | None = None) -> None:
        self.name = name
        self.requires = frozenset({Slot.SNAPSHOT, *requires})
        self.provides = frozenset(provides)
        self.log = log if log is not None else []

    def run(self, session: CycleSession) -> None:
        for slot in sorted(self.requires):
            getattr(session, str(slot))
        for slot in self.provides:
            if slot is Slot.MOVES:
                from swarmgpu.manager.rebalance.moves import Proposal
                session.moves = Proposal()
            elif slot is Slot.UNGRANTED:
                session.ungranted = []
        self.log.append(self.name)


def _cfg(tmp: Path, **kw: Any) -> Config:
    return Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False),
                  agents=AgentsConfig(timeout_s=0.5, identity="none"), **kw)


def _daemon(tmp: Path, **kw: Any) -> Daemon:
    return Daemon(_cfg(tmp, **kw), swarm=EmptySwarm())  # type: ignore[arg-type]


def test_the_daemons_steps_in_order(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    pipeline = d.use(daemon_steps(d))
    assert [s.name for s in pipeline.steps] == [
        "label-sync", "placement", "grants", "metrics", "rebalance", "preemption", "observe"]
    assert pipeline.describe()[1] == "placement: facts, held, snapshot -> placement, planner"
    # placement requires label sync's held writes: label sync holds them for it
    assert any(Slot.HELD in s.requires for s in pipeline.steps)


@pytest.mark.parametrize("cfg", [
    {"placement": PlacementConfig(enabled=False)},
    {"rebalance": RebalanceConfig(enabled=False)},
    {"placement": PlacementConfig(enabled=False), "rebalance": RebalanceConfig(enabled=False)},
    {"placement": PlacementConfig(overshare="restart")},
])
def test_every_config_wires_a_valid_pipeline_and_runs_a_cycle(tmp_path: Path,
                                                              cfg: dict[str, Any]) -> None:
    d = _daemon(tmp_path, **cfg)
    pipeline = d.use(daemon_steps(d))  # checked: raises on a bad order
    report = d.cycle()
    assert report.leader and not report.errors, report.errors
    assert d.last_session is not None
    written = d.last_session.written()
    for step in pipeline.steps:  # each step wrote what it provides, itself
        assert all(written[slot] == step.name for slot in step.provides), (step.name, written)


def test_a_step_before_what_it_requires_is_refused_naming_both() -> None:
    steps = [Fake("observe", {Slot.MOVES}, set()), Fake("rebalance", set(), {Slot.MOVES})]
    with pytest.raises(PipelineError, match=r"step 'observe' requires moves, which no "
                       r"earlier step provides: 'rebalance' provides it later; run "
                       r"'observe' after it"):
        Pipeline(steps)
    with pytest.raises(PipelineError, match=r"'observe' requires moves.*no step provides it"):
        check_order(steps[:1])
    Pipeline(steps[::-1])  # the other way round is fine


def test_two_providers_of_one_slot_or_two_names_are_refused() -> None:
    with pytest.raises(PipelineError, match=r"steps 'a' and 'b' both provide moves"):
        Pipeline([Fake("a", set(), {Slot.MOVES}), Fake("b", set(), {Slot.MOVES})])
    with pytest.raises(PipelineError, match=r"two steps are named 'a'"):
        Pipeline([Fake("a", set(), set()), Fake("a", set(), set())])


def test_the_daemon_refuses_a_bad_order_before_any_cycle(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    swarm = d.swarm
    with pytest.raises(PipelineError, match=r"'late' requires moves"):
        d.use([Fake("late", {Slot.MOVES}, set())])
    assert d.swarm is swarm and d.last_session is None  # nothing ran


def _session() -> CycleSession:
    return CycleSession(Snapshot([], [], [], {}))


def test_a_step_is_held_to_its_declaration() -> None:
    class Sneaky(Fake):
        def run(self, session: CycleSession) -> None:
            session.moves  # noqa: B018 -- reads what it does not require

    pipe = Pipeline([Fake("rb", set(), {Slot.MOVES}), Sneaky("sneaky", set(), set())])
    with pytest.raises(SessionError, match=r"'sneaky' reads moves without requiring it"):
        pipe.run(_session())

    class Writer(Fake):
        def run(self, session: CycleSession) -> None:
            session.ungranted = []

    with pytest.raises(SessionError, match=r"'w' writes ungranted without providing it"):
        Pipeline([Writer("w", set(), set())]).run(_session())

    class Idle(Fake):
        def run(self, session: CycleSession) -> None:
            pass

    with pytest.raises(SessionError, match=r"'idle' declares it provides moves but did not"):
        Pipeline([Idle("idle", set(), {Slot.MOVES})]).run(_session())


def test_a_slot_is_written_once_and_read_only_once_written() -> None:
    s = _session()
    with pytest.raises(SessionError, match=r"moves is read before any step wrote it"):
        s.moves  # noqa: B018
    s.ungranted = []
    with pytest.raises(SessionError, match=r"ungranted is written twice"):
        s.ungranted = []


def test_stop_ends_the_cycle_between_steps_and_after_runs_for_each() -> None:
    log: list[str] = []
    after: list[str] = []
    pipe = Pipeline([Fake("a", set(), set(), log), Fake("b", set(), set(), log)])
    pipe.run(_session(), stop=lambda: True, after=lambda st: after.append(st.name))
    assert log == ["a"] and after == ["a"]  # the first step always runs
    log.clear()
    after.clear()

    class Boom(Fake):
        def run(self, session: CycleSession) -> None:
            raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        Pipeline([Boom("boom", set(), set()), Fake("b", set(), set(), log)]).run(
            _session(), after=lambda st: after.append(st.name))
    assert log == [] and after == ["boom"]


def test_leadership_lost_drops_the_planner(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    d.use(daemon_steps(d))
    d.cycle()
    placement = next(s for s in d.pipeline.steps if s.name == "placement")
    assert getattr(placement, "planner", None) is not None
    d.pipeline.stand_by()
    assert getattr(placement, "planner", "kept") is None


def test_a_term_lost_mid_cycle_or_unknown_starts_the_next_term_anew(tmp_path: Path) -> None:
    """A write that found this engine deposed ends the term; so does a cycle that could
    not ask. The next cycle that finds it the leader again starts from what Swarm stores
    (another manager led meanwhile), as after a cycle that found it a follower."""
    swarm = EmptySwarm()
    d = Daemon(_cfg(tmp_path), swarm=swarm)  # type: ignore[arg-type]
    d.use(daemon_steps(d))
    placement = next(s for s in d.pipeline.steps if s.name == "placement")
    d.cycle()
    old = getattr(placement, "planner", None)
    assert old is not None
    d.term.check_s = 0.0  # a write mid-cycle asks, and hears "no"
    swarm.is_leader = lambda: False  # type: ignore[method-assign]
    assert not d.term.holds() and d.term.lost
    swarm.is_leader = lambda: True  # type: ignore[method-assign]
    d.cycle()  # elected again before the next cycle
    new = getattr(placement, "planner", None)
    assert new is not None and new is not old

    def down() -> bool:
        raise SwarmUnavailable("engine unreachable")

    swarm.is_leader = down  # type: ignore[method-assign]
    assert d.cycle().errors and d.term.lost
    swarm.is_leader = lambda: True  # type: ignore[method-assign]
    d.cycle()
    assert getattr(placement, "planner", None) not in (None, new)
