"""The workload model: the mix of request shapes the placement policy expects.

FGD-class policies (and swarmgpu's residual-waste rule) score a node by what the
*coming* tasks will be able to use, so they need the mix of task shapes to expect. The
daemon learns it from the services it sees (``placement.workload: auto``): every
annotated service counts once per replica when first seen (and again when its request
changes), older observations decay so that the model follows the cluster (an
exponential window of ``window`` tasks), and departed services keep counting until
they decay. A new cluster starts from a documented prior (``PRIOR``, below) that weighs
as ``PRIOR_TASKS`` tasks, so a handful of early services cannot swing the policy.

What a service declares is someone else's input, so learning is bounded:

- one observation counts at most ``MAX_SERVICE_SHARE`` (10%) of the model's weight (the
  weight taken as at least ``PRIOR_TASKS``), however many replicas it declares, and a
  service whose request changes takes back what it counted before (and ages nothing: the
  same tasks, asking differently): one service moves the learned mix by at most 10%
  (total variation), so a ``gpus: "8"`` service with 1,000 replicas cannot make the mix
  "8 GPUs";
- a shape outside sane bounds (more than ``MAX_TASK_GPUS`` GPUs, ``MAX_TASK_CPU_MILLI``
  CPU, a share outside (0, 1]) is not learned; GPU products longer than
  ``MAX_PRODUCT_LEN`` characters, more than ``MAX_PRODUCTS`` of them, or with a character
  that is not printable or is ``|``, are dropped: the shape is learned as "any GPU";
- the stored model is at most ``MAX_STORED_BYTES`` (4 KiB): ``dumps`` drops the
  least-weighted shapes until it fits;
- a stored model that is corrupt, larger than ``MAX_LOAD_BYTES``, non-finite, or
  carries an insane shape is refused (``WorkloadError``; the daemon warns and uses the
  prior); one that weighs more than a window could hold is scaled down (its mix kept).

The model lives in Swarm itself (a label on the swarm object, ``<prefix>state.workload``)
so a restart or a new leader starts from it; no local state. ``placement.workload:
FILE`` pins a mix instead (YAML, ``load_file``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swarmgpu.allocator.fragmentation import TaskShape, TypicalTask, typical_tasks
from swarmgpu.core.yamlfile import read_yaml

MILLI = 1000
DEFAULT_WINDOW = 5000  # tasks: an observation's weight halves after ~0.69 x window tasks
PRIOR_TASKS = 50.0  # what the prior weighs, in tasks
MAX_SHAPES = 256  # shapes kept (by weight); bounds the label and the policy's tables
STATE_KEY = "state.workload"  # under the prefix, on the swarm object's labels
FORMAT = 1
MAX_SERVICE_SHARE = 0.10  # of the model's weight: what one observation may count
MAX_TASK_GPUS = 64  # beyond any node: a declared task that large is not learned
MAX_TASK_CPU_MILLI = 1024 * MILLI
MAX_PRODUCT_LEN = 64  # per product name or glob ("NVIDIA A100-SXM4-80GB" is 21)
MAX_PRODUCTS = 8
MAX_STORED_BYTES = 4096  # the swarm label ``dumps`` writes
MAX_LOAD_BYTES = 16384  # a stored text larger than this is refused unread
# An observation of at most this many tasks counts whole whatever the model weighs (the
# cap is MAX_SERVICE_SHARE of at least PRIOR_TASKS), so it needs no total of the weights.
_ALWAYS_WHOLE = MAX_SERVICE_SHARE * PRIOR_TASKS
_MAX_PENDING = 1024  # decays kept pending before every weight takes them (memory bound)

# The prior: the GPU task mix of Alibaba's openb GPU trace (cluster-trace-gpu-v2023, CC
# BY 4.0), measured from openb_pod_list_default.csv: of its 7,064 GPU pods, 55% ask one
# whole GPU, 44% a share of one (0.81, 0.47, 0.32, 0.65, 0.23 and 0.46 are the common
# sizes), 1% two, four or eight GPUs; CPU is the trace's median per kind (11.4 cores per
# whole GPU, 4 per share), until a GPU task is seen: then the prior asks, per GPU-milli,
# what the seen tasks ask (``WorkloadModel.current``). No GPU-model pins. Weights are pod
# counts.
PRIOR: tuple[tuple[TaskShape, float], ...] = (
    (TaskShape(cpu_milli=11400, gpu_milli=1000, num_gpu=1), 3911),
    (TaskShape(cpu_milli=4000, gpu_milli=810, num_gpu=1), 1078),
    (TaskShape(cpu_milli=4000, gpu_milli=470, num_gpu=1), 750),
    (TaskShape(cpu_milli=4000, gpu_milli=320, num_gpu=1), 328),
    (TaskShape(cpu_milli=4000, gpu_milli=650, num_gpu=1), 253),
    (TaskShape(cpu_milli=4000, gpu_milli=230, num_gpu=1), 140),
    (TaskShape(cpu_milli=4000, gpu_milli=460, num_gpu=1), 128),
    (TaskShape(cpu_milli=88000, gpu_milli=1000, num_gpu=8), 44),
    (TaskShape(cpu_milli=16200, gpu_milli=1000, num_gpu=2), 16),
    (TaskShape(cpu_milli=32200, gpu_milli=1000, num_gpu=4), 15),
)


class WorkloadError(ValueError):
    """A workload file or stored model swarmgpu cannot use, with the fix."""


def _order(s: TaskShape) -> tuple[int, int, int, tuple[str, ...]]:
    """``TaskShape``'s own order as a plain tuple (sorting by it skips the dataclass's
    generated comparisons, which cost most of ``typical`` on every arrival)."""
    return (s.cpu_milli, s.gpu_milli, s.num_gpu, s.products)


def _norm(shapes: Mapping[TaskShape, float]) -> tuple[TypicalTask, ...]:
    total = sum(shapes.values())
    if total <= 0:
        return ()
    return tuple(TypicalTask(s, w / total)
                 for s, w in sorted(shapes.items(), key=lambda kv: _order(kv[0])) if w > 0)


@dataclass(eq=False)
class WorkloadModel:
    """Decayed counts of task shapes; ``typical()`` is what the policy uses.

    Every new service decays every shape's weight. Doing that on each arrival cost most
    of the daemon's arrival path (issue 24), so the decays wait in ``_pending`` and a
    weight takes the ones it has not taken when it is read (``_fresh``), one by one in
    the order they came: the same float multiplications, so every weight is the very
    float an eager decay gives and no placement changes. ``weights`` hands out the dict
    with every decay taken."""

    window: int = DEFAULT_WINDOW
    _weights: dict[TaskShape, float] = field(default_factory=dict, repr=False)
    seen: float = 0.0  # tasks observed (not decayed), for display
    pinned: bool = False  # from a file or the whole trace: never learns
    source: str = "prior"
    _seen_keys: dict[str, str] = field(default_factory=dict, repr=False)
    # What each live service counted (shape, weight, _decayed then), to take it back
    # when its request changes; _decayed sums every observation's log-decay.
    _counted: dict[str, tuple[TaskShape, float, float]] = field(default_factory=dict,
                                                                repr=False)
    _decayed: float = field(default=0.0, repr=False)
    # typical() of the weights as they were at _version (the daemon's planner asks for
    # it on every arrival; it changes only when a service is counted or taken back).
    # The weights dict itself is part of the mark, so replacing it recomputes.
    _version: int = field(default=0, repr=False, compare=False)
    _typical: tuple[object, int, bool, tuple[TypicalTask, ...]] | None = field(
        default=None, repr=False, compare=False)
    # Decay factors not yet taken by every weight, oldest first; a shape in _since has
    # taken those before its index, one not in it none of them.
    _pending: list[float] = field(default_factory=list, repr=False, compare=False)
    _since: dict[TaskShape, int] = field(default_factory=dict, repr=False, compare=False)
    # The prior's shapes and weights as ``prior()`` set them (they decay with the rest:
    # exp(-_decayed) of these is left): ``current`` scales their CPU to what the tasks
    # seen so far ask. Empty for a loaded, file or whole-trace model.
    _prior: dict[TaskShape, float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def weights(self) -> dict[TaskShape, float]:
        """Shape -> decayed weight, every decay taken (the dict itself: a caller that
        changes it changes the model)."""
        self._settle()
        return self._weights

    @weights.setter
    def weights(self, value: dict[TaskShape, float]) -> None:
        self._weights = value
        self._pending.clear()
        self._since.clear()

    def _settle(self) -> None:
        """Every weight takes the decays it has not taken."""
        pending = self._pending
        if pending:
            since, prod = self._since, math.prod
            w = self._weights
            for s, v in w.items():
                w[s] = prod(pending[since.get(s, 0):], start=v)
            pending.clear()
            since.clear()

    def _fresh(self, shape: TaskShape) -> float | None:
        """``shape``'s weight with every decay taken (kept so), or None: not counted."""
        v = self._weights.get(shape)
        if v is None:
            return None
        n = len(self._pending)
        at = self._since.get(shape, 0)
        if at < n:
            v = self._weights[shape] = math.prod(self._pending[at:], start=v)
            self._since[shape] = n
        return v

    def _set(self, shape: TaskShape, v: float) -> None:
        self._weights[shape] = v
        if self._pending:
            self._since[shape] = len(self._pending)

    def _drop(self, shape: TaskShape) -> None:
        self._weights.pop(shape, None)
        self._since.pop(shape, None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkloadModel):
            return NotImplemented
        return (self.window, self.weights, self.seen, self.pinned, self.source,
                self._seen_keys, self._counted, self._decayed) == (
            other.window, other.weights, other.seen, other.pinned, other.source,
            other._seen_keys, other._counted, other._decayed)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    @classmethod
    def prior(cls, window: int = DEFAULT_WINDOW) -> WorkloadModel:
        m = cls(window=window)
        total = sum(w for _, w in PRIOR)
        m.weights = {s: PRIOR_TASKS * w / total for s, w in PRIOR}
        m._prior = dict(m._weights)
        return m

    @classmethod
    def fixed(cls, shapes: Iterable[TaskShape], source: str) -> WorkloadModel:
        """A pinned mix: the typical tasks of ``shapes`` (e.g. a whole trace)."""
        m = cls(pinned=True, source=source)
        m.weights = {t.shape: t.weight for t in typical_tasks(shapes)}
        return m

    # --- learning --------------------------------------------------------------
    def observe(self, key: str, signature: str, shape: TaskShape, count: int = 1) -> bool:
        """Count ``count`` tasks of ``shape`` for the service ``key`` once per
        ``signature`` (its request), at most ``MAX_SERVICE_SHARE`` of the model's
        weight; a shape that is not sane counts nothing. True when the model changed."""
        seen = self._seen_keys.get(key)
        if self.pinned or count <= 0 or seen == signature:
            return False
        if seen == "*":  # counted before a restart; its request is what it was then
            self._seen_keys[key] = signature
            return False
        self._seen_keys[key] = signature
        self._version += 1
        took_back = self._take_back(key)
        clean = sane_shape(shape)
        if clean is None:
            return took_back
        counted: float = count
        if count > _ALWAYS_WHOLE:
            total = sum(self.weights.values())
            counted = min(count, MAX_SERVICE_SHARE * max(total, PRIOR_TASKS))
        if not took_back:  # new tasks age the rest; a changed request replaces its own
            step = counted / max(1, self.window)
            if len(self._pending) >= _MAX_PENDING:
                self._settle()
            self._pending.append(math.exp(-step))
            self._decayed += step
        before = self._fresh(clean)
        self._set(clean, (0.0 if before is None else before) + counted)
        self._counted[key] = (clean, counted, self._decayed)
        self.seen += counted
        if len(self._weights) > MAX_SHAPES:
            keep = sorted(self.weights.items(), key=lambda kv: -kv[1])[:MAX_SHAPES]
            self.weights = dict(keep)
        return True

    def _take_back(self, key: str) -> bool:
        """Remove what ``key`` counted before (decayed as the rest since)."""
        prev = self._counted.pop(key, None)
        if prev is None:
            return False
        self._version += 1
        shape, w, at = prev
        now = self._fresh(shape)
        left = (0.0 if now is None else now) - w * math.exp(-(self._decayed - at))
        if left > 1e-9:
            self._set(shape, left)
        else:
            self._drop(shape)
        return True

    def mark_seen(self, key: str) -> None:
        """Count ``key`` as seen without counting it (it was, before a restart)."""
        self._seen_keys.setdefault(key, "*")

    def knows(self, key: str) -> bool:
        return key in self._seen_keys

    def known_count(self) -> int:
        return len(self._seen_keys)

    def forget_keys(self, live: Iterable[str]) -> None:
        """Drop the seen-marks of departed services (their counts stay and decay)."""
        keep = set(live)
        self._seen_keys = {k: v for k, v in self._seen_keys.items() if k in keep}
        self._counted = {k: v for k, v in self._counted.items() if k in keep}

    def typical(self) -> tuple[TypicalTask, ...]:
        """The shapes covering 95% of the weight, renormalised (FGD's typical pods); a
        pinned mix is used as given."""
        got = self._typical
        if (got is not None and got[0] is self._weights and got[1] == self._version
                and got[2] == self.pinned):
            return got[3]
        tasks = self._compute_typical()
        self._typical = (self._weights, self._version, self.pinned, tasks)
        return tasks

    def _compute_typical(self) -> tuple[TypicalTask, ...]:
        total = sum(self.weights.values())
        if total <= 0:
            return ()
        if self.pinned:
            return _norm(self.weights)
        ranked = sorted(self.current().items(), key=lambda kv: (-kv[1], kv[0]))
        chosen: dict[TaskShape, float] = {}
        covered = 0.0
        for s, w in ranked:
            if covered >= 0.95 * total:
                break
            chosen[s] = w
            covered += w
        return _norm(chosen)

    def current(self) -> dict[TaskShape, float]:
        """The weights the policy uses: ``weights``, with the prior's part asking, per
        GPU-milli, the CPU the tasks seen so far ask (the prior's own CPU, one trace's
        medians, until a GPU task is seen). The prior stands in for the mix of GPU
        shapes; CPU differs from cluster to cluster, and the policy's CPU terms
        (stranding, the reserve) read it from the first placements on: with openb's
        CPU, GPU tasks asking a tenth of it placed 0.2 points less, and a prior asking
        no CPU cost CPU-heavy workloads as much (docs/simulate.md, "The prior's CPU")."""
        weights = self.weights
        if not self._prior:
            return weights
        left = math.exp(-self._decayed)
        seen: dict[TaskShape, float] = {}
        for shape, w in weights.items():
            rest = w - self._prior.get(shape, 0.0) * left
            if rest > 1e-9 * w:
                seen[shape] = rest
        scale = _cpu_per_gpu_milli(seen)
        prior = _cpu_per_gpu_milli(self._prior)
        if scale is None or not prior:
            return weights
        scale /= prior
        for shape, w in self._prior.items():
            if shape in weights:  # not trimmed away (MAX_SHAPES)
                scaled = replace(shape, cpu_milli=round(shape.cpu_milli * scale))
                seen[scaled] = seen.get(scaled, 0.0) + w * left
        return seen

    # --- display and storage ---------------------------------------------------
    def describe(self, top: int = 8) -> list[dict[str, Any]]:
        return [_shape_dict(t.shape) | {"weight": round(t.weight, 4)}
                for t in sorted(self.typical(), key=lambda t: -t.weight)[:top]]

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "pinned": self.pinned, "tasks_seen": round(self.seen),
                "window": self.window, "shapes": len(self._weights), "top": self.describe()}

    def dumps(self) -> str:
        """Compact JSON for the swarm label, at most ``MAX_STORED_BYTES``: ``current``
        weights rounded (a restarted leader reads the prior's CPU as it was scaled), and
        the least-weighted shapes left out where they would not fit."""
        head = json.dumps({"v": FORMAT, "seen": round(self.seen), "w": []},
                          separators=(",", ":"))
        room = MAX_STORED_BYTES - len(head.encode())
        rows: list[str] = []
        for s, w in sorted(self.current().items(), key=lambda kv: (-kv[1], kv[0])):
            if w < 1e-3:
                break
            row = json.dumps([s.num_gpu, s.gpu_milli, s.cpu_milli, "|".join(s.products),
                              round(w, 3)], separators=(",", ":"))
            need = len(row.encode()) + (1 if rows else 0)
            if need > room:
                break  # this one and every lighter one stay out
            rows.append(row)
            room -= need
        return head[:-2] + ",".join(rows) + "]}"  # head ends with the empty list: []}

    @classmethod
    def loads(cls, text: str, window: int = DEFAULT_WINDOW) -> WorkloadModel:
        """A stored model, or ``WorkloadError`` (the caller warns and uses the prior) when
        it is not one ``dumps`` could have written: corrupt, huge, non-finite, or
        carrying a shape that is not sane."""
        if len(text.encode()) > MAX_LOAD_BYTES:
            raise WorkloadError(f"stored workload model is {len(text.encode())} bytes (more "
                                f"than {MAX_LOAD_BYTES}); the prior is used")
        try:
            raw = json.loads(text, parse_constant=_no_constant)
            if not isinstance(raw, dict) or raw.get("v") != FORMAT:
                v = raw.get("v") if isinstance(raw, dict) else None
                raise WorkloadError(f"stored workload model has format {v!r}, expected "
                                    f"{FORMAT}; the prior is used")
            m = cls(window=window, source="learned")
            m.seen = _finite(raw.get("seen", 0), "seen")
            rows = raw["w"]
            if not isinstance(rows, list):
                raise TypeError("w is not a list")
            for row in rows[:MAX_SHAPES]:
                n, g, c, prod, w = row
                if not isinstance(prod, str):
                    raise TypeError(f"products {prod!r} are not text")
                shape = TaskShape(_whole(c), _whole(g), _whole(n),
                                  tuple(p for p in prod.split("|") if p))
                clean = sane_shape(shape)
                if clean is None or clean != shape:
                    raise ValueError(f"shape {shape} is not one swarmgpu learns")
                weight = _finite(w, "weight")
                if weight <= 0:
                    raise ValueError(f"weight {w!r} is not positive")
                m.weights[shape] = m.weights.get(shape, 0.0) + weight
        except WorkloadError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, RecursionError,
                ArithmeticError) as exc:
            raise WorkloadError(f"stored workload model is not readable ({exc}); "
                                "the prior is used") from None
        total = sum(m.weights.values())
        most = 2.0 * max(1, window) + PRIOR_TASKS  # more than a window of tasks can weigh
        if total > most:
            m.weights = {s: w * window / total for s, w in m.weights.items()}
            m.seen = min(m.seen, float(window))
        return m


def _cpu_per_gpu_milli(weights: Mapping[TaskShape, float]) -> float | None:
    """Mean CPU milli per GPU-milli of the GPU shapes in ``weights`` (None: none)."""
    cpu = gpu = 0.0
    for shape, w in weights.items():
        if shape.num_gpu:
            cpu += w * shape.cpu_milli
            gpu += w * shape.num_gpu * shape.gpu_milli
    return cpu / gpu if gpu > 0 else None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number swarmgpu stores")


def _finite(v: object, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"{what} {v!r} is not a number")
    f = float(v)
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{what} {v!r} is not a finite number >= 0")
    return f


def _whole(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{v!r} is not a whole number")
    return v


def sane_shape(s: TaskShape) -> TaskShape | None:
    """``s`` as the model learns it, or None: not a shape any node could run. Odd GPU
    products (too long, too many, a character that is not printable or is ``|``) are
    dropped, so the shape asks for any GPU."""
    if not 0 <= s.cpu_milli <= MAX_TASK_CPU_MILLI:
        return None
    if s.num_gpu == 0:  # a CPU-only task (it competes for the CPU GPU tasks need)
        if s.gpu_milli != 0:
            return None
    elif not (1 <= s.num_gpu <= MAX_TASK_GPUS and 0 < s.gpu_milli <= MILLI
              and (s.gpu_milli == MILLI or s.num_gpu == 1)):
        return None  # a share of a GPU is on one GPU
    if s.products and (len(s.products) > MAX_PRODUCTS or any(
            not p or len(p) > MAX_PRODUCT_LEN or "|" in p or not p.isprintable()
            for p in s.products)):
        return TaskShape(s.cpu_milli, s.gpu_milli, s.num_gpu)
    return s


def _shape_dict(s: TaskShape) -> dict[str, Any]:
    if s.num_gpu == 0:
        ask = "no GPU"
    elif s.gpu_milli < MILLI:
        ask = f"{s.gpu_milli / MILLI:.2f} GPU"
    else:
        ask = f"{s.num_gpu} GPU"
    return {"gpus": s.num_gpu, "gpu_milli": s.gpu_milli, "cpu_milli": s.cpu_milli,
            "products": list(s.products), "ask": ask}


def _check_shape(s: TaskShape, where: str) -> None:
    if s.num_gpu == 0 and s.gpu_milli == 0 and s.cpu_milli > 0:
        return  # a CPU-only task: it competes for the CPU GPU tasks need
    if s.num_gpu < 1 or not 0 < s.gpu_milli <= MILLI or s.cpu_milli < 0:
        raise WorkloadError(f"{where}: shape {s} needs gpus >= 1, 0 < share <= 1, cpu >= 0")
    if s.gpu_milli < MILLI and s.num_gpu != 1:
        raise WorkloadError(f"{where}: a share of a GPU is on one GPU (gpus: 1)")


def _file_number(shape: Mapping[str, Any], key: str, default: float, where: str) -> float:
    """A finite number >= 0 of a workload file's shape (YAML's number, not text)."""
    v = shape.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e9:
        raise WorkloadError(f"{where}: {key}: {v!r} is not a number >= 0")  # NaN too
    return float(v)


def load_file(path: str | Path) -> WorkloadModel:
    """A pinned mix from YAML: a list of ``{gpus: 1, share: 0.5, cpu: 4, products:
    [..], weight: 3}`` (share defaults to 1 = whole GPUs, cpu in cores, weight 1)."""
    raw = read_yaml(Path(path), f"workload file {path}", WorkloadError, sole=True)
    items = raw.get("shapes") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not items:
        raise WorkloadError(f"{path}: expected a list of shapes (or 'shapes: [...]'), "
                            "e.g. '- {gpus: 1, share: 0.5, cpu: 4, weight: 3}'")
    weights: dict[TaskShape, float] = {}
    for i, it in enumerate(items, start=1):
        where = f"{path}: shape {i}"
        if not isinstance(it, dict):
            raise WorkloadError(f"{where}: expected a mapping like "
                                "{gpus: 1, share: 0.5, cpu: 4, weight: 3}")
        unknown = set(it) - {"gpus", "share", "cpu", "products", "weight"}
        if unknown:  # sorted as text: YAML gives number keys too (1: beside x:)
            raise WorkloadError(f"{where}: unknown key(s) {sorted(unknown, key=str)}; use gpus, "
                                "share, cpu, products, weight")
        # Each value of its own type, as the config's: int()/float() read 1.9 GPUs as 1,
        # YAML's 'on' as 1, fullwidth digits and '1_0' as numbers, and products {a: 1} as ['a'].
        gpus = it.get("gpus", 1)
        if isinstance(gpus, bool) or not isinstance(gpus, int) \
                or not 0 <= gpus <= MAX_TASK_GPUS:
            raise WorkloadError(f"{where}: gpus: {gpus!r} is not a whole number from 0 to "
                                f"{MAX_TASK_GPUS}")
        share, cpu, weight = (_file_number(it, k, d, where)
                              for k, d in (("share", 1), ("cpu", 0), ("weight", 1)))
        if cpu * MILLI > MAX_TASK_CPU_MILLI:
            raise WorkloadError(f"{where}: cpu: {cpu!r} cores is more than any task "
                                f"reserves (at most {MAX_TASK_CPU_MILLI // MILLI})")
        prods = it.get("products") or ()
        if isinstance(prods, str):
            prods = prods.split("|")
        if not isinstance(prods, list | tuple) or not all(isinstance(p, str) for p in prods):
            raise WorkloadError(f"{where}: products: {prods!r} is not a list of product "
                                "names (or one text of names separated by |)")
        shape = TaskShape(int(cpu * MILLI), round(share * MILLI), gpus, tuple(prods))
        _check_shape(shape, where)
        if not weight > 0:
            raise WorkloadError(f"{where}: weight must be a positive number")
        weights[shape] = weights.get(shape, 0.0) + weight
    m = WorkloadModel(pinned=True, source=f"file {path}")
    m.weights = weights
    return m
