"""The GPUs a task of a service with a same-node repin in flight runs with, from the
repin's own record of its GPU sets (the service's move label, ``keys.MOVE_STATE``, a copy
of the daemon's record): the ledger names the repin's new GPUs from its step 2 on, before
Swarm stops the old task, so a daemon that did not see that task run (restarted, a new
leader) cannot read its GPUs from the ledger (``nominated.StoppingGpus``).

Swarm resolves a task's device map when it makes the task, and the repin writes it right
after its start: a task made before ``started_at`` has the source GPUs, one made after
the target ones (a restart between the repin's steps). One made within ``SKEW_S`` of it
(the leader's clock against the daemon's): both sets, held while it stops (never the new
GPUs alone for a task that may run on the old ones); one of unknown age: the source's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from swarmgpu.manager.placement.keys import MOVE_STATE, SKEW_S
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_epoch

# (GPU uuid, the share of it in milli) a task uses (``nominated.Uses``)
Uses = tuple[tuple[str, int], ...]


def _gpus(d: Mapping[str, Any], side: str) -> dict[str, int] | None:
    uuids, milli = d.get(f"{side}_uuids"), d.get(f"{side}_milli")
    if not (isinstance(uuids, list) and isinstance(milli, list) and len(uuids) == len(milli)
            and all(isinstance(u, str) for u in uuids)
            and all(type(m) is int and 0 < m <= 1000 for m in milli)):
        return None
    return dict(zip(uuids, milli, strict=True))


def repin_uses(t: SwarmTask, service: SwarmService | None, prefix: str) -> Uses | None:
    """The GPUs ``t`` runs with by its service's same-node repin on its node; None where
    there is none, or its label cannot be read (anyone's text)."""
    text = service.labels.get(prefix + MOVE_STATE, "") if service is not None else ""
    try:
        d = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict) or not t.node_id or not (
            d.get("source") == d.get("target") == t.node_id):
        return None
    started = d.get("started_at")
    source, target = _gpus(d, "source"), _gpus(d, "target")
    if not isinstance(started, int | float) or source is None or target is None:
        return None
    made = rfc3339_epoch(t.created_at)
    if made is None or made < started - SKEW_S:  # unknown: older than the repin
        got = source
    elif _after(made, started):
        got = target
    else:
        got = {u: max(source.get(u, 0), target.get(u, 0)) for u in source | target}
    return tuple(sorted(got.items()))


def made_after(t: SwarmTask, started: float) -> bool:
    """Swarm made ``t`` after ``started`` (epoch s, the daemon's clock) beyond doubt: past
    the clocks' skew (``SKEW_S``); False where its age is unknown. A task made after a
    repin's start has the device map of its step 1, written right after."""
    return _after(rfc3339_epoch(t.created_at), started)


def _after(made: float | None, started: float) -> bool:
    """``made_after`` of a task made at ``made`` (epoch s, None: unknown)."""
    return made is not None and made > started + SKEW_S
