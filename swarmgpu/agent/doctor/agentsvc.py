"""Does ``agents.service`` name the agents' Swarm service, and does a task of it run on
each GPU-labelled node? A name no service has (a typo, a stack deployed under another
name) marks no node as a GPU node: one whose agent has not answered may be taken as
CPU-only; a tenant's service so named (the daemon's tenancy config, ``--config``) marks
none either, and fails. Read from a manager (a worker cannot list services)."""

from __future__ import annotations

from collections.abc import Sequence

from swarmgpu.agent.doctor.infoparts import unread_check
from swarmgpu.agent.doctor.view import Check, NodeView, Status
from swarmgpu.core.peertext import ID_WIDTH, cell, cut_alike, quoted
from swarmgpu.swarm.agentservice import (
    FIX,
    TENANT_FIX,
    gpu_advertised,
    gpu_labelled,
    tenant_agent_service,
    unnamed_agent_service,
    unserved,
)
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.swarmnode import NODE_FIX
from swarmgpu.swarm.unkeyed import UNKEYED_FIX

CID = "agents.service"
SHOWN = 5  # nodes named in the finding


def check_agents_service(view: NodeView) -> Check:
    """``view.agents_service`` (the daemon's key, ``doctor --agents-service``) against
    ``view.swarm`` (the manager's lists)."""
    name = view.agents_service
    if name is None:
        return Check(CID, Status.SKIP, "not checked (no swarm to ask under another --root)")
    if name == "":
        return Check(CID, Status.OK,
                     "agents.service is '' (agents run outside Swarm, e.g. by systemd): "
                     "GPU nodes are known only from their agents' answers and their "
                     "labels (gpu=true, swarmgpu's labels, GPU generic resources); a "
                     "node with none of these whose agent never answered is taken as "
                     "CPU-only")
    unread = unread_check(CID, view.docker_info, ("Swarm", "Swarm.ControlAvailable"))
    if unread is not None:  # (whether this node is a manager, to ask, is not known)
        return unread
    read = view.swarm
    if read is None or read.error is not None:
        why = read.error if read is not None and read.error else "Swarm was not asked"
        return Check(CID, Status.SKIP,
                     f"agents.service {quoted(name)} not checked: {why}; run swarmgpu "
                     "doctor on a manager, or swarmgpu audit")
    missing = unnamed_agent_service(read.services, name)
    if missing is not None and not any(gpu_labelled(n, read.prefix) or gpu_advertised(n, read.kind)
                                       for n in read.nodes):
        # As the daemon and audit (swarm.agentservice): a swarm with no GPU node is not
        # failed for agents it does not run (a node advertising GPU generic resources
        # is one to them, labelled or not: ``gpu_hint``).
        return Check(CID, Status.OK,
                     f"{missing}; no node is GPU-labelled (gpu=true, or label sync's "
                     f"labels under {quoted(read.prefix)}) or advertises GPU generic "
                     f"resources among {len(read.nodes)} node(s): no agent is expected, "
                     "so nothing is missed")
    if missing is not None:
        return Check(CID, Status.FAIL, missing,
                     "a misspelled agents.service marks no node as a GPU node: a GPU "
                     "node whose agent has not answered may be given CPU-only services",
                     FIX + "; doctor --agents-service NAME checks another name, "
                     "doctor --config FILE the daemon's")
    claimed = tenant_agent_service(read.services, name, read.tenants)
    if claimed is not None:
        return Check(CID, Status.FAIL, claimed,
                     "a tenant's service named as the agents' would make the nodes it "
                     "runs on GPU nodes (never given CPU-only services): the daemon "
                     "counts none of its tasks, so the agents' nodes are not known by them",
                     TENANT_FIX)
    left = unserved(read.nodes, read.services, read.tasks, name, read.prefix)
    if left:
        more = f" and {len(left) - SHOWN} more" if len(left) > SHOWN else ""
        said = f"no task of {quoted(name)} runs on {len(left)} GPU-labelled node(s): "
        return Check(CID, Status.WARN,
                     said + ", ".join(n.hostname for n in left[:SHOWN]) + more,
                     "no agent there reports the node's GPUs: its labels go stale and "
                     "no GPU of it is given out",
                     f"docker service ps {name} --no-trunc (a task refused or failing "
                     "there says why); check the service's placement constraints "
                     "(node.labels.gpu==true) match those nodes",
                     text_found=said + _cut_hosts(left[:SHOWN], read.nodes) + more)
    return Check(CID, Status.OK,
                 f"a task of {quoted(name)} runs on each GPU-labelled node")


def _cut_hosts(shown: Sequence[SwarmNode], nodes: Sequence[SwarmNode]) -> str:
    """``shown``'s hostnames cut for the text report (``cell``; the JSON has them whole),
    each beside its node's ID where another node's name is cut alike (``cut_alike``)."""
    alike = cut_alike(n.hostname for n in nodes)
    return ", ".join(cell(n.hostname) + (f" ({cell(n.id, ID_WIDTH)})" if cell(n.hostname) in alike
                                         else "") for n in shown)


def _first_shown(said: Sequence[str]) -> str:
    """The first ``SHOWN`` of ``said``, joined, and how many more there are."""
    more = len(said) - SHOWN
    return "; ".join(said[:SHOWN]) + (f"; and {more} more" if more > 0 else "")


def check_unread_nodes(view: NodeView) -> Check | None:
    """The nodes whose engine answer cannot be read in part (``SwarmNode.unread``): a
    warning naming each, or None when every node reads (nothing to say)."""
    read = view.swarm
    unread = [n.unread for n in (read.nodes if read is not None else ()) if n.unread]
    if not unread:
        return None
    return Check("swarm.nodes", Status.WARN, _first_shown(unread),
                 "swarmgpu places nothing new on such a node and writes none of its "
                 "labels (what it holds is kept)", NODE_FIX)


def check_unkeyed(view: NodeView) -> Check | None:
    """The nodes and services the engine lists without an ID (``swarm.unkeyed``): a
    warning naming each, or None when every one has its ID."""
    said = view.swarm.unkeyed if view.swarm is not None else ()
    if not said:
        return None
    return Check("swarm.ids", Status.WARN, _first_shown(said),
                 "the daemon leaves such an entry out of its lists: nothing is read of it "
                 "or written to it, the others are placed as ever", UNKEYED_FIX)
