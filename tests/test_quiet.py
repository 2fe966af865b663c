"""The change-driven cycle (placement.quiet) plans exactly what the full pass plans.

A ``Planner(change_driven=True)`` and a ``Planner(change_driven=False)`` are fed the same
calls -- every ``plan``, every ``place_arrivals``, every change made to their allocators
from outside (``add_usage``, a rebalancing move) -- and must return equal plans, field by
field, every cycle (``TwinPlanner``). The world applies only the change-driven planner's
plans. Driven by the simulator's replays (arrivals, departures, rebalancing moves) and
by a small hand-built world perturbed at random between cycles: nodes drained, down,
leaving and joining, labels placement owns edited by an operator, facts changing and
vanishing, services edited, removed and added, tasks failing, moving and refused, time
passing.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

import pytest

import swarmgpu.sim.swarm_replay as swarm_replay
from swarmgpu.allocator.core import NodeSpec
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import Planner
from swarmgpu.manager.placement.records import PlacementPlan
from swarmgpu.sim.swarm_replay import Defragmenter, Replay, World
from swarmgpu.sim.trace import TracePod, load_nodes, load_pods
from swarmgpu.sim.traces import bundled
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask

P = "swarmgpu."


# --- comparing plans -------------------------------------------------------------------
def plain(v: object) -> object:
    """``v`` as plain data: dataclasses field by field (in order), sets sorted, NaN named."""
    if is_dataclass(v) and not isinstance(v, type):
        return {f.name: plain(getattr(v, f.name)) for f in fields(v)}
    if isinstance(v, (set, frozenset)):
        return sorted((plain(x) for x in v), key=repr)
    if isinstance(v, Mapping):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def dump_plan(plan: PlacementPlan) -> dict[str, object]:
    """Every field of the plan; its services field by field, in plan order."""
    return {f.name: plain(getattr(plan, f.name)) for f in fields(plan)}


def plan_diff(a: PlacementPlan, b: PlacementPlan) -> list[str]:
    """What differs between the change-driven plan ``a`` and the full pass's ``b``."""
    da, db = dump_plan(a), dump_plan(b)
    out: list[str] = []
    for k in da:
        if k == "services" or da[k] == db[k]:
            continue
        out.append(f"plan.{k}:\n  change-driven: {da[k]!r}\n  full pass:     {db[k]!r}")
    sa, sb = da["services"], db["services"]
    assert isinstance(sa, list) and isinstance(sb, list)
    names_a = [s["name"] for s in sa]
    names_b = [s["name"] for s in sb]
    if names_a != names_b:
        out.append(f"service order:\n  change-driven: {names_a}\n  full pass:     {names_b}")
        return out
    for x, y in zip(sa, sb, strict=True):
        if x == y:
            continue
        for k in x:
            if x[k] != y[k]:
                out.append(f"service {x['name']!r} field {k}:\n  change-driven: {x[k]!r}\n"
                           f"  full pass:     {y[k]!r}")
    return out


def assert_same_plans(a: PlacementPlan, b: PlacementPlan, where: str) -> None:
    # Dataclass equality first (field by field, as strict as the dump: no field of a
    # plan is left out of comparison); the dump only to say what differs.
    if all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a)):
        return
    diff = plan_diff(a, b)
    assert not diff, f"{where}: the change-driven plan differs\n" + "\n".join(diff)


def held_state(planner: Planner) -> list[tuple[object, ...]]:
    """What the planner's allocator holds: per (service, node) the ledger value and
    reservation, and the GPUs counted; and every node's free capacity and usage."""
    held = sorted((k, h.key, None if h.choice is None else (h.choice.gpus, h.choice.milli))
                  for k, h in planner.cluster.held_items())
    alloc = planner.cluster.alloc
    nodes = sorted((nid, tuple(n.free), alloc.usage(nid)) for nid, n in alloc.nodes.items())
    return [*held, *nodes]


# --- two planners fed the same calls ---------------------------------------------------
class TwinPlanner(Planner):
    """The change-driven planner, with a full-pass twin fed every call it gets: each
    ``plan`` and ``place_arrivals`` returns the change-driven plan once the twin's equals
    it. Changes made to the allocator from outside (the replay's CPU pods) are made on
    both. ``now`` left out: one shared clock, a second per cycle."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(change_driven=True, **kw)
        twin_kw = dict(kw)
        if kw.get("workload") is not None:  # learned in place: one model each
            twin_kw["workload"] = copy.deepcopy(kw["workload"])
        self.twin = Planner(change_driven=False, **twin_kw)
        self.cycles = 0
        self.arrivals = 0
        self.quiet_cycles = 0  # cycles where some service was quiet
        self.quiet_services = 0  # quiet services, summed over cycles
        self.clock = 1_700_000_000.0
        self.label = "twin"
        self.check_held = True
        self.mirror = True  # outside changes to the allocator go to the twin's as well
        mine = self.cluster.add_usage
        theirs = self.twin.cluster.add_usage

        def add_usage(node_id: str, cpu_milli: int, memory_mib: int) -> None:
            mine(node_id, cpu_milli, memory_mib)
            if self.mirror:
                theirs(node_id, cpu_milli, memory_mib)

        setattr(self.cluster, "add_usage", add_usage)  # noqa: B010 - an instance's own

    def keep_failed_holdings(self, keep: Callable[[str, str], bool] | None) -> None:
        super().keep_failed_holdings(keep)
        self.twin.keep_failed_holdings(keep)

    def _quiet_services(self, *args: Any, **kw: Any) -> dict[str, str]:
        # (whatever it reads: only its answer is counted)
        out = super()._quiet_services(*args, **kw)
        self.quiet_cycles += bool(out)
        self.quiet_services += len(out)
        return out

    def plan(self, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
             tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *,
             now: float | None = None) -> PlacementPlan:
        if now is None:
            self.clock += 1.0
            now = self.clock
        self.twin.cluster.explain = self.cluster.explain
        self.cycles += 1
        a = super().plan(nodes, services, tasks, facts, now=now)
        b = self.twin.plan(nodes, services, tasks, facts, now=now)
        assert_same_plans(a, b, f"{self.label}, cycle {self.cycles} (now={now})")
        if self.check_held:
            assert held_state(self) == held_state(self.twin), \
                f"{self.label}, cycle {self.cycles}: the allocators hold different things"
        return a

    def place_arrivals(self, services: Sequence[SwarmService], tasks: Sequence[SwarmTask],
                       ) -> PlacementPlan:
        self.arrivals += 1
        a = super().place_arrivals(services, tasks)
        b = self.twin.place_arrivals(services, tasks)
        assert_same_plans(a, b, f"{self.label}, arrivals call {self.arrivals} "
                                f"(after cycle {self.cycles})")
        return a


class TwinDefragmenter(Defragmenter):
    """The rebalance moves on both planners' allocators: the policy runs on each (it
    moves holdings on the allocator it is given), the twin's moves are only recorded,
    the change-driven planner's are carried out in the world; both must be the same."""

    def __init__(self, pods: Sequence[TracePod]) -> None:
        super().__init__(pods)
        self.other = Defragmenter(pods)
        self.moves = 0

    def run(self, planner: Planner, w: World, budget: int) -> int:
        assert isinstance(planner, TwinPlanner)
        twin_moves: list[tuple[object, ...]] = []
        shadow = copy.copy(w)  # the same dicts; its moves are recorded, not made
        setattr(shadow, "move", lambda *a: twin_moves.append(a))  # noqa: B010
        planner.mirror = False
        try:
            n_twin = self.other.run(planner.twin, shadow, budget)
            moves: list[tuple[object, ...]] = []
            real = w.move

            def move(*a: Any) -> None:
                moves.append(a)
                real(*a)

            setattr(w, "move", move)  # noqa: B010
            try:
                n = super().run(planner, w, budget)
            finally:
                del w.move
        finally:
            planner.mirror = True
        assert (n, moves) == (n_twin, twin_moves), "the twin's rebalance moves differ"
        self.moves += n
        return n


def _trace(n_nodes: int, n_pods: int, seed: int) -> tuple[list[NodeSpec], list[TracePod]]:
    nodes_csv, pods_csv = bundled("default")
    rng = random.Random(seed)
    nodes = rng.sample(load_nodes(nodes_csv), n_nodes)
    pods = load_pods(pods_csv)
    start = rng.randrange(len(pods) - n_pods)
    return nodes, pods[start:start + n_pods]


@pytest.fixture
def twins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replays build their planner by this module's name: make it a twin."""
    monkeypatch.setattr(swarm_replay, "Planner", TwinPlanner)


@pytest.mark.usefixtures("twins")
def test_replay_arrivals_and_full_cycles_plan_the_same() -> None:
    nodes, pods = _trace(150, 700, 3)
    rp = Replay(nodes, pods, 11, batch=10)
    twin = rp.planner
    assert isinstance(twin, TwinPlanner)
    res = rp.run()
    assert res.placed > 300 and twin.cycles > 60 and twin.arrivals > 400
    assert twin.quiet_cycles > twin.cycles // 2  # the change-driven path was taken


@pytest.mark.usefixtures("twins")
def test_replay_with_rebalance_moves_plans_the_same() -> None:
    nodes, pods = _trace(60, 700, 5)
    defrag = TwinDefragmenter(pods)
    rp = Replay(nodes, pods, 4, batch=9, at_arrival=False)
    twin = rp.planner
    assert isinstance(twin, TwinPlanner)
    rp.run(moves_per_100=3.0, defrag=defrag, defrag_every=60)
    assert defrag.moves > 0 and twin.quiet_cycles > 10


def test_departures_replay_with_jobs_and_moves_plans_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, pods = _trace(40, 900, 8)
    defrag = TwinDefragmenter(pods)
    made: list[TwinPlanner] = []

    class Recorded(TwinPlanner):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            made.append(self)

    monkeypatch.setattr(swarm_replay, "Planner", Recorded)
    res = swarm_replay.replay_departures_planner(nodes, pods, 2, batch=6, defrag=defrag,
                                                 moves_per_100=2.0, speedup=1.0)
    (twin,) = made
    assert res.placed > 300 and twin.cycles > 50 and defrag.moves > 0
    # Jobs are never quiet (a replicated service only): every cycle is a full pass on both.
    assert twin.quiet_cycles == 0
