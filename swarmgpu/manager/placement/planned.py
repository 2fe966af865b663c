"""What a service's plan was made from, checked again at its write (``Planned``).

A plan is made from a snapshot that can be older than the service: the cache keeps a
service until its event, and one the engine dropped is read again only by the slow
re-list (``swarm.cache.RELIST_S``). The write is a read-modify-write of the spec as it
is then, which keeps everyone's edits, but it would still put a plan made for one GPU
request (its devices, gate, env, MaxReplicas) on a spec re-deployed with another. So the
write first compares what placement's decision read from the service (``planned_from``)
in the spec it is about to change with the snapshot's: when they differ it writes
nothing, and the service is read afresh and planned again next cycle.

Only what the service's owner sets counts: the request labels (``request_labels``: what
``parse_request`` reads), its stack, mode and replica or job counts, its own constraints
and platforms, its own MaxReplicas, its CPU and memory reservations. Everything swarmgpu
writes is left out -- its output labels (devices, share, state), the service's own gate
and the hold, env lines and mounts, the MaxReplicas it sets (1, or the value it recorded
in ``<p>state.max-replicas``), generic reservations, UpdateConfig, ForceUpdate -- so the
daemon's own earlier writes of the service never make a plan stale. One exception: a
write that forces an update (``ForceUpdate`` + 1: every task replaced) is refused when
``ForceUpdate`` moved since the snapshot (an owner's ``docker service update --force``, or
the daemon's own force a stale snapshot missed): those tasks were replaced already, and
the plan's bump on the fresh spec replaced them a second time. A gate naming
another service is the owner's when it appears (a file rendered under another name) and
may be swarmgpu's doing when it goes (it replaces one with the service's own): only one
that appeared counts. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from swarmgpu.core.tenants import STACK_LABEL
from swarmgpu.manager.placement.keys import MAX_STATE, gate_of, is_hold, is_renew
from swarmgpu.manager.services.requests import request_labels
from swarmgpu.swarm.specread import held_reservations

SpecCompute = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """The parts of a service spec placement's decision reads (module docstring)."""

    name: str
    request: tuple[tuple[str, str], ...]  # the request labels, sorted
    stack: str | None  # its stack: which tenant's limits apply
    mode: str  # Spec.Mode's key (Replicated, Global, ReplicatedJob, GlobalJob)
    replicas: int | None
    job: tuple[int | None, int | None]  # MaxConcurrent, TotalCompletions
    constraints: tuple[str, ...]  # its own (no gate, nor the hold), spaces removed, sorted
    other_gates: tuple[str, ...]  # gates naming other services (as ``constraints``)
    platforms: tuple[tuple[str, str], ...]  # (OS, Architecture)
    max_replicas: int  # its own MaxReplicas; 0: none (or the one swarmgpu set)
    reserves: tuple[int, int] | None  # CPU milli, memory MiB each task reserves (None:
    # unread, a change: ``held_reservations``)


def planned_from(spec: Mapping[str, Any], prefix: str) -> PlanInputs:
    """What placement reads from ``spec`` (a service's ``Spec``) to plan it."""
    labels = spec.get("Labels") or {}
    tt = spec.get("TaskTemplate") or {}
    placement = tt.get("Placement") or {}
    mode = spec.get("Mode") or {}
    kind = next(iter(mode), "Replicated")
    counts = mode.get(kind) or {}
    name = str(spec.get("Name") or "")
    cons: list[str] = []
    others: list[str] = []
    for c in placement.get("Constraints") or []:
        gated = gate_of(c, prefix) if isinstance(c, str) else name
        if gated != name and not is_hold(c, prefix) and not is_renew(c, prefix):
            # another's gate, or the owner's (the renewal: swarmgpu's, met by every node)
            (cons if gated is None else others).append(c.replace(" ", ""))
    most = placement.get("MaxReplicas") or 0
    # 0 and 1 read alike (``spread``); 1 is also swarmgpu's one-per-node rule, and a
    # value it recorded is the one it set when it packed the service
    mine = most in (0, 1) or labels.get(prefix + MAX_STATE) == str(most)
    return PlanInputs(
        name=name,
        request=request_labels(labels, prefix),
        stack=labels.get(STACK_LABEL),
        mode=str(kind),
        replicas=counts.get("Replicas") if isinstance(counts, Mapping) else None,
        job=(counts.get("MaxConcurrent"), counts.get("TotalCompletions"))
        if isinstance(counts, Mapping)
        else (None, None),
        constraints=tuple(sorted(cons)),
        other_gates=tuple(sorted(others)),
        platforms=tuple(
            (str(p.get("OS") or ""), str(p.get("Architecture") or ""))
            for p in placement.get("Platforms") or []
            if isinstance(p, Mapping)
        ),
        max_replicas=0 if mine else int(most),
        reserves=held_reservations(spec),
    )


def forced(spec: Mapping[str, Any]) -> int:
    """``spec``'s ForceUpdate (0: unset)."""
    value = (spec.get("TaskTemplate") or {}).get("ForceUpdate") or 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def what_changed(was: PlanInputs, now: PlanInputs) -> list[str]:
    """Each input that differs, in words (``swarmgpu.gpus 1 -> 2``, ``replicas 1 -> 3``)."""
    out: list[str] = []
    if was.request != now.request:
        a, b = dict(was.request), dict(now.request)
        out += [
            f"{k} {_short(a.get(k))} -> {_short(b.get(k))}"
            for k in sorted(a.keys() | b.keys())
            if a.get(k) != b.get(k)
        ]
    for f in fields(PlanInputs):
        if f.name not in ("request", "other_gates") and getattr(was, f.name) != getattr(
            now, f.name
        ):
            out.append(f"{f.name} {_short(getattr(was, f.name))} -> {_short(getattr(now, f.name))}")
    added = [g for g in now.other_gates if g not in was.other_gates]  # gone: maybe swarmgpu's
    if added:
        out.append(f"gate naming another service added: {_short(', '.join(added))}")
    return out


def _short(v: object) -> str:
    text = "unset" if v is None else str(v)
    return text if len(text) <= 80 else text[:77] + "..."


class Planned:
    """A plan's write, refused when the spec no longer asks for what it was planned from.

    ``guard(compute)`` is the read-modify-write to hand the writer: ``compute`` on the
    spec as it is at write time, or None (nothing written) with ``changed`` saying what
    differs from the snapshot. Each call judges afresh (a retried write reads again)."""

    def __init__(self, snapshot_spec: Mapping[str, Any], prefix: str) -> None:
        self.prefix = prefix
        self.inputs = planned_from(snapshot_spec, prefix)
        self.forced = forced(snapshot_spec)  # the ForceUpdate a forcing write bumps
        self.changed: list[str] = []

    def judge(self, spec: Mapping[str, Any]) -> bool:
        """Whether ``spec`` (a service's spec as it is now) still asks for what the plan
        was made from; ``changed`` says what differs when it does not."""
        now = planned_from(spec, self.prefix)
        self.changed = [] if now == self.inputs else what_changed(self.inputs, now)
        return not self.changed

    def guard(self, compute: SpecCompute) -> SpecCompute:
        def checked(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
            if not self.judge(spec):
                return None
            new = compute(spec)
            now = forced(spec)
            if new is not None and forced(new) != now and now != self.forced:
                self.changed = [f"ForceUpdate {self.forced} -> {now} (a forced update "
                                "since the snapshot replaced its tasks already)"]
                return None
            return new

        return checked

    @property
    def stale(self) -> bool:
        """The last write refused: the spec changed what the plan was made from."""
        return bool(self.changed)
