"""Which Swarm task a GPU process belongs to, on the node (the agent's side).

NVML names processes by host PID only. A PID's cgroup names its container (Docker puts
each container in a cgroup ending in its 64-hex id: ``/docker/<id>``,
``/system.slice/docker-<id>.scope``, or under a ``--cgroup-parent``); the engine's
container labels name the Swarm task and service (``com.docker.swarm.task.id``,
``com.docker.swarm.service.name``, set by Swarm on every task container). A process
outside any container, or in a container Swarm did not start, keeps an empty owner.

Never raises and never blocks long: an unreadable ``/proc`` entry (the process ended)
or an engine that does not answer leaves that process unattributed; owners are cached
per container (labels of a container never change), the cache is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from loguru import logger

from swarmgpu.core.samples import GpuProcess, GpuSample

_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
TASK_LABEL = "com.docker.swarm.task.id"
SERVICE_LABEL = "com.docker.swarm.service.name"
_CACHE_MAX = 4096

Labels = Callable[[str], Mapping[str, str] | None]  # container id -> its labels (None: unknown)


def container_of(cgroup_text: str) -> str | None:
    """The container id in ``/proc/<pid>/cgroup`` (v1 or v2), or None: not a container."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            m = _ID.search(part)
            if m:
                return m.group(1)
    return None


def engine_labels(base_url: str, timeout_s: float = 1.5) -> Labels:
    """Container labels from the node's Docker engine (docker SDK, low-level API)."""
    import docker

    client: Any = None

    def lookup(cid: str) -> Mapping[str, str] | None:
        nonlocal client
        try:
            if client is None:
                client = docker.APIClient(base_url=base_url, timeout=timeout_s)
            info = client.inspect_container(cid)
        except docker.errors.NotFound:
            return {}  # gone: no owner, and nothing to ask again
        except Exception as exc:  # the engine is down or slow: unknown this time
            logger.bind(component="agent").debug("container {} not inspected: {}", cid[:12],
                                                 exc)
            return None
        return dict((info.get("Config") or {}).get("Labels") or {})

    return lookup


class Attributor:
    """Adds container, task and service to every process of a sample list."""

    def __init__(self, labels: Labels | None, proc_root: str = "/proc") -> None:
        self.labels = labels
        self.proc_root = Path(proc_root)
        self._owners: dict[str, tuple[str, str]] = {}  # container -> (task, service)

    def _container(self, pid: int) -> str | None:
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(errors="replace")
        except OSError:
            return None
        return container_of(text)

    def _owner(self, cid: str) -> tuple[str, str]:
        if cid in self._owners:
            return self._owners[cid]
        got = self.labels(cid) if self.labels is not None else None
        if got is None:
            return "", ""  # unknown now: asked again next time
        owner = (str(got.get(TASK_LABEL, "")), str(got.get(SERVICE_LABEL, "")))
        if len(self._owners) >= _CACHE_MAX:
            self._owners.clear()
        self._owners[cid] = owner
        return owner

    def process(self, p: GpuProcess) -> GpuProcess:
        cid = self._container(p.pid)
        if cid is None:
            return p
        task, service = self._owner(cid)
        return replace(p, container=cid, task=task, service=service)

    def __call__(self, samples: Sequence[GpuSample]) -> list[GpuSample]:
        return [replace(s, processes=tuple(self.process(p) for p in s.processes))
                if s.processes else s for s in samples]
