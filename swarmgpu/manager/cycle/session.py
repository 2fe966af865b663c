"""What one cycle's steps hand each other: the ``CycleSession``.

The daemon opens a session per cycle (leader only) with the snapshot. Each slot is
written once, by the step that declares it in ``provides``, and read by the steps that
declare it in ``requires`` (``pipeline.Pipeline`` checks the order before any cycle
runs). While a step runs, the session holds it to its word: reading a slot the step does
not require, or writing one it does not provide, raises ``SessionError``, as does
reading a slot no step has written yet. Nothing in a session outlives its cycle: what a
step keeps across cycles (the planner's memory, the rebalancer's windows, the over-share
watch) is the step's own.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from swarmgpu.core.metrics_in import GpuMetrics
    from swarmgpu.core.model import NodeFacts
    from swarmgpu.manager.engine.writes import HeldNodeWrites
    from swarmgpu.manager.nodes.sync import CycleReport, Snapshot
    from swarmgpu.manager.placement import PlacementPlan, Planner
    from swarmgpu.manager.rebalance.moves import Proposal
    from swarmgpu.manager.rebalance.scrape import NodeScrape
    from swarmgpu.manager.services.grants import Ungranted
    from swarmgpu.manager.services.overshare import Watch


class Slot(StrEnum):
    """A value one step hands later ones (its field in ``CycleSession`` has the name)."""

    SNAPSHOT = "snapshot"  # the daemon: one consistent read of the cluster
    REPORT = "report"  # label sync: its writes and errors (the cycle's report)
    FACTS = "facts"  # label sync: facts per node, with this cycle's GPU health states
    HELD = "held"  # label sync: its node writes, held for a later write of the same node
    PLACEMENT = "placement"  # placement: this cycle's plan
    PLANNER = "planner"  # placement: the planner (its model, refused nodes, kept holdings)
    UNGRANTED = "ungranted"  # grants: services that see GPUs without a grant
    METRICS = "metrics"  # scrape: every node's metrics page
    MOVES = "moves"  # rebalance: the proposal, its moves started
    OVERSHARE = "overshare"  # observe: the over-share watch, updated this cycle


GIVEN = frozenset({Slot.SNAPSHOT})  # what the daemon puts in before the first step


class SessionError(RuntimeError):
    """A step read or wrote a slot against its declaration, or read one not written."""


T = TypeVar("T")


def _present(value: T | None, slot: Slot) -> T:
    """A written slot's value (a slot written is never None: its setter takes a value)."""
    if value is None:
        raise SessionError(f"{slot} has no value")
    return value


class _Declared:
    """What the step running now declared (``pipeline.Step``'s three attributes)."""

    def __init__(self, name: str, requires: frozenset[Slot], provides: frozenset[Slot]
                 ) -> None:
        self.name, self.requires, self.provides = name, requires, provides


class CycleSession:
    """One cycle's slots, typed; see the module's docstring for the rules."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._written: dict[Slot, str] = dict.fromkeys(GIVEN, "the daemon")
        self._step: _Declared | None = None
        self._snapshot = snapshot
        self._report: CycleReport | None = None
        self._facts: dict[str, NodeFacts] = {}
        self._held: HeldNodeWrites | None = None
        self._placement: PlacementPlan | None = None
        self._planner: Planner | None = None
        self._ungranted: list[Ungranted] = []
        self._scrapes: dict[str, NodeScrape] = {}
        self._moves: Proposal | None = None
        self._overshare: Watch | None = None

    # --- the rules ------------------------------------------------------------------
    def enter(self, name: str, requires: frozenset[Slot], provides: frozenset[Slot]) -> None:
        """A step starts: its reads and writes are checked against its declaration."""
        self._step = _Declared(name, requires, provides)

    def leave(self) -> list[Slot]:
        """The step ended; the slots it provides but did not write (``Pipeline.run``
        refuses a step that ran to its end without writing them)."""
        step, self._step = self._step, None
        if step is None:
            return []
        return sorted(s for s in step.provides if s not in self._written)

    def written(self) -> dict[Slot, str]:
        """Each slot written so far, and by which step."""
        return dict(self._written)

    def _read(self, slot: Slot) -> None:
        step = self._step
        if step is not None and slot not in step.requires:
            raise SessionError(f"step {step.name!r} reads {slot} without requiring it; add "
                               f"Slot.{slot.name} to its requires")
        if slot not in self._written:
            raise SessionError(f"{slot} is read before any step wrote it")

    def _write(self, slot: Slot) -> None:
        step = self._step
        if step is not None and slot not in step.provides:
            raise SessionError(f"step {step.name!r} writes {slot} without providing it; add "
                               f"Slot.{slot.name} to its provides")
        if slot in self._written:
            raise SessionError(f"{slot} is written twice in one cycle (by "
                               f"{self._written[slot]!r}, then again)")
        self._written[slot] = step.name if step is not None else "outside any step"

    # --- the slots --------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        self._read(Slot.SNAPSHOT)
        return self._snapshot

    @property
    def report(self) -> CycleReport:
        """Label sync's report: its writes and errors (the cycle's report)."""
        self._read(Slot.REPORT)
        return _present(self._report, Slot.REPORT)

    @report.setter
    def report(self, value: CycleReport) -> None:
        self._write(Slot.REPORT)
        self._report = value

    @property
    def facts(self) -> dict[str, NodeFacts]:
        """Node id -> facts as this cycle judges them: each GPU's health state applied (a
        failed GPU is unhealthy: nothing is placed on it, the health policy moves its
        holders), an unreachable agent's last good facts standing in."""
        self._read(Slot.FACTS)
        return self._facts

    @facts.setter
    def facts(self, value: dict[str, NodeFacts]) -> None:
        self._write(Slot.FACTS)
        self._facts = value

    @property
    def held(self) -> HeldNodeWrites | None:
        """Label sync's node writes, held for the next step's write of the same node (one
        write per node per cycle); None when nothing is held (dry-run)."""
        self._read(Slot.HELD)
        return self._held

    @held.setter
    def held(self, value: HeldNodeWrites | None) -> None:
        self._write(Slot.HELD)
        self._held = value

    @property
    def placement(self) -> PlacementPlan:
        """Placement's plan of this cycle (what it wrote, each service's decision)."""
        self._read(Slot.PLACEMENT)
        return _present(self._placement, Slot.PLACEMENT)

    @placement.setter
    def placement(self, value: PlacementPlan) -> None:
        self._write(Slot.PLACEMENT)
        self._placement = value

    @property
    def planner(self) -> Planner:
        """Placement's planner, kept across cycles: its workload model, the nodes Swarm
        refused, the holdings on failed GPUs it keeps for the health policy."""
        self._read(Slot.PLANNER)
        return _present(self._planner, Slot.PLANNER)

    @planner.setter
    def planner(self, value: Planner) -> None:
        self._write(Slot.PLANNER)
        self._planner = value

    @property
    def ungranted(self) -> list[Ungranted]:
        """The services on GPU nodes that see GPUs without a grant."""
        self._read(Slot.UNGRANTED)
        return self._ungranted

    @ungranted.setter
    def ungranted(self, value: list[Ungranted]) -> None:
        self._write(Slot.UNGRANTED)
        self._ungranted = value

    @property
    def scrapes(self) -> dict[str, NodeScrape]:
        """Node id -> its metrics page as scraped (authenticated or not, or why not)."""
        self._read(Slot.METRICS)
        return self._scrapes

    @scrapes.setter
    def scrapes(self, value: dict[str, NodeScrape]) -> None:
        self._write(Slot.METRICS)
        self._scrapes = value

    @property
    def gpu_metrics(self) -> dict[str, dict[str, GpuMetrics]]:
        """Node id -> GPU UUID -> metrics, from the usable pages (``scrapes``)."""
        return {nid: sc.result.samples_by_uuid for nid, sc in self.scrapes.items()
                if sc.result}

    @property
    def moves(self) -> Proposal:
        """The rebalancer's proposal of this cycle; its movers have run."""
        self._read(Slot.MOVES)
        return _present(self._moves, Slot.MOVES)

    @moves.setter
    def moves(self, value: Proposal) -> None:
        self._write(Slot.MOVES)
        self._moves = value

    @property
    def overshare(self) -> Watch:
        """Since when each holder has been over its GPU share (updated this cycle)."""
        self._read(Slot.OVERSHARE)
        return _present(self._overshare, Slot.OVERSHARE)

    @overshare.setter
    def overshare(self, value: Watch) -> None:
        self._write(Slot.OVERSHARE)
        self._overshare = value
