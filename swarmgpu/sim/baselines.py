"""Baseline policies re-implemented from their published descriptions (FGD ATC'23 and
its simulator): FGD, BestFit, GpuPacking, DotProd. Random lives in the replay loop.

Scores are what the originals compute, including integer truncation: equal integer
scores are broken by the run's fixed node order, which is part of their published
figures.
"""

from __future__ import annotations

from swarmgpu.allocator.fragmentation import MILLI, FragCache, TypicalTask
from swarmgpu.allocator.scorer import sigmoid
from swarmgpu.allocator.values import Demand, NodeState

MAX_SPEC_CPU = 128_000  # the simulator's normalisers
MAX_SPEC_GPU = 8_000


def _left(node: NodeState) -> int:
    return node.free_total()


class FgdScorer:
    """Fragmentation gradient descent: sigmoid of the fragmentation drop, 0..100, truncated."""

    name = "fgd"

    def __init__(self, workload: tuple[TypicalTask, ...], rounded: bool = True) -> None:
        self.frag = FragCache(workload)
        self.rounded = rounded

    def _score_after(self, node: NodeState, cpu: int, free: tuple[int, ...]) -> float:
        before = self.frag(node.product, node.cpu_left or 0, tuple(node.free))
        s = sigmoid((before - self.frag(node.product, cpu, free)) / 1000) * 100
        return float(int(s)) if self.rounded else s

    def _share(self, node: NodeState, d: Demand, cands: list[int]) -> tuple[float, int]:
        best, gpu = -1.0, -1
        cpu = (node.cpu_left or 0) - d.cpu_milli
        for i in cands:
            free = list(node.free)
            free[i] -= d.gpu_milli
            s = self._score_after(node, cpu, tuple(free))
            if gpu < 0 or s > best:
                best, gpu = s, i
        return best, gpu

    def score(self, node: NodeState, d: Demand) -> float:
        cpu = (node.cpu_left or 0) - d.cpu_milli
        if d.gpu_milli:
            return self._share(node, d, [i for i, f in enumerate(node.free) if f >= d.gpu_milli])[0]
        free = sorted(node.free)  # take whole GPUs, as the original's Sub does
        n = d.num_gpu
        for i, f in enumerate(free):
            if n and f >= MILLI:
                free[i] = 0
                n -= 1
        return self._score_after(node, cpu, tuple(free))

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        if d.gpu_milli:
            return (self._share(node, d, candidates)[1],)
        return None


class BestFitScorer:
    """Least CPU and GPU left after placement (weights 0.5/0.5 over the max node spec)."""

    name = "bestfit"

    def score(self, node: NodeState, d: Demand) -> float:
        cpu = ((node.cpu_left or 0) - d.cpu_milli) / MAX_SPEC_CPU
        gpu = (_left(node) - d.total_gpu_milli) / MAX_SPEC_GPU
        return float(int((1.0 - (0.5 * cpu + 0.5 * gpu)) * 100))

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        return None  # best-fit GPU: the allocator's default


class PackingScorer:
    """GPU packing: shared GPUs first, then free GPUs of used nodes, then empty nodes."""

    name = "packing"

    def score(self, node: NodeState, d: Demand) -> float:
        if d.gpus_wanted == 0:
            return 0.0
        full = sum(1 for f in node.free if f >= MILLI)
        if full == len(node.free):  # empty node: smaller ones first
            return float(max(100 // 3 - full, 0))
        need = d.milli_per_gpu
        take = sorted(f for f in node.free if f >= need)[: d.gpus_wanted]
        fresh = sum(1 for f in take if f >= MILLI)
        if fresh:
            return float(max(100 // 2 - fresh, 100 // 3))
        spare = sum(take) - d.total_gpu_milli
        return float(max(100 - spare // 10, 100 // 2))

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        return None


class DotProdScorer:
    """Least dot product of (CPU, GPU) free and request vectors, normalised by the max spec."""

    name = "dotprod"

    def score(self, node: NodeState, d: Demand) -> float:
        dot = ((node.cpu_left or 0) / MAX_SPEC_CPU) * (d.cpu_milli / MAX_SPEC_CPU) + (
            _left(node) / MAX_SPEC_GPU) * (d.total_gpu_milli / MAX_SPEC_GPU)
        return float(int((1.0 - dot / 2) * 100))

    def pick(self, node: NodeState, d: Demand, candidates: list[int]) -> tuple[int, ...] | None:
        return None
