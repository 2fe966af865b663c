"""Nodes without GPUs where a service of no GPU (``swarmgpu.gpus: "0"``) may go: which
they are, by Swarm's word alone (``cpu_only_node``), their allocator spec
(``cpu_node_spec``), and how one is picked among them (``CpuFit``).

Such a node runs no swarmgpu agent, so nothing but Swarm describes it: its node object's
``Description.Resources`` (the CPU and memory Swarm's ResourceFilter checks reservations
against), its status and availability (``specs.schedulable``) and its platform (Swarm's
filters, ``placement.filters``). No agent answer makes a node one (a peer on the agent
port could say anything), and no label does either: a label only ever keeps a node out,
as a task of the agents' own service does (``agent_nodes``: Swarm put an agent there).
GPU requests never see these nodes: they live on their own allocator
(``ClusterAllocator.cpu``), which only demands of no GPU are placed on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping, Sequence
from collections.abc import Set as AbstractSet

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Choice, Demand, NodeSpec, NodeState, Unplaceable
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.tenants import TenantSpec
from swarmgpu.manager.placement.keys import ASSIGNED_STATES, MEANT_STATES
from swarmgpu.manager.placement.specs import schedulable, user_labels
from swarmgpu.swarm.agentservice import gpu_advertised, gpu_label_why, operator_agent_ids
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


def agent_nodes(services: Iterable[SwarmService], tasks: Iterable[SwarmTask],
                name: str, tenants: Sequence[TenantSpec] = ()) -> frozenset[str]:
    """The nodes Swarm has assigned a task of the agents' service to (``name``:
    ``agents.service``, the shipped stack's ``swarmgpu_agent``; "": none is read): GPU
    nodes by Swarm's own word, whatever their labels (the operator placed the agents by
    a label of their own, or by hand). Its task assigned or later, desired running or
    ``ready`` (``keys.MEANT_STATES``: a restart's or an update's new task before it
    starts; an agent that fails at start loops so, never answering). A service so named
    that a tenant of ``tenants`` (the operator's tenancy config) matches is not the
    agents' (``agentservice.operator_agent_ids``)."""
    if not name:  # the replay's and render's default: no service is walked for it
        return frozenset()
    ids = operator_agent_ids(services, name, tenants)
    if not ids:
        return frozenset()
    return frozenset(t.node_id for t in tasks if t.service_id in ids and t.node_id
                     and t.desired_state in MEANT_STATES and t.state in ASSIGNED_STATES)


def gpu_hint(node: SwarmNode, prefix: str, kind: str = "",
             agents: AbstractSet[str] = frozenset()) -> str | None:
    """Why Swarm itself says this is a GPU node, whose agent must be read: it carries
    label sync's labels, the ``gpu=true`` node or engine label the shipped stack places
    agents by (docs/deploy.md), it runs a task of the agents' service (``agents``:
    ``agent_nodes``), or its engine advertises GPU generic resources (the usual kinds,
    or ``kind``: ``placement.generic_resource_kind``). None: nothing says so. The one
    answer to "is this a GPU node" before its agent answers: label sync expects an agent
    there (``nodes.sync.is_gpu_node``), ``audit``, ``status`` and the map say it is
    unreachable, and placement never takes it as a CPU-only node."""
    labelled = gpu_label_why(node, prefix)  # the doctor's reading of the labels too
    if labelled is not None:
        return labelled
    if node.id in agents:
        return "Swarm runs a task of the agents' service there (agents.service)"
    if gpu_advertised(node, kind):
        return "its engine advertises GPU generic resources"
    return None


def expects_agent(node: SwarmNode, answered: bool, prefix: str, kind: str = "",
                  agents: AbstractSet[str] = frozenset()) -> bool:
    """A GPU node, whose agent must be read: its agent answered once (``answered``: the
    agent book's ``last_ok``, live or saved) or Swarm says so (``gpu_hint``). The one
    predicate label sync (``nodes.sync.is_gpu_node``) and ``audit`` share."""
    return answered or gpu_hint(node, prefix, kind, agents) is not None


def cpu_only_node(node: SwarmNode, facts: NodeFacts | None, prefix: str, kind: str = "",
                  agents: AbstractSet[str] = frozenset()) -> bool:
    """A node a service of no GPU may be placed on though no agent describes it: no
    agent facts at all, Swarm reports its CPU and memory, and nothing Swarm says makes
    it a GPU node whose agent is merely not read yet (``gpu_hint``: label sync's labels,
    written only for nodes whose agent once answered; the operator's ``gpu=true``, node
    or engine label, where agents run; a task of the agents' service there, ``agents``;
    GPU generic resources). A GPU node's holdings there stay as an unread node's do
    (``ClusterAllocator.commit_holding``)."""
    if facts is not None:
        return False  # the agent answered (or its last facts stand in): a GPU node's path
    if not node.cpu_milli or not node.memory_mib:
        return False  # Swarm does not say what it has: nothing to place against
    return gpu_hint(node, prefix, kind, agents) is None


def cpu_node_spec(node: SwarmNode, prefix: str) -> NodeSpec:
    """The allocator's node: no GPU, Swarm's CPU and memory, the labels placement may
    filter on (zones)."""
    return NodeSpec(name=node.id, gpus=(), cpu_milli=node.cpu_milli,
                    memory_mib=node.memory_mib, labels=user_labels(node.labels, prefix))


def cpu_node_key(node: SwarmNode, prefix: str) -> tuple[object, ...]:
    """What a CPU-only node's spec is built from: the same key, the same spec."""
    return (node.hostname, node.cpu_milli, node.memory_mib,
            tuple(sorted(user_labels(node.labels, prefix).items())))


class CpuFit:
    """Among nodes without GPUs, the one the demand fills best (the least CPU left,
    then the least memory): large CPU-only services keep finding a whole node, as
    placement keeps whole GPU nodes for large GPU tasks. Ties go to the lower rank
    (hostname order), as the allocator breaks them."""

    name = "cpu-fit"

    def score(self, node: NodeState, d: Demand) -> float:
        cpu = node.cpu_left if node.cpu_left is not None else 0
        mem = node.mem_left if node.mem_left is not None else 0
        # CPU first (milli, far below 1e9), memory only among equal CPU
        return -float(cpu - d.cpu_milli) * 1e9 - float(mem - d.memory_mib)

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        return None  # no GPU to pick


def sync_cpu_node(alloc: Allocator, keys: MutableMapping[str, tuple[object, ...]],
                  n: SwarmNode, f: NodeFacts | None, rank: int, prefix: str,
                  kind: str = "", agents: AbstractSet[str] = frozenset()) -> str:
    """Keep a node without GPU facts on the CPU-only allocator while Swarm alone says it
    is one (``cpu_only_node``), rebuilt when its spec would change; its status is its
    blocking (down, paused, drained: it takes nothing new). ``kind``: the configured
    generic resource kind, ``agents``: the nodes running the agents' service
    (``gpu_hint``). Returns what changed: "added", "rebuilt", "dropped", or ""."""
    there = n.id in alloc.nodes
    if not cpu_only_node(n, f, prefix, kind, agents):
        if there:
            alloc.remove_node(n.id)
            keys.pop(n.id, None)
            return "dropped"
        return ""
    key = cpu_node_key(n, prefix)
    got = ""
    if keys.get(n.id) != key:
        if there:
            alloc.remove_node(n.id)
        alloc.add_node(cpu_node_spec(n, prefix), rank=rank)
        keys[n.id] = key
        got = "rebuilt" if there else "added"
    alloc.set_blocked(n.id, not schedulable(n))
    return got


def no_gpu(d: Demand) -> bool:
    """A demand of no GPU at all (``swarmgpu.gpus: "0"``): CPU-only nodes may take it."""
    return (not d.num_gpu and not d.gpu_milli and not d.mig_profile
            and not d.min_memory_mib and not d.products)


def place_no_gpu(alloc: Allocator, d: Demand, allowed: Callable[[NodeState], bool] | None,
                 exclude: AbstractSet[str], where: Callable[[NodeState], bool] | None,
                 explain: bool = True) -> Choice | Unplaceable:
    """The CPU-only node ``d`` fills best (``CpuFit``), among those it may go to."""
    if allowed is not None:
        exclude = frozenset(exclude) | {n for n, ns in alloc.nodes.items() if not allowed(ns)}
    return alloc.place(d, exclude=exclude, where=where, explain=explain,
                       note=f"{d.describe()} on a node without GPUs")


def with_cpu_reason(got: Choice | Unplaceable, cpu: Unplaceable | None) -> Choice | Unplaceable:
    """The GPU nodes' answer; where neither they nor a CPU-only node it may go to has
    room, the reason names the CPU-only node that came closest too."""
    if not isinstance(got, Unplaceable) or cpu is None or "best node" not in cpu.reason:
        return got
    return Unplaceable(f"{got.reason}; of the nodes without GPUs, "
                       f"{cpu.reason.split('; ', 1)[-1]}")
