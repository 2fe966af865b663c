"""The agents the facts watch could not read within its budget (``agents.watch_s``),
said once per change: the watch compares the facts it did read, and those nodes' wait
for the next full cycle.

Before, a cut threw every answer away and said so at debug level only: with a rack's
agents timing out (2 x ``agents.parallel`` of them or more) no watch ever ended, and a
fact change anywhere waited for the next cycle, unsaid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loguru import logger

from swarmgpu.core.peertext import peer_text
from swarmgpu.manager.engine.stop import NotRead
from swarmgpu.swarm.client import SwarmNode

NAMED = 8  # nodes named in the line; the others counted (a rack is dozens)


def _names(nodes: Sequence[SwarmNode]) -> str:
    return _listed([_name(n) for n in nodes])


def _name(node: SwarmNode) -> str:
    return peer_text(node.hostname, 64) or node.id[:12]


def _listed(names: Sequence[str]) -> str:
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return ", ".join(sorted(names[:NAMED])) + more


def _kinds(nodes: Sequence[SwarmNode], missed: Mapping[str, NotRead],
           watch_s: float) -> list[str]:
    """What the watch said of ``nodes`` (those of ``missed``): late, or never read."""
    late = [n for n in nodes if missed.get(n.id) is NotRead.LATE]
    unread = [n for n in nodes if missed.get(n.id) is NotRead.UNSTARTED]
    parts = []
    if late:
        parts.append(f"the agents on {_names(late)} did not answer within "
                     f"agents.watch_s {watch_s:g} s")
    if unread:
        parts.append(f"{len(unread)} node(s) after them not read before it ended "
                     f"({_names(unread)})")
    return parts


class WatchMissed:
    """What the last watch left unread (node IDs), to say a change of it once: a
    warning naming the agents that did not answer in time when the set changes (after
    the first, only those added to it and those read again: a set shifting by one
    agent would repeat dozens of names each watch), a line when every agent answers
    again; nothing while it stays as it was."""

    def __init__(self) -> None:
        self.said: frozenset[str] = frozenset()
        self.names: dict[str, str] = {}  # the set's names: one read again may have left

    def note(self, nodes: Sequence[SwarmNode], missed: Mapping[str, NotRead],
             watch_s: float, interval_s: float) -> None:
        """One watch's ``missed`` (``agent_client.fetch_all``) of its ``nodes``."""
        now = frozenset(missed)
        if now == self.said:
            return
        before, self.said = self.said, now
        gone = [self.names.get(i, i[:12]) for i in before - now]
        self.names = {n.id: _name(n) for n in nodes if n.id in now}
        if not now:
            logger.info("facts watch: every agent answered within agents.watch_s {:g} s "
                        "again; their facts are compared on each watch", watch_s)
            return
        parts = _kinds([n for n in nodes if n.id not in before], missed, watch_s)
        if before:
            parts = ([f"now also {p}" for p in parts]
                     + ([f"answered again: {_listed(gone)}"] if gone else [])
                     + [f"{len(now)} agent(s) unread in all"])
        logger.warning(
            "facts watch: {}; their fact changes wait for the next full cycle (sync."
            "interval_s {:g} s), the {} other node(s)' were compared (said again when "
            "this changes); check those agents and their nodes' reachability "
            "(swarmgpu doctor), or raise agents.watch_s or agents.parallel",
            "; ".join(parts), interval_s, len(nodes) - len(now))
