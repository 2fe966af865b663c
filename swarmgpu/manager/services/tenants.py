"""The operator's tenants applied to requests: a stack's labels ask, the tenant's limits
decide (config ``tenants:``, parsed in ``swarmgpu.core.tenants``).

One function, ``Tenants.apply``, for every reader of a request's priority, opt-out and
queue: the daemon's planner (and so preemption, ``plan``, ``status``, the map),
``render`` and ``render --check``. What it does with a request of tenant ``T``:

* a priority above ``T.max_priority`` (a number, or a class resolved to its number
  first) is capped at it; the reason is kept on the request (``limits``);
* ``swarmgpu.preemptible: false`` from a tenant that may not opt out is ignored (the
  service is preemptible whatever its priority), with the reason;
* a ``swarmgpu.queue`` naming a queue ``T`` does not own makes the request invalid (one
  of its own but for case: naming that one, ``case_twin_refused``); no queue means
  ``T``'s first queue (none when it owns none).

The daemon caps (a service already deployed runs with what it may have, and says why);
``render`` and ``render --check``, the gate before a deploy, refuse the same labels.
Without tenants nothing here runs but ``case_twin_refused`` (a queue named but for
case), which the planner's reads apply either way: requests are as their labels say.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from enum import Enum

from swarmgpu.core.config import Config, parse_priority_classes, queue_quotas
from swarmgpu.core.stamps import MAX_SKEW_S
from swarmgpu.core.tenants import (
    DEFAULT_TENANT,
    STACK_LABEL,
    TenantSpec,
    case_twin,
    claimed_by,
    matches,
    parse_tenants,
)
from swarmgpu.manager.services.requests import GpuRequest, Rebalance, RequestError
from swarmgpu.swarm.client import SwarmService, SwarmTask
from swarmgpu.swarm.taskstop import rfc3339_ns

Quotas = dict[str, tuple[int, int | None]]


class FromConfig(Enum):
    """Tenants not handed on: read from the config where they are needed."""

    READ = "read"


# The default of every reader of tenants a caller may hand on (``Tenants.given``): a
# one-shot command builds them once and hands them to each; a test or a step alone
# leaves them to be read.
FROM_CONFIG = FromConfig.READ


class Tenants:
    """The tenants of a valid config, in matching order (``default`` last)."""

    def __init__(self, specs: list[TenantSpec], own_queues: Quotas,
                 prefix: str = "swarmgpu.") -> None:
        self.specs = specs
        self.own_queues = own_queues
        self.prefix = prefix
        self.by_name = {t.name: t for t in specs}
        self.owner = {q: t.name for t in specs for q in t.queues}

    @classmethod
    def from_config(cls, cfg: Config) -> Tenants | None:
        """None without a ``tenants`` section (requests are as their labels say)."""
        specs, own, errors = parse_tenants(
            cfg.tenants, cfg.queues, parse_priority_classes(cfg.preemption.priority_classes),
            cfg.preemption.max_per_hour)
        if errors:  # load_config refuses such a config; a hand-built one is refused here
            raise ValueError("; ".join(errors))
        return cls(specs, own, cfg.sync.prefix) if specs else None

    @classmethod
    def given(cls, cfg: Config, tenants: Tenants | FromConfig | None) -> Tenants | None:
        """``tenants`` as handed on, or the config's (``from_config``) when none were
        (``FROM_CONFIG``)."""
        return cls.from_config(cfg) if isinstance(tenants, FromConfig) else tenants

    def quotas(self, queues: Mapping[str, object]) -> Quotas:
        """The config's ``queues`` and the queues tenants define (``guaranteed``/``max``)."""
        return {**queue_quotas(queues), **self.own_queues}

    # --- matching -----------------------------------------------------------------
    def matching(self, name: str, stack: str | None) -> list[TenantSpec]:
        """Every tenant that matches (file order; ``default`` only when none does)."""
        out = [t for t in self.specs[:-1] if matches(t, name, stack)]
        return out or [self.specs[-1]]

    def of(self, name: str, stack: str | None) -> TenantSpec:
        """The tenant of service ``name`` of stack ``stack`` (None: not from a stack): the
        first in file order that matches, else ``default``."""
        return claimed_by(self.specs, name, stack) or self.specs[-1]

    def of_service(self, s: SwarmService) -> TenantSpec:
        return self.of(s.name, s.labels.get(STACK_LABEL))

    # --- limits -----------------------------------------------------------------------
    def apply(self, r: GpuRequest | RequestError | None, name: str, stack: str | None,
              ) -> GpuRequest | RequestError | None:
        """``r`` as its tenant may have it (see the module's rules)."""
        if not isinstance(r, GpuRequest):
            return r
        t = self.of(name, stack)
        p = self.prefix
        limits: list[str] = []
        priority, pclass = r.priority, r.priority_class
        if priority > t.max_priority:
            asked = f"{pclass} ({priority})" if pclass else str(priority)
            limits.append(f"priority {asked} capped at {t.max_priority} by tenant {t.name} "
                          "(its max_priority)")
            priority, pclass = t.max_priority, ""
        preemptible = r.preemptible
        if preemptible is False and not t.may_opt_out:
            limits.append(f"{p}preemptible=false ignored: tenant {t.name} may not opt out "
                          "of preemption")
            preemptible = None
        queue = r.queue or t.default_queue
        if refused := case_twin_refused(r.queue, t.queues, p):
            return refused
        if r.queue and r.queue not in t.queues:
            other, twin = self.owner.get(r.queue), case_twin(r.queue, self.owner)
            whose = (f"{r.queue} is tenant {other}'s" if other else
                     f"{r.queue} is tenant {self.owner[twin]}'s queue {twin} but for case"
                     if twin else f"{r.queue} is no tenant's queue")
            mine = ", ".join(t.queues) or "none"
            return RequestError(p + "queue", r.queue,
                                f"a queue of tenant {t.name} ({mine}); {whose} (config "
                                f"tenants.{t.name}.queues)")
        return replace(r, priority=priority, priority_class=pclass, preemptible=preemptible,
                       queue=queue, tenant=t.name, limits=tuple(limits),
                       always_preemptible=not t.may_opt_out)

    def queue_of(self, s: SwarmService, asked: str) -> str:
        """The queue ``s`` counts against when its request is invalid (what it holds
        still counts): ``asked`` (its label's) when its tenant owns it, or the one of its
        own it names but for case (``case_twin``: the queue it meant, as without
        tenants), else the tenant's first queue."""
        t = self.of_service(s)
        if asked in t.queues:
            return asked
        return (case_twin(asked, t.queues) if asked else None) or t.default_queue

    def held_as(self, s: SwarmService, queue: str) -> GpuRequest:
        """What preemption reads for ``s``, whose request is invalid but whose holdings
        are kept (counted in ``queue``, ``queue_of``): the most its tenant's labels could
        ask, its ``max_priority`` and an opt-out only where it may opt out. Read as no
        request, a tenant that may not opt out broke a holder's label (a label change
        restarts no task) and was never a victim, by priority or by quota reclaim."""
        t = self.of_service(s)
        return GpuRequest(priority=t.max_priority, preemptible=False if t.may_opt_out else None,
                          queue=queue, tenant=t.name, always_preemptible=not t.may_opt_out)

    def enforced(self, s: SwarmService, r: GpuRequest | RequestError | None, opt_out: str,
                 mark: str = "", tasks: Sequence[SwarmTask] = (),
                 moved: AbstractSet[float] = frozenset(),
                 ) -> tuple[SwarmService, GpuRequest | None]:
        """``s`` and its request ``r`` as the over-share restart, the operator's limit on
        a share, judges them. For a tenant that may not opt out: without its opt-out
        label ``opt_out`` (``<p>rebalance``: never, in either place), a request its
        labels broke read as ``held_as`` reads it, and without its cool-down ``mark``
        (``<p>state.moved-at``) unless one of its ``tasks`` (its own) was made after it,
        as a restart's is (less ``MAX_SKEW_S``: managers' clocks), or the mover's list of
        moves finished in the hour (``moved``: ``budget.finished_times``, on the swarm
        object) has one ended in that second, as a move's is: it writes the mark at its
        end, after the task it started (make-before-break: a minute and more). Taken as
        written, a tenant's own word (the mark written again each minute) kept a share
        past its size running on its neighbours' memory. For a tenant that may: as they
        are (no request where ``r`` is not one)."""
        if self.of_service(s).may_opt_out:
            return s, r if isinstance(r, GpuRequest) else None
        gpu = (replace(r, rebalance=Rebalance.AUTO) if isinstance(r, GpuRequest)
               else self.held_as(s, "") if isinstance(r, RequestError) else None)
        labels = {k: v for k, v in s.labels.items() if k != opt_out}
        if mark in labels and not _made_after(labels[mark], tasks) \
                and not _moved_then(labels[mark], moved):
            del labels[mark]
        return replace(s, labels=labels), gpu

    def apply_to(self, s: SwarmService, r: GpuRequest | RequestError | None,
                 ) -> GpuRequest | RequestError | None:
        return self.apply(r, s.name, s.labels.get(STACK_LABEL))

    def budget(self, tenant: str) -> int:
        """Victims the services of ``tenant`` may have stopped per hour."""
        t = self.by_name.get(tenant) or self.by_name[DEFAULT_TENANT]
        return t.preemptions_per_hour


def _made_after(mark: str, tasks: Sequence[SwarmTask]) -> bool:
    """One of ``tasks`` still meant to run was made after the time ``mark`` says (less
    ``MAX_SKEW_S``); False for a mark that is no time, or a task whose making time
    cannot be read."""
    # Here, not at the top: the placement package imports its planner, whose reads
    # import this module (a fresh `config check` imported it first and failed half made).
    from swarmgpu.manager.placement.keys import STOPPING_STATES

    try:
        after = (float(mark) - MAX_SKEW_S) * 10**9
    except ValueError:
        return False
    return any(t.desired_state not in STOPPING_STATES and (m := rfc3339_ns(t.created_at))
               is not None and m >= after for t in tasks)


def _moved_then(mark: str, moved: AbstractSet[float]) -> bool:
    """Whether a move ended in the second ``mark`` says (``moved``: the mover's finished
    list; both written as whole seconds of one time, ``record.end_move``)."""
    try:
        return float(mark) in moved
    except ValueError:
        return False


def case_twin_refused(queue: str, queues: Collection[str], prefix: str) -> RequestError | None:
    """A ``swarmgpu.queue`` that names one of ``queues`` but for case, refused naming
    both (None otherwise): read as a queue apart, it had no max, and the config refuses
    two such queues. One rule with tenants (``queues``: its tenant's) and without (the
    config's, ``placement.reads``)."""
    twin = case_twin(queue, queues) if queue else None
    if twin is None:
        return None
    return RequestError(prefix + "queue", queue,
                        f"a queue's name as the config writes it: {queue} differs from queue "
                        f"{twin} only in case; write {prefix}queue={twin}")


def specs_of(tenants: Tenants | None) -> tuple[TenantSpec, ...]:
    """The tenants' specs in matching order (() without tenants): what a reader below
    this layer takes (``swarm.agentservice.tenant_agent``)."""
    return tuple(tenants.specs) if tenants is not None else ()
