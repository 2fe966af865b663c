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

CORE = (
    "Swarm's start-first updater keeps a task made before swarmgpu wrote the device map "
    "(waiting behind its closed gate) until the new task that carries the map runs, and "
    "that one waits for the old one to go"
)
FIX = "use order: stop-first (for no downtime, replicas >= 2 with parallelism: 1)"
# render's words: its own file carries the map, so the stall comes only when the daemon
# writes the map again while a task waits; a re-deploy doubles up on the GPUs instead
WHY = (
    f"start-first is refused for a service swarmgpu places: {CORE}, so the service is "
    "never placed once the daemon writes its map while a task waits (the plan changed "
    "since render, or it waited for room), and a re-deploy starts the new task beside "
    f"the old one on the same GPUs; {FIX}"
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


STALLED = "never placed: update_config.order is start-first: "  # plan, ``audit``


def stalled(spec: Mapping[str, Any], older_waiting: bool) -> tuple[str, ...]:
    """The plan's warning for a service whose gate waits (``older_waiting``: a task made
    before its device map still waits) and whose ``spec`` updates start-first: that task
    stays until the new one runs, so the gate never opens. Said from the cycle that
    writes the map: the deadlock is certain from then on."""
    return (f"{STALLED}{CORE}; {FIX}",) if older_waiting and starts_first(spec) else ()
