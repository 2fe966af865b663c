"""The errors of the engine's client (``swarm.client``, which names them too): what
the engine could not do, and why; here so the readers of its answers raise them
without importing the client."""

from __future__ import annotations

from swarmgpu.swarm.specread import UnreadSpec


class SwarmError(RuntimeError):
    """The engine could not do what was asked."""


class SwarmUnavailable(SwarmError):
    """The engine is not reachable, or this node is not a Swarm manager."""


class SwarmStalled(SwarmUnavailable):
    """The engine answers, but its swarm node does not run: ``state`` is its
    ``Swarm.LocalNodeState`` ("locked", "error", "inactive": ``swarm.localstate``)."""

    def __init__(self, why: str, state: str) -> None:
        super().__init__(why)
        self.state = state


class BudgetCut(SwarmUnavailable):
    """A read not made past its cycle's engine budget (``answerjson.BudgetSpent``): no
    object's fault: the daemon's readers raise ``stop.read_cut`` on it, ending the cycle."""


class SwarmNotFound(SwarmError):
    """The object is not there (HTTP 404): removed, or never was."""


class SwarmUnkeyed(SwarmError):
    """An inspect answered without an ID (``unkeyed.inspected``): left out, as listed."""


class SwarmWrongObject(SwarmError):
    """An inspect answered another object than the one asked for (``wrong_object``)."""


class VersionConflict(SwarmError):
    """The object changed since we read it ("update out of sequence")."""


class UnreadWrite(SwarmError, UnreadSpec):
    """A spec write refused: the service as read for it has a part that cannot be read
    (``SwarmService.unread``). Both kinds: a writer that takes a spec it cannot read
    for its own skip (``UnreadSpec``) does, the others see a failed write."""


class NotLeader(SwarmError):
    """The write was not made: this daemon's engine no longer leads the swarm
    (``SwarmClient.may_write``)."""
