"""A preemption victim's spec write (``victimstop.close_gates``): its device lists for the
node go and ``<p>state.preempted`` records why (labels: no task restarts).

A task of the victim that waits for a node when that write lands would be of an older
revision, which Swarm's scheduler never tries again (moby/swarmkit 807f25e,
``noSuitableNode``; docs/deploy.md): it waited until the victim's next placement forced
it. The write cannot wait for it (a replica asked beyond what fits would make a service
immune to preemption), so where one waits, read from Swarm just before, the write carries
the renewal constraint too (``placement.keys.RENEW_STATE``, met by every node), as
placement's converge renewal does: Swarm's updater replaces only the tasks without a
node, and the running ones stay (the victim's on the preempted node until its gate
closes, its replicas elsewhere). A job is left out: any write of its spec runs it anew.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from swarmgpu.manager.placement.jobs import JOB_MODES
from swarmgpu.manager.placement.keys import (
    DEVICES,
    MEANT_STATES,
    is_renew,
    next_renewal,
)
from swarmgpu.manager.placement.preempted import PREEMPTED_STATE
from swarmgpu.manager.placement.records import SpecWrites
from swarmgpu.manager.placement.specwrite import SpecCompute, service_compute
from swarmgpu.swarm.client import SwarmClient, SwarmService
from swarmgpu.swarm.specread import UnreadSpec, spec_count, spec_object, spec_texts

if TYPE_CHECKING:
    from loguru import Logger


def renewed(swarm: SwarmClient, service_id: str) -> SwarmService | None:
    """The victim as Swarm has it now, where a task of it waits for a node (not a job;
    desired running, or ready: a restart's or an update's new task before it starts):
    its write carries the renewal; None where none waits. Raises ``SwarmError``, or
    ``UnreadSpec`` where its write could not read its spec (``check_victim``): read so
    for every victim before the first write, none is written then."""
    s = swarm.service(service_id)
    check_victim(s.spec)
    if s.mode in JOB_MODES:
        return None
    # Desired ready too: a restart's or an update's new task waits for a node so too
    # (``MEANT_STATES``). Judged on each task Swarm returns, not by a desired-state
    # filter sent with the list: the check that reads Swarm's answer is the one kept,
    # so an engine (or proxy) that dropped the filter could not renew for a dead task,
    # nor (its ServiceID checked too) for another service's waiting task.
    tasks = swarm.tasks({"service": service_id})
    return s if any(t.service_id == service_id and not t.node_id
                    and t.desired_state in MEANT_STATES for t in tasks) else None


def victim_spec(prefix: str, node_id: str, record: str,
                renew: SwarmService | None = None) -> SpecCompute:
    """The victim's spec write: its device lists for ``node_id`` gone, the record set;
    ``renew`` (``renewed``): its renewal constraint changed too. What goes is read from
    the spec the write reads (its labels and constraints then), and placement's own
    ``service_compute`` applies it."""
    dk = f"{prefix}{DEVICES}{node_id}"

    def service(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
        constraints = check_victim(spec)
        drop = tuple(k for k in spec_object(spec.get("Labels"), "Labels")
                     if k == dk or k.startswith(dk + "."))
        mine: tuple[str, ...] = ()
        renewal: tuple[str, ...] = ()
        if renew is not None:
            mine = tuple(c for c in constraints if is_renew(c, prefix))
            renewal = next_renewal(mine, prefix, renew.version)
        writes = SpecWrites(service_labels_set={prefix + PREEMPTED_STATE: record},
                            service_labels_remove=drop, remove_constraints=mine,
                            add_constraints=renewal)
        return service_compute(writes)(spec)

    return service


def check_victim(spec: Mapping[str, Any]) -> list[str]:
    """The constraints of a spec the victim's write can read (``service_compute`` reads
    its labels, placement and env, the actuator's change list its ForceUpdate too);
    ``UnreadSpec`` naming the first part that is not what Docker sends: read as none, a
    string's characters would be written back as its constraints or env lines, and
    read unguarded it raised mid-preemption."""
    spec_object(spec.get("Labels"), "Labels")
    tt = spec_object(spec.get("TaskTemplate"), "TaskTemplate")
    placement = spec_object(tt.get("Placement"), "TaskTemplate.Placement")
    cs = spec_object(tt.get("ContainerSpec"), "TaskTemplate.ContainerSpec")
    spec_count(tt.get("ForceUpdate"), "TaskTemplate.ForceUpdate")  # (a renewal's change list)
    constraints = spec_texts(placement.get("Constraints"), "TaskTemplate.Placement.Constraints")
    spec_texts(cs.get("Env"), "TaskTemplate.ContainerSpec.Env")
    return list(constraints)


def unread_victims(services: Sequence[SwarmService], holders: Collection[str]
                   ) -> dict[str, str]:
    """Of the services named in ``holders`` (those holding GPUs: the possible victims),
    each whose spec its victim write could not read, with why (``check_victim``):
    never chosen, as its write would fail after the preemption was decided."""
    out: dict[str, str] = {}
    for s in services:
        if s.name in holders:
            try:
                check_victim(s.spec)
            except UnreadSpec as exc:
                out[s.name] = str(exc)
    return out


def unwritten(log: Logger, victim: str, victims: str, preemptor: str, exc: Exception) -> bool:
    """Say why ``victim``'s read or spec write (``exc``: ``SwarmError``, or
    ``UnreadSpec``: skipped) stopped the preemption of ``victims`` for ``preemptor``
    before its gate write; False (none stopped)."""
    if isinstance(exc, UnreadSpec):  # as Swarm has it now (check_victim)
        log.error("preemption: {} skipped, its spec cannot be read: {}; none of {} stopped "
                  "for {}, no gate closed", victim, exc, victims, preemptor)
    else:
        log.error("preemption: {}'s spec write failed: none of {} stopped for {}, no gate "
                  "closed: {}", victim, victims, preemptor, exc)
    return False
