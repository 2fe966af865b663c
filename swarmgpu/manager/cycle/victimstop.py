"""A preemption's victims stopped as one (``preemption.Preempter``'s stop): their
holdings read again from their node, each one's spec written (``victimspec``), then all
their gates closed in one node write. A fault before that write stops none; after it,
the stop is half made, counted, and judged from Swarm next cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from loguru import logger

from swarmgpu.manager.cycle.victimspec import renewed, unwritten, victim_spec
from swarmgpu.manager.engine.actuator import Why, Writes
from swarmgpu.manager.engine.stop import read_cut
from swarmgpu.manager.placement import assign_key, gate_key
from swarmgpu.manager.placement.ledger import read_ledger
from swarmgpu.manager.placement.preempt import Candidate, Preemption
from swarmgpu.manager.placement.preempted import Preempted
from swarmgpu.swarm.client import BudgetCut, SwarmClient, SwarmError, SwarmService
from swarmgpu.swarm.specread import UnreadSpec


def close_gates(gate: Writes, swarm: SwarmClient, prefix: str, p: Preemption,
                victims: list[Candidate], now: float, closing: list[bool]) -> bool | None:
    """Close the victims' gates on their node in one write, after reading their
    holdings again and writing each one's spec (its device lists gone, the record; no
    task restarts): a fault before that write stops none (a spec written is
    placement's to restore: the victim still holds). True closed, False none, None
    half made (the gate write failed: its outcome unknown, counted). ``closing``:
    appended to once the gate write is tried."""
    log = logger.bind(service=p.service)
    try:  # the holdings as Swarm has them now, not as the snapshot had them
        node = swarm.node(p.node_id)
    except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
        raise read_cut() from exc
    except SwarmError as exc:
        log.error("preemption: cannot read node {}: {}", p.node_id[:12], exc)
        return False
    if node.unread:  # (its gate write is refused so: the victims' specs not written first)
        log.error("preemption of {} for {} not made: {}", names(victims), p.service,
                  node.unread)
        return False
    ledger = read_ledger([node], prefix)
    gone = [v.service for v in victims if (h := ledger.get(v.service, {}).get(
        p.node_id)) is None or not set(v.uuids) <= set(h.uuids)]
    if gone:
        log.warning("preemption: {} no longer holds what was decided on {}: none of "
                    "{} stopped for {} (tried again next cycle)", ", ".join(gone),
                    p.hostname, names(victims), p.service)
        return False
    made = Preempted(p.service, p.priority, now, p.node_id, p.service_id)  # (the record)
    # each victim's names the GPUs of it the hold names: a one-shot spares only those
    records = {v.service: victim_record(made, p, ledger[v.service][p.node_id].uuids)
               for v in victims}
    why = Why("preempt", f"room for {p.service} (priority {p.priority}) on {p.hostname}")
    # Through the actuator's gate, as every write; preemption's own dry-run checks
    # ran before this (``cycle``), the gate's refuses whatever slipped past them.
    # Each read and checked before any is written: a job's write runs it anew, so one
    # written before another's fault was stopped alone for a preemption not made.
    renew: list[SwarmService | None] = []
    try:  # (``v``: the victim whose read or write failed; a loop's, not a comprehension's)
        for v in victims:  # a task of it waiting for a node: replaced by the write
            renew.append(renewed(swarm, v.service_id))
        for v, r in zip(victims, renew, strict=True):
            gate.service_spec(v.service_id, victim_spec(prefix, p.node_id, records[v.service],
                                                        r), why)
    except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
        raise read_cut() from exc
    except (SwarmError, UnreadSpec) as exc:
        return unwritten(log, v.service, names(victims), p.service, exc)
    drop = {k for v in victims for k in (assign_key(prefix, v.service),
                                         gate_key(prefix, v.service))}
    closing.append(True)
    try:
        gate.node_labels(p.node_id, lambda cur: {k: val for k, val in cur.items()
                                                 if k not in drop}
                         if drop & cur.keys() else None, why)
    except SwarmError as exc:
        # Half made: the specs landed, and this one's outcome is unknown (a timeout
        # after the engine made it stopped the victims), so their seconds stay
        # spent; a victim still holding next cycle is placement's, which keeps it.
        log.error("preemption of {} for {} half made (specs written, the gate write "
                  "failed), counted in the hour and judged from Swarm next cycle: {}",
                  names(victims), p.service, exc)
        return None
    for v in victims:
        logger.bind(service=v.service).warning(
            "{} on {}: its gate is closed, Swarm stops its task; it is placed again "
            "when capacity frees", made.reason(), p.hostname)
    return True


def victim_record(made: Preempted, p: Preemption, uuids: Sequence[str]) -> str:
    """A victim's ``<p>state.preempted`` record: ``made``, with those of its GPUs
    (``uuids``, its holding on the node) that ``p``'s hold names (``Preemption.held``; none
    held: all, as ``Nominations.nominate`` holds them). The daemon's hold spares only
    those of its stopping task for the preemptor (``StoppingGpus.holds``); a one-shot
    read all of them so (``recorded_nominations``): its plan gave the preemptor GPUs, or
    kept others waiting for them, where the daemon's did not."""
    held = set(p.held) if p.held else set(uuids)
    return replace(made, held=tuple(u for u in uuids if u in held)).to_json()


def names(victims: list[Candidate]) -> str:
    return ", ".join(v.service for v in victims)
