"""``agents.service`` against Swarm: a name no service has (a typo, or a stack deployed
under another name) marks no node, silently; this says so, with the fix.

Not an error to the daemon: the key is only one sign of a GPU node
(``manager.placement.cpunodes.gpu_hint``), and systemd agents run in no service at all.
Said where GPU nodes exist, so a swarm without any is not told about agents it does not
run. ``swarmgpu doctor`` fails it where a node is GPU-labelled (``gpu_labelled``) or
advertises GPU generic resources (``gpu_advertised``; ``agent.doctor.agentsvc``), and
names the GPU-labelled nodes no task of the service runs on (``unserved``): the daemon,
the log, ``audit`` and the doctor read it here alike.

The key is the operator's word, and only the operator's service answers to it: a service
so named that a tenant of the operator's tenancy config matches (``tenant_agent``: a
tenant's stack ``swarmgpu`` with a service ``agent`` is named ``swarmgpu_agent``, the
default, which systemd fleets often leave set) marks no node, and is said
(``claimed_agent_service``) with the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from swarmgpu.core.peertext import quoted
from swarmgpu.core.tenants import STACK_LABEL, TenantSpec, claimed_by
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.constraints import equal_fold
from swarmgpu.swarm.labels import owned_by_label_sync
from swarmgpu.swarm.swarmnode import gpu_kinds

SHOWN = 5  # services ending in _agent named in the note

# The fix, the same in the daemon's log, ``audit`` and ``doctor``: the systemd fleet's
# first (left at the default, it is told this once), as docs/systemd.md says it.
FIX = ("agents run by systemd (swarmgpu-agent.service) or otherwise outside Swarm: set "
       'agents.service: "" in the daemon\'s config (docs/systemd.md); agents run by a '
       "stack: set agents.service to their service (docker service ls; the stack's is "
       "<stack>_agent)")

# A tenant's service named as the agents': the fix above, or the tenant's globs narrowed.
TENANT_FIX = (FIX + "; agents run by a stack of your own: narrow the tenant's stacks or "
              "services globs (config tenants) so that they do not match it")


def unnamed_agent_service(services: Iterable[SwarmService], name: str) -> str | None:
    """The finding alone: ``agents.service`` (``name``) matches no service in Swarm,
    with the services whose name ends in ``_agent`` (the stack's ``<stack>_agent``);
    None when one is named so, or the key is off (""). The doctor gives its why and
    fix their own lines (``agent.doctor.agentsvc``)."""
    names = sorted({s.name for s in services})
    if not name or name in names:
        return None
    like = [n for n in names if n.endswith("_agent")]
    seen = (f"services named *_agent: {', '.join(like[:SHOWN])}"
            + (f" and {len(like) - SHOWN} more" if len(like) > SHOWN else "")
            if like else "no service is named *_agent")
    return f"agents.service: no Swarm service is named {quoted(name)} ({seen})"


def tenant_agent(s: SwarmService, tenants: Sequence[TenantSpec]) -> str | None:
    """Why service ``s``, named as ``agents.service``, is a tenant's and not the
    operator's: a tenant other than ``default`` of the operator's tenancy config
    (``tenants``: its specs, () without one) matches it. None: none does, so its tasks
    are the agents' (``operator_agent_ids``)."""
    stack = s.labels.get(STACK_LABEL)
    t = claimed_by(tenants, s.name, stack)
    if t is None:
        return None
    of = f" of stack {quoted(stack)}" if stack else ""
    return f"tenant {t.name} matches it (service {quoted(s.name)}{of}; config tenants.{t.name})"


def operator_agent_ids(services: Iterable[SwarmService], name: str,
                       tenants: Sequence[TenantSpec] = ()) -> frozenset[str]:
    """The IDs of the services named ``name`` (``agents.service``) that are the
    operator's (``tenant_agent``): a tenant's service of that name says nothing of
    nodes, or any tenant could make a node of its choosing a GPU node."""
    return frozenset(s.id for s in services
                     if s.name == name and tenant_agent(s, tenants) is None)


def tenant_agent_service(services: Iterable[SwarmService], name: str,
                         tenants: Sequence[TenantSpec]) -> str | None:
    """The finding alone: the service ``agents.service`` (``name``) names is a tenant's
    (``tenant_agent``); None: it is not (or no service is so named, or the key is off).
    The doctor gives its why and fix (``TENANT_FIX``) their own lines."""
    why = next((w for s in services if name and s.name == name
                and (w := tenant_agent(s, tenants)) is not None), None)
    if why is None:
        return None
    return f"agents.service {quoted(name)} names a tenant's service, not the operator's: {why}"


def claimed_agent_service(services: Iterable[SwarmService], name: str,
                          tenants: Sequence[TenantSpec]) -> str | None:
    """``tenant_agent_service``'s finding in one line, with what it costs and the fix
    (the daemon's log, ``audit``); None as there."""
    found = tenant_agent_service(services, name, tenants)
    if found is None:
        return None
    return f"{found}; its tasks mark no node as a GPU node; fix: {TENANT_FIX}"


def missing_agent_service(services: Iterable[SwarmService], name: str) -> str | None:
    """``unnamed_agent_service``'s finding in one line, with what it costs and the fix
    (the daemon's log, ``audit``); None as there."""
    found = unnamed_agent_service(services, name)
    if found is None:
        return None
    return (f"{found}, so no node is known as a GPU node by the agents' tasks: one whose "
            "agent has not answered and has no gpu=true label may be taken as CPU-only; "
            f"fix: {FIX}")


def gpu_advertised(node: SwarmNode, kind: str = "") -> bool:
    """Its engine advertises GPU generic resources (the usual kinds, or ``kind``:
    ``placement.generic_resource_kind``): one of the daemon's signs of a GPU node
    (``manager.placement.cpunodes.gpu_hint``), though no label says so."""
    return not set(gpu_kinds(kind)).isdisjoint(
        (*node.generic_resources, *node.discrete_resources))


def gpu_label_why(node: SwarmNode, prefix: str = "swarmgpu.") -> str | None:
    """Which label makes this a GPU node: label sync's labels, or ``gpu=true`` (node or
    engine label, as Swarm matches it: where the shipped stack places the agents); None:
    none does. The labels' part of the daemon's answer
    (``manager.placement.cpunodes.gpu_hint``) and the doctor's, one code for both."""
    if any(owned_by_label_sync(k, prefix) for k in node.labels):
        return f"it carries {prefix}gpu labels"
    if equal_fold(node.labels.get("gpu", ""), "true"):  # as Swarm matches gpu==true
        return "it is labelled gpu=true (where the stack runs agents)"
    if equal_fold(node.engine_labels.get("gpu", ""), "true"):
        return "its engine is labelled gpu=true (where the stack runs agents)"
    return None


def gpu_labelled(node: SwarmNode, prefix: str = "swarmgpu.") -> bool:
    """A node labelled as a GPU node (``gpu_label_why``)."""
    return gpu_label_why(node, prefix) is not None


def unserved(nodes: Iterable[SwarmNode], services: Iterable[SwarmService],
             tasks: Iterable[SwarmTask], name: str,
             prefix: str = "swarmgpu.") -> list[SwarmNode]:
    """The GPU-labelled nodes (``gpu_labelled``) on which no task of the service
    ``name`` runs (desired running and running), by hostname; a node that is down or
    drained is left out (Swarm runs nothing there)."""
    ids = {s.id for s in services if s.name == name}
    running = {t.node_id for t in tasks if t.service_id in ids
               and t.desired_state == "running" and t.state == "running"}
    return sorted((n for n in nodes if gpu_labelled(n, prefix) and n.id not in running
                   and n.state == "ready" and n.availability == "active"),
                  key=lambda n: (n.hostname, n.id))
