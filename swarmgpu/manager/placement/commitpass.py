"""The commit pass of a cycle: the holdings kept this cycle are committed before any
new placement; a quiet service (``placement.quiet``) keeps its committed as they are
and is not visited."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.backoff import Backoff
from swarmgpu.manager.placement.existing import KeptHoldings
from swarmgpu.manager.placement.isolate import unnamed_holders, unreleased
from swarmgpu.manager.placement.jobs import JobProgress, without_finished
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.quiet import Quiet
from swarmgpu.manager.placement.reads import Parsed, ServiceRead
from swarmgpu.swarm.client import SwarmNode


def commit_kept(kept: KeptHoldings, read: ServiceRead,
                ledger: Mapping[str, Mapping[str, Holding]],
                jobs: Mapping[str, JobProgress], by_id: Mapping[str, SwarmNode],
                facts: Mapping[str, NodeFacts], running: Mapping[str, Mapping[str, int]],
                skip: tuple[dict[str, str], Parsed, int] | None,
                ) -> tuple[dict[str, str], dict[str, dict[str, Holding]]]:
    """Commit the holdings kept this cycle; returns the quiet services (id -> name:
    placement.quiet), whose holdings stay committed as they are and are not
    returned, and service name -> node id -> holding for the others. ``skip``:
    ``quiet_services``' answer, or None where this cycle may skip none."""
    quiet, rest, count = skip if skip is not None else ({}, read.parsed, 0)
    held = [*unreleased(read.no_request, read.ungate_failed, ledger),  # (isolate: whole)
            *unnamed_holders(read, ledger)]
    if quiet:
        rest = [*rest, *held] if held else rest
        got = kept.commit(rest, without_finished(ledger, rest, jobs, read.failed),
                          by_id, facts, running, read.failed,
                          keep=set(quiet.values()), kept_count=count)
        if got is not None:
            return quiet, got
    parsed = [*read.parsed, *held] if held else read.parsed  # the full pass
    got = kept.commit(parsed, without_finished(ledger, parsed, jobs, read.failed),
                      by_id, facts, running, read.failed)
    return {}, got or {}


def quiet_services(kept: KeptHoldings, read: ServiceRead, records: Mapping[str, Quiet],
                   tasks_changed: AbstractSet[str], touched: AbstractSet[str],
                   facts: Mapping[str, NodeFacts], *, quotas: bool,
                   backoff: Mapping[str, Backoff]) -> tuple[dict[str, str], Parsed, int]:
    """The services this cycle need not visit (id -> name; placement.quiet), the
    others, and how many holdings the quiet ones have committed; none when something
    every service reads may have changed."""
    if read.queued or quotas or (kept.keep_failed is not None and any(
            not g.healthy for f in facts.values() for g in f.gpus)):
        return {}, read.parsed, 0  # a queue's use is counted over every service
    quiet: dict[str, str] = {}
    rest: Parsed = []
    count = 0
    for p in read.parsed:
        s = p[0]
        sid = s.id
        q = records.get(sid)
        if (q is not None and q.version == s.version and sid not in tasks_changed
                and s.name not in touched and sid not in backoff
                and sid not in read.failed):
            quiet[sid] = s.name
            count += q.held
        else:
            rest.append(p)
    return quiet, rest, count
