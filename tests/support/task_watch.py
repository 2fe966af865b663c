"""Every task a service makes, and the environment of every container one of them ran.

A background poll of Swarm's task list (each task is kept once seen, so the task
history Swarm trims is still counted) and of each new container's environment on its
node, read while the container exists: whether any task ever ran without its device
list is checked on the containers themselves.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import docker

from support.swarm_harness import SwarmCluster
from swarmgpu.swarm.taskstop import rfc3339_ns


@dataclass
class Seen:
    task_id: str
    service: str
    created: str
    states: set[str] = field(default_factory=set)
    container: str = ""
    env: dict[str, str] | None = None  # the container's, once read
    node: str = ""

    @property
    def ran(self) -> bool:
        """A container was made for it (Swarm made and started it: running, or it ended)."""
        return bool(self.container)


class TaskWatch:
    def __init__(self, swarm: SwarmCluster, services: list[str], interval: float = 0.1) -> None:
        self.swarm = swarm
        self.services = list(services)
        self.interval = interval
        self.seen: dict[str, Seen] = {}
        self.unread: dict[str, str] = {}  # task id -> why its container could not be read
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._apis: dict[str, docker.APIClient] = {}
        self._thread = threading.Thread(target=self._run, daemon=True, name="task-watch")

    def __enter__(self) -> TaskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for api in self._apis.values():
            api.close()

    def _api(self, host: str) -> docker.APIClient:
        if host not in self._apis:
            self._apis[host] = docker.APIClient(base_url=host, version="1.41", timeout=10)
        return self._apis[host]

    def _run(self) -> None:
        mgr = self.swarm.manager.docker_host
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a slow engine: the next poll reads it
                self.poll(self._api(mgr))
            self._stop.wait(self.interval)

    def poll(self, api: docker.APIClient) -> None:
        for svc in list(self.services):
            for t in api.tasks(filters={"service": svc}):
                self._saw(svc, t)

    def _saw(self, svc: str, t: dict[str, Any]) -> None:
        with self._lock:
            s = self.seen.get(t["ID"])
            if s is None:
                s = self.seen[t["ID"]] = Seen(t["ID"], svc, t.get("CreatedAt", ""))
            s.states.add(t["Status"]["State"])
            cid = (t["Status"].get("ContainerStatus") or {}).get("ContainerID") or ""
            if not cid or s.env is not None:
                return
            s.container, s.node = cid, t.get("NodeID", "")
        try:
            node = self.swarm.node(s.node)
            env = self._api(node.docker_host).inspect_container(cid)["Config"]["Env"] or []
        except Exception as exc:
            self.unread[s.task_id] = str(exc)
            return
        with self._lock:
            s.env = dict(e.split("=", 1) for e in env)
            self.unread.pop(s.task_id, None)

    def watch(self, service: str) -> None:
        with self._lock:
            if service not in self.services:
                self.services.append(service)

    def of(self, service: str) -> list[Seen]:
        """``service``'s tasks, the oldest first (by CreatedAt's instant: as text,
        "...00.5Z" sorts after "...00.55Z"; one whose time does not read, last)."""
        with self._lock:
            return sorted((s for s in self.seen.values() if s.service == service),
                          key=lambda s: ((at := rfc3339_ns(s.created)) is None, at or 0))

    def settle(self, seconds: float) -> None:
        """Let the poll run a while (each container read while it still exists)."""
        time.sleep(seconds)
