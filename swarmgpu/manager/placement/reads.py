"""Every service's request, read once per spec version (``RequestReader``), and one
cycle's services as the planner reads them (``ServiceRead``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from operator import attrgetter

from swarmgpu.core.peertext import peer_text
from swarmgpu.core.tenants import NAME_RE, case_twin
from swarmgpu.manager.placement.jobs import JOB_MODES, job_defaults
from swarmgpu.manager.placement.memo import LabelParse, PlannerMemo, RequestEntry, ServeKey
from swarmgpu.manager.placement.preempt import serve_key
from swarmgpu.manager.placement.queues import ALL_QUEUES
from swarmgpu.manager.services.requests import (
    GpuRequest,
    RequestError,
    container_request_errors,
    parse_all,
    request_labels,
)
from swarmgpu.manager.services.tenants import Tenants, case_twin_refused
from swarmgpu.swarm.client import SwarmService
from swarmgpu.swarm.specread import UnreadSpec, reservations

Parsed = list[tuple[SwarmService, GpuRequest | RequestError]]


@dataclass
class ServiceRead:
    """One cycle's services, read once (``RequestReader.read``), by name."""

    parsed: Parsed = field(default_factory=list)  # with a GPU request, or a broken one
    cpu_only: list[SwarmService] = field(default_factory=list)  # none, but reserve CPU
    no_request: list[SwarmService] = field(default_factory=list)  # none
    names: set[str] = field(default_factory=set)  # every service's name
    few: set[str] = field(default_factory=set)  # ids: no more replicas than ``most``
    queued: bool = False  # some request names a queue
    # service name -> the queue an invalid request's holdings count against (``read``)
    broken_queues: dict[str, str] = field(default_factory=dict)
    # with tenants, service name -> what preemption reads for an invalid request
    # (``Tenants.held_as``): its holdings are kept, so it may still be a victim
    held_as: dict[str, GpuRequest] = field(default_factory=dict)
    # queue -> why its use is not known this cycle: an invalid request's queue lookup
    # raised (``QueueBook.start``'s ``unknown``; ``ALL_QUEUES``: every queue)
    unknown_queues: dict[str, str] = field(default_factory=dict)
    serve_keys: list[ServeKey] = field(default_factory=list)  # of ``parsed``
    mixed: bool = False  # not every serve key is the same
    # service id -> what a pass over every service raised for it before its visit (its
    # read here; the planner's other passes add theirs): planned as failed, kept whole
    failed: dict[str, Exception] = field(default_factory=dict)
    # of ``failed``, the services of no request whose ungating raised (the planner's
    # release pass): the only ones whose ledger entries are kept whole (``unreleased``)
    ungate_failed: set[str] = field(default_factory=set)
    # a service whose name cannot be read (``SwarmService.unread``): any name in the
    # ledger may be its, so none is taken for gone this cycle (``isolate.unnamed_holders``)
    unnamed: SwarmService | None = None

    def served(self) -> Parsed:
        """``parsed`` in serve order (``placement.preempt.serve_order``: the same stable
        sort, by keys read once per spec version)."""
        if not self.mixed:
            return self.parsed
        keys, parsed = self.serve_keys, self.parsed
        return [parsed[i] for i in sorted(range(len(parsed)), key=keys.__getitem__)]


_UNPARSED = RequestError("", "", "")  # (a marker: not parsed yet)
# (in C: keys read from every service, every cycle)
_by_name = attrgetter("name")
_by_id = attrgetter("id")


class RequestReader:
    """Reads each service's request once per spec version into the planner's memo
    (``PlannerMemo.requests``), with its tenant's limits and a job's defaults."""

    def __init__(
        self,
        memo: PlannerMemo,
        prefix: str,
        zone_label: str,
        classes: Mapping[str, int] | None,
        tenants: Tenants | None,
        queues: frozenset[str] = frozenset(),
    ) -> None:
        self.memo = memo
        self.prefix = prefix
        self.zone_label = zone_label
        self.classes = classes
        self.tenants = tenants
        self.queues = queues  # the config's queue names (its tenants' too)

    def read(self, services: Sequence[SwarmService], most: int = -1,
             unkeyed: Sequence[str] = ()) -> ServiceRead:
        """Every service read once, by name (``ServiceRead``); ``most``: the largest
        node's GPUs (``few``: services with no more replicas); ``unkeyed``: the services
        the list left out, without an ID (``swarm.unkeyed``): any name in the ledger may
        be one's, as a nameless service's may (``ServiceRead.unnamed``)."""
        known = self.memo.requests  # (not "requests": bandit reads that as HTTP's)
        order = sorted(services, key=_by_name)
        # New spec versions parsed first; then each field is one comprehension over
        # the services (a loop doing all of it per service cost 3-4 times as much).
        failed: dict[str, Exception] = {}
        # an unread service too: its version's memo is not this read of it (a proxy may
        # answer the same version unread), so it fails again each cycle it is unread
        for s in [s for s in order
                  if (g := known.get(s.id)) is None or g.version != s.version or s.unread]:
            try:
                self._parse(s)
            except Exception as exc:  # its fault is its own: the others are read
                failed[s.id] = exc
                known[s.id] = unread(s)
        pairs = list(zip(order, map(known.__getitem__, map(_by_id, order)), strict=True))
        parsed: Parsed = [(s, g.request) for s, g in pairs if g.request is not None]
        keys = [g.serve_key for _, g in pairs if g.request is not None]
        unknown: dict[str, str] = {}
        held: dict[str, GpuRequest] = {}
        broken = self._broken_queues(parsed, failed, unknown, held)
        return ServiceRead(
            parsed=parsed,
            cpu_only=[s for s, g in pairs if g.request is None and g.reservation[0] > 0],
            no_request=[s for s, g in pairs if g.request is None],
            names=set(map(_by_name, order)),
            few={s.id for s in order if (s.replicas or 0) <= most},
            queued=bool(broken) or bool(unknown)
            or (
                bool(self.memo.queued_ids)
                and any(isinstance(r, GpuRequest) and r.queue for _, r in parsed)
            ),
            broken_queues=broken,
            held_as=held,
            unknown_queues=unknown,
            serve_keys=keys,
            mixed=bool(keys) and keys.count(keys[0]) != len(keys),
            failed=failed,
            unnamed=next((s for s in order if s.unread and not s.name), None)
            or self._stand_in(unkeyed),
        )

    def _stand_in(self, unkeyed: Sequence[str]) -> SwarmService | None:
        """A nameless stand-in for the services the list left out (``read``), read as
        one whose read raised (``unread``); None when none was."""
        if not unkeyed:
            return None
        s = SwarmService("", "", {}, (), (), "replicated", None, None, 0, unread=unkeyed[0])
        self.memo.requests[s.id] = unread(s)  # (its holdings' reservation: none)
        return s

    def _broken_queues(self, parsed: Parsed, failed: dict[str, Exception],
                       unknown: dict[str, str], held: dict[str, GpuRequest]) -> dict[str, str]:
        """The queue of each invalid request: what it holds is kept (never dropped for a
        broken label), so it still counts -- against its label's queue when that names
        one it may (with tenants: one its tenant owns, else the tenant's first; and
        ``held`` gets what preemption reads for it, ``Tenants.held_as``). One
        whose lookup raises is failed and its holdings count nowhere, so each queue it
        may count against is put in ``unknown`` (no new work is admitted to it)."""
        out: dict[str, str] = {}
        for s, r in parsed:
            if isinstance(r, RequestError):
                try:
                    asked = s.labels.get(self.prefix + "queue", "")
                    asked = asked if NAME_RE.fullmatch(asked) else ""
                    q = (self.tenants.queue_of(s, asked) if self.tenants is not None
                         else case_twin(asked, self.queues) or asked)  # (the one it meant)
                    if self.tenants is not None:
                        held[s.name] = self.tenants.held_as(s, q)
                except Exception as exc:  # (as in ``read``)
                    failed.setdefault(s.id, exc)
                    why = (f"finding the queue of {s.name} raised ({type(exc).__name__}: "
                           f"{peer_text(str(exc), 200)})")
                    for each in self._maybe_queues(s):
                        unknown.setdefault(each, why)
                    continue
                if q:
                    out[s.name] = q
        return out

    def _maybe_queues(self, s: SwarmService) -> set[str]:
        """The queues an invalid request whose queue lookup raised may count against:
        its label's, and every queue of its tenant; every queue (``ALL_QUEUES``) where
        neither can be told."""
        out: set[str] = set()
        with suppress(Exception):  # (its fault is said once, by ``_broken_queues``)
            asked = s.labels.get(self.prefix + "queue", "")
            if isinstance(asked, str) and NAME_RE.fullmatch(asked):
                out.add(asked)
        if self.tenants is None:
            return out or {ALL_QUEUES}
        try:
            out.update(self.tenants.of_service(s).queues)
        except Exception:  # its tenant cannot be told: any tenant's queue
            out.add(ALL_QUEUES)
        return out

    def _parse(self, s: SwarmService) -> RequestEntry:
        """A new spec version's request. A version that changed only what parsing does
        not read (placement's own device map and state labels, constraints, env) keeps
        the request object it had, and the shape learned from it."""
        if s.unread:  # a part of its spec the engine's answer had unread (swarm.client)
            raise UnreadSpec(s.unread)
        memo = self.memo
        prev = memo.requests.get(s.id)
        labels = request_labels(s.labels, self.prefix)
        got = memo.parses.get(s.id)
        if got is None or got.labels != labels or isinstance(got.request, RequestError):
            # The same labels parse the same (a frozen request, shared); an error is
            # said per service, so it is parsed again.
            one = memo.by_labels.get(labels, _UNPARSED)
            if one is _UNPARSED:
                one = parse_all(
                    s.labels, prefix=self.prefix, zone_label=self.zone_label, classes=self.classes
                )
                if not isinstance(one, RequestError):
                    memo.shared_parse(labels, one)
            got = memo.parses[s.id] = LabelParse(labels, one)
        ceiling = (self.tenants.of_service(s).max_priority
                   if self.tenants is not None and s.mode in JOB_MODES else None)
        r = job_defaults(s, got.request, self.prefix, self.classes, ceiling)  # batch by default
        if r is None:  # a request among its containers' labels is said, not ignored
            r = next(iter(container_request_errors(_container_labels(s), self.prefix)), None)
        if self.tenants is not None:  # what its tenant may have (per service, not shared)
            r = self.tenants.apply_to(s, r)
        elif isinstance(r, GpuRequest) and (no := case_twin_refused(r.queue, self.queues,
                                                                    self.prefix)):
            r = no  # (with tenants, apply refuses it by the same rule)
        res = reservations(s.spec)
        if (
            prev is not None
            and not isinstance(r, RequestError)
            and prev.reservation == res
            and (r is prev.request or r == prev.request)
        ):
            r = prev.request
        else:
            memo.shapes.pop(s.id, None)
            memo.learned.discard(s.id)
        entry = memo.requests[s.id] = RequestEntry(s.version, r, res, serve_key(s, r))
        for ids, yes in (
            (memo.job_ids, s.mode in JOB_MODES),
            (memo.queued_ids, isinstance(r, GpuRequest) and bool(r.queue)),
        ):
            if yes:
                ids.add(s.id)
            else:
                ids.discard(s.id)
        return entry


def unread(s: SwarmService) -> RequestEntry:
    """The entry of a service whose read raised: an invalid request (what it holds is
    kept, never dropped), no reservation, read again next cycle (no version matches)."""
    r = RequestError(f"{s.name}'s labels", "", "labels swarmgpu could read")
    return RequestEntry(-1, r, (0, 0), serve_key(s, r))


def _container_labels(s: SwarmService) -> Mapping[str, str]:
    """``TaskTemplate.ContainerSpec.Labels``: a stack file's service-level ``labels:``."""
    tt = s.spec.get("TaskTemplate")
    cs = tt.get("ContainerSpec") if isinstance(tt, Mapping) else None
    labels = cs.get("Labels") if isinstance(cs, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}
