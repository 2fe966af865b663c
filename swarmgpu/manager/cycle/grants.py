"""Ungranted GPU access in the daemon's cycle and in `audit`, `plan`, `status`.

Each cycle (leader only, after placement wrote its grants): read what the manager's
engine knows of the images that can decide an answer (``ImageEnvs``, cached), find the
services that see GPUs without a grant (``grants.find_ungranted``), keep them for the
map (the session's ``ungranted``), log each change, export ``swarmgpu_ungranted_services``. With
``placement.ungranted: void``, void each one's NVIDIA_VISIBLE_DEVICES through the write
gate (``actuator.Writes``: nothing in dry-run): a read-modify-write judged again on the
spec read at write time, changing only ``ContainerSpec.Env``; a spec that already says
``void`` is not written again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from loguru import logger
from prometheus_client import Counter, Gauge

from swarmgpu.core.saidonce import SaidOnce
from swarmgpu.manager.commands.audit import Finding
from swarmgpu.manager.cycle.host import CycleHost
from swarmgpu.manager.cycle.pipeline import Step
from swarmgpu.manager.cycle.placement import OnePlan
from swarmgpu.manager.cycle.session import CycleSession, Slot
from swarmgpu.manager.engine.actuator import Why, Writes
from swarmgpu.manager.engine.stop import read_cut
from swarmgpu.manager.engine.writes import WRITE_PARALLEL, write_each
from swarmgpu.manager.placement import PlacementPlan
from swarmgpu.manager.services.grants import (
    KIND,
    ImageEnv,
    Ungranted,
    find_ungranted,
    gpu_nodes,
    image_of,
    images_to_read,
    parse_exempt,
    void_spec,
)
from swarmgpu.manager.services.tenants import FROM_CONFIG, FromConfig, Tenants
from swarmgpu.swarm.answerjson import budget_cut
from swarmgpu.swarm.client import BudgetCut, SwarmClient, SwarmError, SwarmWrongObject
from swarmgpu.swarm.specread import UnreadSpec

if TYPE_CHECKING:
    from swarmgpu.core.config import Config
    from swarmgpu.manager.nodes.sync import Snapshot

IMAGE_TTL_S = 300.0  # a tag can be moved: its env is read again after this long
# Image reads per cycle at most; the rest are 'not read yet' (unknown) until a later
# cycle: a first cycle over thousands of new images stays short (each read is two
# engine round trips, a list and an inspect).
MAX_READS = 32
# Images kept beyond those a cycle needs (a service gone from the GPU nodes, a task
# between two runs), the least recently needed dropped first: a pinned image is not read
# again when it comes back, and memory stays bounded.
MAX_KEPT = 4096
# Image reads of a cycle in flight at once: each is two round trips of ~20 ms
# (docs/reliability.md), so 32 one after another took 0.6-0.8 s of a steady cycle.
READ_PARALLEL = WRITE_PARALLEL


def pinned(ref: str) -> bool:
    """``ref`` names its image by digest (``name[:tag]@sha256:...``, as Swarm pins a
    service's image at deploy): that image, and so its env, never changes."""
    _, at, digest = ref.partition("@")
    return bool(at) and ":" in digest


class ImageEnvs:
    """The env of images, as the manager's engine has them, by reference; at most
    ``max_reads`` engine reads per ``lookup`` (a first cycle over thousands of new
    images stays short; the rest are unknown until a later cycle). An env read of an
    image pinned by digest is kept for the daemon's life (``max_kept`` bounds those no
    service needs now); anything else for ``ttl_s`` (a tag can move; an image not on the
    manager's engine may be pulled there). A lookup's reads run ``READ_PARALLEL`` at once."""

    def __init__(self, swarm: SwarmClient, *, ttl_s: float = IMAGE_TTL_S,
                 max_reads: int = MAX_READS, max_kept: int = MAX_KEPT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.swarm = swarm
        self.ttl_s = ttl_s
        self.max_reads = max_reads
        self.max_kept = max_kept
        self.clock = clock
        self._seen: OrderedDict[str, tuple[float, ImageEnv]] = OrderedDict()

    def _fresh(self, ref: str, at: float, image: ImageEnv, now: float) -> bool:
        return (image.env is not None and pinned(ref)) or now - at < self.ttl_s

    def lookup(self, refs: Iterable[str]) -> dict[str, ImageEnv]:
        now = self.clock()
        out: dict[str, ImageEnv] = {}
        todo: list[str] = []
        for ref in dict.fromkeys(refs):
            hit = self._seen.get(ref)
            if hit is not None:
                self._seen.move_to_end(ref)  # the least recently needed go first
                if self._fresh(ref, *hit, now):
                    out[ref] = hit[1]
                    continue
            if len(todo) >= self.max_reads:
                out[ref] = hit[1] if hit else ImageEnv(ref, None, "not read yet", read=False)
                continue
            todo.append(ref)
        # Reads of different images, a few at once (_read turns an engine error into
        # an unknown image; only the cycle's thread touches the cache).
        for ref, (image, keep) in zip(todo, write_each(todo, self._read, READ_PARALLEL),
                                      strict=True):
            out[ref] = image
            if keep:
                self._seen[ref] = (now, image)
                self._seen.move_to_end(ref)
        # This cycle's images are the newest: drop the oldest of the rest beyond the bound.
        while len(self._seen) > self.max_kept:
            oldest = next(iter(self._seen))
            if oldest in out:
                break
            del self._seen[oldest]
        return out

    def _read(self, ref: str) -> tuple[ImageEnv, bool]:
        """``ref``'s env, and whether it is kept: not when the cycle's engine budget cut
        its read (it says nothing of the image; kept, the next cycles took the image
        for unknown, its services for ungranted)."""
        try:
            env = self.swarm.image_env(ref)
        except BudgetCut as exc:  # (its cycle's budget: no fault of its own)
            raise read_cut() from exc
        except SwarmWrongObject as exc:  # (its text bounded: both IDs and the fix shown)
            return ImageEnv(ref, None, str(exc), read=False), True
        except SwarmError as exc:
            why = f"the manager's engine could not be asked: {exc}"[:200]
            return ImageEnv(ref, None, why, read=False), not budget_cut(exc)
        if env is None:
            return ImageEnv(ref, None, "it is not on the manager's engine"), True
        return ImageEnv(ref, env), True

    def get(self, ref: str) -> ImageEnv | None:
        hit = self._seen.get(ref)
        return hit[1] if hit else None


def managed_names(plan: PlacementPlan | None) -> set[str]:
    """The services placement manages this cycle: a valid request (placed, pending,
    a finished job). Without placement (disabled) nothing is granted."""
    return {sp.name for sp in (plan.services if plan is not None else [])
            if sp.status != "invalid"}


def find(cfg: Config, snap: Snapshot, plan: PlacementPlan | None,
         images: ImageEnvs) -> list[Ungranted]:
    """Every service on a GPU node that sees GPUs without a grant, now."""
    prefix = cfg.sync.prefix
    gpu = gpu_nodes(snap.nodes, snap.facts, prefix, cfg.placement.generic_resource_kind)
    envs = images.lookup(images_to_read(snap.services, snap.tasks, gpu, prefix))
    return find_ungranted(snap.services, snap.tasks, gpu, prefix=prefix,
                          managed=managed_names(plan), images=envs,
                          exempt=parse_exempt(cfg.placement.ungranted_exempt),
                          grants=cfg.placement.grants,
                          generic_kind=cfg.placement.generic_resource_kind)


def findings(found: Sequence[Ungranted]) -> list[Finding]:
    """``swarmgpu audit``: each needs action (exit 1), but an exempt one."""
    return [Finding(KIND, u.service,
                    f"ungranted GPU access on {', '.join(u.nodes)}: {u.reason}; fix: {u.fix}",
                    advisory=u.exempt) for u in found]


def rows(found: Sequence[Ungranted]) -> list[dict[str, Any]]:
    """The cluster document's ``ungranted`` list (the map, `status --json`, `plan --json`)."""
    return [u.to_dict() for u in found]


def void_one(gate: Writes, u: Ungranted, *, prefix: str, managed: bool, grants: str,
             images: ImageEnvs) -> bool:
    """Void one service's NVIDIA_VISIBLE_DEVICES (a read-modify-write judged on the spec
    read at write time); True when a write landed."""
    before: list[Any] = [None]

    def compute(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
        ref = image_of(spec)
        image = images.get(ref) or ImageEnv(ref, None, "not read", read=False)
        new = void_spec(spec, image, prefix=prefix, managed=managed, grants=grants)
        # read once void_spec has (its UnreadSpec named a part that is not an object)
        before[0] = ((spec.get("TaskTemplate") or {}).get("ContainerSpec") or {}).get("Env")
        return new

    log = logger.bind(service=u.service)
    try:
        # It restarts the service's tasks: the operator's word (the setting), so decided.
        landed = gate.service_spec(u.service_id, compute, Why(
            "operator", f"placement.ungranted: void (GPU access without a grant: {u.reason})"))
    except SwarmError as exc:
        log.error("ungranted GPU access: the void write failed: {}", exc)
        return False
    except UnreadSpec as exc:  # its spec as read at write time: this service's alone
        log.error("ungranted GPU access: not voided, its spec cannot be read: {}", exc)
        return False
    if landed:
        log.warning("ungranted GPU access voided (placement.ungranted: void): "
                    "NVIDIA_VISIBLE_DEVICES=void written, env was {}; why: {}",
                    before[0], u.reason)
    return landed


class GrantsStep(Step):
    """After placement (judged on the grants it just wrote): find the services that see
    GPUs without a grant, log each change, count them; with ``placement.ungranted:
    void``, void each one (outside dry-run)."""

    name = "grants"
    provides = frozenset({Slot.UNGRANTED})

    def __init__(self, host: CycleHost, *, placement: bool) -> None:
        """``placement``: the placement step runs before this one (its plan says which
        services it manages); without it, nothing is granted."""
        self.host = host
        self.cfg = cfg = host.cfg
        self.placement = placement
        self.requires = frozenset({Slot.SNAPSHOT, *([Slot.PLACEMENT] if placement else [])})
        self.images = ImageEnvs(host.swarm)
        r = host.metrics.registry
        self.count = Gauge("swarmgpu_ungranted_services",
                           "Services on GPU nodes that see GPUs without a grant from "
                           "placement (exempt ones not counted)", registry=r)
        self.voided = Counter("swarmgpu_ungranted_voided", "NVIDIA_VISIBLE_DEVICES=void "
                              "writes made (placement.ungranted: void)", registry=r)
        self.said: SaidOnce[str] = SaidOnce()  # services, with the reason logged (a change is)
        self.void = cfg.placement.ungranted == "void"

    def stand_by(self) -> None:
        self.count.set(0)  # (the leader's daemon counts them)

    def run(self, session: CycleSession) -> None:
        cfg = self.cfg
        plan = session.placement if self.placement else None
        found = find(cfg, session.snapshot, plan, self.images)
        session.ungranted = found
        self.count.set(sum(not u.exempt for u in found))
        self._log(found)
        if not self.void:
            return
        todo = [u for u in found if u.voidable and not u.exempt]
        if cfg.dry_run:
            for u in todo:
                logger.bind(service=u.service).info(
                    "dry-run: would write NVIDIA_VISIBLE_DEVICES=void (ungranted GPU access: "
                    "{})", u.reason)
            return
        prefix = cfg.sync.prefix
        gate = Writes(self.host.swarm, dry_run=cfg.dry_run, who="ungranted GPU access",
                      prefix=prefix)
        managed = managed_names(plan)
        for u in todo:
            if void_one(gate, u, prefix=prefix, managed=u.service in managed,
                        grants=cfg.placement.grants, images=self.images):
                self.voided.inc()

    def _log(self, found: Sequence[Ungranted]) -> None:
        """Each service's ungranted access when it starts or its reason changes, and
        its end."""
        said = self.said
        said.begin()
        for u in found:
            if said.fresh(u.service, u.reason):
                logger.bind(service=u.service).warning(
                    "ungranted GPU access{} on {}: {}; fix: {}",
                    " (exempt)" if u.exempt else "", ", ".join(u.nodes), u.reason, u.fix)
        for name in set(said) - {u.service for u in found}:
            logger.bind(service=name).info("ungranted GPU access: no longer")
        said.end()


def audit_check(cfg: Config, swarm: SwarmClient,
                tenants: Tenants | FromConfig | None = FROM_CONFIG,
                plans: OnePlan | None = None) -> Callable[[Snapshot], list[Finding]]:
    """`swarmgpu audit`: the services that see GPUs without a grant (``tenants``: the
    command's, built once; ``FROM_CONFIG``: read for the plan; ``plans``: the run's one
    plan, shared with its placement findings)."""
    plan_of = plans or OnePlan(cfg, swarm, tenants)

    def check(snap: Snapshot) -> list[Finding]:
        plan = plan_of(snap) if cfg.placement.enabled else None
        return findings(find(cfg, snap, plan, ImageEnvs(swarm)))

    return check
