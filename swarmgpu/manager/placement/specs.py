"""What the allocator is given: a node's spec, a replica's demand, a node Swarm schedules on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.allocator.values import Demand, GpuSpec, NodeSpec
from swarmgpu.core.model import NodeFacts, link_score
from swarmgpu.manager.placement.keys import owned_prefixes
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.swarm.client import SwarmNode


def user_labels(labels: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Node labels placement may filter on: everything but swarmgpu's own gates and
    ledger (those differ per node and would split nodes built alike into one group
    each, so the allocator could no longer answer once per group)."""
    owned = owned_prefixes(prefix)
    return {k: v for k, v in labels.items() if not k.startswith(owned)}


# (GPUs, links) -> a small id: nodes built alike share it (NodeSpec.shape)
_SHAPES: dict[tuple[object, ...], int] = {}


def node_spec(node: SwarmNode, facts: NodeFacts, prefix: str = "swarmgpu.") -> NodeSpec:
    links = facts.links
    numa = [g.numa_node for g in facts.gpus]

    def pair(a: int, b: int) -> int:
        if a == b:
            return 0
        # go-gpuallocator's score, plus 1 for sharing a NUMA node: among equally linked
        # GPUs (all NV12 on a DGX) the set stays local to one CPU socket.
        same = numa[a] is not None and numa[a] == numa[b]
        return link_score(links[a][b]) + (1 if same else 0)

    gpus = tuple(GpuSpec(index=i, product=g.product, memory_mib=g.memory_mib,
                         numa_node=g.numa_node, healthy=g.healthy, mig_enabled=g.mig_enabled)
                 for i, g in enumerate(facts.gpus))
    return NodeSpec(
        name=node.id,
        gpus=gpus,
        shape=_SHAPES.setdefault((gpus, links), len(_SHAPES)),
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        labels=user_labels(node.labels, prefix),
        pair_score=pair if links else None,
    )


def demand_of(req: GpuRequest, cpu_milli: int = 0, memory_mib: int = 0) -> Demand:
    """The allocator's demand for one replica; CPU and memory are the service's Swarm
    reservations, which Swarm's scheduler checks against the node."""
    if req.mig_profile:
        return Demand(mig_profile=req.mig_profile, products=req.products, cpu_milli=cpu_milli,
                      memory_mib=memory_mib)
    if req.is_fraction:
        return Demand(gpu_milli=req.gpu_milli, min_memory_mib=req.min_memory_mib or 0,
                      products=req.products, cpu_milli=cpu_milli, memory_mib=memory_mib)
    return Demand(num_gpu=req.gpus, min_memory_mib=req.min_memory_mib or 0,
                  products=req.products, topology=str(req.topology),
                  cpu_milli=cpu_milli, memory_mib=memory_mib)


def unread(facts: NodeFacts | None) -> bool:
    """Nothing is known of the node's GPUs: no facts (its agent unreachable, and no last
    good ones to stand in, as when a new leader starts), or facts that list no GPU and
    say why (the source failed: NVML cannot initialise, its GPU count failed). Zero GPUs
    without an error is an answer; this is not."""
    return facts is None or facts.gpus_unread


def host_ports(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The ports a service publishes in host mode ("8000/tcp"): Swarm runs one task per
    node with each (its HostPortFilter), so its replicas are never packed on one node."""
    endpoint = spec.get("EndpointSpec")
    return host_mode(endpoint.get("Ports") if isinstance(endpoint, Mapping) else None)


def host_mode(ports: object) -> tuple[str, ...]:
    """Of an endpoint's port list, those published in host mode with a port number
    (Swarm's HostPortFilter skips published port 0: the engine picks one at run time);
    anything that is not a list of objects publishes none."""
    if not isinstance(ports, list | tuple):
        return ()
    return tuple(dict.fromkeys(
        f"{p.get('PublishedPort')}/{p.get('Protocol') or 'tcp'}" for p in ports
        if isinstance(p, Mapping) and p.get("PublishMode") == "host"
        and p.get("PublishedPort")))


def schedulable(node: SwarmNode) -> bool:
    """Ready, active and read whole: an ``unread`` node takes no new placement (what it
    holds is kept, as a paused node's)."""
    return node.state == "ready" and node.availability == "active" and not node.unread
