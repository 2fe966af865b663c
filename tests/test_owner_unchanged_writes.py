"""What the daemon writes when the owner changed nothing: no task restarts (issue 34).

Swarm replaces a running task when its task spec changes (swarmkit ``IsTaskDirty``) and
stops one whose node no longer meets its constraints. A re-read of the same facts in
another order, or swarmgpu's own record spelled another way (a hand edit, an earlier
or later release), is no change of the owner's: the daemon's write for it, if any,
changes neither. Pure: facts, nodes and specs in, the plan out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support.forged import sw_node

from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.swarm.client import SwarmTask
from swarmgpu.swarm.labels import desired_labels, plan_node_labels

P = "swarmgpu."
A100 = Gpu(0, "GPU-a", "NVIDIA A100-SXM4-80GB", 81920, "00000000:07:00.0", 8, 0)
H100 = Gpu(1, "GPU-h", "NVIDIA H100 80GB HBM3", 81559, "00000000:0F:00.0", 9, 0)


def test_a_mixed_nodes_labels_do_not_depend_on_the_order_its_gpus_are_read() -> None:
    # One A100 and one H100: the product (a tie) and the compute capability came from
    # whichever GPU the agent listed first, so a listing in another order flipped
    # gpu.product, gpu.compute.major and gpu.family -- labels a running task's
    # constraint reads. They follow the GPUs' indices now, as NVML numbers them.
    listed = NodeFacts(hostname="n", gpus=(A100, H100))
    reordered = replace(listed, gpus=(H100, A100))
    want = desired_labels(listed)
    assert desired_labels(reordered) == want
    assert want[P + "gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert want[P + "gpu.compute.major"] == "8"
    node = sw_node("n1", "gpu-node-1", want)
    t = SwarmTask("t1", "id-m", "n1", 1, "running", "running",
                  ("node.labels.swarmgpu.gpu.family==ampere",))
    plan = plan_node_labels(node, reordered, tasks=[t], prefix=P, allow_disruptive=True)
    assert plan.empty and plan.held == ()
