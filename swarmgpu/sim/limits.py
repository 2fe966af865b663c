"""The daemon's budgets on the replay's moves (``simulate --move-limits daemon``).

Without them (``--move-limits replay``, the default) a replay's moves spend what
``--rebalance-moves`` (moves per 100 arrived pods) allows as it comes: the swarmgpu
replay plans once 5 are allowed and makes them all in one call, as a daemon with an
operator's ``max_moves_per_cycle: 5`` and no ``max_moves_per_node`` would, and every
move ends at once. With them each call of a replay's defragmenter or rescuer is one
daemon cycle whose moves pass the daemon's own rule (``rebalance.admission``'s
``over_budget_on``, which ``admit`` and ``Mover.start`` ask) with the daemon's defaults
(``RebalanceConfig``: ``max_moves_per_cycle`` 1, ``max_moves_per_node`` 1). With
``flight`` > 0 a move stays in flight for that many arrivals after it starts: the rule
counts it on both budgets, on its source and its target, as the daemon counts a move in
flight; its share is on the target at once (what it holds on the source is not kept).

Not modelled (the no-departure replay has no clock, no metrics, no constraints): the
daemon's limits on targets (metrics known, constraints, cooldowns) and its fragmentation
rations (moves per hour and per 100 placements; ``--rebalance-moves`` stands for them).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from swarmgpu.allocator.defrag import Ban, DefragMove
from swarmgpu.core.rebalanceconfig import RebalanceConfig
from swarmgpu.manager.rebalance.admission import over_budget_on
from swarmgpu.manager.rebalance.record import MoveState

MOVE_LIMITS = ("replay", "daemon")
# Nodes no replay has: what a rescue's moves touch before its plan names them (a rescue
# moves tasks off one node, each to another).
_SOURCE = "\0source"


def _flight(source: str, target: str, n: int) -> MoveState:
    """A move in flight, as the rule reads it (its nodes; the rest is not read)."""
    return MoveState(id=f"sim-{n}", service="", source=source, source_host="",
                     source_uuids=(), source_milli=(), target=target, target_host="",
                     target_uuids=(), target_milli=(), surge=False, replicas=1,
                     max_replicas=0, started_at=0.0, trigger="", reason="")


@dataclass
class DaemonLimits:
    """The daemon's budgets, per call of a replay's mover; ``now`` (arrivals so far) is
    set by the replay before each arrival's calls."""

    cfg: RebalanceConfig = field(default_factory=RebalanceConfig)
    flight: int = 0  # arrivals a move stays in flight (0: it ends at once)
    now: int = 0
    _flying: list[tuple[int, MoveState]] = field(default_factory=list)
    _started: int = 0
    admitted: list[AbstractSet[str]] = field(default_factory=list)  # this call's

    def in_flight(self) -> list[MoveState]:
        """The moves still in flight now."""
        self._flying = [(end, st) for end, st in self._flying if end > self.now]
        return [st for _end, st in self._flying]

    def call(self) -> None:
        """A new call (a daemon cycle): nothing admitted in it yet."""
        self.admitted = []

    def room(self, nodes: Sequence[AbstractSet[str]]) -> int:
        """How many moves the rule admits now in this call, each touching the nodes of
        ``nodes`` in turn (at most ``len(nodes)``)."""
        flying, n = self.in_flight(), 0
        while n < len(nodes) and over_budget_on(
                nodes[n], flying, [*self.admitted, *nodes[:n]], self.cfg) is None:
            n += 1
        return n

    def cycle_room(self, budget: int) -> int:
        """Moves a call may make, of ``budget``: each on nodes no other touches, the
        per-cycle budget (the nodes are checked as the search finds them, ``check``)."""
        return self.room([{f"\0a{i}", f"\0b{i}"} for i in range(max(budget, 0))])

    def rescue_room(self, budget: int) -> int:
        """Moves a rescue may make in this call, of ``budget``: its moves leave one node,
        each for another (the plan's own nodes are checked once it names them,
        ``admit_all``)."""
        return self.room([{_SOURCE, f"\0t{i}"} for i in range(max(budget, 0))])

    def admit(self, source: str, target: str) -> bool:
        """Whether a move from ``source`` to ``target`` passes the rule now; if so it is
        counted as admitted in this call and, with ``flight``, in flight from now."""
        if over_budget_on({source, target}, self.in_flight(), self.admitted,
                          self.cfg) is not None:
            return False
        self.admitted.append(frozenset({source, target}))
        if self.flight > 0:
            self._started += 1
            self._flying.append((self.now + self.flight,
                                 _flight(source, target, self._started)))
        return True

    def admit_all(self, moves: Sequence[tuple[str, str]]) -> bool:
        """Whether every (source, target) of ``moves`` passes, in order; all are then
        counted, else none is."""
        saved = (list(self._flying), list(self.admitted), self._started)
        for src, dst in moves:
            if not self.admit(src, dst):
                self._flying, self.admitted, self._started = saved
                return False
        return True

    def check(self) -> Callable[[DefragMove], Ban | None]:
        """``FragmentationMoves.plan``'s ``check``: a move the rule refuses is banned from
        that target node (the search then tries another, as the daemon's pass does)."""
        def check(mv: DefragMove) -> Ban | None:
            key: Hashable = mv.key
            return None if self.admit(mv.old.node, mv.new.node) else (key, mv.new.node, ())
        return check
