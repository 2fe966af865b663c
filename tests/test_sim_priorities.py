"""``simulate --priorities``: the departures timeline with a queue, without and with
priorities, through the daemon's planner and its preemption decision."""

from __future__ import annotations

import json

from swarmgpu.allocator.values import GpuSpec, NodeSpec
from swarmgpu.sim.priorities import RUNS, high_pods, replay_priorities, run_cli, tenant_of
from swarmgpu.sim.trace import TracePod
from swarmgpu.sim.traces import bundled


def _node(name: str, n: int) -> NodeSpec:
    return NodeSpec(name, tuple(GpuSpec(i, "T4", 0) for i in range(n)), 64000, 1 << 20)


def _pod(name: str, gpus: int, start: int, end: int) -> TracePod:
    return TracePod(name, 1000, 1024, gpus, 1000, (), start, end)


def _pods() -> list[TracePod]:
    """Eight long batch pods fill the one 8-GPU node; then one more pod asks for 2 GPUs
    (``high_pods`` with share 1/9 and this seed draws it: checked below)."""
    batch = [_pod(f"b{i}", 1, i, 10_000) for i in range(8)]
    return [*batch, _pod("zz-late", 2, 100, 400)]


def test_a_high_pod_preempts_instead_of_waiting_for_a_departure() -> None:
    pods = _pods()
    seed = next(s for s in range(100) if high_pods(pods, 1 / 9, s) == {"zz-late"})
    nodes = [_node("n1", 8)]
    off = replay_priorities(nodes, pods, seed, share=1 / 9, priorities=False)
    on = replay_priorities(nodes, pods, seed, share=1 / 9, priorities=True)
    # without priorities it waits for the node: until the end of the window
    assert off.classes["high"].to_dict()["never_started"] == 1
    assert off.preemptions == 0 and off.classes["batch"].preempted == 0
    # with: it starts a second after it arrives, two batch pods (the newest) stopped
    hi = on.classes["high"].to_dict()
    assert hi["started"] == 1 and hi["mean_wait_s"] is not None and hi["mean_wait_s"] <= 2
    assert on.preemptions == 1 and on.classes["batch"].preempted == 2
    assert on.classes["batch"].started == 8  # each started once, before the preemption


def test_the_cli_refuses_a_bad_share_and_prints_both_runs() -> None:
    n, p = bundled("default")
    text, code = run_cli(str(n), str(p), [42], 1.5, 1.0, "online", False)
    assert code == 2 and "--priorities 1.5" in text
    pods = _pods()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        nf = Path(tmp) / "nodes.csv"
        pf = Path(tmp) / "pods.csv"
        nf.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,1048576,8,T4\n")
        pf.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                      "creation_time,deletion_time,scheduled_time\n" + "".join(
                          f"{q.name},1000,1024,{q.num_gpu},1000,,LS,Running,"
                          f"{q.creation_time},{q.deletion_time},{q.creation_time}\n"
                          for q in pods))
        text, code = run_cli(str(nf), str(pf), [1], 0.2, 1.0, "online", True)
    assert code == 0, text
    doc = json.loads(text)
    assert set(doc) == set(RUNS) == {"without", "with", "tenants"}
    assert set(doc["with"][0]["classes"]) == {"high", "batch"}
    assert set(doc["tenants"][0]["classes"]) <= {f"{t}:{k}" for t in ("inference", "research")
                                                for k in ("high", "batch")}
    assert doc["tenants"][0]["tenants"] is True


def test_a_waiting_pod_starts_in_the_drain_when_the_node_frees() -> None:
    pods = _pods()
    seed = next(s for s in range(100) if high_pods(pods, 1 / 9, s) == {"zz-late"})
    nodes = [_node("n1", 8)]
    off = replay_priorities(nodes, pods, seed, share=1 / 9, priorities=False, drain_s=20_000)
    hi = off.classes["high"].to_dict()
    # the batch pods leave at 10,000 s; the high pod (arrived at 100) starts then
    assert hi["started"] == 1 and hi["never_started"] == 0
    assert 9_890 <= hi["mean_wait_s"] <= 9_910
    assert off.contended_from is not None and off.contended_from <= 101
    assert off.contended_s >= 9_899  # to its start (then nothing waits: the drain ends)
    # 8 of 8 GPUs held while it waits, 2 from its start: the mean over the span is high
    assert off.contended_alloc_pct is not None and 99.0 <= off.contended_alloc_pct <= 100.0


def test_a_tenant_ceiling_decides_who_preempts() -> None:
    # Four long 2-GPU pods fill the node, then a fifth asks for 2 GPUs; all ask priority
    # 100. Without tenants equal priorities never preempt: the fifth waits. With tenants
    # the four are research's (capped at 50) and the fifth inference's (100): it preempts.
    long = [_pod(f"a{i}", 2, i, 10_000) for i in range(4)]
    pods = [*long, _pod("zz-late", 2, 100, 400)]
    seed = next(s for s in range(1000) if tenant_of("zz-late", s) == "inference"
                and all(tenant_of(p.name, s) == "research" for p in long))
    nodes = [_node("n1", 8)]
    flat = replay_priorities(nodes, pods, seed, share=1.0, priorities=True)
    assert flat.classes["high"].to_dict()["never_started"] == 1 and flat.preemptions == 0
    ten = replay_priorities(nodes, pods, seed, share=1.0, priorities=True, tenants=True)
    got = ten.classes["inference:high"].to_dict()
    assert got["started"] == 1 and got["mean_wait_s"] is not None and got["mean_wait_s"] <= 2
    assert ten.preemptions == 1 and ten.classes["research:high"].preempted == 1


def test_the_cli_refuses_a_non_finite_speedup() -> None:
    """NaN passed ``speedup <= 0`` and was replayed (arrival times all NaN)."""
    n, p = bundled("default")
    for bad in (float("nan"), float("inf")):
        text, code = run_cli(str(n), str(p), [42], 0.1, bad, "online", False)
        assert code == 2 and f"--speedup {bad:g}" in text
