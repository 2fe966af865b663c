"""Decision time and quality of ``swarmgpu.allocator.topology`` on real and scaled nodes.

Nodes come from real ``nvidia-smi topo -m`` captures (tests/fixtures/SOURCES.md); 16-,
32- and 64-GPU nodes replicate a real 8-GPU board and join the boards by SYS (what a
multi-board host looks like), or are one NVSwitch domain (every pair NV18). Each case
marks a random share of the GPUs as used and asks for k GPUs, with and without a
``nvlink`` / ``numa`` restriction. Where C(free, k) is small the exhaustive optimum is
computed too, and the table says how close the choice came (score ratio, % optimal).

Run:  python benchmarks/bench_topology.py [--cases 200] [--seed 7] [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from math import comb
from pathlib import Path

from swarmgpu.allocator.topology import choose_gpu_set, set_score
from swarmgpu.core.model import is_nvlink, link_score

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELLS = re.compile(r"\t+|\s{2,}")
BRUTE_LIMIT = 20_000  # exhaustive only where C(free, k) is at most this


@dataclass(frozen=True)
class Node:
    name: str
    links: list[list[str]]
    numa: list[int]

    @property
    def n(self) -> int:
        return len(self.links)


def parse_topo(text: str) -> tuple[list[list[str]], list[int]]:
    """GPU-to-GPU links and NUMA node per GPU from ``nvidia-smi topo -m`` (minimal)."""
    lines = [_ANSI.sub("", ln).strip() for ln in text.splitlines()]
    header_at = next(i for i, ln in enumerate(lines) if ln.startswith("GPU0"))
    header = _CELLS.split(lines[header_at])
    n = sum(1 for h in header if re.fullmatch(r"GPU\d+", h))
    numa_col = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    links: list[list[str]] = []
    numa: list[int] = []
    for ln in lines[header_at + 1 :]:
        cells = _CELLS.split(ln)
        if not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        links.append(cells[1 : n + 1])
        value = cells[1 + numa_col] if numa_col is not None else ""
        numa.append(int(value) if value.isdigit() else 0)
    return links, numa


def load(path: Path) -> Node:
    links, numa = parse_topo(path.read_text())
    return Node(path.stem, links, numa)


def replicate(block: Node, boards: int, name: str) -> Node:
    """``boards`` copies of an 8-GPU board, joined by SYS, NUMA nodes kept apart."""
    n = block.n
    links = [["SYS"] * (n * boards) for _ in range(n * boards)]
    numa: list[int] = []
    for b in range(boards):
        for i in range(n):
            numa.append(block.numa[i] + b * (max(block.numa) + 1))
            for j in range(n):
                links[b * n + i][b * n + j] = block.links[i][j]
    return Node(name, links, numa)


def nvswitch(n: int) -> Node:
    links = [["X" if i == j else "NV18" for j in range(n)] for i in range(n)]
    return Node(f"nvswitch-{n}xNV18", links, [i * 2 // n for i in range(n)])


def nodes(fixtures: Path) -> list[Node]:
    topo = fixtures / "topology"
    cap = fixtures / "captures"
    dgx = load(topo / "topo_dgx_a100_nv12.txt")
    pix = load(topo / "topo_pcie_8x_rtx4090_pix_sys.txt")
    cube = load(cap / "nvsmi_topo_v100-sxm2-32gb-x8_hybrid-cube-mesh_drv580_vast-llamacpp.txt")
    dgx, pix, cube = (Node(nm, x.links, x.numa) for nm, x in
                      (("DGX-A100 NV12", dgx), ("8x4090 PIX/SYS", pix), ("V100 cube-mesh", cube)))
    out = [dgx, pix, cube]
    for boards in (2, 4, 8):
        g = 8 * boards
        out += [
            replicate(dgx, boards, f"{boards}xDGX-A100={g}"),
            replicate(pix, boards, f"{boards}x4090-PIX={g}"),
            replicate(cube, boards, f"{boards}xV100-cube={g}"),
        ]
    out += [nvswitch(32), nvswitch(64)]
    return out


def brute_best(free: list[int], k: int, ps: Callable[[int, int], int],
               allowed: Callable[[int, int], bool] | None) -> int | None:
    best: int | None = None
    for combo in combinations(free, k):
        if allowed and not all(allowed(a, b) for a, b in combinations(combo, 2)):
            continue
        s = set_score(combo, ps)
        if best is None or s > best:
            best = s
    return best


def run(node: Node, cases: int, rng: random.Random) -> dict[str, object]:
    def ps(a: int, b: int) -> int:
        return link_score(node.links[a][b])

    restrictions: dict[str, Callable[[int, int], bool] | None] = {
        "any": None,
        "nvlink": lambda a, b: is_nvlink(node.links[a][b]),
        "numa": lambda a, b: node.numa[a] == node.numa[b],
    }
    times: list[float] = []
    ratios: list[float] = []
    exact = 0
    compared = optimal = none = 0
    heur_checked = heur_same = 0
    for _ in range(cases):
        used_share = rng.uniform(0.0, 0.6)
        free = sorted(g for g in range(node.n) if rng.random() >= used_share)
        if not free:
            continue
        k = min(rng.choice((1, 2, 2, 4, 4, 8)), len(free))
        mode = rng.choice(("any", "any", "nvlink", "numa"))
        allowed = restrictions[mode]
        t0 = time.perf_counter()
        choice = choose_gpu_set(free, k, ps, all_gpus=range(node.n), allowed_pair=allowed)
        times.append(time.perf_counter() - t0)
        if choice is None:
            none += 1
        elif choice.exact:
            exact += 1
        if choice is not None and choice.exact:
            # How good is the fallback alone? Compare it where the exact answer is known.
            alone = choose_gpu_set(free, k, ps, all_gpus=range(node.n), allowed_pair=allowed,
                                   node_budget=0)
            heur_checked += 1
            heur_same += alone is not None and alone.score == choice.score
        if comb(len(free), k) <= BRUTE_LIMIT:
            best = brute_best(free, k, ps, allowed)
            got = None if choice is None else choice.score
            if (best is None) != (got is None):
                raise AssertionError(f"{node.name}: feasibility differs {free} k={k} {mode}")
            if best is not None and got is not None:
                compared += 1
                optimal += got == best
                ratios.append(got / best if best else 1.0)
    times.sort()
    return {
        "node": node.name,
        "gpus": node.n,
        "median_ms": 1000 * statistics.median(times),
        "p99_ms": 1000 * times[min(len(times) - 1, int(0.99 * len(times)))],
        "exact_pct": 100 * exact / max(1, len(times) - none),
        "compared": compared,
        "optimal_pct": 100 * optimal / compared if compared else float("nan"),
        "min_ratio": min(ratios) if ratios else float("nan"),
        "heur_pct": 100 * heur_same / heur_checked if heur_checked else float("nan"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--fixtures", type=Path, default=FIXTURES)
    args = p.parse_args()
    rng = random.Random(args.seed)
    print(f"{'node':24} {'gpus':>4} {'median ms':>9} {'p99 ms':>8} {'exact %':>7} "
          f"{'vs brute':>8} {'optimal %':>9} {'min ratio':>9} {'heur-only opt %':>15}")
    for node in nodes(args.fixtures):
        r = run(node, args.cases, rng)
        print(f"{r['node']!s:24} {r['gpus']!s:>4} {r['median_ms']:>9.2f} {r['p99_ms']:>8.2f} "
              f"{r['exact_pct']:>7.1f} {r['compared']!s:>8} {r['optimal_pct']:>9.1f} "
              f"{r['min_ratio']:>9.3f} {r['heur_pct']:>15.1f}")


if __name__ == "__main__":
    main()
