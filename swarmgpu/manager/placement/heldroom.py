"""The CPU and memory a settling preemptor will take on the node its hold names, counted
in a preemption round (``preempt.choose_preemptions``) for those of its priority or
lower, as Kubernetes counts a nominated pod of equal or higher priority on its node
(``RunFilterPluginsWithNominatedPods``).

A preemptor still pending while it settles (``settling``: its turn in the round is
skipped) has no holding on that node, so ``preemptroom.Room`` counted nothing of it
there. Its victim a job, whose task Swarm stops with its spec and counts until it stops,
a lower request short of CPU there only for that task read the node as room once it
stopped and waited, no victim sought; the CPU went to the preemptor, placed first, and
the request preempted only then, a grace period late."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.preemptroom import Room
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmService


@dataclass
class HeldRoom:
    """The settling preemptors by priority, highest first: (priority, name, node id,
    replicas); ``counted``: how many of them ``count`` has counted in the round's room."""

    waiting: list[tuple[int, str, str, int]]
    counted: int = 0

    @staticmethod
    def of(held: Mapping[tuple[str, str], tuple[str, int]], settling: AbstractSet[str],
           pending: AbstractSet[str], req: Mapping[str, GpuRequest | RequestError],
           room: Room | None,
           holdings: Mapping[str, Mapping[str, Holding]] | None = None) -> HeldRoom:
        """Of the preemptors ``held`` names GPUs for (node id, uuid -> preemptor, ...),
        those ``settling`` and ``pending`` with a whole-GPU request: replicas by the GPUs
        held for it there that its own holding there (``holdings``: node id -> service ->
        holding) does not name. A packed preemptor already running there holds for the
        replicas it lacks: ``Room`` counts its running tasks, not those."""
        gpus: dict[tuple[str, str], int] = {}
        for (nid, u), (who, _pr) in held.items():
            own = (holdings or {}).get(nid, {}).get(who)
            if who in settling and who in pending and (own is None or u not in own.uuids):
                gpus[(who, nid)] = gpus.get((who, nid), 0) + 1
        waiting = []
        for (who, nid), n in gpus.items():
            r = req.get(who)
            if room is None or not isinstance(r, GpuRequest) or r.gpus < 1:
                continue
            waiting.append((r.priority, who, nid, max(1, n // r.gpus)))
        return HeldRoom(sorted(waiting, key=lambda w: (-w[0], w[1], w[2])))

    def count(self, room: Room | None, by_name: Mapping[str, SwarmService],
              priority: int) -> None:
        """Count in ``room`` those of ``priority`` or higher, and only those: the ones not
        counted yet are taken, and any of lower priority an earlier request counted are
        given back. The round serves by priority, highest first, but one that takes
        another round's choices first (``choose_preemptions``' ``first``) serves those
        first, whatever their priority: a higher request after them read the CPU of
        preemptors below it as taken, and preempted for it."""
        want = sum(1 for w in self.waiting if w[0] >= priority)  # (sorted: a prefix)
        sign = 1 if want > self.counted else -1
        for _pr, who, nid, replicas in self.waiting[min(want, self.counted):
                                                    max(want, self.counted)]:
            s = by_name.get(who)
            if room is not None and s is not None:
                room.took(s, nid, (), sign * replicas)  # (negative: given back)
        self.counted = want
