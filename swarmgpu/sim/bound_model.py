"""The bound's model: node types, pod classes, share patterns and the linear program.

``sim.bound`` solves it; docs/simulate.md ("The upper bound") derives why its optimum
bounds every placement. Pure Python, no solver here: the model is plain columns and
rows, so the weak-duality certificate (``certify``) is checked in integers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from swarmgpu.allocator.fragmentation import MILLI, product_matches
from swarmgpu.allocator.values import NodeSpec
from swarmgpu.sim.trace import TracePod

# Share patterns enumerated for the integer program at most; past that only the linear
# bound (by column generation) is computed.
PATTERN_LIMIT = 20_000
# What the model charges per forced pod it leaves out (GPU-milli): far above what placing
# one pod can cost the rest (at most the GPUs, CPU and memory it takes), so the optimum
# leaves one out only where they cannot all be placed.
SHORT_COST = 1_000_000


@dataclass(frozen=True)
class NodeType:
    """Nodes alike in everything the bound reads: GPU models, GPU count, CPU, memory."""

    products: tuple[str, ...]
    gpus: int
    cpu_milli: int | None
    memory_mib: int | None
    count: int


@dataclass(frozen=True)
class PodClass:
    """GPU pods alike in everything the bound reads. ``share`` > 0: a share of one GPU
    (``num_gpu`` 1); else ``num_gpu`` whole GPUs. ``value``: the GPU-milli the replay
    counts as allocated when one is placed (``TracePod.total_gpu_milli``)."""

    num_gpu: int
    share: int
    cpu_milli: int
    memory_mib: int
    products: tuple[str, ...]
    value: int
    count: int
    forced: int = 0  # pods of the class every solution must place (the online bound)

    def fits_type(self, t: NodeType) -> bool:
        """Whether one pod of this class can be placed on one empty node of type ``t``."""
        if t.gpus < self.num_gpu:
            return False
        if t.cpu_milli is not None and self.cpu_milli > t.cpu_milli:
            return False
        if t.memory_mib is not None and self.memory_mib > t.memory_mib:
            return False
        if not self.num_gpu:  # a forced CPU-only pod: any node with the room
            return True
        # A node of several models: any matching model is enough (a relaxation).
        return any(product_matches(p, self.products) for p in t.products)


def node_types(nodes: Iterable[NodeSpec], cpu_nodes: bool = False) -> list[NodeType]:
    """The GPU nodes grouped by (models, GPU count, CPU, memory); nodes without a GPU
    can hold no GPU pod and are left out, unless ``cpu_nodes`` (forced CPU-only pods
    may sit there)."""
    c = Counter((tuple(sorted({g.product for g in n.gpus})), len(n.gpus), n.cpu_milli,
                 n.memory_mib) for n in nodes if n.gpus or cpu_nodes)
    return [NodeType(p, g, cpu, mem, k) for (p, g, cpu, mem), k in
            sorted(c.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0,
                                              kv[0][3] or 0))]


ClassKey = tuple[int, int, int, int, tuple[str, ...], int]


def class_key(p: TracePod) -> ClassKey:
    """(GPUs, share, CPU, memory, gpu_spec, value): what the bound reads of a pod."""
    if p.total_gpu_milli <= 0:
        return (0, 0, p.cpu_milli, p.memory_mib, (), 0)
    share = p.gpu_milli if 0 < p.gpu_milli < MILLI else 0
    return (1 if share else p.num_gpu, share, p.cpu_milli, p.memory_mib, p.gpu_spec,
            p.total_gpu_milli)


def pod_classes(pods: Iterable[TracePod], forced: Iterable[TracePod] = ()) -> list[PodClass]:
    """The GPU pods grouped by shape. CPU-only pods add no GPU allocation and are left
    out (a placement may always leave them unplaced), except those in ``forced``: the
    pods every solution must place (a sub-multiset of ``pods``), whose CPU and memory
    are then taken (docs/simulate.md, "The online bound")."""
    c: Counter[ClassKey] = Counter(class_key(p) for p in pods if p.total_gpu_milli > 0)
    f: Counter[ClassKey] = Counter(class_key(p) for p in forced)
    for k, n in f.items():
        if n > c[k] and k[0]:
            raise ValueError(f"{n} forced pod(s) of class {k}, but only {c[k]} arrived")
        if not k[0]:
            c[k] = n  # forced CPU-only pods: only they matter
    return [PodClass(*k, count=n, forced=f[k]) for k, n in sorted(c.items())]


def share_caps(classes: Sequence[PodClass]) -> dict[int, int]:
    """Share size -> most pods of that size one GPU can hold (by capacity and by count)."""
    n: Counter[int] = Counter()
    for c in classes:
        if c.share:
            n[c.share] += c.count
    return {s: min(k, MILLI // s) for s, k in sorted(n.items(), reverse=True)}


def maximal_patterns(caps: dict[int, int], limit: int = PATTERN_LIMIT
                     ) -> list[tuple[int, ...]] | None:
    """Every maximal set of shares one GPU can hold, as counts per size in ``caps``'
    order (no further share of an available size fits). None past ``limit``."""
    sizes = list(caps)
    out: list[tuple[int, ...]] = []
    cur: list[int] = []

    def rec(i: int, room: int) -> bool:
        if i == len(sizes):
            if not any(s <= room and cur[j] < caps[s] for j, s in enumerate(sizes)):
                out.append(tuple(cur))
            return len(out) <= limit
        s = sizes[i]
        for k in range(min(caps[s], room // s), -1, -1):
            cur.append(k)
            ok = rec(i + 1, room - k * s)
            cur.pop()
            if not ok:
                return False
        return True

    return out if rec(0, MILLI) else None


def node_patterns(gpus: int, sizes: Sequence[int]) -> list[tuple[tuple[int, ...], int]]:
    """Ways one node of ``gpus`` GPUs can hold multi-GPU pods: (count per size in
    ``sizes``, GPUs left for single GPUs and shares)."""
    out: list[tuple[tuple[int, ...], int]] = []

    def rec(i: int, left: int, cur: tuple[int, ...]) -> None:
        if i == len(sizes):
            out.append((cur, left))
            return
        for k in range(left // sizes[i] + 1):
            rec(i + 1, left - k * sizes[i], (*cur, k))

    rec(0, gpus, ())
    return out


@dataclass
class Model:
    """max cost.x, rows.x <= rhs, 0 <= x <= upper; x integer where ``integer``.

    Columns are kept as (row, coefficient) lists; every coefficient, bound and cost is
    an integer, so a dual vector's bound is checked exactly (``certify``)."""

    rhs: list[int] = field(default_factory=list)
    row_names: list[str] = field(default_factory=list)
    cost: list[int] = field(default_factory=list)
    upper: list[int] = field(default_factory=list)
    cols: list[list[tuple[int, int]]] = field(default_factory=list)
    col_names: list[str] = field(default_factory=list)

    def row(self, name: str, rhs: int) -> int:
        self.rhs.append(rhs)
        self.row_names.append(name)
        return len(self.rhs) - 1

    def col(self, name: str, cost: int, upper: int, entries: list[tuple[int, int]]) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        self.cols.append(entries)
        self.col_names.append(name)
        return len(self.cost) - 1


@dataclass
class Built:
    """The model with what column generation and the certificate need to find again."""

    model: Model
    types: list[NodeType]
    classes: list[PodClass]
    sizes: list[int]  # share sizes, the order of a pattern's counts
    caps: dict[int, int]
    free_row: dict[int, int]  # type index -> its row of GPUs left for singles and shares
    slot_row: dict[tuple[int, int], int]  # (type index, share size) -> its slot row
    patterns: dict[tuple[int, tuple[int, ...]], int] = field(default_factory=dict)
    short_cols: list[int] = field(default_factory=list)  # forced pods left out, per class
    short: float = 0.0  # forced pods the last LP solution left out (``linear_bound``)

    def add_pattern(self, t: int, pattern: tuple[int, ...]) -> int | None:
        """The column of ``pattern`` on type ``t`` (None: it holds no share the type can
        take, or it is there already)."""
        key = (t, pattern)
        if key in self.patterns:
            return None
        entries = [(self.free_row[t], 1)]
        entries += [(self.slot_row[(t, s)], -k) for s, k in zip(self.sizes, pattern, strict=True)
                    if k and (t, s) in self.slot_row]
        if len(entries) == 1:
            return None
        nt = self.types[t]
        col = self.model.col(f"y[{t},{pattern}]", 0, nt.count * nt.gpus, entries)
        self.patterns[key] = col
        return col


def build(nodes: Iterable[NodeSpec], pods: Iterable[TracePod],
          forced: Sequence[TracePod] = (), values: bool = True) -> Built:
    """The model for these nodes and pods, without share pattern columns (``add_pattern``
    adds them: some by column generation, or those the integer program needs).
    ``forced``: pods of ``pods`` every solution must place (the online bound).
    ``values`` False: placed pods are worth nothing, only forced ones left out cost (its
    optimum below 0 proves that no solution holds them all)."""
    classes = pod_classes(pods, forced)
    return build_types(node_types(nodes, any(not c.num_gpu for c in classes)), classes,
                       values)


def build_like(b: Built) -> Built:
    """The same model as ``b`` (the same rows, in the same order), without patterns."""
    return build_types(b.types, b.classes)


def build_types(types: list[NodeType], classes: list[PodClass], values: bool = True) -> Built:
    caps = share_caps(classes)
    m = Model()
    b = Built(m, types, classes, list(caps), caps, {}, {})
    multi = sorted({c.num_gpu for c in classes if c.num_gpu > 1 and not c.share})
    avail = {i: m.row(f"avail[{i}]", c.count) for i, c in enumerate(classes)}
    # A forced class: -sum_t x(t,c) - short(c) <= -forced(c), a row of the <= form the
    # certificate reads. short(c), the forced pods left out, costs SHORT_COST each: any
    # solution placing them all has short = 0 and its own value, so the optimum still
    # bounds it; short > 0 at the optimum says they do not all fit (``Bound.short``).
    must = {i: m.row(f"forced[{i}]", -c.forced) for i, c in enumerate(classes) if c.forced}
    b.short_cols = [m.col(f"short[{i}]", -SHORT_COST, classes[i].forced, [(r, -1)])
                    for i, r in must.items()]
    for t, nt in enumerate(types):
        fit = [i for i, c in enumerate(classes) if c.fits_type(nt)]
        if not fit:
            continue
        nodes_row = m.row(f"nodes[{t}]", nt.count)
        b.free_row[t] = m.row(f"free[{t}]", 0)
        sizes_here = sorted({classes[i].share for i in fit if classes[i].share}, reverse=True)
        for s in sizes_here:
            b.slot_row[(t, s)] = m.row(f"slot[{t},{s}]", 0)
        ks = [k for k in multi if k <= nt.gpus and any(classes[i].num_gpu == k and
                                                      not classes[i].share for i in fit)]
        multi_row = {k: m.row(f"multi[{t},{k}]", 0) for k in ks}
        cpu_row = m.row(f"cpu[{t}]", nt.count * nt.cpu_milli) if nt.cpu_milli is not None \
            else None
        mem_row = m.row(f"mem[{t}]", nt.count * nt.memory_mib) \
            if nt.memory_mib is not None else None
        for counts, left in node_patterns(nt.gpus, ks):
            entries = [(nodes_row, 1), (b.free_row[t], -left)]
            entries += [(multi_row[k], -n) for k, n in zip(ks, counts, strict=True) if n]
            m.col(f"v[{t},{counts}]", 0, nt.count, [e for e in entries if e[1]])
        for i in fit:
            c = classes[i]
            entries = [(avail[i], 1)]
            if i in must:
                entries.append((must[i], -1))
            if c.share:
                entries.append((b.slot_row[(t, c.share)], 1))
            elif c.num_gpu == 1:
                entries.append((b.free_row[t], 1))
            elif c.num_gpu:
                entries.append((multi_row[c.num_gpu], 1))
            if cpu_row is not None and c.cpu_milli:
                entries.append((cpu_row, c.cpu_milli))
            if mem_row is not None and c.memory_mib:
                entries.append((mem_row, c.memory_mib))
            m.col(f"x[{t},{i}]", c.value if values else 0, c.count, entries)
    return b
