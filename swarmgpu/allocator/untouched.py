"""What an untouched node is worth to the tasks only such a node can host.

A task that asks all of a node (every GPU, or more CPU than any other task leaves) fits
only a node nothing runs on. Where its CPU also rules out every class but one (openb's
8-GPU tasks of 128 cores fit G3's 128-core nodes only), breaking the last untouched
nodes of that class loses it for good: residual waste and stranding price a node by its
GPU shares and CPU, and see nothing lost there. FGD's fragmentation sees it (the
task cannot use any GPU of a node it no longer fits); here it is priced as the chance
that the node will be needed.

For such a shape, ``E`` is how many of its tasks are expected before the free GPU-milli
is used up at the workload's mix (weight x free / mean GPU-milli per task). With ``u``
untouched nodes left that can host it, the u-th is needed when ``u`` or more come, so
taking one costs P(Poisson(E) >= u) times its GPU-milli. While untouched nodes are many
that is nothing; it grows as the last ones go. Measured (docs/simulate.md, "A value for
untouched nodes"): x-cpubimodal, half the GPU pods at twice their CPU, was below FGD
without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from swarmgpu.allocator.fragmentation import MILLI, TaskShape, product_matches

# A node class: (GPU model, GPUs on the node, the node's CPU milli or None without CPU
# data), as ``Allocator.gpu_hosts`` keys them.
NodeClass = tuple[str, int, int | None]


@dataclass(frozen=True)
class Confined:
    """Tasks that only untouched nodes of some classes can host: how many are expected,
    and the least GPUs and CPU one of them asks (a node that keeps that much still
    hosts the smallest of them)."""

    expected: float
    num_gpu: int
    cpu_milli: int


# By the classes whose untouched nodes are the only hosts.
Groups = dict[tuple[NodeClass, ...], Confined]
# Per class: (GPUs, CPU milli, chance) of each group it is in (``untouched_values``).
Values = dict[NodeClass, tuple[tuple[int, int, float], ...]]
# By group: untouched nodes other tasks are expected to break (``other_breaks``,
# ``forced_breaks``).
Breaks = dict[tuple[NodeClass, ...], float]
VALUE_MIN = 1e-3  # a chance below this is no value (keeps scores cached for longer)


def poisson_at_least(mean: float, k: int) -> float:
    """P(N >= k) for N ~ Poisson(mean)."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if mean > 700:  # exp(-mean) underflows: sum the terms' logarithms
        return _poisson_at_least_log(mean, k)
    term = math.exp(-mean)
    below = term
    for i in range(1, k):
        term *= mean / i
        below += term
    return max(0.0, 1.0 - below)


def _poisson_at_least_log(mean: float, k: int) -> float:
    log_term, log_mean = -mean, math.log(mean)
    below = math.exp(log_term)
    for i in range(1, k):
        log_term += log_mean - math.log(i)
        below += math.exp(log_term)
    return max(0.0, 1.0 - below)


def exclusive_groups(shapes: Mapping[TaskShape, float], classes: Mapping[NodeClass, int],
                     free_total: int) -> Groups:
    """The shapes of whole GPUs that only an untouched node can host, and that their CPU
    confines to some of the classes with the GPUs they ask, grouped by those classes:
    their expected count before ``free_total`` GPU-milli is used at the mix of
    ``shapes`` (weights). ``classes`` are the cluster's node classes (any value).

    A node is "whole" for a shape when any task breaks it for that shape: one GPU taken
    leaves too few, or the smallest CPU any task asks leaves too little. A shape some
    used node could still host is left out (using a node then loses it nothing); so is
    one that fits every class with its GPUs (ordinary multi-GPU tasks: what packing the
    used nodes first keeps whole already, and a claim there cost the default workload)."""
    return _groups(shapes, classes, free_total, exclusive=True)


def whole_groups(shapes: Mapping[TaskShape, float], classes: Mapping[NodeClass, int],
                 free_total: int) -> Groups:
    """As ``exclusive_groups``, with the shapes every class of their GPUs hosts kept in:
    every shape of whole GPUs that only an untouched node can host. The scorer's score
    reads it with ``SwarmScorer.whole_untouched`` set (main's rule since stop 82); the
    roll-out's "covered" leaf prices broken nodes by it."""
    return _groups(shapes, classes, free_total, exclusive=False)


def _groups(shapes: Mapping[TaskShape, float], classes: Mapping[NodeClass, int],
            free_total: int, *, exclusive: bool) -> Groups:
    gpu = [(s, w) for s, w in shapes.items() if s.num_gpu > 0 and s.gpu_milli > 0 and w > 0]
    per_task = sum(w * s.num_gpu * s.gpu_milli for s, w in gpu)
    if per_task <= 0 or free_total <= 0:
        return {}
    cpus = [s.cpu_milli for s in shapes if s.cpu_milli > 0]
    least_cpu = min(cpus) if cpus else 1
    groups: Groups = {}
    for s, w in gpu:
        if s.gpu_milli < MILLI:
            continue
        sized = [k for k in classes if k[1] >= s.num_gpu and product_matches(k[0], s.products)]
        hosts = [k for k in sized if k[2] is None or k[2] >= s.cpu_milli]
        if not hosts or (exclusive and len(hosts) == len(sized)):
            continue
        whole = [k for k in hosts if k[1] - 1 < s.num_gpu
                 or (k[2] is not None and k[2] - least_cpu < s.cpu_milli)]
        if len(whole) < len(hosts):
            continue
        key = tuple(sorted(whole, key=str))
        expected = w * free_total / per_task
        got = groups.get(key)
        groups[key] = Confined(expected, s.num_gpu, s.cpu_milli) if got is None else Confined(
            got.expected + expected, min(got.num_gpu, s.num_gpu),
            min(got.cpu_milli, s.cpu_milli))
    return groups


def other_breaks(groups: Groups, before: Mapping[NodeClass, int],
                 after: Mapping[NodeClass, int], placed: int, free_total: int) -> Breaks:
    """Per group, how many of its untouched nodes other tasks are expected to break
    before ``free_total`` GPU-milli is used: the group's untouched nodes lost while the
    last ``placed`` GPU-milli went (counts ``before`` and ``after``), at that rate over
    ``free_total``, less the group's own expected tasks (they took some of those). The
    scorer's own choices at the workload's mix, read back; empty when nothing was
    placed (releases)."""
    if placed <= 0 or free_total <= 0:
        return {}
    out: Breaks = {}
    for key, c in groups.items():
        lost = sum(before.get(k, 0) for k in key) - sum(after.get(k, 0) for k in key)
        b = lost * free_total / placed - c.expected
        if b > 0:
            out[key] = b
    return out


def forced_breaks(shapes: Mapping[TaskShape, float], classes: Mapping[NodeClass, int],
                  free_total: int, groups: Groups) -> Breaks:
    """Per group, a bound from the mix on its untouched nodes that other tasks must
    break, whatever the price: the tasks that only the group's classes host (GPUs,
    model and CPU), expected before ``free_total`` GPU-milli is used at the mix of
    ``shapes``, in nodes: as many to a node as fit one (a 4-GPU task of 120 cores is
    one to a 128-core node). The group's own shapes are left out (E counts them)."""
    gpu = [(s, w) for s, w in shapes.items() if s.num_gpu > 0 and s.gpu_milli > 0 and w > 0]
    per_task = sum(w * s.num_gpu * s.gpu_milli for s, w in gpu)
    if per_task <= 0 or free_total <= 0 or not groups:
        return {}
    own = {k for key in groups for k in key}
    cpus = [s.cpu_milli for s in shapes if s.cpu_milli > 0]
    least_cpu = min(cpus) if cpus else 1
    out: Breaks = {}
    for s, w in gpu:
        hosts = {k for k in classes if k[1] >= s.num_gpu and product_matches(k[0], s.products)
                 and (k[2] is None or k[2] >= s.cpu_milli)}
        if not hosts or not hosts <= own:
            continue
        whole = all(k[1] - 1 < s.num_gpu or (k[2] is not None and k[2] - least_cpu < s.cpu_milli)
                    for k in hosts)  # as ``_groups``: then it is the group's own
        nodes = w * free_total / per_task / max(1, min(_per_node(s, k) for k in hosts))
        for key in groups:
            if hosts <= set(key) and not (whole and hosts == set(key)):
                out[key] = out.get(key, 0.0) + nodes
    return out


def _per_node(s: TaskShape, k: NodeClass) -> int:
    """How many tasks of shape ``s`` one node of class ``k`` holds."""
    fit = k[1] // s.num_gpu if s.gpu_milli >= MILLI else k[1] * (MILLI // s.gpu_milli)
    if k[2] is not None and s.cpu_milli > 0:
        fit = min(fit, k[2] // s.cpu_milli)
    return fit


def untouched_values(groups: Groups, untouched: Mapping[NodeClass, int],
                     breaks: Mapping[tuple[NodeClass, ...], float] | None = None) -> Values:
    """Per class, each group's chance that taking one of its untouched nodes loses a
    task: P(Poisson(E) >= u), with ``u`` the group's untouched nodes. With ``breaks``
    (``other_breaks`` or ``forced_breaks``: B nodes other tasks take), both streams draw on
    the ``u`` nodes: the u-th is needed when E + B's Poisson count reaches ``u``, and
    the one then left without is the group's task with chance E / (E + B)."""
    out: dict[NodeClass, list[tuple[int, int, float]]] = {}
    for key, c in groups.items():
        u = sum(untouched.get(k, 0) for k in key)
        if not u:
            continue
        b = breaks.get(key, 0.0) if breaks else 0.0
        p = poisson_at_least(c.expected, u) if not b else (
            poisson_at_least(c.expected + b, u) * c.expected / (c.expected + b))
        if p <= VALUE_MIN:
            continue
        for k in key:
            out.setdefault(k, []).append((c.num_gpu, c.cpu_milli, p))
    return {k: tuple(v) for k, v in out.items()}


def loss(entries: tuple[tuple[int, int, float], ...], gpus: int, whole_left: int,
         cpu_left: int | None) -> float:
    """GPU-milli a placement is expected to lose on an untouched node of ``gpus`` GPUs
    that leaves it ``whole_left`` whole GPUs and ``cpu_left`` CPU (None: no CPU data):
    the chances of the groups whose smallest task it no longer hosts (at most 1), times
    the node's GPU-milli."""
    chance = sum(p for n, cpu, p in entries
                 if whole_left < n or (cpu_left is not None and cpu_left < cpu))
    return min(1.0, chance) * gpus * MILLI
