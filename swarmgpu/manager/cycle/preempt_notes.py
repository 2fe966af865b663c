"""What a preemptor's plan says of the preemption step's decision (the map, `plan`,
`status`): the same words from the daemon's cycle and from `plan_as_daemon`."""

from __future__ import annotations

from collections.abc import Mapping

from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.placement.preempt import Preemption


def dry_note(p: Preemption) -> str:
    """What a preemptor's plan says of ``p`` in dry-run (the map, `plan`, `status`)."""
    return f"would {p.describe()} (preemption.dry_run)"


def raised_note(name: str, exc: Exception) -> str:
    """What preemptor ``name``'s plan says when choosing its victims raised (the map,
    `plan`, `status`): it alone preempts nothing, as in the daemon's cycle."""
    return (f"preemption: choosing victims for {name} failed unexpectedly "
            f"({type(exc).__name__}: {peer_text(str(exc), 200)}): it preempts nothing, the "
            "other preemptions go on; fix: a bug or input swarmgpu does not foresee, "
            "report it with the daemon's log, which has the traceback")


def note_on(plan: PlacementPlan, by_name: Mapping[str, int], name: str, note: str) -> None:
    """``note`` on service ``name``'s plan, where the plan has it."""
    i = by_name.get(name)
    if i is not None:
        plan.services[i] = plan.services[i].noted(note)
