"""The arrival path is cheap without changing a figure (issue 24): the workload model
defers its decay (applied in the same order, so every weight is the float the eager
decay gives) and the residual-waste tables are shared by GPU models whose tasks are
the same (``swarmgpu.allocator.fragmentation.ResidualWaste``)."""

from __future__ import annotations

import math
import random

from swarmgpu.allocator.fragmentation import (
    ResidualWaste,
    TaskShape,
    TypicalTask,
    residual_waste_table,
)
from swarmgpu.allocator.workload import (
    DEFAULT_WINDOW,
    MAX_SERVICE_SHARE,
    MAX_SHAPES,
    PRIOR_TASKS,
    WorkloadModel,
)

MIX = (TypicalTask(TaskShape(4000, 500, 1), 0.5), TypicalTask(TaskShape(8000, 1000, 1), 0.3),
       TypicalTask(TaskShape(4000, 320, 1, ("A100*",)), 0.2))


def test_gpu_models_with_the_same_tasks_share_one_waste_table() -> None:
    w = ResidualWaste(MIX)
    t4, v100, a100 = (w._table(p, 1000) for p in ("T4", "V100", "A100-SXM4"))
    assert t4 is v100  # built once: the same tasks fit both
    assert t4 == residual_waste_table(MIX, "T4")
    assert a100 == residual_waste_table(MIX, "A100-SXM4") and a100 != t4
    assert w("T4", (500, 180)) == residual_waste_table(MIX, "T4")[500] + t4[180]


class _Eager:
    """The model's counting as it was before the decay was deferred: every shape decays
    on each new service."""

    def __init__(self, weights: dict[TaskShape, float]) -> None:
        self.weights = dict(weights)
        self.seen = 0.0
        self.decayed = 0.0
        self.keys: dict[str, str] = {}
        self.counted: dict[str, tuple[TaskShape, float, float]] = {}

    def observe(self, key: str, sig: str, shape: TaskShape, count: int) -> None:
        if self.keys.get(key) == sig:
            return
        self.keys[key] = sig
        took_back = False
        prev = self.counted.pop(key, None)
        if prev is not None:
            took_back = True
            s, w, at = prev
            left = self.weights.get(s, 0.0) - w * math.exp(-(self.decayed - at))
            if left > 1e-9:
                self.weights[s] = left
            else:
                self.weights.pop(s, None)
        total = sum(self.weights.values())
        counted: float = min(count, MAX_SERVICE_SHARE * max(total, PRIOR_TASKS))
        if not took_back:
            step = counted / DEFAULT_WINDOW
            decay = math.exp(-step)
            for s in self.weights:
                self.weights[s] *= decay
            self.decayed += step
        self.weights[shape] = self.weights.get(shape, 0.0) + counted
        self.counted[key] = (shape, counted, self.decayed)
        self.seen += counted
        if len(self.weights) > MAX_SHAPES:
            keep = sorted(self.weights.items(), key=lambda kv: -kv[1])[:MAX_SHAPES]
            self.weights = dict(keep)


def test_deferred_decay_gives_every_weight_the_eager_float() -> None:
    # seed 0: read now and then, large services capped by the total; seed 1: small
    # services, few shapes, never read (the pending decays reach their bound); seed 2:
    # more shapes than MAX_SHAPES (trimmed).
    for seed, many, counts, read_every, services in (
            (0, 40, (1, 1, 3, 8, 200), 97, 400), (1, 1, (1, 2, 5), 0, 4000),
            (2, 300, (1, 1, 9), 400, 400)):
        rnd = random.Random(seed)
        m = WorkloadModel.prior()
        ref = _Eager(m.weights)
        for i in range(2000):
            key = f"svc-{rnd.randrange(services)}"
            shape = TaskShape(rnd.randrange(1, 20) * 1000 + rnd.randrange(many),
                              rnd.choice((250, 500, 1000)), 1,
                              ("T4",) if rnd.random() < 0.1 else ())
            count = rnd.choice(counts)
            sig = f"{shape}-{rnd.randrange(2)}"  # a request that changes: taken back
            m.observe(key, sig, shape, count)
            ref.observe(key, sig, shape, count)
            if read_every and i % read_every == 0:
                assert list(m.weights.items()) == list(ref.weights.items())
        assert list(m.weights.items()) == list(ref.weights.items())  # same floats, order
        assert m.seen == ref.seen and not m._pending
