"""`swarmgpu audit`'s word on a running GPU service's own model-server settings.

A stack deployed without `swarmgpu render` (``docker stack deploy`` straight, or
``docker service create``) is adopted by the daemon as it stands, and render's
warnings never ran on it. Audit reads the same rules (``model_servers``,
``cudavisible``, ``devshm``: one rule, two callers) on each service that asks
swarmgpu for GPUs, from its spec as Swarm returns it: ``ContainerSpec.Command`` is
Compose's ``entrypoint``, ``Args`` its ``command``, ``Env`` its ``environment`` (env
files already in it), ``Mounts`` its ``volumes``. Each is advisory: a reading of the
server's flags, which nothing swarmgpu does depends on. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.manager.commands.auditnodes import Finding
from swarmgpu.manager.commands.cudavisible import visible_warnings
from swarmgpu.manager.commands.devshm import (
    ENOUGH,
    SHM,
    granted_gpus,
    shm_warnings,
    spec_mounts,
)
from swarmgpu.manager.commands.model_servers import server_warnings
from swarmgpu.manager.services.requests import GpuRequest
from swarmgpu.manager.services.requests import parse_all as parse_request_labels
from swarmgpu.swarm.client import SwarmService


def server_findings(svc: SwarmService, prefix: str,
                    classes: Mapping[str, int] | None = None) -> list[Finding]:
    """The service's model-server warnings, as render would say them of its stack:
    ``server-gpu-count``, ``cuda-visible-devices``, ``server-shm`` (none without a
    GPU request, or a spec part that is not what Docker sends). ``classes``:
    ``preemption.priority_classes``, a label's class read as placement reads it."""
    req = parse_request_labels(svc.labels, prefix=prefix, classes=classes)
    if not isinstance(req, GpuRequest):
        return []
    container = container_of(svc.spec)
    compose = {
        "image": container.get("Image", ""),
        "entrypoint": container.get("Command"),
        "command": container.get("Args"),
        "environment": list(svc.env),
    }
    return [
        *(Finding("server-gpu-count", svc.name, m, advisory=True)
          for m in server_warnings(compose, req, prefix)),
        *(Finding("cuda-visible-devices", svc.name, m, key="CUDA_VISIBLE_DEVICES",
                  advisory=True) for m in visible_warnings(compose, req, {}, prefix)),
        *(Finding("server-shm", svc.name, f"{m}; or, on the running service: docker "
                  "service update --mount-add type=tmpfs,destination=/dev/shm,"
                  f"tmpfs-size={ENOUGH} {svc.name}", key=SHM, advisory=True)
          for m in shm_warnings(compose, spec_mounts(container.get("Mounts")), {},
                                granted_gpus(req))),
    ]


def container_of(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """Spec.TaskTemplate.ContainerSpec, or nothing where it is not an object."""
    tt = spec.get("TaskTemplate")
    cs = tt.get("ContainerSpec") if isinstance(tt, Mapping) else None
    return cs if isinstance(cs, Mapping) else {}
