"""The planner's memory across cycles (``PlannerMemo``: named records, named bounds, one
``evict``); what a settled service's plan reads of a node, by content (``NodeContent``),
and the key it will have once its own gates are open (``key_after_gates_open``),
which ``settles`` keeps a new plan under.

Nothing here decides: each record is an answer the planner computed once and reuses
while its inputs (a spec version, a node's version, the same labels) are unchanged.

Only a plan whose writes are its gates opening is kept across its own writes. A plan
that chose new placements, or writes the service's spec, is planned again the cycle
after they landed: a planner says of a holding it finds in the ledger something other
than it said when it chose it (state Allocated, not Bound; no score; no adoption
warning), so that plan is no answer to the next cycle's inputs
(tests/test_memo.py::test_a_plan_that_places_is_planned_again_once_its_writes_landed).
The daemon writes all of it in one cycle (``cycle.placement.apply_plan``), so its first
cycle without writes plans each such service once more; the two-cycle order did that
in its second, gate-opening, cycle."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import fields, replace
from typing import Any, NamedTuple

from swarmgpu.allocator.fragmentation import TaskShape
from swarmgpu.allocator.workload import WorkloadModel
from swarmgpu.manager.placement.keys import assign_key, gate_key, owned_prefixes
from swarmgpu.manager.placement.ledger import Holding
from swarmgpu.manager.placement.quiet import QuietServices
from swarmgpu.manager.placement.records import EMPTY, ServicePlan, Status
from swarmgpu.manager.placement.tasks import TaskBook
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmNode, SwarmService

# The bounds. Past each, the entries of services or nodes gone are dropped (or, where
# they are shared answers, all of them: they are asked again).
PARSES_MAX = 10_000  # distinct request label sets whose parse is shared
LABEL_KEYS_MAX = 100_000  # services' (ledger, gate) label keys
SERVICES_SLACK = 1_000  # records of gone services, beyond twice the live ones
NODES_SLACK = 100  # records of gone nodes, beyond twice the live ones
FITS_SLACK = 10_000  # kept holdings' fit answers, beyond four per settled service

RequestLabels = tuple[tuple[str, str], ...]
# a service's place in serve order (``preempt.serve_key``): its priority negated, whether
# its CreatedAt reads, that time's instant (ns)
ServeKey = tuple[int, bool, int]


class RequestEntry(NamedTuple):
    """A service's request as read from one spec version."""

    version: int  # the spec version it was read from
    request: GpuRequest | RequestError | None  # None: no GPU request
    reservation: tuple[int, int]  # (CPU milli, memory MiB) each task reserves
    serve_key: ServeKey  # its place in serve order (``placement.preempt``)


class LabelParse(NamedTuple):
    """The request labels a service's request was parsed from, and that parse."""

    labels: RequestLabels
    request: GpuRequest | RequestError | None


class SettledPlan(NamedTuple):
    """A settled service's last plan (no writes), and everything it read
    (``Planner._settled_key``): while that is unchanged, the plan still holds."""

    key: tuple[object, ...]
    plan: ServicePlan


class NodeGates(NamedTuple):
    """A node's gate labels, as of one spec version."""

    version: int
    gates: list[tuple[str, str]]  # (label key, the service it names)
    names: frozenset[str]  # the services they name


class PlannerMemo:
    """What a long-lived ``Planner`` remembers between cycles, by name. ``evict`` drops
    the records of services that are gone once they pass ``SERVICES_SLACK``; the
    records of the planner's parts kept by service id (``by_service``) go with them."""

    def __init__(self, prefix: str) -> None:
        self.requests: dict[str, RequestEntry] = {}  # service id -> its request
        self.parses: dict[str, LabelParse] = {}  # service id -> its labels' parse
        # request labels -> their parse, shared by every service that has them
        self.by_labels: dict[RequestLabels, GpuRequest | None] = {}
        self.shapes: dict[str, TaskShape] = {}  # service id -> shape learned
        # ids whose shape ``learned_of`` (the model) has counted: not asked again
        self.learned: set[str] = set()
        self.learned_of: WorkloadModel | None = None
        self.job_ids: set[str] = set()  # services parsed as jobs (some may be gone)
        self.queued_ids: set[str] = set()  # ... whose request names a queue
        self.settled: dict[str, SettledPlan] = {}  # service id -> its settled plan
        self.quiet = QuietServices(prefix)  # settled services' records (placement.quiet)
        self.tasks = TaskBook()  # the last cycle's tasks, by service
        self.most = -1  # the largest node's GPUs, last cycle
        self.moving: frozenset[str] = frozenset()  # last cycle's services in a move
        self.unread: frozenset[str] = frozenset()  # ... of them, whose record is unreadable
        self.ledger: dict[str, tuple[int, list[Holding]]] = {}  # ``read_ledger``'s
        self.node_content = NodeContent(prefix)  # settled keys read nodes by content
        self.node_gates: dict[str, NodeGates] = {}  # node id -> its gates
        self.label_keys: dict[str, tuple[str, str]] = {}  # service name -> ledger, gate keys
        # the planner's parts' records by service id, evicted with these
        self.by_service: tuple[MutableMapping[str, Any], ...] = ()
        self.fits: MutableMapping[str, Any] = {}  # ``KeptHoldings.fits``
        self.unread_version = 0  # the last version given an unread node (``unmatched``)

    def unmatched(self, nodes: Sequence[SwarmNode]) -> Sequence[SwarmNode]:
        """``nodes``, each ``unread`` one given a spec version no record matches (a new
        negative one each cycle): what its labels read in part made (its ledger, gates,
        content) is never kept for the version it has read whole, its holdings missed."""
        if not any(n.unread for n in nodes):
            return nodes
        self.unread_version -= 1
        return [replace(n, version=self.unread_version) if n.unread else n for n in nodes]

    def request(self, sid: str) -> GpuRequest | RequestError | None:
        got = self.requests.get(sid)
        return None if got is None else got.request

    def reservation(self, sid: str) -> tuple[int, int]:
        return self.requests[sid].reservation

    def shared_parse(self, labels: RequestLabels, request: GpuRequest | None) -> None:
        if len(self.by_labels) > PARSES_MAX:
            self.by_labels.clear()
        self.by_labels[labels] = request

    def label_keys_of(self, name: str, prefix: str) -> tuple[str, str]:
        keys = self.label_keys.get(name)
        if keys is None:
            if len(self.label_keys) > LABEL_KEYS_MAX:
                self.label_keys.clear()
            keys = self.label_keys[name] = (assign_key(prefix, name), gate_key(prefix, name))
        return keys

    def evict(self, live: Sequence[SwarmService], live_nodes: Mapping[str, object]) -> None:
        """Drop what is remembered of services and nodes no longer live (``live``:
        every service; ``live_nodes``: by id), each kind once past its bound."""
        if len(self.fits) > 4 * len(self.settled) + FITS_SLACK:  # departed services'
            self.fits.clear()
        gates = self.node_gates
        if len(gates) > 2 * len(live_nodes) + NODES_SLACK:  # nodes that left
            for nid in [k for k in gates if k not in live_nodes]:
                del gates[nid]
        if len(self.requests) <= 2 * len(live) + SERVICES_SLACK:
            return
        live_ids = {s.id for s in live}
        books: tuple[MutableMapping[str, Any], ...] = (
            self.requests, self.shapes, self.parses, *self.by_service)
        for book in books:
            for sid in [k for k in book if k not in live_ids]:
                del book[sid]
        self.learned &= live_ids
        self.job_ids &= live_ids
        self.queued_ids &= live_ids


class NodeContent:
    """A number per node that changes only when the node changes in something other
    than other services' gates and ledger entries. A node's spec version moves with
    every label write, and the daemon writes a gate or a ledger entry for each service
    it places: keyed on the version, one placement re-planned every settled service
    sharing its nodes. A service's own gate and ledger entry are keyed beside it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        # node id -> (spec version, content, its number)
        self._seen: dict[str, tuple[int, tuple[object, ...], int]] = {}
        self._gen = 0
        self.of: dict[str, int] = {}  # node id -> this cycle's number

    def new_cycle(self, nodes: Sequence[SwarmNode]) -> None:
        seen, prefix = self._seen, self.prefix
        of: dict[str, int] = {}
        for n in nodes:
            got = seen.get(n.id)
            if got is None or got[0] != n.version:
                content = _content(n, prefix)
                if got is None or got[1] != content:
                    self._gen += 1
                    got = (n.version, content, self._gen)
                else:
                    got = (n.version, content, got[2])
                seen[n.id] = got
            of[n.id] = got[2]
        if len(seen) > 2 * len(nodes) + 100:  # nodes that left
            for nid in [k for k in seen if k not in of]:
                del seen[nid]
        self.of = of


# SwarmNode's fields but the version (``dataclasses.fields`` builds its answer per call)
_CONTENT_FIELDS = tuple(f.name for f in fields(SwarmNode) if f.name != "version")


def _content(n: SwarmNode, prefix: str) -> tuple[object, ...]:
    """Every field but the version, the labels without any gate or ledger entry."""
    out: list[object] = []
    owned = owned_prefixes(prefix)
    for name in _CONTENT_FIELDS:
        v = getattr(n, name)
        if name == "labels":
            v = {k: x for k, x in v.items() if not k.startswith(owned)}
        out.append(tuple(sorted(v.items())) if isinstance(v, Mapping) else v)
    return tuple(out)


def key_after_gates_open(key: tuple[object, ...], sp: ServicePlan, s: SwarmService,
                         old: Mapping[str, Holding], prefix: str) -> tuple[object, ...] | None:
    """The settled key (``Planner._settled_key``: its second part is the nodes, each
    ``(id, holding, content, ledger entry, gate)`` then more) that the service's next
    cycle reads once this plan's writes for it landed, when those writes are only its
    gates opening on the nodes it keeps: that cycle's plan is this one without the
    writes, so the cycle after the daemon's own writes does not plan it again. None
    otherwise. A write that did not land leaves the gate as it was: planned again."""
    if (s.mode != "replicated" or sp.status != Status.PLACED or not sp.node_writes or sp.new
            or sp.gates_deferred or sp.needs_service_write):
        return None
    held = {p.node_id for p in sp.placements}
    if held != set(old):
        return None
    ak, gk = assign_key(prefix, s.name), gate_key(prefix, s.name)
    opened: set[str] = set()
    for nid in held:
        sets = sp.node_set.get(nid, EMPTY)
        if ak in sets or any(k in (ak, gk) for k in sp.node_remove.get(nid, ())):
            return None
        if sets.get(gk) == "true":
            opened.add(nid)
    nodes = key[1]
    if not isinstance(nodes, tuple) or not opened or {n[0] for n in nodes} != held:
        return None
    after = tuple((*n[:4], "true" if n[0] in opened else n[4], *n[5:]) for n in nodes)
    return (key[0], after, *key[2:])


def settles(key: tuple[object, ...], sp: ServicePlan, s: SwarmService,
            old: Mapping[str, Holding], prefix: str) -> SettledPlan | None:
    """A new plan as its service's settled one: a plan that writes nothing, under its
    key; one whose writes are only its gates opening, under the key it will have once
    they landed (``placement.memo``); None: it is planned again next cycle."""
    if ((sp.status in (Status.PLACED, Status.DONE)
         or (sp.status == Status.PENDING and not sp.placements))
            and not sp.needs_service_write and not sp.node_writes and not sp.new):
        return SettledPlan(key, sp)
    after = key_after_gates_open(key, sp, s, old, prefix)
    return None if after is None else SettledPlan(after, sp.without_node_writes())
