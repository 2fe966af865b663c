"""One write per node and per service, converged in one cycle, on the real test swarm.

The daemon's own cycle (label sync, then placement) in this process against the real
engine, through a SwarmClient that notes every write that landed (the writes are the
engine's; only the count is added). A new 1-GPU service on nodes without swarmgpu's
labels: label sync's labels, the ledger entry and the gate of the chosen node go in one
node write, the device map in one service write, and the task Swarm runs after that
cycle sees its GPU (NVIDIA_VISIBLE_DEVICES, not void). The next cycle writes nothing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import GPU_NODES, cfg_file
from support.swarm_harness import SwarmCluster, edit_node_labels

from swarmgpu.core.config import load_config
from swarmgpu.manager.cycle.placement import PlacementStep
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.placement import (
    assign_key,
    devices_key,
    env_template,
    gate_constraint,
    gate_key,
)
from swarmgpu.swarm.client import SwarmClient

pytestmark = pytest.mark.swarm
P = "swarmgpu."
NAME = "onecycle"


class NotingClient(SwarmClient):
    """The real client; every node or service write that landed is noted."""

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.landed: list[tuple[str, str]] = []

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **kw: Any) -> bool:
        ok = super().update_node_labels(node_id, compute, **kw)
        if ok:
            self.landed.append(("node", node_id))
        return ok

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            **kw: Any) -> bool:
        ok = super().update_service_spec(service_id, compute, **kw)
        if ok:
            self.landed.append(("service", service_id))
        return ok


def _edit_gpu_nodes(swarm: SwarmCluster, drop: Callable[[str], bool],
                    extra: Mapping[str, str]) -> None:
    """Each GPU node's labels without those ``drop`` names, with ``extra``."""
    api = swarm.client(swarm.manager).api
    for host in GPU_NODES:
        def edit(labels: dict[str, str]) -> None:
            for k in [k for k in labels if drop(k)]:
                del labels[k]
            labels.update(extra)

        edit_node_labels(api, swarm.node(host).node_id, edit)


def test_new_service_converges_in_one_cycle_with_one_write_per_object(
        swarm: SwarmCluster, agents: dict[str, Any], tmp_path: Path) -> None:
    api = swarm.client(swarm.manager).api
    # No swarmgpu label on the GPU nodes (label sync must write them this cycle), and a
    # user's own label beside, which must stay.
    _edit_gpu_nodes(swarm, lambda k: k.startswith(P), {"team": "h2-writes"})
    svc = api.create_service(
        {"ContainerSpec": {"Image": "local/busybox:latest", "Args": ["sleep", "3600"],
                           "Env": [env_template(P), "USER_VAR=1"]},
         "Placement": {"Constraints": [gate_constraint(P, NAME)]},
         "RestartPolicy": {"Condition": "any", "Delay": 1_000_000_000}},
        name=NAME, labels={f"{P}gpus": "1", "owner": "tests"},
        mode={"Replicated": {"Replicas": 1}})
    sid = svc["ID"]
    try:
        # Swarm creates the replica at once: a task waiting behind the closed gate,
        # created before any device map (it would start with void).
        swarm.wait_for(lambda: api.tasks(filters={"service": sid}) or None, 30,
                       "the service's first task")
        cfg = load_config(cfg_file(tmp_path, swarm, sync={"interval_s": 30}), env={})
        client = NotingClient(swarm.manager.docker_host)
        d = Daemon(cfg, client)
        d.use([PlacementStep(d)])

        rep = d.cycle()
        assert rep.leader and not rep.errors, rep.errors
        per_object = Counter(client.landed)
        assert per_object and max(per_object.values()) == 1, client.landed
        assert per_object[("service", sid)] == 1
        gpu_ids = {swarm.node(h).node_id for h in GPU_NODES}
        # label sync changed both GPU nodes: each is written, once
        assert {o for k, o in per_object if k == "node"} == gpu_ids, client.landed
        labels = {h: api.inspect_node(swarm.node(h).node_id)["Spec"]["Labels"]
                  for h in GPU_NODES}
        gated = [h for h, lb in labels.items() if lb.get(gate_key(P, NAME)) == "true"]
        assert len(gated) == 1, labels  # opened in this very cycle
        host = gated[0]
        nid = swarm.node(host).node_id
        assert labels[host][assign_key(P, NAME)]  # the ledger, in the same write
        assert labels[host][f"{P}gpu.count"] == "8"  # label sync's, in the same write
        assert all(lb["team"] == "h2-writes" for lb in labels.values())
        spec = api.inspect_service(sid)["Spec"]
        uuids = spec["Labels"][devices_key(P, nid)]
        assert spec["Labels"]["owner"] == "tests"
        assert "USER_VAR=1" in spec["TaskTemplate"]["ContainerSpec"]["Env"]

        def running() -> dict[str, Any] | None:
            ts = [t for t in api.tasks(filters={"service": sid, "desired-state": "running"})
                  if t["Status"]["State"] == "running"]
            return ts[0] if len(ts) == 1 else None

        task = swarm.wait_for(running, 60, "the replica running")
        assert task["NodeID"] == nid
        node = swarm.node(task["NodeID"])
        cid = task["Status"]["ContainerStatus"]["ContainerID"]
        env = dict(e.split("=", 1)
                   for e in swarm.client(node).api.inspect_container(cid)["Config"]["Env"])
        assert env["NVIDIA_VISIBLE_DEVICES"] == uuids != "void"
        # Converged: the next cycle writes nothing.
        client.landed.clear()
        time.sleep(1)
        rep = d.cycle()
        assert not rep.errors and client.landed == [], client.landed
    finally:
        api.remove_service(sid)
        _edit_gpu_nodes(swarm, lambda k: k == "team" or k in (
            gate_key(P, NAME), assign_key(P, NAME)), {})
