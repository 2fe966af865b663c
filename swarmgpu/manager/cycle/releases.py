"""A plan's releases, judged against the services as they are before any is written.

``apply_plan`` writes releases (a service's ledger entries and gates going) in phase 1,
before the service writes, so that no task starts on a node its new device map no
longer names. The service write is judged then (``placement.planned``), too late for
its releases: a request removed and added back, both events missed, lost its ledger
entry and gate for a cycle while its task ran, and its GPU went to another service in
the same plan. So each live service whose plan releases something is read first and
judged: when its spec no longer asks for what the plan was made from, nothing of its
plan is written (releases, service write, ledger entries, gates), and neither is the
plan of a service given a new ledger entry on a node where it would have released (it
may name the GPUs that release would have freed), nor, in turn, of any service that
second one would have made room for. The next cycle plans them from a fresh read. A
service that cannot be read is held back the same way; one that is gone is released.
A release whose node write fails holds back, the same way, the services given a new
ledger entry on that node (``hold_unreleased``): its GPUs are still held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loguru import logger

from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.engine.stop import read_cut
from swarmgpu.manager.engine.writes import write_each
from swarmgpu.manager.placement import PlacementPlan, assign_key, gate_key
from swarmgpu.manager.placement.keys import ASSIGN, GATE
from swarmgpu.manager.placement.planned import Planned
from swarmgpu.swarm.client import BudgetCut, SwarmClient, SwarmError, SwarmNotFound, SwarmService


def hold_stale_releases(
    swarm: SwarmClient,
    gate: Writes,
    plan: PlacementPlan,
    services: Sequence[SwarmService],
    prefix: str,
) -> set[str]:
    """Judge the services ``plan`` releases something of (module docstring); take the
    writes of those held back out of ``plan`` and return their names (their service
    writes are the caller's to leave out)."""
    by_name = {s.name: s for s in services}
    releases: dict[str, set[str]] = {}  # live service -> nodes it releases on
    for nid, keys in plan.node_remove.items():
        for k in keys:
            name = owner(k, prefix)
            if name in by_name:
                releases.setdefault(name, set()).add(nid)
    if not releases:
        return set()
    names = sorted(releases)
    current = write_each(names, lambda n: _current(swarm, gate, by_name[n], prefix))
    held = {n for n, ok in zip(names, current, strict=True) if not ok}
    todo, visited = sorted(held), set[str]()
    while todo:  # who takes room on a node where a held release would have made it
        name = todo.pop()
        for nid in sorted(releases.get(name, set()) - visited):
            visited.add(nid)
            for k in plan.node_set.get(nid, {}):
                other = owner(k, prefix, ASSIGN)
                if other is not None and other not in held:
                    held.add(other)
                    todo.append(other)
                    logger.bind(service=other).info(
                        "placement: {} waits a cycle: its new ledger entry on node {} "
                        "may name GPUs that {}'s release, not written, would have freed",
                        other,
                        nid[:12],
                        name,
                    )
    for name in held:
        drop_writes(plan, name, prefix)
    return held


def hold_unreleased(plan: PlacementPlan, failed: Mapping[str, Sequence[str]],
                    prefix: str) -> set[str]:
    """The services given a new ledger entry on a node where a ledger entry's release did
    not land (``failed``: node id -> the keys its failed write removed): the new entry
    may name GPUs that release would have freed, still held (written, one GPU had two
    holders). Their writes still to come are taken out of ``plan``, as
    ``hold_stale_releases``' are; their names returned. The next cycle plans them from a
    fresh read."""
    held: set[str] = set()
    for nid, keys in failed.items():
        if not any(owner(k, prefix, ASSIGN) is not None for k in keys):
            continue  # only gates went: no GPU was to be freed there
        for k in plan.node_set.get(nid, {}):
            name = owner(k, prefix, ASSIGN)
            if name is not None and name not in held:
                held.add(name)
                logger.bind(service=name).info(
                    "placement: {} waits a cycle: its new ledger entry on node {} may name "
                    "GPUs that a release there, whose write failed, still holds",
                    name, nid[:12])
    for name in held:
        drop_writes(plan, name, prefix)
    return held


def _current(swarm: SwarmClient, gate: Writes, s: SwarmService, prefix: str) -> bool:
    """Whether ``s``'s spec as it is now still asks for what its plan was made from."""
    log = logger.bind(service=s.name)
    try:
        now = swarm.service(s.id)
    except SwarmNotFound:
        return True  # gone since: its release is right
    except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
        raise read_cut() from exc
    except SwarmError as exc:
        log.warning(
            "placement: cannot read {} to check its release, nothing of its "
            "plan written this cycle: {}",
            s.name,
            exc,
        )
        return False
    if now.unread:  # a part of its spec cannot be read: what it asks is not known
        log.warning("placement: {}'s spec cannot be read, nothing of its plan written "
                    "this cycle: {}", s.name, now.unread)
        return False
    planned = Planned(s.spec, prefix)
    if planned.judge(now.spec):
        return True
    gate.reread("service", s.id)
    log.warning(
        "placement: {} changed since the snapshot its plan was made from ({}): "
        "nothing of its plan written, its ledger entries and gates stay as they "
        "are; read again and planned next cycle",
        s.name,
        "; ".join(planned.changed),
    )
    return False


def owner(key: str, prefix: str, *kinds: str) -> str | None:
    """The service a ledger entry or gate key names (of ``kinds``: ASSIGN, GATE)."""
    for kind in kinds or (ASSIGN, GATE):
        if key.startswith(prefix + kind):
            return key[len(prefix + kind) :]
    return None


def drop_writes(plan: PlacementPlan, service: str, prefix: str) -> None:
    """Leave out ``service``'s ledger entries, gates and releases from the node writes
    to come (the other services' on the same nodes still go)."""
    mine = (assign_key(prefix, service), gate_key(prefix, service))
    for nid in list(plan.node_set):
        rest = {k: v for k, v in plan.node_set[nid].items() if k not in mine}
        if rest:
            plan.node_set[nid] = rest
        else:
            del plan.node_set[nid]
    for nid in list(plan.node_remove):
        left = [k for k in plan.node_remove[nid] if k not in mine]
        if left:
            plan.node_remove[nid] = left
        else:
            del plan.node_remove[nid]
