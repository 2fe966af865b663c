"""Nodes Swarm would refuse a service's task on: its constraints, platforms and generic
resources (``SwarmFilters``), answered once per distinct filter while the nodes are as
they were."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from swarmgpu.manager.placement.generic import generic_count, generic_reservations
from swarmgpu.manager.placement.keys import gate_of, is_hold
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmNode, SwarmService
from swarmgpu.swarm.constraints import node_satisfies, platform_ok
from swarmgpu.swarm.constraints import parse_all as parse_constraints

# (constraints, platforms (os, arch), generic reservations (kind, count))
ExcludeKey = tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[tuple[str, int], ...]]


class SwarmFilters:
    """The planner's view of Swarm's own node filters, kept across cycles: per service
    (and spec version) its filter key, per key the nodes it excludes. ``gen`` moves when
    a node changes, so answers that depended on the nodes are asked anew."""

    def __init__(self, prefix: str, generic_kind: str,
                 request_of: Callable[[str], GpuRequest | RequestError | None]) -> None:
        self.prefix = prefix
        self.generic_kind = generic_kind
        self.request_of = request_of  # service id -> its parsed request (or None)
        self.gen = 0
        self.keys: dict[str, tuple[int, ExcludeKey | None]] = {}  # service id -> its key
        self._exclude: dict[ExcludeKey, frozenset[str]] = {}
        self._sig: tuple[tuple[str, int], ...] = ()
        self._nodes: Sequence[SwarmNode] = ()

    def new_cycle(self, nodes: Sequence[SwarmNode]) -> None:
        self._nodes = nodes
        sig = tuple((n.id, n.version) for n in nodes)
        if sig != self._sig:  # a node changed: Swarm's filters may answer anew
            self._sig = sig
            self.gen += 1
            self._exclude = {}

    def refused(self, s: SwarmService) -> frozenset[str]:
        """Nodes Swarm would refuse the service's task on: its own constraints (not the
        gate, which swarmgpu opens, nor the hold, which it replaces with the gate),
        platforms and generic resources."""
        got = self.keys.get(s.id)
        if got is None or got[0] != s.version:
            got = (s.version, self._key(s))
            self.keys[s.id] = got
        key = got[1]
        if key is None:
            return frozenset()
        hit = self._exclude.get(key)
        if hit is None:
            cons, plats, generic = key
            parsed, _errors = parse_constraints(cons)
            hit = frozenset(n.id for n in self._nodes
                            if not node_satisfies(parsed, n)
                            or (plats and not any(platform_ok(n, o, a) for o, a in plats))
                            or any(generic_count(n, k) < v for k, v in generic))
            self._exclude[key] = hit
        return hit

    def _key(self, s: SwarmService) -> ExcludeKey | None:
        # Gates (its own, or another's it replaces) and the hold are swarmgpu's to open or
        # replace; any other constraint on a gate label is the owner's, and Swarm's.
        cons = tuple(c for c in s.constraints
                     if gate_of(c, self.prefix) is None and not is_hold(c, self.prefix))
        plats = tuple((str(p.get("OS") or ""), str(p.get("Architecture") or ""))
                      for p in ((s.spec.get("TaskTemplate") or {}).get("Placement") or {})
                      .get("Platforms") or () if isinstance(p, Mapping))
        generic = dict(generic_reservations(s.spec))
        r = self.request_of(s.id)
        if (self.generic_kind and isinstance(r, GpuRequest) and not r.mig_profile
                and not r.is_fraction):
            generic[self.generic_kind] = r.gpus  # what reserve_generic will reserve
        if not cons and not plats and not generic:
            return None
        return (cons, plats, tuple(sorted(generic.items())))
