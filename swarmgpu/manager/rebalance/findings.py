"""What the mover says and mends of a verdict's findings (``verdict.py``): move labels
the daemon did not write (forged), records naming another service (mismatched) and
records that cannot be read, each said once while it lasts (``report``); a forged label
removed from its own service's spec (``repair``; a job's is left, and dry-run writes
nothing: the actuator's gate).
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from swarmgpu.core.peertext import peer_text
from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.placement import MOVE_STATE
from swarmgpu.manager.placement.jobs import JOB_MODES
from swarmgpu.manager.rebalance.moves import Outcome
from swarmgpu.manager.rebalance.outcomes import Outcomes
from swarmgpu.manager.rebalance.record import (
    MoveState,
    earlier_surge,
    end_surge,
    record_key,
    spec_edit,
    spec_labels,
)
from swarmgpu.manager.rebalance.verdict import Verdict
from swarmgpu.swarm.client import SwarmClient, SwarmService, service_from_api


def report(v: Verdict, said: SaidOnce[str], outcomes: Outcomes, prefix: str, *,
           dry_run: bool, judge_labels: bool) -> None:
    """Say each forged or mismatched move label once (while it stays the same), and
    (one mover: ``judge_labels``) each record that cannot be read, while it lasts."""
    said.begin()
    for sid in sorted(v.unreadable - v.unreadable_gone) if judge_labels else ():
        if said.fresh(f"unreadable:{sid}"):
            logger.error("move record {} cannot be read: its move may be under way, so "
                         "its service is not moved, re-placed or preempted and it counts "
                         "as a move in flight; check the service's gates, then remove it "
                         "by hand (swarmgpu audit: move-record-unreadable)",
                         peer_text(record_key(prefix, sid)))
    for sid, st in sorted(v.held.items()):
        if said.fresh(f"held:{sid}:{st.id}"):
            logger.bind(service=st.service).warning(
                "move record {} of {} ({} -> {}): its service is not listed while the "
                "list left one out ({}): held as it is, counted in flight, until it is "
                "listed or the list leaves none out", peer_text(record_key(prefix, sid)),
                peer_text(st.service), peer_text(st.source_host),
                peer_text(st.target_host), v.left_out)
    for s, why in v.forged:
        # The id and a hash of the value, not the value: a tenant's label may be a
        # megabyte (hash(): salted per process, no copy of the string).
        if said.fresh(f"{s.id}:{hash(s.labels.get(prefix + MOVE_STATE)):x}"):
            outcomes.record(s.name, "-", "-", "a move label the daemon did not write",
                            Outcome.IGNORED, why + (
                                "" if dry_run else "; left on its spec: a job runs again "
                                "from the start on any write of its spec"
                                if s.mode in JOB_MODES else "; removed from its spec"))
    for sid, st in v.mismatched:
        if said.fresh(f"{sid}:{st.id}"):
            logger.error("move record {} names {} but service id {} is not that service: "
                         "left alone; remove it by hand", record_key(prefix, sid),
                         st.service, sid)
    said.end()


def surge_shown(s: SwarmService, st: MoveState, key: str) -> bool:
    """Whether Swarm's PreviousSpec of ``s`` shows that its last update brought the move
    label ``key`` with the surge ``st`` names: before it, no such label, ``st.replicas``
    replicas and MaxReplicas ``st.max_replicas`` (0: unset), as the earlier release's
    one write of both left it. ``end_surge`` then gives back only what that update
    changed, whoever made it. The label is the owner's text, the previous spec Swarm's:
    on the label's word alone the daemon scaled a service down by one and wrote its
    MaxReplicas over one the owner or an operator set."""
    if s.previous_spec is None:
        return False
    was = service_from_api({"ID": s.id, "Spec": s.previous_spec})
    return (not was.unread and was.mode == "replicated" and key not in was.labels
            and (was.replicas or 0) == st.replicas
            and (was.max_replicas_per_node or 0) == st.max_replicas)


def repair(writes: Writes, swarm: SwarmClient, prefix: str, s: SwarmService) -> None:
    """Remove a move label the daemon did not write from its own service's spec
    (swarmgpu's key; nothing else of the spec changes, no task restarts), with the
    surge of a move an earlier release started, as its end would (``earlier_surge``),
    where Swarm's previous spec shows that surge (``surge_shown``)."""
    key = prefix + MOVE_STATE
    seen = s.labels.get(key)
    old = earlier_surge(s, prefix, swarm)
    unshown = old if old is not None and not surge_shown(s, old, key) else None
    if unshown is not None:
        old = None

    def edit(spec: dict[str, Any]) -> None:
        labels = spec_labels(spec)
        if labels.get(key) == seen:  # a newer value is judged next cycle
            labels.pop(key, None)
            if old is not None:  # placement then releases the idle node's holding
                end_surge(spec, old)

    if not writes.service_spec(s.id, spec_edit(edit)):
        return
    if old is not None:
        logger.bind(service=s.name).warning(
            "move {} -> {} of {} started by an earlier release (its label, no record): "
            "its surge undone (replicas {}); placement carries on from the ledger",
            peer_text(old.source_host), peer_text(old.target_host), s.name, old.replicas)
    elif unshown is not None:
        logger.bind(service=s.name).warning(
            "{}: its {} label reads as a make-before-break move of an earlier release, but "
            "Swarm's PreviousSpec of the service does not show that update (replicas {} -> "
            "{}, MaxReplicas {} -> 1, the label added with them): the label went, replicas "
            "and MaxReplicas left as they are; if an upgrade left an extra replica, scale "
            "{} back by hand", s.name, peer_text(key), unshown.replicas, unshown.replicas + 1,
            unshown.max_replicas or "unset", s.name)
