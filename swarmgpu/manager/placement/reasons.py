"""Why a demand has no node, in the words people read (``Reasons``): a MIG profile no
GPU of the asked products offers, a memory no GPU has, and node ids rewritten as the
hostnames people know. Each is kept while the nodes are the same: identical pending
requests share one reason, and a cycle over an unchanged cluster reads none again."""

from __future__ import annotations

from collections.abc import Mapping

from swarmgpu.allocator.values import Demand
from swarmgpu.core.migprofile import not_offered
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement.memsize import short_of
from swarmgpu.manager.services.requests import matches_products
from swarmgpu.swarm.client import SwarmNode

Stamp = tuple[int, int]  # the nodes' generation a reason was read at (``ClusterAllocator``)


class Reasons:
    """The reasons ``ClusterAllocator`` gives, each cached per node set."""

    def __init__(self) -> None:
        self._host_text: dict[str, str] = {}
        self._names: tuple[tuple[str, str], ...] = ()
        # (MIG profile, gpu-product globs) -> (node generation, why none can be free)
        self._offers: dict[tuple[str, tuple[str, ...]], tuple[Stamp, str | None]] = {}
        # (gpu-memory MiB, gpu-product globs) -> (node generation, the GPU that comes close)
        self._short: dict[tuple[int, tuple[str, ...]], tuple[Stamp, str | None]] = {}

    def rename(self, names: tuple[tuple[str, str], ...]) -> None:
        """The nodes as (id, hostname), in order: another set rewrites texts anew."""
        if names != self._names:
            self._names = names
            self._host_text.clear()

    def not_offered(self, d: Demand, facts: Mapping[str, NodeFacts],
                    stamp: Stamp) -> str | None:
        """The MIG profiles the cluster's GPUs of the asked products offer, when none
        offers the asked one (it can never be free: the owner must change the label);
        once per profile and products while the nodes are the same."""
        key = (d.mig_profile or "", d.products)
        got = self._offers.get(key)
        if got is None or got[0] != stamp:
            if len(self._offers) > 1_000:
                self._offers.clear()
            models = {
                g.product
                for f in facts.values()
                for g in f.gpus
                if (g.mig_capable or g.mig_devices) and matches_products(g.product, d.products)
            }
            got = self._offers[key] = (stamp, not_offered(key[0], models))
        return got[1]

    def short_of(self, d: Demand, facts: Mapping[str, NodeFacts], stamp: Stamp,
                 prefix: str) -> str | None:
        """``memsize.short_of`` over the cluster's GPUs; once per size and products while
        the nodes are the same."""
        key = (d.min_memory_mib, d.products)
        got = self._short.get(key)
        if got is None or got[0] != stamp:
            if len(self._short) > 1_000:
                self._short.clear()
            gpus = (g for f in facts.values() for g in f.gpus)
            got = self._short[key] = (stamp, short_of(key[0], key[1], gpus, prefix))
        return got[1]

    def hostnames(self, text: str, nodes: Mapping[str, SwarmNode]) -> str:
        """Node ids in the allocator's words, as the hostnames people know (identical
        pending requests share one reason: each text is rewritten once per node set)."""
        got = self._host_text.get(text)
        if got is None:
            got = text
            for nid, n in nodes.items():
                if nid in got:
                    got = got.replace(nid, n.hostname)
            if len(self._host_text) > 10_000:
                self._host_text.clear()
            self._host_text[text] = got
        return got
