"""The mover's judgement of the move records, pure: which moves are in flight by the
daemon's own records (``verify``), for one mover's scope (``verify_scope``), and
``audit``'s findings of the labels and records the daemon leaves for a human
(``forged_check``). Split from ``mover.py`` (which re-exports it) by job.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.commands.audit import Finding
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import MOVE_STATE
from swarmgpu.manager.rebalance.record import (
    HEALTH,
    MoveState,
    move_of,
    node_gone_finding,
    read_records,
    record_key,
    stuck_finding,
    unlisted_records,
    unreadable_records,
)
from swarmgpu.swarm.client import SwarmService


@dataclass
class Verdict:
    """Moves in flight, each judged against the daemon's records (pure: ``verify``)."""

    verified: dict[str, MoveState] = field(default_factory=dict)  # service id -> record
    # Records whose service no longer carries their move label (a stack re-deploy
    # rewrote its labels, or the daemon stopped between the record and the label).
    lost: dict[str, MoveState] = field(default_factory=dict)
    gone: dict[str, MoveState] = field(default_factory=dict)  # the service was removed
    # Records of a service not listed while the list left some out (``swarm.unkeyed``):
    # it may be one of those, its move under way. Held as they are, counted in flight.
    held: dict[str, MoveState] = field(default_factory=dict)
    left_out: str = ""  # then: the first left-out service's message (``Unkeyed``)
    # Move labels with no record of the daemon's: written by whoever deployed the
    # service. Never acted on.
    forged: list[tuple[SwarmService, str]] = field(default_factory=list)
    # A record whose service id now carries another name: never acted on.
    mismatched: list[tuple[str, MoveState]] = field(default_factory=list)
    unreadable: set[str] = field(default_factory=set)  # ids whose record cannot be read
    # ... of those, the ids of no service: no move of theirs can be under way (dropped)
    unreadable_gone: set[str] = field(default_factory=set)

    def in_flight(self) -> list[MoveState]:
        return [*self.verified.values(), *self.lost.values(), *self.held.values()]


def verify(
    services: Sequence[SwarmService],
    records: Mapping[str, MoveState],
    prefix: str,
    unreadable: Collection[str] = (),
    left_out: Sequence[str] = (),
) -> Verdict:
    """Which moves the daemon started, judged from its records, never from a label alone:
    a move is verified when its record is keyed by the carrying service's id, names that
    service and carries its move label's move id. An ``unreadable`` record's: left alone.
    ``left_out``: the services the list left out (``swarm.unkeyed``), each its message:
    while any was, a record of a service not listed is held, never taken for gone,
    unless a listed service carries its name (a new service of a gone one's name)."""
    v = Verdict(unreadable=set(unreadable), left_out=left_out[0] if left_out else "")
    by_id = {s.id: s for s in services}
    held = unlisted_records(services, records) if left_out else {}
    if not left_out:
        v.unreadable_gone = {sid for sid in v.unreadable if sid not in by_id}
    for sid, st in records.items():
        s = by_id.get(sid)
        if s is None:
            (v.held if sid in held else v.gone)[sid] = st
        elif st.service != s.name or (st.service_id and st.service_id != sid):
            v.mismatched.append((sid, st))
        elif move_of(s, records, prefix) is not None:  # the one rule (record.move_of)
            v.verified[sid] = st
        else:
            v.lost[sid] = st
    for s in services:
        raw = s.labels.get(prefix + MOVE_STATE)
        if raw is None or s.id in v.verified or s.id in v.lost or s.id in v.unreadable:
            continue
        claim = MoveState.parse(raw)
        named = f"naming {claim.service}" if claim is not None else "unreadable"
        v.forged.append(
            (
                s,
                f"{prefix}{MOVE_STATE} label ({named}) with no move record of "
                f"the daemon's for service id {s.id}",
            )
        )
    return v


def verify_scope(
    every: Mapping[str, MoveState],
    services: Sequence[SwarmService],
    prefix: str,
    scope: Callable[[MoveState], bool] | None,
    unreadable: Collection[str] = (),
    left_out: Sequence[str] = (),
) -> Verdict:
    """``verify`` for one mover (pure): the records of ``scope`` (None: all); another
    mover's records, and their services, are left to it. Its ``in_flight`` is what the
    mover's budgets count (``run_cycle``'s and ``start``'s), with ``unreadable``: any
    scope's; ``left_out``: ``verify``'s."""
    mine = every if scope is None else {sid: st for sid, st in every.items() if scope(st)}
    return verify(
        [s for s in services if s.id in mine or s.id not in every], mine, prefix, unreadable,
        left_out,
    )


def rebalancing(st: MoveState) -> bool:
    """The scope of a mover on ``rebalance``'s budgets: every record but the health
    mover's (``health.evacuations_per_cycle`` is its own)."""
    return st.trigger != HEALTH


def forged_check(
    prefix: str, *, move_timeout_s: float | None = None, cycle_s: float = 0.0
) -> Callable[[Snapshot], list[Finding]]:
    """``audit``: every move label the daemon did not write (never acted on; the daemon
    removes it once it writes), as a finding that needs action. The records are the
    snapshot's (read just before and after its services: ``take_snapshot``); a read
    after them misses the record of a move that ended in between, its label forged.
    ``move_timeout_s`` (None: not judged): a record older than it and one cycle
    (``cycle_s``) at the snapshot's time is stuck (``stuck_finding``)."""

    def check(snap: Snapshot) -> list[Finding]:
        v = verify(
            snap.services,
            read_records(snap.swarm_labels, prefix),
            prefix,
            unreadable_records(snap.swarm_labels, prefix),
            snap.unkeyed.services,
        )
        out = [
            Finding(
                "forged-move-label",
                s.name,
                peer_text(why) + "; the daemon ignores "
                "it: remove it from the stack's deploy.labels",
                key=prefix + MOVE_STATE,
            )
            for s, why in v.forged
        ]
        # Records the daemon leaves alone, saying "remove it by hand" in its log only.
        hand = (
            "; the daemon leaves it alone: check the service's gates, then remove it "
            "by hand from the swarm object's labels (docs/rebalancing.md)"
        )
        out += [
            Finding(
                "move-record-mismatch",
                st.service,
                peer_text(
                    f"move record for service id {sid} names {st.service}, which that id no "
                    f"longer is"
                )
                + hand,
                key=record_key(prefix, sid),
            )
            for sid, st in v.mismatched
        ]
        out += [
            Finding(
                "move-record-unreadable",
                "swarm",
                peer_text(f"move record {k} cannot be read") + hand,
                key=peer_text(k),
            )
            for k in sorted(record_key(prefix, sid) for sid in v.unreadable - v.unreadable_gone)
        ]
        out += [
            Finding(
                "move-record-unreadable",
                "swarm",
                peer_text(f"move record {k} cannot be read and names no service")
                + "; the swarmgpu "
                "daemon drops it on its next cycle; still here, the daemon is not running or is "
                "in dry-run: run it with writes on, or remove it by hand from the swarm object's "
                "labels (docs/rebalancing.md)",
                key=peer_text(k),
            )
            for k in sorted(record_key(prefix, sid) for sid in v.unreadable_gone)
        ]
        gone = [
            node_gone_finding(record_key(prefix, sid), st, snap.nodes)
            for sid, st in sorted({**v.verified, **v.lost}.items())
        ]
        out += [f for f in gone if f is not None]
        return out + _stuck(v, snap, prefix, move_timeout_s, cycle_s, {f.key for f in out})

    return check


def _stuck(
    v: Verdict,
    snap: Snapshot,
    prefix: str,
    timeout_s: float | None,
    cycle_s: float,
    said: set[str | None],
) -> list[Finding]:
    """The records past their timeout that no other finding names (a node gone, a
    mismatch: each says already why the daemon has not ended it)."""
    if timeout_s is None:
        return []
    found = [
        stuck_finding(
            record_key(prefix, sid), st, snap.taken_at, timeout_s, cycle_s, gone=sid in v.gone
        )
        for sid, st in sorted({**v.verified, **v.lost, **v.gone, **v.held}.items())
    ]
    return [f for f in found if f is not None and f.key not in said]
