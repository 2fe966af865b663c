"""What an engine's ``docker info`` says of its own swarm node's state (``Swarm.
LocalNodeState``) that no other answer says: a manager locked, one whose swarm node
failed to start, or an engine in no swarm has no ``Swarm.NodeID``, which the daemon read
as "not the leader"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.core.peertext import peer_text, quoted
from swarmgpu.swarm.errors import SwarmError, SwarmStalled


def stalled_why(info: Mapping[str, Any]) -> str | None:
    """Why an engine's swarm node does not run (``Swarm.LocalNodeState`` locked, error or
    inactive: in no swarm), with its fix; None otherwise (pending: joining, a follower).
    Such an engine's info has no NodeID, which read as "not the leader": a healthy
    follower, while no manager of a swarm whose managers all restarted locked led it,
    and a daemon pointed at an engine in no swarm never led at all."""
    swarm = info.get("Swarm")
    state = swarm.get("LocalNodeState") if isinstance(swarm, Mapping) else None
    if state == "locked":
        return ("this engine's swarm is locked (autolock, after a restart): its manager "
                "runs no part of the swarm until unlocked: run `docker swarm unlock` on it")
    if state == "inactive":  # (a worker, a manager demoted, is a follower: promoted, it leads)
        return ("this engine is in no swarm (it left it, or docker_host names another "
                "engine): its daemon can never lead; point docker_host at a manager's "
                "engine, or make this one a manager (`docker swarm join` with a manager "
                "token, from `docker swarm join-token manager` on a manager)")
    if state == "error":
        said = swarm.get("Error") if isinstance(swarm, Mapping) else None
        why = peer_text(said, 200) if isinstance(said, str) and said else "no reason given"
        return (f"this engine's swarm node failed to start ({why}): see `docker info` "
                "and dockerd's log on it")
    return None


def running(info: Mapping[str, Any]) -> Mapping[str, Any]:
    """``info``, of an engine whose swarm node runs (its NodeID given) or joins
    (pending); ``SwarmStalled`` saying why and the fix where it does not
    (``stalled_why``), with the state; ``SwarmError`` where the answer lacks the ID."""
    if (why := stalled_why(info)) is not None:
        raise SwarmStalled(why, str(info["Swarm"]["LocalNodeState"]))
    swarm = info.get("Swarm")
    state = swarm.get("LocalNodeState") if isinstance(swarm, Mapping) else None
    if isinstance(swarm, Mapping) and (swarm.get("NodeID") or state == "pending"):
        return info
    # Docker sends NodeID and LocalNodeState always (none omitted when empty), and an
    # ID in every state but pending and those above: an answer without it is not read
    # as "not the leader", a healthy follower while a proxy trimmed it.
    said = "missing" if state is None else quoted(state)
    raise SwarmError(f"the engine's info: Swarm.NodeID is empty or missing, its "
                     f"LocalNodeState {said}: Docker sends the node's ID in "
                     "every state but pending, locked, error and inactive; check any "
                     "proxy in front of the engine")
