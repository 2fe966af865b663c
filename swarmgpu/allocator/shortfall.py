"""What the node that came closest to a pending request is short of, in words.

``Allocator.explain_unplaceable`` picks the node; this says why it still does not fit.
A bare count ("has 0 free") read as "no GPU free" when the node had free GPUs the
request's memory or product filter turned away: the words name what is short.
Text only: nothing here decides a placement.
"""

from __future__ import annotations

from collections import Counter

from swarmgpu.allocator.fragmentation import MILLI, product_matches
from swarmgpu.allocator.values import Demand, GpuSpec, NodeState


def gpu_shortfall(node: NodeState, d: Demand, have: int) -> str:
    """Words for ``node``, which has ``have`` (< what ``d`` wants) GPUs that fit ``d``."""
    name = node.spec.name
    if not node.spec.gpus:
        return f"{name} has no GPUs"
    need = d.milli_per_gpu
    usable = [(g, f) for g, f in zip(node.spec.gpus, node.free, strict=True)
              if g.healthy and not g.mig_enabled]
    roomy = [g for g, f in usable if f >= need]
    if len(roomy) <= have:  # no filter turned one away: the count or the share is short
        if d.gpu_milli and not have:
            most = max((f for _, f in usable), default=0)
            return (f"{name} has no GPU with {need / MILLI:.2f} free "
                    f"(at most {most / MILLI:.2f} on one)")
        return f"{name} has {have} free"
    wants = []
    if any(g.memory_mib < d.min_memory_mib for g in roomy):
        wants.append(f"with {d.min_memory_mib / 1024:g} GiB")
    if any(not product_matches(g.product, d.products) for g in roomy):
        wants.append(f"matching {'|'.join(d.products)}")
    count = "no" if not have else f"only {have}"
    gpu = "GPUs" if have > 1 else "GPU"
    return f"{name} has {count} free {gpu} {' '.join(wants)} ({_kinds(roomy, bool(d.products))})"


def _kinds(roomy: list[GpuSpec], products: bool) -> str:
    """The free GPUs by size (and model, when the request names one)."""
    kinds = Counter((g.product if products else "", g.memory_mib) for g in roomy)
    words = {k: f"{k[0] + ' ' if k[0] else ''}{_gib(k[1])} GiB" for k in kinds}
    if len(kinds) == 1:
        return f"{len(roomy)} free, {words[next(iter(kinds))]} each"
    by_size = sorted(kinds, key=lambda k: (-k[1], k[0]))
    return f"{len(roomy)} free: " + ", ".join(f"{kinds[k]} of {words[k]}" for k in by_size)


def _gib(mib: int) -> str:
    # one decimal at most: nvidia-smi's 23034 MiB reads 22.5, 40960 reads 40
    return f"{mib / 1024:.1f}".removesuffix(".0")
