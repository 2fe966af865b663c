"""What a preemptor's plan says of the preemption step's decision (the map, `plan`,
`status`): the same words from the daemon's cycle and from ``oneshot_plan.plan_as_daemon``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from loguru import logger

from swarmgpu.core.peertext import peer_text
from swarmgpu.core.saidonce import SaidOnce
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


def unread_note(name: str, why: str) -> str:
    """What holder ``name``'s plan (`plan`, `status`, the map) and the daemon's log say
    while a preemption would skip it: its victim write cannot read its spec (``why``)."""
    return (f"preemption: {name} holds GPUs but is not taken as a victim while its spec "
            f"cannot be read ({why}): a preemptor may wait for GPUs it holds; fix: make "
            f"that field of {name}'s spec what Docker sends (re-deploy or re-create it)")


def note_unread(plan: PlacementPlan, by_name: Mapping[str, int],
                unread: Mapping[str, str]) -> None:
    """Each holder of ``unread`` (``victimspec.unread_victims``) says why on its plan
    (``by_name``: ``note_on``'s)."""
    for name, why in sorted(unread.items()):
        note_on(plan, by_name, name, unread_note(name, why))


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


# A use taken as far above any guarantee in ``UnknownVictims.find``'s second choice.
_FAR_GPUS = 1_000_000.0


class UnknownVictims:
    """Preemptors that preempted nothing because the only victims they had sit in a
    queue whose use is not known this cycle (``queues.unknown_of``): guarded and reclaim
    victims of it are taken by neither rule then. Each one's plan says so each cycle (the
    map, `plan`, `status`), and the daemon's log once while it lasts. A preemptor whose
    own queue's use is unknown is ``note_unknown_use``'s."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[str, str]] = {}  # preemptor -> (queue, why unknown)
        self.said: SaidOnce[tuple[str, str]] = SaidOnce()

    def find(self, plan: PlacementPlan, chosen: list[Preemption],
             choose: Callable[[PlacementPlan], list[Preemption]]) -> None:
        """After ``chosen`` (the round on ``plan``): choose again (``choose``, acting on
        nothing, ``chosen`` taken first as they were: ``choose_preemptions``' ``first``)
        with each unknown queue's use taken as far above its guarantee; a pending
        preemptor that then takes a victim of such a queue preempted nothing for it
        alone. Chosen anew, one of ``chosen`` took such a victim there instead, and the
        one it left its own victims to was never said held back. Only where a queue's
        use is unknown (a fault): no second round else."""
        self.found = {}
        rows = {q["queue"]: q for q in plan.queues}
        unknown = {q for q, row in rows.items() if row.get("used_unknown")}
        got = {p.service for p in chosen}
        waiting = {sp.name for sp in plan.services if sp.status == Status.PENDING
                   and isinstance(sp.request, GpuRequest) and sp.name not in got
                   and not (sp.request.queue and unknown_of(sp.request.queue, rows))}
        if not unknown or not waiting:
            return
        known = [{**row, "used_unknown": None, "used_gpus": _FAR_GPUS}
                 if row["queue"] in unknown else row for row in plan.queues]
        for p in choose(replace(plan, queues=known)):
            qs = sorted({q for v in p.victims for q in (v.quota or "", v.guard) if q in unknown})
            if p.service in waiting and qs:
                self.found[p.service] = (qs[0], str(rows[qs[0]]["used_unknown"]))

    def note(self, plan: PlacementPlan, log: bool = False) -> None:
        """``note_unknown_use``, and each preemptor ``find`` found says why it preempted
        nothing; ``log`` (the daemon's cycle): in the log too, once while it lasts."""
        note_unknown_use(plan)
        by_name = {sp.name: i for i, sp in enumerate(plan.services)}
        if log:
            self.said.begin()
        for name, (q, why) in sorted(self.found.items()):
            said = (f"preemption: {name} preempts nothing this cycle: its victims would be "
                    f"of queue {q}, whose use is not known this cycle ({why}), and no work "
                    "of a queue whose use is unknown is preempted by its guarantee or "
                    "reclaimed from; fix: this is a swarmgpu fault, report it with the "
                    "daemon's log, which has the traceback")
            note_on(plan, by_name, name, said)
            if log and self.said.fresh((name, q)):
                logger.bind(service=name).warning("{}", said)
        if log:
            self.said.end()
        self.found = {}  # said for the round ``find`` read: never for a later plan
