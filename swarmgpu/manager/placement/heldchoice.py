"""A hold's GPUs on the cluster allocator (``placement.nominated``'s ``Holds``, the
rebalancer's ``Context``): the ones held and free, as a Choice that counts them used once
committed (wholly free GPUs, ``held_choice``; a share of each, ``share_choice``), and what
a hold keeps from a demand, in the words a demand is described by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from swarmgpu.allocator.fragmentation import MILLI
from swarmgpu.allocator.mig import MigChoice, pick_mig_device
from swarmgpu.allocator.values import Choice, Demand
from swarmgpu.manager.placement.cluster import ClusterAllocator
from swarmgpu.manager.services.requests import matches_products


def held_words(cluster: ClusterAllocator, c: Choice) -> str:
    """What ``c`` holds, as a demand is described ("2 GPUs", "0.50 of a GPU", "1 GPU
    and 0.25 of a GPU"): a share of a GPU is not said as the whole of one."""
    state = cluster.alloc.nodes.get(c.node)
    caps = [state.spec.gpus[i].capacity_milli if state is not None else MILLI
            for i in c.gpus]
    whole = sum(1 for m, cap in zip(c.milli, caps, strict=True) if m >= cap)
    parts = sorted((m for m, cap in zip(c.milli, caps, strict=True) if m < cap),
                   reverse=True)
    said = [f"{whole} GPU{'s' if whole > 1 else ''}"] if whole else []
    said += [f"{m / MILLI:.2f} of a GPU" for m in parts]
    return " and ".join(said)


def migs_keep_off(cluster: ClusterAllocator, node: str, migs: Sequence[str],
                   d: Demand) -> bool:
    """``d``, a MIG request, gets no device on ``node`` now but would with ``migs`` (held
    MIG devices) free, its CPU and memory left there (not a drained or down node)."""
    state, facts = cluster.alloc.nodes.get(node), cluster.facts.get(node)
    if d.mig_profile is None or state is None or facts is None or not cluster.alloc.fits(
            state, Demand(cpu_milli=d.cpu_milli, memory_mib=d.memory_mib,
                          node_labels=d.node_labels)):
        return False
    gpus = [g for g in facts.gpus if matches_products(g.product, d.products)]
    taken = cluster.assigned_mig.get(node, set())
    try:
        return not isinstance(pick_mig_device(gpus, d.mig_profile, taken), MigChoice) \
            and isinstance(pick_mig_device(gpus, d.mig_profile, taken - set(migs)), MigChoice)
    except ValueError:  # (a malformed profile: its request said so already)
        return False


def mig_words(cluster: ClusterAllocator, node: str, migs: Sequence[str]) -> str:
    """``migs`` by profile ("1g.10gb MIG device", "2 1g.10gb MIG devices")."""
    facts = cluster.facts.get(node)
    profile = {m.uuid: m.profile for g in (facts.gpus if facts is not None else ())
               for m in g.mig_devices}
    count: dict[str, int] = {}
    for u in migs:
        count[profile.get(u, "")] = count.get(profile.get(u, ""), 0) + 1
    return " and ".join(f"{k} MIG device" if c == 1 and k else
                        f"{c} {k} MIG devices" if k else
                        f"{c} MIG device{'s' if c > 1 else ''}" for k, c in sorted(count.items()))


def held_choice(cluster: ClusterAllocator, node: str, held: Callable[[str], bool],
                explanation: str) -> Choice | None:
    """The GPUs of ``node`` that ``held`` says (by UUID) are held and are wholly free on
    ``cluster`` (not MIG, some share free, all of it), as a Choice that counts them used
    once committed; None when there is none (or the node is not known)."""
    state, facts = cluster.alloc.nodes.get(node), cluster.facts.get(node)
    if state is None or facts is None:
        return None
    gpus = tuple(i for i, g in enumerate(facts.gpus)
                 if i < len(state.free) and not g.mig_enabled and state.free[i] > 0
                 and state.free[i] == state.spec.gpus[i].capacity_milli and held(g.uuid))
    if not gpus:
        return None
    return Choice(node=node, gpus=gpus, milli=tuple(state.free[i] for i in gpus), score=0.0,
                  explanation=explanation, cpu_milli=0, memory_mib=0)


def share_choice(cluster: ClusterAllocator, node: str, milli: Mapping[str, int],
                 explanation: str) -> Choice | None:
    """``milli`` (GPU uuid -> the share held of it) of ``node``'s GPUs, as much of each as
    is free on ``cluster`` (a GPU in MIG mode is none: the allocator counts its devices
    by profile, not by UUID), as a Choice that counts them used once committed; None when
    nothing of them is free (or the node is not known)."""
    state, facts = cluster.alloc.nodes.get(node), cluster.facts.get(node)
    if state is None or facts is None:
        return None
    take = [(i, min(milli[g.uuid], state.free[i])) for i, g in enumerate(facts.gpus)
            if i < len(state.free) and not g.mig_enabled and g.uuid in milli]
    take = [(i, m) for i, m in take if m > 0]
    if not take:
        return None
    return Choice(node=node, gpus=tuple(i for i, _ in take), milli=tuple(m for _, m in take),
                  score=0.0, explanation=explanation, cpu_milli=0, memory_mib=0)
