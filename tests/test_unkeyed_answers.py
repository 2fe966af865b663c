"""An entry the engine lists without an ID, and a node that cannot be read, each cost
only what they must.

A node or a service listed with no ``ID`` (or one that is no non-empty text), or as no
JSON object, failed the whole node or service list: every cycle wrote nothing. Now it
is left out of the list (nothing can be keyed to it, so nothing is written to it), the
daemon logs it each cycle naming its position, its name and the fix, and ``audit``,
``doctor`` and ``plan`` say it. While a service is left out any name in the ledger may
be its: none is released as a gone service's. While a node is, a service with a task
on a node not listed is left as it is (what it holds there is not known).

A global service whose task runs on a node whose labels cannot be read failed whole;
now only that node is skipped for it (its plan says why), its other nodes go on.
"""

from __future__ import annotations

from dataclasses import replace

from support.health import hold
from support.placement import FACTS, P, svc

from swarmgpu.manager.placement import plan_placement
from swarmgpu.swarm.client import SwarmClient, SwarmTask

HELD = FACTS["n-4090"].gpus[0].uuid
DGX_HELD = FACTS["n-dgx"].gpus[0].uuid


def raw_node(nid: str, host: str, labels: object = None) -> dict[str, object]:
    """A node as Docker sends it; ``labels`` as given (a list: no labels Docker makes)."""
    return {"ID": nid, "Version": {"Index": 7},
            "Spec": {"Role": "worker", "Availability": "active",
                     "Labels": {} if labels is None else labels},
            "Description": {"Hostname": host, "Resources": {"NanoCPUs": 64_000_000_000,
                                                            "MemoryBytes": 512 * 1024**3}},
            "Status": {"State": "ready", "Addr": "10.0.0.2"}}


class NodeApi:
    def __init__(self, raw: list[object]) -> None:
        self.raw = raw

    def nodes(self, filters: object = None) -> list[object]:
        return self.raw


def client(api: object) -> SwarmClient:
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", api  # type: ignore[assignment]
    sw.on_write = sw.on_landed = None
    return sw


def test_a_global_service_on_a_node_whose_labels_cannot_be_read_skips_that_node() -> None:
    """glob runs on both nodes; gpu-node-2's Spec.Labels is a list (its holdings cannot
    be read): glob failed whole, nothing written for it on gpu-node-1 either. Now only
    gpu-node-2 is skipped, its plan naming why; gpu-node-1 keeps its holding."""
    labels = [f"{k}={v}" for k, v in hold("glob", [HELD]).items()]
    nodes = client(NodeApi([raw_node("n-dgx", "gpu-node-1", hold("glob", [DGX_HELD])),
                            raw_node("n-4090", "gpu-node-2", labels)])).nodes()
    assert nodes[1].unread and not nodes[0].unread
    g = replace(svc("glob", {f"{P}gpus": "1"}), mode="global", replicas=None)
    tasks = [SwarmTask("t1", g.id, "n-dgx", None, "running", "running", ()),
             SwarmTask("t2", g.id, "n-4090", None, "running", "running", ())]
    plan = plan_placement(nodes, [g], tasks, FACTS)
    (sp,) = plan.services
    assert sp.status != "failed", sp.reason
    assert [(p.node_id, p.uuids) for p in sp.placements] == [("n-dgx", (DGX_HELD,))]
    assert sp.nodes_waiting == {"gpu-node-2": nodes[1].unread}
    assert "n-4090" not in plan.node_set and "n-4090" not in plan.node_remove
