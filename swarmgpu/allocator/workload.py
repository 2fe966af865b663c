"""The workload model: the mix of request shapes the placement policy expects.

FGD-class policies (and swarmgpu's residual-waste rule) score a node by what the
*coming* tasks will be able to use, so they need the mix of task shapes to expect. The
daemon learns it from the services it sees (``placement.workload: auto``): every
annotated service counts once per replica when first seen (and again when its request
changes), older observations decay so that the model follows the cluster (an
exponential window of ``window`` tasks), and departed services keep counting until
they decay. A new cluster starts from a documented prior (``PRIOR``, below) that weighs
as ``PRIOR_TASKS`` tasks, so a handful of early services cannot swing the policy.

The model lives in Swarm itself (a label on the swarm object, ``<prefix>state.workload``)
so a restart or a new leader starts from it; no local state. ``placement.workload:
FILE`` pins a mix instead (YAML, ``load_file``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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

# The prior: the GPU task mix of Alibaba's openb GPU trace (cluster-trace-gpu-v2023, CC
# BY 4.0), measured from openb_pod_list_default.csv: of its 7,064 GPU pods, 55% ask one
# whole GPU, 44% a share of one (0.81, 0.47, 0.32, 0.65, 0.23 and 0.46 are the common
# sizes), 1% two, four or eight GPUs; CPU is the trace's median per kind (11.4 cores per
# whole GPU, 4 per share). No GPU-model pins. Weights are pod counts.
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


def _norm(shapes: Mapping[TaskShape, float]) -> tuple[TypicalTask, ...]:
    total = sum(shapes.values())
    if total <= 0:
        return ()
    return tuple(TypicalTask(s, w / total) for s, w in sorted(shapes.items()) if w > 0)


@dataclass
class WorkloadModel:
    """Decayed counts of task shapes; ``typical()`` is what the policy uses."""

    window: int = DEFAULT_WINDOW
    weights: dict[TaskShape, float] = field(default_factory=dict)
    seen: float = 0.0  # tasks observed (not decayed), for display
    pinned: bool = False  # from a file or the whole trace: never learns
    source: str = "prior"
    _seen_keys: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def prior(cls, window: int = DEFAULT_WINDOW) -> WorkloadModel:
        m = cls(window=window)
        total = sum(w for _, w in PRIOR)
        m.weights = {s: PRIOR_TASKS * w / total for s, w in PRIOR}
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
        ``signature`` (its request); True when the model changed."""
        seen = self._seen_keys.get(key)
        if self.pinned or count <= 0 or seen == signature:
            return False
        if seen == "*":  # counted before a restart; its request is what it was then
            self._seen_keys[key] = signature
            return False
        self._seen_keys[key] = signature
        decay = math.exp(-count / max(1, self.window))
        for s in self.weights:
            self.weights[s] *= decay
        self.weights[shape] = self.weights.get(shape, 0.0) + count
        self.seen += count
        if len(self.weights) > MAX_SHAPES:
            keep = sorted(self.weights.items(), key=lambda kv: -kv[1])[:MAX_SHAPES]
            self.weights = dict(keep)
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

    def typical(self) -> tuple[TypicalTask, ...]:
        """The shapes covering 95% of the weight, renormalised (FGD's typical pods); a
        pinned mix is used as given."""
        total = sum(self.weights.values())
        if total <= 0:
            return ()
        if self.pinned:
            return _norm(self.weights)
        ranked = sorted(self.weights.items(), key=lambda kv: (-kv[1], kv[0]))
        chosen: dict[TaskShape, float] = {}
        covered = 0.0
        for s, w in ranked:
            if covered >= 0.95 * total:
                break
            chosen[s] = w
            covered += w
        return _norm(chosen)

    # --- display and storage ---------------------------------------------------
    def describe(self, top: int = 8) -> list[dict[str, Any]]:
        return [_shape_dict(t.shape) | {"weight": round(t.weight, 4)}
                for t in sorted(self.typical(), key=lambda t: -t.weight)[:top]]

    def summary(self) -> dict[str, Any]:
        return {"source": self.source, "pinned": self.pinned, "tasks_seen": round(self.seen),
                "window": self.window, "shapes": len(self.weights), "top": self.describe()}

    def dumps(self) -> str:
        """Compact JSON for the swarm label (weights rounded: labels are small)."""
        rows = [[s.num_gpu, s.gpu_milli, s.cpu_milli, "|".join(s.products), round(w, 3)]
                for s, w in sorted(self.weights.items(), key=lambda kv: -kv[1]) if w >= 1e-3]
        return json.dumps({"v": FORMAT, "seen": round(self.seen), "w": rows},
                          separators=(",", ":"))

    @classmethod
    def loads(cls, text: str, window: int = DEFAULT_WINDOW) -> WorkloadModel:
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("v") != FORMAT:
                raise WorkloadError(f"stored workload model has format {raw.get('v')!r}, "
                                    f"expected {FORMAT}")
            m = cls(window=window, source="learned")
            m.seen = float(raw.get("seen", 0))
            for row in raw["w"][:MAX_SHAPES]:
                n, g, c, prod, w = row
                shape = TaskShape(int(c), int(g), int(n),
                                  tuple(p for p in str(prod).split("|") if p))
                _check_shape(shape, "stored workload model")
                m.weights[shape] = float(w)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            if isinstance(exc, WorkloadError):
                raise
            raise WorkloadError(f"stored workload model is not readable ({exc}); "
                                "it is rebuilt from the prior") from None
        return m


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


def load_file(path: str | Path) -> WorkloadModel:
    """A pinned mix from YAML: a list of ``{gpus: 1, share: 0.5, cpu: 4, products:
    [..], weight: 3}`` (share defaults to 1 = whole GPUs, cpu in cores, weight 1)."""
    raw = read_yaml(Path(path), f"workload file {path}", WorkloadError)
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
        if unknown:
            raise WorkloadError(f"{where}: unknown key(s) {sorted(unknown)}; use gpus, "
                                "share, cpu, products, weight")
        try:
            share = float(it.get("share", 1))
            prods = it.get("products") or ()
            if isinstance(prods, str):
                prods = prods.split("|")
            shape = TaskShape(int(float(it.get("cpu", 0)) * MILLI), round(share * MILLI),
                              int(it.get("gpus", 1)), tuple(str(p) for p in prods))
            weight = float(it.get("weight", 1))
        except (TypeError, ValueError, OverflowError) as exc:
            raise WorkloadError(f"{where}: {exc}") from None
        _check_shape(shape, where)
        if not weight > 0 or not math.isfinite(weight):
            raise WorkloadError(f"{where}: weight must be a positive number")
        weights[shape] = weights.get(shape, 0.0) + weight
    m = WorkloadModel(pinned=True, source=f"file {path}")
    m.weights = weights
    return m


def shapes_signature(shapes: Sequence[TaskShape]) -> str:
    return ";".join(f"{s.num_gpu}x{s.gpu_milli}c{s.cpu_milli}{'|'.join(s.products)}"
                    for s in shapes)
