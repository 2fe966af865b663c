"""GPU facts -> Swarm node labels: the desired set, the diff, and the guard.

Pure: no I/O. The daemon feeds it a snapshot and applies what it returns.

Ownership: label sync owns every key under the prefix except the placement gates and
ledger (``<prefix>service.``, ``<prefix>assign.``), which placement owns. Nothing else
is touched.
Only static facts become labels; anything that moves with load would rewrite labels
(and risk stopping tasks) every cycle.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from swarmgpu.core.andmore import and_more
from swarmgpu.core.labelkeys import usable_label_key, usable_label_value
from swarmgpu.core.migprofile import canonical_profile
from swarmgpu.core.model import Gpu, NodeFacts, gpu_family, is_nvlink
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.constraints import (
    Constraint,
    node_labels_satisfy,
    parse_all,
)

DEFAULT_PREFIX = "swarmgpu."
# Placement owns these node labels (gates and the GPU ledger), not label sync.
PLACEMENT_INFIXES = ("service.", "assign.")


def product_label(product: str) -> str:
    """GPU feature discovery's form of a product name: spaces become dashes."""
    return re.sub(r"\s+", "-", product.strip())


def owned_by_label_sync(key: str, prefix: str = DEFAULT_PREFIX) -> bool:
    return key.startswith(prefix) and not key.startswith(_placement_prefixes(prefix)) \
        and not _operator_health_key(key, prefix)


def label_sync_labels(labels: Mapping[str, str], prefix: str = DEFAULT_PREFIX) -> dict[str, str]:
    """The labels of a node that label sync owns (``owned_by_label_sync``)."""
    return {k: v for k, v in labels.items() if owned_by_label_sync(k, prefix)}


def _operator_health_key(key: str, prefix: str) -> bool:
    """``<prefix>gpu.<uuid>.health``: the operator's reset label (docs/health.md), never
    label sync's to remove."""
    return key.endswith(".health") and key.startswith((f"{prefix}gpu.GPU-",
                                                       f"{prefix}gpu.MIG-"))


@functools.cache
def _placement_prefixes(prefix: str) -> tuple[str, ...]:
    # Called for every label of every node each cycle: built once per prefix.
    return tuple(prefix + infix for infix in PLACEMENT_INFIXES)


NVLINK_SEARCH_BUDGET = 20_000  # search steps; a count, not a time, so answers are stable


def largest_nvlink_group(facts: NodeFacts, budget: int = NVLINK_SEARCH_BUDGET) -> int:
    """Size of the largest set of GPUs that are pairwise NVLink-connected.

    A maximum-clique search (Bron-Kerbosch with Tomita pivoting and a size bound), which
    is exact and instant on real topologies (NVSwitch: one clique; hybrid cube mesh:
    cliques of 4). Max-clique is exponential in general, and an agent chooses the link
    matrix, so the search stops after ``budget`` steps and answers the largest group
    found by then: never more than the truth, and at least a greedy clique's size.
    """
    n = len(facts.gpus)
    if n == 0:
        return 0
    if not facts.links:
        return 1
    adj = [frozenset(j for j in range(n) if j != i and is_nvlink(facts.link(i, j)))
           for i in range(n)]
    best = _greedy_clique(adj)
    steps = 0

    def expand(r: int, p: set[int], x: set[int]) -> None:
        nonlocal best, steps
        steps += 1
        if steps > budget:
            return
        if not p:
            best = max(best, r)  # r is a clique (x non-empty: not maximal, still a clique)
            return
        if r + len(p) <= best:
            return
        pivot = max(p | x, key=lambda u: len(adj[u] & p))
        for v in list(p - adj[pivot]):
            expand(r + 1, p & adj[v], x & adj[v])
            p.discard(v)
            x.add(v)
            if steps > budget:
                return

    expand(0, set(range(n)), set())
    return best


def _greedy_clique(adj: Sequence[frozenset[int]]) -> int:
    """A quick lower bound: grow a clique from each GPU, best-connected first."""
    best = 1
    for start in range(len(adj)):
        clique = {start}
        cand = set(adj[start])
        while cand:
            v = max(cand, key=lambda u: (len(adj[u] & cand), -u))
            clique.add(v)
            cand &= adj[v]
        best = max(best, len(clique))
    return best


def _mig_strategy(facts: NodeFacts) -> str:
    enabled = [g for g in facts.gpus if g.mig_enabled]
    if not enabled:
        return "none"
    if len(enabled) == len(facts.gpus):
        profiles = {canonical_profile(m.profile) for g in enabled for m in g.mig_devices}
        if len(profiles) <= 1:
            return "single"
    return "mixed"


def desired_labels(facts: NodeFacts, prefix: str = DEFAULT_PREFIX) -> dict[str, str]:
    """The labels a node with these facts should carry (keys include the prefix).
    Memoised on what they are made of: agents re-read facts every cycle, and a thousand
    nodes built alike would otherwise recompute the same NVLink groups each time. The
    key leaves out what the labels never show (UUIDs, bus ids), so nodes built alike
    share one entry; keyed on whole GPUs, 5,000 nodes overflowed the memo and every
    cycle recomputed all of them."""
    key = (tuple(_label_inputs(g) for g in in_index_order(facts.gpus)), facts.links,
           facts.driver_version, facts.cuda_driver_version, prefix)
    got = _DESIRED.get(key)
    if got is None:
        if len(_DESIRED) >= _DESIRED_MAX:
            del _DESIRED[next(iter(_DESIRED))]  # the oldest entry
        got = _DESIRED[key] = _desired_labels(facts, prefix)
    return dict(got)


def in_index_order(gpus: Sequence[Gpu]) -> tuple[Gpu, ...]:
    """``gpus`` by index (NVML's, PCI bus order), then bus id and UUID: the order the
    labels take their first GPU (its compute capability) and a product tie in, not the
    order an agent listed them in (another listing flipped labels a running task's
    constraint reads)."""
    return tuple(sorted(gpus, key=lambda g: (g.index, g.pci_bus_id, g.uuid)))


def _label_inputs(g: Gpu) -> tuple[object, ...]:
    """What ``_desired_labels`` reads of one GPU."""
    return (g.product, g.memory_mib, g.compute_major, g.compute_minor, g.mig_capable,
            g.mig_enabled, tuple(m.profile for m in g.mig_devices), g.numa_node, g.healthy)


_DESIRED: dict[tuple[object, ...], dict[str, str]] = {}
_DESIRED_MAX = 4096  # distinct node shapes remembered


def _desired_labels(facts: NodeFacts, prefix: str) -> dict[str, str]:
    p = prefix
    gpus = in_index_order(facts.gpus)
    out: dict[str, str] = {f"{p}gpu.count": str(len(gpus))}
    if gpus:
        out[f"{p}gpu.present"] = "true"
        # GPUs not failed (docs/health.md); set from the hysteresis state, so it does not
        # flap, and held back like any label when running tasks' constraints use it.
        out[f"{p}gpu.healthy-count"] = str(sum(g.healthy for g in gpus))
        products = Counter(product_label(g.product) for g in gpus)
        # A mixed node advertises its most common product (a tie: the first GPU's, by
        # index), and says it is mixed.
        out[f"{p}gpu.product"] = products.most_common(1)[0][0]
        if len(products) > 1:
            out[f"{p}gpu.product-mixed"] = "true"
        out[f"{p}gpu.memory"] = str(min(g.memory_mib for g in gpus))
        first = gpus[0]
        if first.compute_major is not None:
            out[f"{p}gpu.compute.major"] = str(first.compute_major)
            out[f"{p}gpu.compute.minor"] = str(first.compute_minor or 0)
            fam = gpu_family(first.compute_major, first.compute_minor)
            if fam:
                out[f"{p}gpu.family"] = fam
        out[f"{p}mig.capable"] = str(any(g.mig_capable for g in gpus)).lower()
        out[f"{p}mig.strategy"] = _mig_strategy(facts)
        # One spelling per profile, the one requests are read into (1G.10GB is 1g.10gb)
        mig_counts = Counter(canonical_profile(m.profile) for g in gpus for m in g.mig_devices)
        for profile, count in sorted(mig_counts.items())[:MAX_MIG_PROFILES]:
            out[f"{p}mig-{profile}.count"] = str(count)
        if facts.links:
            group = largest_nvlink_group(facts)
            out[f"{p}nvlink"] = str(group > 1).lower()
            out[f"{p}nvlink.largest-group"] = str(group)
        numa = Counter(g.numa_node for g in gpus if g.numa_node is not None)
        if numa:
            out[f"{p}numa.nodes"] = str(len(numa))
            out[f"{p}numa.max-gpus"] = str(max(numa.values()))
    if facts.driver_version:
        out[f"{p}driver.version.full"] = facts.driver_version
        out[f"{p}driver.version.major"] = facts.driver_version.split(".")[0]
    if facts.cuda_driver_version:
        major, _, minor = facts.cuda_driver_version.partition(".")
        out[f"{p}cuda.driver-version.full"] = facts.cuda_driver_version
        out[f"{p}cuda.driver-version.major"] = major
        out[f"{p}cuda.driver-version.minor"] = minor.split(".")[0] or "0"
    # Every key must be usable in a constraint; a value Swarm cannot match (or one an
    # agent made up: whitespace, a newline, non-ASCII, huge) is dropped rather than
    # written as a label nobody can select on. At most MAX_NODE_LABELS, whatever the
    # facts say.
    good = {k: v for k, v in out.items() if usable_label_key(k) and writable_label_value(v)}
    return dict(sorted(good.items())[:MAX_NODE_LABELS]) if len(good) > MAX_NODE_LABELS \
        else good


MAX_LABEL_VALUE_LEN = 128
MAX_NODE_LABELS = 64  # ~20 fixed keys plus MIG profiles (capped at MAX_MIG_PROFILES)
MAX_MIG_PROFILES = 16  # distinct MIG profile labels per node; real GPUs have under 10
_WRITABLE_VALUE = re.compile(r"[A-Za-z0-9:_.\-()+\[\]/]+", re.ASCII)


def writable_label_value(value: str) -> bool:
    """A value swarmgpu writes: swarmkit's value rule, ASCII, no whitespace, short."""
    return 0 < len(value) <= MAX_LABEL_VALUE_LEN and bool(_WRITABLE_VALUE.fullmatch(value)) \
        and usable_label_value(value)


@dataclass(frozen=True)
class HeldChange:
    key: str
    old: str | None
    new: str | None
    tasks: tuple[str, ...]  # running task ids that this change would stop
    reason: str


@dataclass(frozen=True)
class NodeLabelPlan:
    node_id: str
    hostname: str
    set: Mapping[str, str] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    held: tuple[HeldChange, ...] = ()
    skipped: str | None = None  # why nothing is planned (agent unreachable...)

    @property
    def empty(self) -> bool:
        return not self.set and not self.remove

    def apply_to(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The new label set when this plan is applied to ``labels`` (others kept)."""
        new = dict(labels)
        for k in self.remove:
            new.pop(k, None)
        new.update(self.set)
        return new


def _services_constraints(
    services: Iterable[SwarmService],
) -> dict[str, list[Constraint]]:
    out: dict[str, list[Constraint]] = {}
    for s in services:
        good, _ = parse_all(s.constraints)
        out[s.id] = good
    return out


# What to do about it: doctor checks the driver, NVML and the runtime the agent reads.
GPUS_UNREAD_FIX = "run swarmgpu doctor on the node and fix what it fails"


def gpus_unread_why(facts: NodeFacts) -> str:
    """Why a node's GPUs cannot be read (``NodeFacts.gpus_unread``), as label sync, audit
    and the map say it: the first error; the agent's others are logged each (sync.py)."""
    return f"its GPUs cannot be read: {facts.errors[0]}{and_more(len(facts.errors))}"


def plan_node_labels(
    node: SwarmNode,
    facts: NodeFacts | None,
    *,
    services: Sequence[SwarmService] = (),
    tasks: Sequence[SwarmTask] = (),
    prefix: str = DEFAULT_PREFIX,
    allow_disruptive: bool = False,
    facts_error: str | None = None,
    never: Callable[[str], bool] | None = None,
) -> NodeLabelPlan:
    """Compare the node's labels with what its facts call for.

    ``facts`` None means the agent could not be read: nothing changes (a missing
    agent must never turn into removed labels, which would stop running tasks). Nor
    do facts whose source could not list the GPUs (``NodeFacts.gpus_unread``): they
    say nothing of the node's GPUs, and count=0 would stop the same tasks.
    A change that would make a running task on this node violate its own constraints
    (its spec's, which Swarm's constraint enforcer reads) or its service's is held back
    unless ``allow_disruptive``.
    ``never``: the keys no node ever carries (the manager's ``keys.never_on_a_node``),
    removed from the node even with no facts: they say nothing of its GPUs, and one left
    there (a hand-set renewal label) keeps swarmgpu's own tasks off the node. The
    skipped plan then removes them alone, under the same guard.
    """
    skipped: str | None = None
    if facts is None:
        skipped = facts_error or "no facts from the agent"
    elif facts.gpus_unread:
        skipped = f"{gpus_unread_why(facts)}; fix: {GPUS_UNREAD_FIX}"
    if facts is None or skipped is not None:
        strays = tuple(sorted(k for k in node.labels if never is not None and never(k)))
        if not strays:
            return NodeLabelPlan(node.id, node.hostname, skipped=skipped)
        to_set: dict[str, str] = {}
        to_remove = strays
    else:
        want = desired_labels(facts, prefix)
        have = label_sync_labels(node.labels, prefix)
        to_set = {k: v for k, v in want.items() if have.get(k) != v}
        to_remove = tuple(sorted(k for k in have if k not in want))
    if not to_set and not to_remove:
        return NodeLabelPlan(node.id, node.hostname)

    # A job's task has desired state "complete" while it runs, and one in its restart
    # delay "ready" (on its node already): Swarm's constraint enforcer rejects every task
    # whose desired state is from "assigned" up to "complete".
    running = [
        t for t in tasks
        if t.node_id == node.id and t.desired_state in ("running", "complete", "ready")
        and t.state in ("running", "starting", "preparing", "assigned", "accepted", "ready")
    ]
    held: list[HeldChange] = []
    if running and not allow_disruptive:
        by_service = _services_constraints(services)
        # Swarm stops a task by its own spec's constraints; its service's (the next task's)
        # count too: an old task runs under the old ones while an update rolls out.
        checked = {t.id: (by_service.get(t.service_id, []),
                          parse_all(t.constraints or ())[0]) for t in running}
        before = dict(node.labels)
        changes: list[tuple[str, str | None]] = [(k, v) for k, v in to_set.items()]
        changes += [(k, None) for k in to_remove]
        for key, new in changes:
            after = dict(before)
            if new is None:
                after.pop(key, None)
            else:
                after[key] = new
            victims = tuple(
                t.id for t in running
                if any(node_labels_satisfy(c, before) and not node_labels_satisfy(c, after)
                       for c in checked[t.id])
            )
            if victims:
                held.append(
                    HeldChange(
                        key=key,
                        old=before.get(key),
                        new=new,
                        tasks=victims,
                        reason=(
                            f"would stop {len(victims)} running task(s) whose constraints "
                            f"use node.labels.{key}; set sync.allow_disruptive: true "
                            "or move those tasks first"
                        ),
                    )
                )
        held_keys = {h.key for h in held}
        to_set = {k: v for k, v in to_set.items() if k not in held_keys}
        to_remove = tuple(k for k in to_remove if k not in held_keys)
    return NodeLabelPlan(
        node.id, node.hostname, set=to_set, remove=to_remove, held=tuple(held),
        skipped=skipped,
    )
