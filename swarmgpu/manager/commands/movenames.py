"""How `plan`'s and `status`'s move, failing-node and node-list lines name a node: its hostname cut
(``peertext.cell``), as their tables cut it, and the node's ID (whole, as the tables and
`docker node ls` show it) beside a cut that more than one node reads as. A line had the
cut names alone: a move between two nodes whose long names are alike up to the cut read
as a move from a node to itself, two failing nodes as one."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from swarmgpu.core.peertext import ID_WIDTH, cell

MoveName = Callable[[Mapping[str, Any], str], str]


def move_names(moves: Iterable[Mapping[str, Any]],
               nodes: Iterable[tuple[object, object]] = ()) -> MoveName:
    """A function naming move ``m``'s ``side`` (``"from"`` or ``"to"``) for a text line.
    ``nodes``: the (hostname, ID) pairs known beside the moves' own (``from_node``,
    ``to_node``; an older daemon's moves have none: the ID is then the one node of that
    hostname, else ``?``)."""
    moves = list(moves)
    ids: dict[str, set[str]] = {}  # hostname -> the IDs of the nodes it is known as
    for host, nid in nodes:
        ids.setdefault(str(host), set()).update([str(nid)] if nid else [])
    for m in moves:
        for side in ("from", "to"):
            nid = m.get(f"{side}_node")
            ids.setdefault(str(m.get(side)), set()).update([str(nid)] if nid else [])
    by_cut: dict[str, set[str]] = {}
    for host, known in ids.items():  # a hostname of no known ID is one node, by its name
        by_cut.setdefault(cell(host), set()).update(known or {f"hostname {host}"})
    alike = {c for c, known in by_cut.items() if len(known) > 1}

    def name(m: Mapping[str, Any], side: str) -> str:
        host = cell(m.get(side))
        if host not in alike:
            return host
        nid = m.get(f"{side}_node") or ""
        if not nid and len(known := ids.get(str(m.get(side)), set())) == 1:
            (nid,) = known
        return f"{host} [{cell(nid, ID_WIDTH) or '?'}]"

    return name


def failing_entry(key: object, nodes: Iterable[tuple[object, object]]) -> dict[str, object]:
    """A failing node of the daemon's health policy (``failing_nodes``: keyed by its
    hostname, ``host (ID)`` where two nodes share it: ``node_names``) as a move's
    ``from`` side, for ``move_names`` to name; ``nodes``: the (hostname, ID) pairs known."""
    key = str(key)
    for host, nid in nodes:
        if nid and key == f"{host} ({nid})":
            return {"from": str(host), "from_node": str(nid)}
    return {"from": key}


def node_list(hosts: Iterable[tuple[object, object]],
              nodes: Iterable[tuple[object, object]] = ()) -> str:
    """``hosts``, (hostname, node ID or None) pairs, as a text line's list: each named as
    a move's node is (``move_names``: cut, the ID beside a cut more than one node reads
    as); a hostname without its ID may be a ``host (ID)`` key (``nodes_waiting``, as
    ``failing_entry`` reads one); ``nodes``: the (hostname, ID) pairs known. Listed
    whole, three 253-character hostnames filled a line's ``LINE_WIDTH`` and the nodes
    after them were cut off; a ``host (ID)`` key cut whole lost its ID."""
    nodes = list(nodes)
    sides = [{"from": str(h), "from_node": str(i)} if i else failing_entry(h, nodes)
             for h, i in hosts]
    name = move_names(sides, nodes)
    return ", ".join(name(m, "from") for m in sides)
