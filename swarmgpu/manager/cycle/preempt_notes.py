"""What a preemptor's plan says of the preemption step's decision (the map, `plan`,
`status`): the same words from the daemon's cycle and from `plan_as_daemon`."""

from __future__ import annotations

from collections.abc import Mapping

from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.placement.preempt import Preemption
from swarmgpu.manager.placement.queues import unknown_of
from swarmgpu.manager.placement.records import Status
from swarmgpu.manager.services.requests import GpuRequest


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


def note_unknown_use(plan: PlacementPlan) -> None:
    """Each waiting service's plan whose queue (or one of its tenant's) has a use not
    known this cycle says it reclaims nothing by its guarantee this cycle; one its
    queue's max already holds back says why there (``QueueBook``)."""
    rows = {q["queue"]: q for q in plan.queues}
    blocked = {n for q in plan.queues for n in q.get("blocked", ())}
    for i, sp in enumerate(plan.services):
        r = sp.request
        if sp.status != Status.PENDING or not isinstance(r, GpuRequest) or not r.queue \
                or sp.name in blocked:
            continue
        q = unknown_of(r.queue, rows)
        if q is not None:
            plan.services[i] = sp.noted(
                f"preemption: queue {q}'s use is not known this cycle "
                f"({rows[q]['used_unknown']}), so {sp.name} reclaims no GPUs by queue "
                f"{r.queue}'s guarantee this cycle; fix: this is a swarmgpu fault, report "
                "it with the daemon's log, which has the traceback")
