"""The arrival path is cheap without changing a figure (issue 24): the workload model
defers its decay (applied in the same order, so every weight is the float the eager
decay gives) and the residual-waste tables are shared by GPU models whose tasks are
the same (``swarmgpu.allocator.fragmentation.ResidualWaste``)."""

from __future__ import annotations

from swarmgpu.allocator.fragmentation import (
    ResidualWaste,
    TaskShape,
    TypicalTask,
    residual_waste_table,
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
