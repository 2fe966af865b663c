"""The per-process series (``swarmgpu_gpu_process_memory_used_mib``) against the
manager's caps on one node's metrics page.

The manager kept up to 512 processes a GPU and refused a page with more than
``MAX_METRIC_SAMPLES`` (4,096) samples of one metric: a node with that many process
samples (64 GPUs x 64) had its whole page refused, every GPU's readings with it, not
its processes capped; and the agent served every process, so its own page could be one
the manager refuses. Now the agent serves at most ``MAX_PROCESSES`` a GPU (the largest
users of memory) and counts the rest, and the manager caps process series a GPU rather
than refusing the page for them.
"""

from __future__ import annotations

from swarmgpu.agent.metrics import render_metrics
from swarmgpu.core import metrics_in
from swarmgpu.core.metrics_in import PROCESS_MEMORY, parse_metrics
from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.core.samples import GpuProcess, GpuSample

# What a GPU's share of one metric's cap is: the agent's page must stay within it.
PER_GPU = metrics_in.MAX_METRIC_SAMPLES // metrics_in.MAX_GPUS


def _uuid(i: int) -> str:
    return f"GPU-{i:08x}-0000-0000-0000-000000000000"


def _node(gpus: int, processes: int) -> tuple[NodeFacts, list[GpuSample]]:
    facts = NodeFacts(hostname="node-a", gpus=tuple(
        Gpu(i, _uuid(i), "NVIDIA H100 80GB HBM3", 81559) for i in range(gpus)))
    samples = [GpuSample(_uuid(i), i, 50.0, 1000, 80000, 1.0, 40.0, 300.0, tuple(
        GpuProcess(1000 + p, used_mib=10 + p) for p in range(processes)))
        for i in range(gpus)]
    return facts, samples


def _process_lines(page: str) -> list[str]:
    return [ln for ln in page.splitlines() if ln.startswith(PROCESS_MEMORY + "{")]


def test_the_agent_serves_a_gpus_largest_processes_up_to_its_cap_and_counts_the_rest() -> None:
    facts, samples = _node(1, PER_GPU + 36)
    page = render_metrics(facts, samples).decode()
    lines = _process_lines(page)
    assert len(lines) == PER_GPU, len(lines)  # was every one of PER_GPU + 36
    pids = {int(ln.split('pid="')[1].split('"')[0]) for ln in lines}
    assert pids == set(range(1036, 1036 + PER_GPU))  # the 36 smallest users left out
    (left,) = [ln for ln in page.splitlines()
               if ln.startswith("swarmgpu_gpu_processes_left_out{")]
    assert f'UUID="{_uuid(0)}"' in left and left.endswith(" 36.0"), left


def test_a_full_nodes_agent_page_is_read_whole_by_the_manager() -> None:
    facts, samples = _node(metrics_in.MAX_GPUS, 100)
    res = parse_metrics(render_metrics(facts, samples).decode())
    assert res.refused is None, res.refused  # was refused: 6,400 process samples
    assert len(res.samples_by_uuid) == metrics_in.MAX_GPUS
    assert all(len(g.processes) == PER_GPU for g in res.samples_by_uuid.values())


def _page(gpus: int, processes: int) -> str:
    return "".join(
        f'{PROCESS_MEMORY}{{gpu="{i}",UUID="{_uuid(i)}",pid="{1000 + p}",container="",'
        f'task="",service="",hostname="node-a"}} 10\n'
        for i in range(gpus) for p in range(processes))


def test_the_manager_caps_a_gpus_processes_rather_than_refusing_the_page() -> None:
    """Another writer's page (an older agent's) of more process samples than the cap on
    one metric: each GPU's processes are kept up to the manager's cap, the page read."""
    res = parse_metrics(_page(10, 500) + _page(11, 600)[len(_page(10, 600)):])
    assert res.refused is None, res.refused  # was refused: 5,600 process samples
    kept = {u: len(g.processes) for u, g in res.samples_by_uuid.items()}
    assert [kept[_uuid(i)] for i in range(10)] == [500] * 10
    assert kept[_uuid(10)] == metrics_in.MAX_PROCESSES_READ  # 600 listed: capped
    assert any(f"{_uuid(10)}: more than {metrics_in.MAX_PROCESSES_READ} processes" in e
               for e in res.errors), res.errors


def test_other_metrics_past_the_cap_still_refuse_the_page() -> None:
    page = "".join(f'DCGM_FI_DEV_SM_CLOCK{{UUID="{_uuid(0)}",x="{i}"}} 1\n'
                   for i in range(metrics_in.MAX_METRIC_SAMPLES + 1))
    refused = parse_metrics(page).refused
    assert refused is not None and "DCGM_FI_DEV_SM_CLOCK" in refused


def _served(samples: list[GpuSample], facts: NodeFacts) -> tuple[list[int], list[str]]:
    page = render_metrics(facts, samples).decode()
    pids = [int(ln.split('pid="')[1].split('"')[0]) for ln in _process_lines(page)]
    left = [ln for ln in page.splitlines()
            if ln.startswith("swarmgpu_gpu_processes_left_out{")]
    return pids, left


def test_a_process_nvml_lists_twice_at_the_cap_is_served_once_and_not_counted_left_out(
        ) -> None:
    """NVML can list one compute process twice: both copies sat at the cut (kept by
    equality), so 65 series were served past a cap of 64, one a duplicate series, and
    the copy was counted as a process left out."""
    facts, samples = _node(1, PER_GPU)
    twice = (*samples[0].processes, samples[0].processes[0])  # the smallest user, again
    samples = [GpuSample(_uuid(0), 0, 50.0, 1000, 80000, 1.0, 40.0, 300.0, twice)]
    pids, left = _served(samples, facts)
    assert sorted(pids) == list(range(1000, 1000 + PER_GPU)), len(pids)
    assert left == []  # every process served: none left out


def test_a_process_listed_twice_under_the_cap_is_one_series() -> None:
    facts, samples = _node(1, 3)
    twice = (*samples[0].processes, samples[0].processes[1])
    samples = [GpuSample(_uuid(0), 0, 50.0, 1000, 80000, 1.0, 40.0, 300.0, twice)]
    assert _served(samples, facts) == ([1000, 1001, 1002], [])
