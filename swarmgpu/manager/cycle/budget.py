"""The daemon's cycle within one engine budget, so that systemd's watchdog ping after it
comes in time.

Each engine request ends within its own deadline (``swarm.answerjson``: 60 s for the
daemon's 30 s client), but a cycle makes many: three reads each just under it took
three minutes, past the 90 s of cycle the 120 s watchdog allows after the 30 s interval,
and systemd restarted the daemon. So a cycle has one budget (``engine_budget_s``:
WatchdogSec= less the interval, less ``BUDGET_SLACK_S`` for the writes in flight as it
passes, less ``answerjson.WRITE_FLOOR_S``, the most a write's request runs past that
slack; without a watchdog, the one docs/systemd.md asks for). Within it each read's
deadline is cut to what is left, and none is sent once it has passed
(``answerjson.CycleBudget``); the write gate starts no write past it (``BudgetGate``,
beside the stop request's: a write in flight is never refused midway, its own reads
included, but each of its requests gets what is left of the budget and
``BUDGET_SLACK_S``, ``answerjson.WRITE_FLOOR_S`` at least, never past the budget, the
slack and one floor (the watchdog's line; one due past it is not sent): past it, it fails as a
timeout, said so, ``answerjson.WriteCut`` (it ends the cycle as over budget,
``BudgetGate.ended``, not as the engine's fault, whether it ended its step or the step
caught it and went on: the budget notes each, ``CycleBudget.write_cut``); before, each took its own
60 s and a slow engine held the cycle past the watchdog; one that undoes a write of the
cycle's, made outside the budget, is let through: the over-share restart's reopened gate). A read
cut so is no object's failure: its reader raises ``stop.read_cut`` on the client's
``BudgetCut``, a ``BudgetEnded`` as ``OverBudget`` is, which every reader that fails
one object lets through (none said failed, unread or ungranted for it). The cycle then
ends there, no further step run (none where the snapshot's read was cut), its report
not kept, said in one line (``over_budget``), counted as no engine error
(``kind="budget"``) and told by /healthz; the next cycle reads afresh with a budget of
its own. ``run --once`` has none unless a watchdog waits for it (``Daemon.once``).
The nodes' reads (agents' facts, metrics pages: ``engine.stop.read_each``, parallel)
are bounded so too: each one's deadline cut to what is left, none started past it, a
read cut so ``BudgetEnded`` (no agent taken for unreachable). A batch of writes it ends
keeps what its landed writes made (``write_each``'s ``taken``): counted and recorded,
only the writes left are "not made".
"""

from __future__ import annotations

import math

from swarmgpu.manager.engine.stop import BudgetEnded, StopRequest
from swarmgpu.swarm.answerjson import WRITE_FLOOR_S, CycleBudget, budgeted, write_cut

# What the watchdog's allowance keeps back past the budget: the writes in flight as it
# passes finish (at most 8, each one engine round trip, some 25 ms on a sound engine).
BUDGET_SLACK_S = 15.0
MIN_BUDGET_S = 10.0  # (a watchdog it would not fit is refused at start: watchdog_problem)


def engine_budget_s(interval_s: float, watchdog_s: float | None) -> float:
    """The most one cycle may take: the watchdog (``watchdog_s``, WatchdogSec=; None: the
    2 x interval + 60 s docs/systemd.md asks for) less the interval before the cycle,
    less ``BUDGET_SLACK_S``, less ``answerjson.WRITE_FLOOR_S``; ``MIN_BUDGET_S`` at
    least. 70 s for the unit's 120 s and 30 s. The floor is the worst a write's request
    runs past the slack (``CycleBudget.write_left`` gives none past budget, slack and
    one floor): without it here, a request started as the slack ended got its 5 s
    floor and the ping came 5 s past the watchdog."""
    dog = watchdog_s if watchdog_s is not None else 2 * interval_s + 60
    return max(dog - interval_s - BUDGET_SLACK_S - WRITE_FLOOR_S, MIN_BUDGET_S)


def secs(s: float) -> str:
    """``s`` seconds as systemd's WatchdogSec= takes them, to the microsecond it passes
    (``:g`` rounds to six digits: 59999999 µs said "60")."""
    return f"{s:.6f}".rstrip("0").rstrip(".")


def _secs_to(s: float, *, up: bool) -> str:
    """``s`` seconds to the microsecond, rounded ``up`` or down: a bound named as the fix
    passes the check (rounded to six digits, 29.999999 s said "30", a value refused)."""
    us = s * 1e6
    # (a thousandth of a microsecond of float noise is no microsecond more)
    return secs((math.ceil(us - 1e-3) if up else math.floor(us + 1e-3)) / 1e6)


def watchdog_problem(interval_s: float, watchdog_s: float | None) -> str | None:
    """Why the daemon cannot run under ``watchdog_s`` (WatchdogSec=), else None. It pings
    after each cycle, so two pings may be the interval and a whole cycle apart: the
    budget, ``MIN_BUDGET_S`` at least, its slack and one write floor. Under a shorter
    watchdog systemd kills the daemon in a slow cycle's writes, restart after restart:
    refused at start (a warning was missed). Not pinged during the cycle instead: the
    ping says a cycle ended, which a hung one never does."""
    least = interval_s + MIN_BUDGET_S + BUDGET_SLACK_S + WRITE_FLOOR_S
    if watchdog_s is None or watchdog_s >= least:
        return None
    most = watchdog_s - (MIN_BUDGET_S + BUDGET_SLACK_S + WRITE_FLOOR_S)
    lower = (f", or lower sync.interval_s to {_secs_to(most, up=False)}s or less"
             if most >= 1 else "")
    return (f"WatchdogSec={secs(watchdog_s)}s is too short for sync.interval_s {interval_s:g}s: "
            f"the daemon pings the watchdog after each cycle, and pings may be {least:g} s "
            f"apart (the interval, the shortest engine budget of {MIN_BUDGET_S:g} s and "
            f"{BUDGET_SLACK_S + WRITE_FLOOR_S:g} s for the writes in flight), so systemd "
            f"would kill it mid-cycle; set WatchdogSec= to at least {_secs_to(least, up=True)}s "
            f"({2 * interval_s + 60:g}s, 2 x interval + 60 s, as docs/systemd.md asks; "
            f"systemctl edit swarmgpu.service){lower}")


class OverBudget(BudgetEnded):
    """A write not made: its cycle's engine budget has passed. A ``BudgetEnded``: it
    ends the step and the cycle (the writes in flight finish; ``write_each`` counts the
    rest), as a read cut there does (``read_cut``)."""


class BudgetGate:
    """One cycle's ``budget`` as its write gate and its pipeline see it. ``at``: where
    the budget ended the cycle other than in a read (``budget.cut`` says that one)."""

    def __init__(self, budget_s: float) -> None:
        self.budget = CycleBudget(budget_s, BUDGET_SLACK_S)
        self.writes = StopRequest()  # (counts the writes left: ``write_each``)
        self.at: str | None = None

    def check(self) -> None:
        """Before a write: ``OverBudget`` once the budget has passed (that write left),
        but for one made outside it (``answerjson.outside_budget``: one that undoes a
        write of the cycle's, as the over-share restart's reopened gate)."""
        if self.budget.passed() and budgeted():
            self._end("before a write")
            self.writes.leave(1)
            raise OverBudget(self.writes)

    def stops(self) -> bool:
        """Before a step: whether the budget has passed (then no further step runs)."""
        if self.budget.passed():
            self._end("between two steps")
            return True
        return False

    def ended(self, exc: BaseException | None = None) -> bool:
        """Whether the budget refused anything: a read, a write or a step (a cycle done
        past it, with nothing refused, is a cycle done), or cut a write in flight: ``exc``
        (its slack's ``answerjson.WriteCut``, that ended a step) or any other of the
        cycle's, caught by the step that made it (``CycleBudget.write_cut``)."""
        cut = write_cut(exc)
        what = cut.what if cut is not None else self.budget.write_cut
        if what is not None:
            self._end(f"writing ({what}, cut past the slack)")
        return self.budget.cut is not None or self.at is not None

    def _end(self, at: str) -> None:
        if self.at is None:  # (the first: writes in parallel may each come here)
            self.at = at


def over_budget(gate: BudgetGate, interval_s: float, watchdog_s: float | None) -> str:
    """The one line that says ``gate``'s cycle ended at its budget: what it was reading,
    its time, the budget's making and the fix."""
    budget = gate.budget
    doing = f"reading {budget.cut}" if budget.cut is not None else gate.at or "-"
    dog = (f"WatchdogSec= {secs(watchdog_s)} s" if watchdog_s is not None else
           f"the {2 * interval_s + 60:g} s WatchdogSec= docs/systemd.md asks for")
    left = f" ({gate.writes.left} write(s) not made)" if gate.writes.left else ""
    return (f"cycle ended at its engine budget, {budget.took_s():.1f} s in, while "
            f"{doing}: a cycle may take {budget.budget_s:g} s ({dog}, less "
            f"sync.interval_s {interval_s:g} s and {BUDGET_SLACK_S + WRITE_FLOOR_S:g} s) "
            "so that the "
            f"watchdog's ping comes in time; no further step ran and no write was "
            f"made past it{left}; the next cycle reads afresh; check the engine "
            "and any proxy in front of it (is `docker info` slow there?)")
