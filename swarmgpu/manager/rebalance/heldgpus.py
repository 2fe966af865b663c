"""What of a GPU a hold keeps from one service: the one rule the rebalancer judges held
GPUs by, for a move's target (``Context.block_targets``: every policy's target search,
the fragmentation policy's and defrag's search for a mover's place among them), for a
pending request's room (``Context.count_held``) and at a move's start
(``record.room_for``). Each read it by hand before, and they could drift apart.

The holds are ``Inputs.held`` (a preemptor's nomination, the tasks Swarm is stopping, a
victim's stopping task spared for its preemptor: ``placement.nominated``) and, of those,
``Inputs.held_shares`` (the stopping tasks' shares where no preemptor's hold names the
GPU). A service is never held from its own hold: placement gives a preemptor the GPUs
held for it.
"""

from __future__ import annotations

from collections.abc import Mapping

# (node id, GPU uuid) -> (for whom, priority): GPUs held though the ledger shows them free
Held = Mapping[tuple[str, str], tuple[str, int]]
# Of those, (node id, GPU uuid) -> the share (milli) tasks Swarm is stopping hold of it,
# where no preemptor's hold names it (``nominated.stopping_shares``): judged by share
Shares = Mapping[tuple[str, str], int]


def held_from(held: Held, shares: Shares, svc: str | None, nid: str, uuid: str
              ) -> int | None:
    """What of GPU ``uuid`` on ``nid`` is held from ``svc`` (None: from every service,
    its own hold too): 0 nothing; the share tasks Swarm is stopping hold of it (counted
    used, as placement counts it; the rest free); None the whole GPU (a preemptor's)."""
    who = held.get((nid, uuid))
    if who is None or who[0] == svc:
        return 0
    return shares.get((nid, uuid))
