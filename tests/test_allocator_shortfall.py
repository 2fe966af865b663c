"""A pending request's reason says what the closest node is short of (allocator.shortfall).

Before: "needs 1 GPU >= 80 GiB; best node gpu-node-1 has 0 free" while gpu-node-1 had
two free 40 GiB GPUs: it meant none big enough, and read as none free at all.
"""

from __future__ import annotations

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Choice, Demand, GpuSpec, NodeSpec, Unplaceable

A100_40 = "NVIDIA A100-SXM4-40GB"


def gpus(n: int, product: str = A100_40, mem: int = 40960, start: int = 0) -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec(index=start + i, product=product, memory_mib=mem) for i in range(n))


def reason(d: Demand, *nodes: NodeSpec) -> str:
    a = Allocator()
    for n in nodes:
        a.add_node(n)
    got = a.place(d)
    assert isinstance(got, Unplaceable), got
    return got.reason


def test_free_gpus_too_small_are_named_with_their_size() -> None:
    why = reason(Demand(num_gpu=1, min_memory_mib=81920), NodeSpec("gpu-node-1", gpus(2)))
    assert why == ("needs 1 GPU >= 80 GiB; best node gpu-node-1 has no free GPU with "
                   "80 GiB (2 free, 40 GiB each)"), why


def test_some_big_enough_but_too_few_says_only() -> None:
    node = NodeSpec("mixed", gpus(1, "NVIDIA A100-SXM4-80GB", 81920) + gpus(2, start=1))
    why = reason(Demand(num_gpu=2, min_memory_mib=81920), node)
    assert why.endswith("best node mixed has only 1 free GPU with 80 GiB "
                        "(3 free: 1 of 80 GiB, 2 of 40 GiB)"), why


def test_the_wrong_product_is_named() -> None:
    why = reason(Demand(num_gpu=1, products=("*H100*",)),
                 NodeSpec("l4", gpus(2, "NVIDIA L4", 23034)))
    assert why.endswith("best node l4 has no free GPU matching *H100* "
                        "(2 free, NVIDIA L4 22.5 GiB each)"), why


def test_too_few_free_keeps_the_count() -> None:
    # Every free GPU would do: the count is what is short, as before.
    why = reason(Demand(num_gpu=3, min_memory_mib=40960),
                 NodeSpec("gpu-node-1", gpus(1)), NodeSpec("gpu-node-3", gpus(2)))
    assert why.endswith("best node gpu-node-3 has 2 free"), why


def test_a_share_names_the_most_one_gpu_has_left() -> None:
    a = Allocator()
    a.add_node(NodeSpec("n", gpus(2)))
    for _ in range(2):
        c = a.place(Demand(gpu_milli=700))
        assert isinstance(c, Choice)
        a.commit(c)
    got = a.place(Demand(gpu_milli=500))
    assert isinstance(got, Unplaceable)
    assert got.reason.endswith("best node n has no GPU with 0.50 free (at most 0.30 on one)"), got


def test_a_node_without_gpus_says_so() -> None:
    why = reason(Demand(num_gpu=1), NodeSpec("cpu-1", cpu_milli=4000))
    assert why.endswith("best node cpu-1 has no GPUs"), why
