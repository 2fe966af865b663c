"""Holdings kept each cycle: every valid ledger entry, then the device lists a service
declares, adopted onto free GPUs only (``KeptHoldings``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from collections.abc import Set as AbstractSet

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.placement.jobs import JOB_MODES
from swarmgpu.manager.placement.keys import DEVICES
from swarmgpu.manager.placement.ledger import Holding, packed_holding
from swarmgpu.manager.placement.replicas import holding_fits
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmNode, SwarmService

Parsed = Sequence[tuple[SwarmService, GpuRequest | RequestError]]
# (no task runs there yet, service name, service, request, holding): a declared list
Declared = tuple[bool, str, SwarmService, GpuRequest, Holding]
# (service id, service name, holding), in commit order
Order = list[tuple[str, str, Holding]]
Failed = MutableMapping[str, Exception]  # service id -> what a pass over it raised


class KeptHoldings:
    """Commits the holdings kept this cycle on the planner's allocator. Kept across
    cycles: whether a holding fits its request (per node generation), and each
    service's declared lists (per spec version).

    The ledger (node labels only swarmgpu writes) is authoritative. A
    ``<p>devices.<node>`` service label without a ledger entry (a stack from ``swarmgpu
    render``, a lost node label) is adopted only onto GPUs that are still free, so a
    service cannot take another one's GPUs by naming their UUIDs: the declared list is
    reported and the service is placed anew, and the running owner keeps its GPUs.
    Declared lists of services with running tasks on that node are tried first.
    """

    def __init__(self, cluster: ClusterAllocator, prefix: str,
                 reservation: Callable[[str], tuple[int, int]]) -> None:
        self.cluster = cluster
        self.dk = prefix + DEVICES
        self.reservation = reservation  # service id -> its (CPU milli, memory MiB)
        # service id -> (its request, (holding, node generation) -> why it does not fit)
        self.fits: dict[str, tuple[GpuRequest, dict[tuple[Holding, int], str | None]]] = {}
        self.declared: dict[str, tuple[int, list[tuple[str, int | None, tuple[str, ...]]]]] = {}
        # (service name, node id) -> True: a holding on a failed GPU is kept, for the
        # health rebalance policy to move (docs/health.md); None or False: re-placed.
        self.keep_failed: Callable[[str, str], bool] | None = None
        # (service name, node id): entries a removed service of the name left, its task
        # still stopping there (``placement.recreated``): never kept, nor a list adopted
        self.disowned: AbstractSet[tuple[str, str]] = frozenset()

    def commit(self, parsed: Parsed, ledger: Mapping[str, Mapping[str, Holding]],
               by_id: Mapping[str, SwarmNode], facts: Mapping[str, NodeFacts],
               running: Mapping[str, Mapping[str, int]], failed: Failed,
               keep: AbstractSet[str] = frozenset(),
               kept_count: int = 0) -> dict[str, dict[str, Holding]] | None:
        """service name -> node id -> holding kept (and committed) this cycle. ``keep``:
        services left out of ``parsed`` whose committed holdings stay as they are (a
        change-driven cycle's quiet ones: ``kept_count`` holdings); None, with nothing
        committed, when a service of ``parsed`` has a declared list to adopt then
        (adoption reads every service's holdings: only a full pass does it). A service
        whose reading raises is named in ``failed`` (service id -> the fault), what it
        holds in the ledger kept as it is."""
        wanted, order, declared = self._read(parsed, ledger, by_id, facts, running, failed)
        if keep and declared:
            return None
        self._adopt(declared, facts, wanted, order, failed)
        whole = self._strip_failed(wanted, order, facts, failed) if self.keep_failed else {}
        kept = self.cluster.keep_holdings(wanted, order, self.reservation, keep, kept_count)
        for (name, nid), h in whole.items():
            if nid in kept.get(name, {}):
                kept[name][nid] = h
        return kept

    def _strip_failed(self, wanted: dict[str, dict[str, Holding]], order: Order,
                      facts: Mapping[str, NodeFacts], failed: Failed,
                      ) -> dict[tuple[str, str], Holding]:
        """Holdings on failed GPUs that ``keep_failed`` keeps: committed without those GPUs
        (no room to count there, nobody is given them), kept whole; returns the whole ones."""
        keep = self.keep_failed
        bad = {nid: u for nid, f in facts.items() if (u := failed_uuids(f))}
        whole: dict[tuple[str, str], Holding] = {}
        if keep is None or not bad:
            return whole
        drop: list[int] = []
        for i, (sid, name, h) in enumerate(order):
            gone = bad.get(h.node_id)
            if not gone or h.packed or gone.isdisjoint(h.uuids):
                continue
            try:
                kept = keep(name, h.node_id)
            except Exception as exc:  # its fault is its own: kept, as the policy keeps
                failed.setdefault(sid, exc)
                kept = True
            if not kept:  # released: re-placed, and said why
                drop.append(i)
                wanted[name].pop(h.node_id, None)
                self.cluster.problems.append(
                    f"{name}: holds failed GPU(s) {','.join(sorted(gone & set(h.uuids)))}; "
                    "re-placed on a healthy GPU (the health policy released it)")
                continue
            pairs = [(u, m) for u, m in zip(h.uuids, h.milli, strict=True) if u not in gone]
            rest = Holding(h.service, h.node_id, tuple(u for u, _ in pairs),
                           tuple(m for _, m in pairs))
            order[i] = (sid, name, rest)
            wanted[name][h.node_id] = rest
            whole[(name, h.node_id)] = h
        for i in reversed(drop):
            del order[i]
        return whole

    def _read(self, parsed: Parsed, ledger: Mapping[str, Mapping[str, Holding]],
              by_id: Mapping[str, SwarmNode], facts: Mapping[str, NodeFacts],
              running: Mapping[str, Mapping[str, int]], failed: Failed,
              ) -> tuple[dict[str, dict[str, Holding]], Order, list[Declared]]:
        """The valid ledger entries (service name -> node id -> holding, and in commit
        order); the declared lists of nodes the service holds nothing on, to adopt. A
        service whose reading raises keeps its ledger entries whole, as an invalid
        request does, and is named in ``failed`` (service id -> the fault)."""
        wanted: dict[str, dict[str, Holding]] = {}
        order: Order = []
        declared: list[Declared] = []
        no_holdings: dict[str, Holding] = {}
        for s, r in parsed:
            mine = ledger.get(s.name, no_holdings)
            n_order, n_declared = len(order), len(declared)
            try:
                self._read_one(s, r, mine, by_id, facts, running, wanted, order, declared)
            except Exception as exc:  # its fault is its own: what it holds stays held
                failed.setdefault(s.id, exc)
                del order[n_order:], declared[n_declared:]
                wanted.pop(s.name, None)
                for h in mine.values():
                    wanted.setdefault(s.name, {})[h.node_id] = h
                    order.append((s.id, s.name, h))
        return wanted, order, declared

    def _read_one(self, s: SwarmService, r: GpuRequest | RequestError,
                  mine: Mapping[str, Holding], by_id: Mapping[str, SwarmNode],
                  facts: Mapping[str, NodeFacts], running: Mapping[str, Mapping[str, int]],
                  wanted: dict[str, dict[str, Holding]], order: Order,
                  declared: list[Declared]) -> None:
        """``_read`` of one service (``mine``: its ledger entries)."""
        cluster = self.cluster
        gen, in_alloc, fits = cluster.node_gen, cluster.alloc.nodes, self.fits
        cpu_nodes = cluster.cpu.nodes
        if mine and not isinstance(r, RequestError):
            # Per service and request object (a new spec version parses a new one):
            # one lookup per service, not a hash of the request per holding.
            got_fits = fits.get(s.id)
            if got_fits is None or got_fits[0] is not r or len(got_fits[1]) > 64:
                got_fits = fits[s.id] = (r, {})
            known = got_fits[1]
        disowned = self.disowned
        for node_id, h in mine.items():  # 1. the ledger
            if disowned and (s.name, node_id) in disowned:
                continue
            if not isinstance(r, RequestError):  # invalid now: keep, never drop
                if node_id not in by_id:
                    continue
                if not h.uuids and not r.cpu_only and node_id in cpu_nodes:
                    continue  # an entry of no GPU there is nothing a GPU request wants
                fk = (h, gen.get(node_id, 0) if node_id in in_alloc else -1)
                why = known.get(fk, fk)
                if why is fk:
                    why = known[fk] = holding_fits(h, r, facts.get(node_id))
                if why is not None:
                    continue
            wanted.setdefault(s.name, {})[node_id] = h
            order.append((s.id, s.name, h))
        if isinstance(r, RequestError) or s.mode in JOB_MODES:
            return  # a job's lists outlive its run (placement.jobs): never adopted
        got = self.declared.get(s.id)
        if got is None or got[0] != s.version:
            got = (s.version, _declared_lists(s.labels, self.dk))
            self.declared[s.id] = got
        per_slot: dict[str, dict[int, tuple[Sequence[str], Sequence[int]]]] = {}
        for nid, slot, uuids in got[1]:  # 2. declared device lists (``_adopt``)
            if nid in mine or nid not in by_id or not uuids:
                continue
            milli = r.gpu_milli if r.is_fraction else 1000
            if slot is not None:  # replicas packed on the node: one list per slot
                per_slot.setdefault(nid, {})[slot] = (uuids, tuple(1000 for _ in uuids))
                continue
            h = Holding(s.name, nid, uuids, tuple(milli for _ in uuids))
            declared.append((not running.get(s.id, {}).get(nid), s.name, s, r, h))
        for nid, per in per_slot.items():
            h = packed_holding(s.name, nid, per)
            if len(set(h.uuids)) == len(h.uuids):  # a GPU in two slots: not adopted
                declared.append((not running.get(s.id, {}).get(nid), s.name, s, r, h))

    def _adopt(self, declared: Sequence[Declared], facts: Mapping[str, NodeFacts],
               wanted: dict[str, dict[str, Holding]], order: Order, failed: Failed) -> None:
        """Declared lists onto GPUs no other service holds (running services first); a
        list whose check raises is not adopted, its service named in ``failed``."""
        owner = {(nid, u): svc for svc, per in wanted.items() for nid, h in per.items()
                 for u in h.uuids} if declared else {}
        for d in sorted(declared, key=lambda d: (d[0], d[1])):
            try:
                self._adopt_one(d, facts, wanted, order, owner)
            except Exception as exc:  # its fault is its own
                failed.setdefault(d[2].id, exc)

    def _adopt_one(self, d: Declared, facts: Mapping[str, NodeFacts],
                   wanted: dict[str, dict[str, Holding]], order: Order,
                   owner: dict[tuple[str, str], str]) -> None:
        """``_adopt`` of one declared list."""
        _, name, s, r, h = d
        # A share of a GPU may sit beside another service's share (capacity decides).
        taken = sorted({owner[(h.node_id, u)] for u, m in zip(h.uuids, h.milli, strict=True)
                        if m >= 1000 and owner.get((h.node_id, u), name) != name})
        if taken:
            self.cluster.problems.append(
                f"{name}: its label {self.dk}{h.node_id} names GPU(s) that "
                f"{', '.join(taken)} hold(s) in the ledger; ignored, and the service is "
                "placed anew")
            return
        if holding_fits(h, r, facts.get(h.node_id)) is None:
            wanted.setdefault(name, {})[h.node_id] = h
            order.append((s.id, name, h))
            owner.update({(h.node_id, u): name for u in h.uuids})

def failed_uuids(facts: NodeFacts) -> set[str]:
    """The failed GPUs of a node, and the MIG devices on them (a slice fails with its GPU)."""
    return {u for g in facts.gpus if not g.healthy
            for u in (g.uuid, *(m.uuid for m in g.mig_devices))}


def _declared_lists(labels: Mapping[str, str], dk: str
                    ) -> list[tuple[str, int | None, tuple[str, ...]]]:
    """(node id, slot or None, uuids) of each device list on a service (node ids have no
    dot; ``<node>.<slot>`` is a packed replica's list)."""
    out: list[tuple[str, int | None, tuple[str, ...]]] = []
    for k, v in labels.items():
        if not k.startswith(dk):
            continue
        rest = k[len(dk):]
        uuids = tuple(u for u in v.split(",") if u)
        nid, dot, slot = rest.rpartition(".")
        if dot and nid and slot.isascii() and slot.isdigit() and 0 < len(slot) <= 6 \
                and int(slot) > 0:
            out.append((nid, int(slot), uuids))
        else:
            out.append((rest, None, uuids))
    return out
