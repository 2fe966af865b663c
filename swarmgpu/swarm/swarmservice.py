"""A service as the engine describes it: ``SwarmService``, decoded from the engine's JSON
(``read_service``), each part of its spec read apart. ``swarm.client`` reads services
through it (``service_from_api``) and keeps ``SwarmService`` importable from there, where
most readers take it with the other snapshot types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from swarmgpu.core.peertext import quoted
from swarmgpu.swarm.answerjson import Repeated
from swarmgpu.swarm.specread import (
    UnreadSpec,
    job_iteration,
    spec_count,
    spec_labels,
    spec_maybe_count,
    spec_object,
    spec_text,
    spec_texts,
)
from swarmgpu.swarm.taskports import endpoint_ports


@dataclass(frozen=True)
class SwarmService:
    id: str
    name: str
    labels: Mapping[str, str]
    constraints: tuple[str, ...]
    env: tuple[str, ...]
    mode: str  # "replicated" | "global" | ...
    replicas: int | None
    max_replicas_per_node: int | None
    version: int
    spec: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    force_update: int = 0  # TaskTemplate.ForceUpdate: bumping it replaces every task
    # Jobs (mode replicated-job / global-job): Swarm's counts and the run it is on
    # (any update of a job's spec starts a new iteration: the job runs again)
    max_concurrent: int | None = None
    total_completions: int | None = None
    job_iteration: int = 0
    created_at: str = field(default="", compare=False)  # CreatedAt (RFC 3339): its age
    # Endpoint.Ports: the ports Swarm gave it, which its tasks are made with (a spec
    # changed since may not have reached them yet)
    endpoint_ports: tuple[Mapping[str, Any], ...] = field(default=(), repr=False,
                                                          compare=False)
    # Why a part of its spec cannot be read ("": read whole): the fields and their fix
    # (``read_service``); placement fails it alone and writes nothing for it
    unread: str = ""
    # PreviousSpec: the spec before its last update, as Swarm keeps it (None: never
    # updated, or not an object). Swarm's word on what that update changed, which a label
    # the update carried cannot forge (``findings.surge_shown``).
    previous_spec: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    # UpdatedAt (RFC 3339, the leader's clock): its last write, the spec's or Swarm's own
    # (an update's status); UpdateStatus present: Swarm's updater ran since its last spec
    # update (each resets it), so tasks may have been made after that update
    # (``devicemap``: which task a device list may be in)
    updated_at: str = field(default="", compare=False)
    update_ran: bool = field(default=False, compare=False)


# Spec.Mode's keys as the stack file and the CLI write them (--mode replicated-job).
_MODES = {"ReplicatedJob": "replicated-job", "GlobalJob": "global-job"}

_PLACEMENT = "Spec.TaskTemplate.Placement"
_CONTAINER = "Spec.TaskTemplate.ContainerSpec"
_EMPTY: Mapping[str, Any] = {}
_T = TypeVar("_T")


def _part(why: list[str], read: Callable[[], _T], default: _T) -> _T:
    """``read()``, else ``default`` with why it cannot be read added to ``why``: each part
    of a service read apart, so one unread part leaves the others as they are."""
    try:
        return read()
    except UnreadSpec as exc:
        why.append(str(exc))
        return default


def read_service(raw: Any) -> SwarmService:
    """A service as the engine lists it. One whose spec has a part that is not what
    Docker sends (a proxy's null or string where an object goes) is read as far as it can
    be and marked ``unread`` (the fields and their fix): placement fails it alone, nothing
    is written for it, what it holds stays held. Raised instead, one such service failed
    the whole list, and so every cycle. One listed as no object, or without an ID (the
    key of everything the daemon keeps), is refused (``UnreadSpec``;
    ``client.service_from_api``: SwarmError, as a task is)."""
    if not isinstance(raw, Mapping):  # (a proxy's null or string in the list)
        raise UnreadSpec(f"a service listed as {type(raw).__name__} (Docker sends objects; "
                         "check any proxy)")
    sid = raw.get("ID")
    if not isinstance(sid, str) or not sid:
        raise UnreadSpec(f"a service listed without an ID ({quoted(sid)}; Docker sends one "
                         "with every service; check any proxy)")
    why = [raw.why] if isinstance(raw, Repeated) else []  # (a key twice: answerjson)
    spec = _part(why, lambda: spec_object(raw.get("Spec"), "Spec", required=True), _EMPTY)
    tt = _part(why, lambda: spec_object(spec.get("TaskTemplate"), "Spec.TaskTemplate"), _EMPTY)
    placement = _part(why, lambda: spec_object(tt.get("Placement"), _PLACEMENT), _EMPTY)
    container = _part(why, lambda: spec_object(tt.get("ContainerSpec"), _CONTAINER), _EMPTY)
    mode = _part(why, lambda: spec_object(spec.get("Mode"), "Spec.Mode"), _EMPTY)
    mode_name = str(next(iter(mode), "replicated"))
    replicated = _part(why, lambda: spec_object(mode.get("Replicated"),
                                                "Spec.Mode.Replicated"), _EMPTY)
    job = _part(why, lambda: spec_object(mode.get("ReplicatedJob"),
                                         "Spec.Mode.ReplicatedJob"), _EMPTY)
    return SwarmService(
        id=sid,
        name=_part(why, lambda: spec_text(spec.get("Name"), "Spec.Name"), ""),
        labels=_part(why, lambda: spec_labels(spec.get("Labels"), "Spec.Labels"), {}),
        constraints=_part(why, lambda: spec_texts(placement.get("Constraints"),
                                                  f"{_PLACEMENT}.Constraints"), ()),
        env=_part(why, lambda: spec_texts(container.get("Env"), f"{_CONTAINER}.Env"), ()),
        mode=_MODES.get(mode_name, mode_name.lower()),
        replicas=_part(why, lambda: spec_maybe_count(
            replicated.get("Replicas"), "Spec.Mode.Replicated.Replicas"), None),
        max_replicas_per_node=_part(why, lambda: spec_maybe_count(
            placement.get("MaxReplicas"), f"{_PLACEMENT}.MaxReplicas"), None),
        version=_part(why, lambda: spec_count(spec_object(raw.get("Version"), "Version")
                                              .get("Index"), "Version.Index"), 0),
        spec=spec,
        force_update=_part(why, lambda: spec_count(tt.get("ForceUpdate"),
                                                   "Spec.TaskTemplate.ForceUpdate"), 0),
        max_concurrent=_part(why, lambda: spec_maybe_count(
            job.get("MaxConcurrent"), "Spec.Mode.ReplicatedJob.MaxConcurrent"), None),
        total_completions=_part(why, lambda: spec_maybe_count(
            job.get("TotalCompletions"), "Spec.Mode.ReplicatedJob.TotalCompletions"), None),
        job_iteration=_part(why, lambda: job_iteration(raw), 0),
        created_at=str(raw.get("CreatedAt") or ""),
        endpoint_ports=endpoint_ports(raw),
        unread="; ".join(why),
        previous_spec=prev if isinstance(prev := raw.get("PreviousSpec"), Mapping) else None,
        updated_at=str(raw.get("UpdatedAt") or ""),
        update_ran=raw.get("UpdateStatus") is not None,
    )
