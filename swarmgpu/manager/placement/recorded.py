"""A one-shot's stand-in for the daemon's preemption holds (``recorded_nominations``):
``plan`` and ``status`` keep no nominations between runs, so they read them from the
victims' ``state.preempted`` records and the tasks Swarm still stops."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.nominated import Nomination, settles_from, task_device_uses
from swarmgpu.manager.placement.preempted import preempted_state, stopped_then
from swarmgpu.swarm.client import SwarmError, SwarmService, SwarmTask, SwarmUnavailable


def recorded_nominations(services: Sequence[SwarmService], leaving: Sequence[SwarmTask],
                         facts: Mapping[str, NodeFacts], prefix: str, now: float,
                         settle_s: float, waited: AbstractSet[tuple[str, str]] = frozenset(),
                         left_out: bool = False, *, stopped: AbstractSet[int]
                         ) -> list[Nomination]:
    """A one-shot's stand-in for the daemon's nominations, kept in its memory only
    (``plan``, ``status``: ``cycle.placement.make_plan``): the GPUs of each task Swarm
    still stops (``leaving``: stopping or rejected) whose service's ``state.preempted``
    record names a live preemptor, that task's node and a time less than ``settle_s``
    before ``now`` (epoch s; for a task among ``waited``, ``stops_waited``, the daemon's
    hold waits for its stop: ``settles_from``), held for that preemptor.
    Read from the task's own device line only (a one-shot knows no ledger entry the
    preemption removed), those the record's ``held`` names (the hold's; before, all of
    the task's were spared for the preemptor, where the daemon held the rest from all
    until the task stopped). Without them
    such GPUs read as held for the stopping task: the preemptor waits (its plan said
    so) and the preview of preemption chose new victims for it, which the daemon, its
    nomination held, does not. ``left_out``: the service list left one out
    (``swarm.unkeyed``): a preemptor not listed may be that one, its hold kept as the
    daemon keeps it (``live_nominations``). A victim left out is read alone
    (``left_out_victims``), among ``services``. ``stopped``: the seconds of the stops the
    preemption hour on the swarm object counts (``preempted.hour_seconds``): a record
    is a label of its victim's own spec, which its stack writes, and one whose second
    the hour lacks (managers alone write it) is no preemption swarmgpu made: it holds
    nothing for the preemptor it names (``preempted.stopped_then``), as the daemon,
    which made none, holds nothing."""
    by_id, names = {s.id: s for s in services}, {s.name for s in services}
    got: dict[tuple[str, int, str, str], set[str]] = {}  # (by, its priority, node, its id)
    victims: dict[tuple[str, int, str, str], set[str]] = {}  # their ids: only theirs spared
    for t in leaving:
        svc = by_id.get(t.service_id)
        st = None if svc is None else preempted_state(svc.labels, prefix)
        # The daemon's hold lasts while a victim's task Swarm counts still stops
        # (``settles_from``), then ``settle_s``; the task stopping now stopped since the
        # record (the preemption stopped it)
        if (st is None or st.node_id != t.node_id or now < st.at
                or not stopped_then(st, stopped)
                or (st.by not in names and not left_out)
                or now - settles_from(st.at, st.at, now, (t.service_id, t.node_id) in waited)
                >= settle_s):
            continue
        uuids = {u for u, _m in task_device_uses(t, prefix, facts.get(t.node_id))}
        if st.held is not None:  # those the daemon's hold names: the rest held from all
            uuids &= set(st.held)
        if uuids:
            key = (st.by, st.priority, t.node_id, st.by_id)
            got.setdefault(key, set()).update(uuids)
            victims.setdefault(key, set()).add(t.service_id)
    # (by id where the record names it: ``live_nominations`` ends a hold whose name a
    # service created since carries, as the daemon's ends)
    return [Nomination(by, priority, nid, tuple(sorted(uuids)),
                       victims=tuple(sorted(victims[(by, priority, nid, sid)])), service_id=sid)
            for (by, priority, nid, sid), uuids in sorted(got.items())]


def left_out_victims(swarm: Any, services: Sequence[SwarmService],
                     leaving: Sequence[SwarmTask], left_out: bool) -> list[SwarmService]:
    """For ``recorded_nominations``: the services of ``leaving`` tasks not among
    ``services`` while the list left one out (``left_out``), each read alone by its
    task's service id (``swarm.service``: an inspect, nothing written). A victim's
    record is a label of its own spec, the one place that names its preemptor: left
    out, its task's GPUs read as held from all, while the daemon holds them for that
    preemptor. One the engine answers unkeyed too (``SwarmUnkeyed``), or not at all
    (removed), or with another service's id, is not read: held from all
    (``StoppingGpus``) until it stops; an engine unreachable ends the reads (each would
    wait out the timeout). None without ``swarm``."""
    if not left_out or swarm is None:
        return []
    listed = {s.id for s in services}
    out: list[SwarmService] = []
    for sid in sorted({t.service_id for t in leaving if t.service_id} - listed):
        try:
            got = swarm.service(sid)
        except SwarmUnavailable:
            break  # (each read after it would wait out the client's timeout in turn)
        except SwarmError:
            continue  # (its why is the list's message, said by ``plan`` and ``doctor``)
        if got.id == sid:  # another's answer (a proxy's) would stand in for that one's
            out.append(got)
    return out
