"""The allocator's value types: a node and its GPUs as the allocator sees them, what one
task asks for (``Demand``), what it gets (``Choice``) or why not (``Unplaceable``), and a
node's free capacity during a replay or a cycle (``NodeState``, which scorers read)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from swarmgpu.allocator.fragmentation import MILLI, TaskShape

PairScore = Callable[[int, int], int]
TOPOLOGIES = ("any", "nvlink", "numa")


@dataclass(frozen=True)
class GpuSpec:
    index: int
    product: str
    memory_mib: int
    capacity_milli: int = MILLI
    numa_node: int | None = None
    healthy: bool = True
    mig_enabled: bool = False


@dataclass(frozen=True)
class NodeSpec:
    """A node as the allocator sees it. ``cpu_milli``/``memory_mib`` None = unconstrained."""

    name: str
    gpus: tuple[GpuSpec, ...] = ()
    cpu_milli: int | None = None
    memory_mib: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    pair_score: PairScore | None = None  # link score between GPU indices, if known
    # Nodes with the same ``shape`` (GPUs, links) answer alike in the same state: the
    # allocator scores one of them per state. None: the node is its own shape.
    shape: int | None = None


@dataclass(frozen=True)
class Demand:
    """What one task asks for. ``gpu_milli`` (1..999) is a share of ONE GPU."""

    num_gpu: int = 0
    gpu_milli: int = 0
    min_memory_mib: int = 0
    products: tuple[str, ...] = ()
    topology: str = "any"
    cpu_milli: int = 0
    memory_mib: int = 0
    mig_profile: str | None = None
    node_labels: tuple[tuple[str, str], ...] = ()  # required label values (zone filters)

    def __hash__(self) -> int:
        # Kept on the instance: a demand keys the allocator's memos on every decision (a
        # dataclass hash re-hashes every field on every lookup).
        got: int | None = self.__dict__.get("_hash")
        if got is None:
            got = self.__dict__["_hash"] = hash(
                (self.num_gpu, self.gpu_milli, self.min_memory_mib, self.products,
                 self.topology, self.cpu_milli, self.memory_mib, self.mig_profile,
                 self.node_labels))
        return got

    def __getstate__(self) -> dict[str, object]:
        # Without the kept hash: another process hashes strings with another seed.
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def __post_init__(self) -> None:
        if self.num_gpu < 0 or self.gpu_milli < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"demand {self}: counts must not be negative")
        if self.gpu_milli and not 0 < self.gpu_milli < MILLI:
            raise ValueError(
                f"gpu_milli={self.gpu_milli}: a share must be 1..999; ask num_gpu for whole GPUs"
            )
        if self.gpu_milli and self.num_gpu:
            raise ValueError("set either num_gpu (whole GPUs) or gpu_milli (a share), not both")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology={self.topology!r}: use one of {', '.join(TOPOLOGIES)}")

    @property
    def gpus_wanted(self) -> int:
        return 1 if self.gpu_milli else self.num_gpu

    @property
    def milli_per_gpu(self) -> int:
        return self.gpu_milli or (MILLI if self.num_gpu else 0)

    @property
    def total_gpu_milli(self) -> int:
        return self.gpus_wanted * self.milli_per_gpu

    def shape(self) -> TaskShape:
        return TaskShape(self.cpu_milli, self.milli_per_gpu, self.gpus_wanted, self.products)

    def describe(self) -> str:
        if self.mig_profile:
            what = f"a MIG {self.mig_profile} device"
        elif self.gpu_milli:
            what = f"{self.gpu_milli / MILLI:.2f} of a GPU"
        elif self.num_gpu:
            link = {"nvlink": " NVLink", "numa": " same-NUMA"}.get(self.topology, "")
            what = f"{self.num_gpu}{link} GPU{'s' if self.num_gpu > 1 else ''}"
        else:
            what = "no GPU"
        if self.min_memory_mib:
            what += f" >= {self.min_memory_mib / 1024:g} GiB"
        if self.products:
            what += f" ({'|'.join(self.products)})"
        return what


@dataclass(frozen=True)
class Choice:
    node: str
    gpus: tuple[int, ...]
    milli: tuple[int, ...]  # per chosen GPU
    score: float
    explanation: str
    cpu_milli: int = 0
    memory_mib: int = 0
    mig: object | None = None  # what the MIG picker returned, when delegated


@dataclass(frozen=True)
class Unplaceable:
    reason: str


MigPicker = Callable[[NodeSpec, tuple[int, ...], Demand], object | None]


class NodeState:
    """One node's spec and what is free on it now."""

    __slots__ = ("blocked", "capacity", "cpu_left", "free", "gid", "gkey", "mem_left",
                 "product", "rank", "simple", "spec")

    def __init__(self, spec: NodeSpec, rank: int) -> None:
        self.spec = spec
        self.rank = rank
        self.blocked = False  # holds what it holds, takes nothing new (down, drained)
        self.free = [g.capacity_milli if g.healthy else 0 for g in spec.gpus]
        self.capacity = sum(g.capacity_milli for g in spec.gpus)  # milli, healthy or not
        self.cpu_left = spec.cpu_milli
        self.mem_left = spec.memory_mib
        products = {g.product for g in spec.gpus}
        self.product = products.pop() if len(products) == 1 else ""
        self.simple = (
            spec.pair_score is None
            and len({(g.product, g.memory_mib, g.capacity_milli) for g in spec.gpus}) <= 1
            and all(g.healthy and not g.mig_enabled and g.numa_node is None for g in spec.gpus)
        )
        self.gkey: tuple[object, ...] = ()
        self.gid = -1  # the allocator's number for gkey (``Allocator._gid``)

    def group_key(self) -> tuple[object, ...]:
        if self.simple:
            g0 = self.spec.gpus[0] if self.spec.gpus else None
            sig = (self.product, g0.memory_mib if g0 else 0, len(self.spec.gpus),
                   tuple(sorted(self.spec.labels.items())))
            return (sig, self.blocked, self.cpu_left, self.mem_left, tuple(sorted(self.free)))
        who: object = ("shape", self.spec.shape) if self.spec.shape is not None \
            else ("node", self.spec.name)
        return (who, tuple(sorted(self.spec.labels.items())), self.blocked, self.cpu_left,
                self.mem_left, tuple(self.free))

    def free_total(self) -> int:
        return sum(self.free)


