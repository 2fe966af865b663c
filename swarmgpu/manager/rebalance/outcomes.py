"""What the movers say of their moves: each outcome in ``recent``, the log and
``swarmgpu_moves``, and a move's end (done, rolled back, failed) said once.

Once is kept in Swarm, not only in this daemon's memory: the move's record carries the
outcome said (``record.mark_said``, written just before it is said), so a daemon
restarted before the record goes, or a new leader, ends the move saying nothing again.
A mark that fails leaves the outcome unsaid (the step is tried again next cycle); a
kill between the mark and the saying loses one log line, never says it twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from loguru import logger

from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.rebalance.moves import MoveRecord, Outcome
from swarmgpu.manager.rebalance.record import MoveState, mark_said, swarm_id
from swarmgpu.swarm.client import SwarmError

ENDS = (Outcome.DONE, Outcome.ROLLED_BACK, Outcome.FAILED)


class Outcomes:
    """One mover's outcomes: ``recent`` (the API's), the metric, the log; ``ended``: the
    moves whose end this daemon said while their record stays (the record says it too)."""

    def __init__(self, writes: Writes, prefix: str, clock: Callable[[], float],
                 metrics: DaemonMetrics | None) -> None:
        self.writes = writes
        self.prefix = prefix
        self.clock = clock
        self.metrics = metrics
        self.recent: deque[MoveRecord] = deque(maxlen=50)
        self.ended: set[str] = set()

    def record(self, service: str, src: str, dst: str, reason: str, outcome: Outcome,
               detail: str = "", nodes: tuple[str, str] = ("", "")) -> None:
        """``nodes``: the source's and the target's node IDs (``MoveRecord``)."""
        self.recent.append(MoveRecord(self.clock(), service, src, dst, reason, outcome, detail,
                                      *nodes))
        if self.metrics is not None:
            self.metrics.moves.labels(outcome=str(outcome)).inc()
        log = logger.bind(service=service)
        if outcome is Outcome.IGNORED:
            log.warning("{} ignored: {}{}", service, reason, f" ({detail})" if detail else "")
            return
        msg = "move {} -> {} {}: {}{}"
        args = (src, dst, outcome, reason, f" ({detail})" if detail else "")
        if outcome in (Outcome.FAILED, Outcome.ROLLED_BACK):
            log.warning(msg, *args)
        else:
            log.info(msg, *args)

    def say(self, st: MoveState, outcome: Outcome, detail: str = "") -> None:
        if outcome in ENDS:
            return self.end(st, outcome, detail)
        self.record(st.service, st.source_host, st.target_host, st.reason, outcome, detail,
                    (st.source, st.target))

    def end(self, st: MoveState, outcome: Outcome, detail: str) -> None:
        """A move's outcome, said once, before its record's removal (the last write): a
        removal that fails is retried next cycle with nothing said again (the retry finds
        the move label gone: its reason would be wrong), by this daemon or another (the
        record's ``said``, marked first)."""
        if st.said or st.id in self.ended:
            return
        if swarm_id(st.service_id):  # a failed mark: nothing said, the step tried again
            mark_said(self.writes, self.prefix, st.service_id, str(outcome), {st.id})
        self.ended.add(st.id)
        self.record(st.service, st.source_host, st.target_host, st.reason, outcome, detail,
                    (st.source, st.target))

    def start_failed(self, service: str, sid: str, src: str, dst: str, reason: str,
                     wrote: bool, detail: str, nodes: tuple[str, str] = ("", "")) -> None:
        """A start that raised: said failed, its one outcome. Its record may have landed
        (``record.failed_if_raised`` put its id in ``ended``): marked said first, best
        effort, so the roll-back a later daemon makes says nothing again."""
        try:
            if wrote:
                mark_said(self.writes, self.prefix, sid, str(Outcome.FAILED), self.ended)
        except SwarmError:
            pass  # this daemon's memory still has it (``ended``)
        self.record(service, src, dst, reason, Outcome.FAILED, detail, nodes)
