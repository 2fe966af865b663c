"""The recorded-shape cluster at swarmgpu's client boundary, for the scale benchmarks
(bench_scale.py, bench_replicas.py) and the map's test fleet (tests/support/web_fleet.py):
``FakeSwarm``, a SwarmClient's methods over state in memory (no docker SDK, versions
enforced, each call's engine latency slept when given), and ``build_cluster``, N nodes
x 8 GPUs from DGX A100 / RTX 4090 `topo -m` captures with annotated services. What the
benchmarks measure against it, and how they print it, is theirs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from swarmgpu.agent.facts.topo import TopoSource  # noqa: E402
from swarmgpu.core.model import NodeFacts  # noqa: E402
from swarmgpu.manager.placement import env_template, gate_constraint  # noqa: E402
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask  # noqa: E402
from swarmgpu.swarm.unkeyed import Unkeyed  # noqa: E402

P = "swarmgpu."


def _topology() -> Path:
    from support.paths import (
        TOPOLOGY,  # tests/support/paths.py: tests/fixtures/topology in the repo
    )

    return TOPOLOGY


# --- the fake at swarmgpu's client boundary ------------------------------------------------

class FakeSwarm:
    """Same methods as swarmgpu.swarm.client.SwarmClient, state in memory, versions enforced.

    ``latency_ms`` (bench_scale.ENGINE_LATENCY_MS's keys; None: free) makes every call sleep what it
    takes on a real engine; a sleep lets other threads run, as a real round trip does, so
    bounded parallel writes gain here what they gain on the engine."""

    def __init__(self, nodes: list[SwarmNode], services: list[SwarmService],
                 latency_ms: Mapping[str, float] | None = None,
                 model_tasks: bool = False,
                 images: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self._nodes = {n.id: n for n in nodes}
        self._images = dict(images or {})  # what the manager's engine has: ref -> env
        self.image_reads = 0
        self.image_reads_at_once = 0  # the most image reads in flight together
        self._reading = 0
        self._services = {s.id: s for s in services}
        self.writes = 0
        self.node_writes = self.service_writes = 0
        self.calls = 0
        self.inspects = 0
        # As SwarmClient: told of each write that landed (the daemon's cache reads the
        # object again); ``listeners`` hear the engine's event for every change.
        self.on_write: Callable[[str, str], None] | None = None
        self.listeners: list[Callable[[Mapping[str, Any]], None]] = []
        self.latency = {k: v / 1e3 for k, v in (latency_ms or {}).items()}
        self._lock = threading.Lock()
        # ``model_tasks``: Swarm's tasks as its orchestrator keeps them -- each replica a
        # task from the moment its service exists (pending behind a closed gate), all
        # replaced at once when ForceUpdate changes (the updater with parallelism 0 or
        # one batch; here before the next call), and running once a node opens its gate.
        # Without it the task list is empty (the planner's input in earlier figures).
        self.model_tasks = model_tasks
        self._tasks: dict[str, list[SwarmTask]] = {}
        if model_tasks:
            for sv in services:
                self._replace_tasks(sv)

    def _replace_tasks(self, sv: SwarmService) -> None:
        self._tasks[sv.id] = [
            SwarmTask(f"t{sv.id}.{sv.force_update}.{k}", sv.id, "", k, "pending", "running",
                      sv.env, force_update=sv.force_update)
            for k in range(1, (sv.replicas or 0) + 1)]

    def _wait(self, kind: str, objects: int = 0) -> None:
        with self._lock:
            self.calls += 1
        if self.latency:
            time.sleep(self.latency[kind] + objects * self.latency.get("list_per_object", 0))

    def is_leader(self) -> bool:
        return True

    def nodes(self) -> list[SwarmNode]:
        self._wait("list", len(self._nodes))
        return list(self._nodes.values())

    def node(self, node_id: str) -> SwarmNode:
        self._wait("inspect")
        self.inspects += 1
        return self._nodes[node_id]

    def services(self) -> list[SwarmService]:
        self._wait("list", len(self._services))
        return list(self._services.values())

    def service(self, service_id: str) -> SwarmService:
        self._wait("inspect")
        self.inspects += 1
        return self._services[service_id]

    def unkeyed(self) -> Unkeyed:
        return Unkeyed()  # every entry of its lists has its ID

    def _changed(self, kind: str, obj: str) -> None:
        """The engine's event for a change, and the client's own note of its write."""
        for listen in self.listeners:
            listen({"Type": kind, "Action": "update", "Actor": {"ID": obj}})
        if self.on_write is not None:
            self.on_write(kind, obj)

    def tasks(self, filters: Mapping[str, Any] | None = None) -> list[SwarmTask]:
        if not self.model_tasks:
            self._wait("list")
            return []  # replicas stay pending until their gate opens; the planner's input
        self._schedule()
        out = [t for ts in self._tasks.values() for t in ts]
        self._wait("list", len(out))
        return out

    def _schedule(self) -> None:
        """Swarm's scheduler, as far as gates go: a waiting task runs on a node that
        opened its service's gate and runs no other task of it."""
        gates: dict[str, list[str]] = {}
        for n in self._nodes.values():
            for k, v in n.labels.items():
                if v == "true" and k.startswith(P + "service."):
                    gates.setdefault(k[len(P + "service."):], []).append(n.id)
        for sv in self._services.values():
            open_on = gates.get(sv.name)
            ts = self._tasks.get(sv.id)
            if not open_on or not ts:
                continue
            used = {t.node_id for t in ts if t.node_id}
            free = [nid for nid in open_on if nid not in used]
            for i, t in enumerate(ts):
                if t.state == "pending" and free:
                    ts[i] = dataclasses.replace(t, node_id=free.pop(0), state="running")

    def image_env(self, ref: str) -> tuple[str, ...] | None:
        """As the client: the image list with a reference filter, then the inspect."""
        with self._lock:
            self.image_reads += 1
            self._reading += 1
            self.image_reads_at_once = max(self.image_reads_at_once, self._reading)
        try:
            self._wait("list", 1)
            env = self._images.get(ref)
            if env is not None:
                self._wait("inspect")
            return env
        finally:
            with self._lock:
                self._reading -= 1

    def events(self, *, types: tuple[str, ...] = ("node", "service")) -> Iterator[dict[str, Any]]:
        return iter(())

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           *, attempts: int = 5) -> bool:
        self._wait("node_update")  # the inspect and the update: the client's round trip
        n = self._nodes[node_id]
        new = compute(dict(n.labels))
        if new is None or dict(new) == dict(n.labels):
            return False
        with self._lock:
            self.writes += 1
            self.node_writes += 1
        self._nodes[node_id] = dataclasses.replace(n, labels=dict(new), version=n.version + 1)
        self._changed("node", node_id)
        return True

    def update_service_spec(self, service_id: str,
                            compute: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
                            *, attempts: int = 5) -> bool:
        self._wait("service_update")
        s = self._services[service_id]
        new = compute(s.spec)
        if new is None or new == s.spec:
            return False
        with self._lock:
            self.writes += 1
            self.service_writes += 1
        tt = new.get("TaskTemplate", {})
        sv = self._services[service_id] = dataclasses.replace(
            s, spec=new, labels=dict(new.get("Labels") or {}),
            constraints=tuple((tt.get("Placement") or {}).get("Constraints") or ()),
            env=tuple((tt.get("ContainerSpec") or {}).get("Env") or ()), version=s.version + 1,
            force_update=int(tt.get("ForceUpdate") or 0))
        if self.model_tasks and sv.force_update != s.force_update:
            self._replace_tasks(sv)
        self._changed("service", service_id)
        return True

    def state(self) -> tuple[dict[str, dict[str, str]], dict[str, Mapping[str, Any]]]:
        """Every node's labels and every service's spec, to count what changed."""
        return ({i: dict(n.labels) for i, n in self._nodes.items()},
                {i: s.spec for i, s in self._services.items()})


# --- the recorded-shape cluster -----------------------------------------------------------

REQUESTS: list[dict[str, str]] = [
    {"gpus": "1"}, {"gpus": "1"}, {"gpus": "2", "topology": "nvlink"}, {"gpus": "4"},
    {"gpus": "8"}, {"gpus": "2", "topology": "numa"}, {"gpu-fraction": "0.5"},
    {"gpu-memory": "20GB"}, {"mig": "1g.5gb"}, {"gpus": "1", "gpu-product": "*4090*"},
]


# A CUDA base image's env (nvidia/cuda:12.4.1-base): what a GPU service's image says.
IMAGE_ENV = ("PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin",
             "NVARCH=x86_64", "NVIDIA_REQUIRE_CUDA=cuda>=12.4", "CUDA_VERSION=12.4.1",
             "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
             "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")


def image_refs(n: int, digests: bool = True) -> list[str]:
    """``n`` distinct image references as Swarm pins them (``name:tag@sha256:...``, as
    ``docker service create`` and ``docker stack deploy`` resolve them), or by tag only."""
    out = []
    for k in range(n):
        ref = f"registry.example/team/app{k:05d}:1"
        out.append(f"{ref}@sha256:{hashlib.sha256(ref.encode()).hexdigest()}" if digests
                   else ref)
    return out


def build_cluster(n_nodes: int, n_services: int, seed: int = 1,
                  images: list[str] | None = None,
                  ) -> tuple[list[SwarmNode], list[SwarmService], dict[str, NodeFacts]]:
    """``images``: the services' images, in turn (None: all ``x``, no such image)."""
    topo = _topology()
    kinds = [
        ("topo_dgx_a100_nv12.txt", "NVIDIA A100-SXM4-40GB", 40960, "0:1g.5gb*7"),
        ("topo_pcie_8x_rtx4090_pix_sys.txt", "NVIDIA GeForce RTX 4090", 24564, None),
    ]
    nodes, facts = [], {}
    for i in range(n_nodes):
        cap, product, mem, mig = kinds[i % 2]
        host = f"gpu-{i:04d}"
        f = TopoSource(topo / cap, hostname=host, product=product, memory_mib=mem,
                       mig_layout=mig).read()
        nid = f"node{i:021d}"[:25]
        nodes.append(SwarmNode(nid, host, f"10.{i // 250}.{i % 250}.1", "worker", "ready",
                               "active", {"topology.zone": f"z{i % 4}", "team": "ml"}, {},
                               1, {"NVIDIA-GPU": tuple(g.uuid for g in f.gpus)}, {}))
        facts[nid] = f
    rng = random.Random(seed)
    services = []
    for j in range(n_services):
        name = f"svc{j:05d}"
        labels = {P + k: v for k, v in rng.choice(REQUESTS).items()}
        labels["owner"] = "bench"
        spec = {"Name": name, "Labels": dict(labels), "TaskTemplate": {
            "ContainerSpec": {"Image": images[j % len(images)] if images else "x",
                              "Env": [env_template(P), "USER=1"]},
            "Placement": {"Constraints": [gate_constraint(P, name)]}},
            "Mode": {"Replicated": {"Replicas": 1}}}
        services.append(SwarmService(f"sid{j:022d}"[:25], name, labels,
                                     (gate_constraint(P, name),), (env_template(P), "USER=1"),
                                     "replicated", 1, None, 1, spec))
    return nodes, services, facts
