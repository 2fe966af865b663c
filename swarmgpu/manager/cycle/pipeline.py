"""The daemon's cycle as a pipeline of declared steps.

A ``Step`` says what it reads (``requires``) and what it hands later steps
(``provides``), as ``session.Slot`` names. ``Pipeline`` checks the order once, when the
daemon is wired (before any cycle): a step that requires what no earlier step provides
is refused, naming the step, the slot and the step that provides it (or that none
does); so is a slot two steps provide, or two steps of one name. Each cycle it then runs
the steps in order on one ``CycleSession``, which holds each step to its declaration.

After the scheduling frameworks that run plugins on a session per cycle (KAI-Scheduler's
actions on a session opened from a snapshot), with the order checked rather than stated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from swarmgpu.manager.cycle.session import GIVEN, CycleSession, SessionError, Slot


class PipelineError(ValueError):
    """The steps cannot run in this order (the daemon refuses to start its cycles)."""


class Step(Protocol):
    """One step of the daemon's cycle (leader only)."""

    name: str  # short, unique in the pipeline; in logs and errors
    requires: frozenset[Slot]  # slots an earlier step (or the daemon) must have written
    provides: frozenset[Slot]  # slots this step writes, every cycle it runs to its end

    def run(self, session: CycleSession) -> None:
        """Do this cycle's part: read what it requires, write what it provides."""

    def stand_by(self) -> None:
        """This daemon is no longer the leader: drop what a new term must read again
        from Swarm (the default keeps everything)."""
        return None


def check_order(steps: Sequence[Step]) -> None:
    """PipelineError naming every step whose requirements no earlier step meets."""
    errors: list[str] = []
    by: dict[Slot, str] = dict.fromkeys(GIVEN, "the daemon")
    names: set[str] = set()
    for i, step in enumerate(steps):
        if step.name in names:
            errors.append(f"two steps are named {step.name!r}")
        names.add(step.name)
        for slot in sorted(step.requires - by.keys()):
            later = [s.name for s in steps[i + 1:] if slot in s.provides]
            errors.append(
                f"step {step.name!r} requires {slot}, which no earlier step provides: "
                + (f"{later[0]!r} provides it later; run {step.name!r} after it" if later
                   else "no step provides it; add the step that does"))
        for slot in sorted(step.provides):
            if slot in by:
                errors.append(f"steps {by[slot]!r} and {step.name!r} both provide {slot}")
            else:
                by[slot] = step.name
    if errors:
        raise PipelineError("; ".join(errors))


class Pipeline:
    """The daemon's steps, their order checked (``check_order``) when it is built."""

    def __init__(self, steps: Sequence[Step]) -> None:
        check_order(steps)
        self.steps: tuple[Step, ...] = tuple(steps)

    def run(self, session: CycleSession, *, stop: Callable[[], bool] = lambda: False,
            after: Callable[[Step], None] = lambda _step: None) -> str | None:
        """Each step in order on ``session``; ``after(step)`` once each has run. The
        first step always runs; before each later one, ``stop()`` can end the cycle (the
        daemon's signal: the step in progress finishes, no new one starts): then the
        name of the first step not run, else None. A step's exception ends the cycle,
        after ``after`` ran for it."""
        for i, step in enumerate(self.steps):
            if i and stop():
                return step.name
            try:
                session.enter(step.name, step.requires, step.provides)
                try:
                    step.run(session)
                finally:
                    missing = session.leave()
                if missing:
                    raise SessionError(f"step {step.name!r} declares it provides "
                                       f"{', '.join(missing)} but did not write it")
            finally:
                after(step)
        return None

    def stand_by(self) -> None:
        """Not the leader: each step drops what a new term reads again."""
        for step in self.steps:
            step.stand_by()

    def describe(self) -> list[str]:
        """One line per step: ``name: requires -> provides`` (the daemon logs it)."""
        def names(slots: frozenset[Slot]) -> str:
            return ", ".join(sorted(slots)) or "-"

        return [f"{s.name}: {names(s.requires)} -> {names(s.provides)}" for s in self.steps]
