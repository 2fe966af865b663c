"""The preemption hour's writes to the swarm object (``preempt_budget.SpentHour`` keeps
it in memory): stored before the victims' writes, corrected after them. Split out of
``preemption``, whose ``Preempter`` spends it and hands it here to store."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from loguru import logger

from swarmgpu.manager.cycle.preempt_budget import SpentHour
from swarmgpu.manager.cycle.victimlist import with_victims
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.engine.stop import Stopped
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.swarm.client import SwarmClient, SwarmError


@dataclass
class HourStore:
    """``spent`` (the ``Preempter``'s own) as its writes store it; ``dry_run``: whether
    the daemon or preemption is in dry-run now (asked at each write: its config's)."""

    spent: SpentHour
    prefix: str
    dry_run: Callable[[], bool]

    def write(self, swarm: SwarmClient, victims: Sequence[str] = (), now: float = 0.0,
              ) -> None:
        """The hour stored, with ``victims`` (their service ids) stopped at ``now`` added
        to the victims' list in the same write (``victimlist``: a record names them)."""
        def compute(cur: Mapping[str, str]) -> Mapping[str, str] | None:
            new = self.spent.labels(cur)
            if not victims:
                return new
            return with_victims(cur if new is None else new, self.prefix, victims, now)

        Writes(swarm, dry_run=self.dry_run(), who="preemption",
               prefix=self.prefix).swarm_labels(compute)
        self.spent.stored()

    def store(self, swarm: SwarmClient) -> None:
        """The correction after the victims' writes: not stored, said and tried again
        (``spent.given`` keeps what was given back until a write takes it out)."""
        try:
            self.write(swarm)
        except SwarmError as exc:
            logger.warning("preemption: cannot store the budget hour: {}", exc)

    def reserve(self, swarm: SwarmClient, p: Preemption, tenant: str, ids: Sequence[str],
                now: float) -> bool:
        """Spend the victims of ``p`` about to be stopped (``ids``: their service ids,
        named in the victims' list), and store the hour, before their writes. Stored
        after them, a daemon stop asked in between (the write gate then refuses that
        store) left a restarted daemon or the next leader counting fewer than were
        stopped, free to stop more than ``max_per_hour``. A stop asked before
        the correction (``Preempter.cycle``) leaves the hour over-counted until those
        seconds leave it: the safe side. Not stored: none is stopped now (tried again next
        cycle)."""
        for _ in ids:
            self.spent.spend(now, tenant)
        try:
            self.write(swarm, ids, now)
        except (SwarmError, Stopped) as exc:
            self.spent.release(now, tenant, len(ids))
            # (not stored: given back, and the step ends: the cycle's budget, or the term
            # ended, whose daemon may lead again with this memory)
            if isinstance(exc, Stopped):
                raise
            logger.bind(service=p.service).error(
                "preemption: not {} now, the budget hour cannot be stored first (tried "
                "again next cycle): {}", p.describe(), exc)
            return False
        return True
