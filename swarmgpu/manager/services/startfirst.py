"""A service swarmgpu places on GPUs with ``update_config.order: start-first``: never
placed. The daemon writes the device map with a ForceUpdate (a new task carrying it);
Swarm's start-first updater keeps the first task (made before the map, waiting behind
its closed gate) until the new one runs, and the gate opens only once every waiting task
is newer than the map (a task reads its devices from the labels copied into it when it
was made: the old one would run on the GPUs unmapped). Both wait for ever. ``render``
refuses it; the daemon names it as the pending reason (docs/deploy.md, "Updates")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WHY = (
    "start-first: Swarm's updater keeps the first task (made before swarmgpu wrote its "
    "device map, waiting behind its closed gate) until the new task carrying the map "
    "runs, and that one waits for the old one to go, so the service is never placed; "
    "use order: stop-first (for no downtime, replicas >= 2 with parallelism: 1)"
)


def stack_order_error(deploy: Mapping[str, Any], where: str) -> str | None:
    """The error for a stack service's ``deploy`` (``where``: its path) that updates
    start-first; None for any other order (a malformed ``update_config`` is the
    schema's to say)."""
    update = deploy.get("update_config")
    if isinstance(update, Mapping) and update.get("order") == "start-first":
        return f"{where}.deploy.update_config.order: {WHY}"
    return None


def starts_first(spec: Mapping[str, Any]) -> bool:
    """Swarm's service ``Spec`` says ``UpdateConfig.Order: start-first``."""
    update = spec.get("UpdateConfig")
    return isinstance(update, Mapping) and update.get("Order") == "start-first"


STALLED = "never placed: its update_config.order is "  # the plan's warning, ``audit``'s key


def stalled(spec: Mapping[str, Any], older_waiting: bool) -> tuple[str, ...]:
    """The plan's warning for a service whose gate waits (``older_waiting``: a task made
    before its device map still waits) and whose ``spec`` updates start-first: that task
    stays until the new one runs, so the gate never opens. Said from the cycle that
    writes the map: the deadlock is certain from then on."""
    return (STALLED + WHY,) if older_waiting and starts_first(spec) else ()
