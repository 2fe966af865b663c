"""Nodes Swarm would refuse a service's task on: its constraints, platforms, generic
resources and the plugins its volumes, networks and log driver need (``SwarmFilters``;
``swarm.plugins``), answered once per distinct filter while the nodes are as they were."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from swarmgpu.core.andmore import and_more
from swarmgpu.manager.placement.generic import generic_count, generic_reservations
from swarmgpu.manager.placement.keys import gate_of, is_hold
from swarmgpu.manager.services.requests import GpuRequest, RequestError
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.constraints import node_satisfies, platform_ok
from swarmgpu.swarm.constraints import parse_all as parse_constraints
from swarmgpu.swarm.plugins import Plugin, missing, needed, network_drivers_of, said, unknown
from swarmgpu.swarm.specread import UnreadSpec, spec_object

# (constraints, platforms (os, arch), generic reservations (kind, count), plugins needed)
ExcludeKey = tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[tuple[str, int], ...],
                   tuple[Plugin, ...]]
_NO_NETWORKS: tuple[str, ...] = ()


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
        # service id -> (its spec version, its tasks' network drivers, its key)
        self.keys: dict[str, tuple[int, tuple[str, ...], ExcludeKey | None]] = {}
        self._exclude: dict[ExcludeKey, frozenset[str]] = {}
        self._sig: tuple[tuple[str, int], ...] = ()
        self._nodes: Sequence[SwarmNode] = ()
        # Some node lists its plugins (else the plugins are never judged, nor read).
        self.plugins_known = False
        self.networks: Mapping[str, tuple[str, ...]] = {}  # service id -> network drivers
        # service id -> why its filter cannot be read (``UnreadSpec``): refused on every
        # node, that service alone (raised, it failed every caller's whole pass)
        self.unread: dict[str, str] = {}

    def new_cycle(self, nodes: Sequence[SwarmNode]) -> None:
        self._nodes = nodes
        sig = tuple((n.id, n.version) for n in nodes)
        if sig != self._sig:  # a node changed: Swarm's filters may answer anew
            self._sig = sig
            self.gen += 1
            self._exclude = {}
            self.plugins_known = any(n.plugins for n in nodes)

    def set_tasks(self, tasks: Sequence[SwarmTask]) -> None:
        """This cycle's tasks: the drivers of the networks each service's tasks are
        attached to (Swarm's PluginFilter reads the task's, not the spec's), read only
        where some node lists its plugins."""
        self.networks = network_drivers_of(tasks) if self.plugins_known else {}

    def refused(self, s: SwarmService) -> frozenset[str]:
        """Nodes Swarm would refuse the service's task on: its own constraints (not the
        gate, which swarmgpu opens, nor the hold, which it replaces with the gate),
        platforms and generic resources. A spec whose filter cannot be read: every node
        (``unread_why`` says why)."""
        key = self.key_of(s)
        if s.id in self.unread:
            return frozenset(n.id for n in self._nodes)
        if key is None:
            return frozenset()
        hit = self._exclude.get(key)
        if hit is None:
            cons, plats, generic, need = key
            parsed, _errors = parse_constraints(cons)
            hit = frozenset(n.id for n in self._nodes
                            if not node_satisfies(parsed, n)
                            or (plats and not any(platform_ok(n, o, a) for o, a in plats))
                            or any(generic_count(n, k) < v for k, v in generic)
                            or missing(n, need))
            self._exclude[key] = hit
        return hit

    def key_of(self, s: SwarmService) -> ExcludeKey | None:
        """The service's filter key (None: it has no filter), kept per spec version and
        network drivers."""
        nets = self.networks.get(s.id, _NO_NETWORKS)
        got = self.keys.get(s.id)
        if got is None or got[0] != s.version or got[1] != nets:
            self.unread.pop(s.id, None)
            try:
                key = self._key(s, nets)
            except UnreadSpec as exc:
                key, self.unread[s.id] = None, str(exc)
            got = self.keys[s.id] = (s.version, nets, key)
        return got[2]

    def refused_strict(self, s: SwarmService) -> frozenset[str]:
        """``refused``, raising ``UnreadSpec`` where the filter cannot be read: placement
        fails that service alone (``isolate``), its plan naming the field, rather than
        leaving it pending for "no node allowed"."""
        got = self.refused(s)
        why = self.unread.get(s.id)
        if why is not None:
            raise UnreadSpec(why)
        return got

    def unread_why(self, s: SwarmService) -> str:
        """Why ``s``'s filter cannot be read, naming the field and the fix ("": it can)."""
        self.key_of(s)
        why = self.unread.get(s.id)
        return f"{s.name}'s spec cannot be read: {why}" if why else ""

    def plugins_why(self, s: SwarmService, node: SwarmNode) -> str:
        """Why ``node`` is refused for the plugins ``s`` needs ("" when it is not)."""
        key = self.key_of(s)
        lacks = missing(node, key[3]) if key is not None else ()
        return f"{node.hostname} lacks {said(lacks)} (Swarm's PluginFilter)" if lacks else ""

    def plugins_refused(self, s: SwarmService) -> str:
        """The nodes refused for the plugins ``s`` needs, a few named ("" when none)."""
        key = self.key_of(s)
        if key is None or not key[3]:
            return ""
        said_ = [why for n in self._nodes if (why := self.plugins_why(s, n))]
        return "; ".join(said_[:3]) + and_more(len(said_), 3, "nodes") if said_ else ""

    def plugins_unknown(self, s: SwarmService) -> str:
        """The plugins ``s`` needs and the nodes whose description lists none, in a
        plan's words ("" when none): Swarm decides there, swarmgpu cannot."""
        key = self.key_of(s)
        if key is None or not key[3]:
            return ""
        hosts = sorted(n.hostname for n in self._nodes if unknown(n, key[3]))
        if not hosts:
            return ""
        more = f" and {len(hosts) - 3} more" if len(hosts) > 3 else ""
        return (f"needs {said(key[3])}; the node description of {', '.join(hosts[:3])}"
                f"{more} lists no plugins: left to Swarm's PluginFilter there")

    def _key(self, s: SwarmService, nets: tuple[str, ...]) -> ExcludeKey | None:
        # Gates (its own, or another's it replaces) and the hold are swarmgpu's to open or
        # replace; any other constraint on a gate label is the owner's, and Swarm's.
        cons = tuple(c for c in s.constraints
                     if gate_of(c, self.prefix) is None and not is_hold(c, self.prefix))
        tt = spec_object(s.spec.get("TaskTemplate"), "TaskTemplate")
        listed = spec_object(tt.get("Placement"), "TaskTemplate.Placement").get("Platforms")
        plats = tuple((str(p.get("OS") or ""), str(p.get("Architecture") or ""))
                      for p in listed if isinstance(p, Mapping)) \
            if isinstance(listed, list | tuple) else ()
        generic = dict(generic_reservations(s.spec))
        r = self.request_of(s.id)
        if (self.generic_kind and isinstance(r, GpuRequest) and not r.mig_profile
                and not r.is_fraction):
            generic[self.generic_kind] = r.gpus  # what reserve_generic will reserve
        need = needed(s.spec, nets)
        if not cons and not plats and not generic and not need:
            return None
        return (cons, plats, tuple(sorted(generic.items())), need)
