"""``simulate --priorities``: the departures timeline with a queue, without and with
priorities, through the daemon's planner and its preemption decision."""

from __future__ import annotations

import json

import pytest

from swarmgpu.allocator.values import GpuSpec, NodeSpec
from swarmgpu.sim.priorities import (
    RUNS,
    high_pods,
    replay_priorities,
    run,
    run_cli,
    tenant_of,
)
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


@pytest.mark.timeout(60)
def test_a_long_drain_with_a_pod_that_never_starts_ends() -> None:
    # The drain stepped through every second of it, a step kept for each: --drain
    # 1000000000000 with a pod no node fits ran for weeks, its memory growing.
    pods = [*_pods(), _pod("zz-huge", 16, 200, 300)]
    drain = 10**12
    off = replay_priorities([_node("n1", 8)], pods, 1, share=0.0, priorities=False,
                            drain_s=drain)
    batch = off.classes["batch"].to_dict()
    assert batch["started"] == 9 and batch["never_started"] == 1  # zz-huge waits it out
    assert off.own_end_contended_s is not None and off.own_end_contended_s >= drain


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


def test_every_run_of_a_seed_is_measured_over_the_same_contended_span() -> None:
    """Each run was measured from the shared start to its OWN end (its queue emptied):
    a run whose last pod started later had its quiet tail averaged in.

    One 8-GPU node: ``v`` (6 GPUs, batch) runs from 0 to 1000; ``h`` (4 GPUs) arrives at
    10, ``f`` (4 GPUs, batch) at 20. Without priorities both wait for ``v`` (6 of 8 held)
    and start at 1000: the queue is empty, the span ends. With priorities ``h`` preempts
    ``v`` and ``f`` fills the rest (8 of 8 held) to 1000; then ``v`` (6 GPUs) waits for
    ``h`` to leave at ~3010 with 4 of 8 held -- a tail after the span's end."""
    pods = [_pod("v", 6, 0, 1000), _pod("x-h", 4, 10, 3010), _pod("y-f", 4, 20, 1000)]
    seed = next(s for s in range(100) if high_pods(pods, 1 / 3, s) == {"x-h"})
    out = run([_node("n1", 8)], pods, [seed], share=1 / 3, drain_s=10_000)
    off, on = out["without"][0], out["with"][0]
    assert on.preemptions == 1 and on.classes["batch"].preempted == 1
    assert off.contended_from is not None and off.contended_from <= 11
    assert 985 <= off.contended_s <= 995
    assert off.contended_alloc_pct is not None and 74.0 <= off.contended_alloc_pct <= 76.0
    # the same span, not the run's own (longer) one
    assert on.contended_from == off.contended_from and on.contended_s == off.contended_s
    assert on.contended_alloc_pct is not None and on.contended_alloc_pct >= 99.0
    # what the run's own end would have shown, and how much later it came, reported
    assert off.ended_later_s == 0
    assert 1_990 <= on.ended_later_s <= 2_030
    assert on.own_end_contended_s == on.contended_s + on.ended_later_s
    pct = on.own_end_contended_alloc_pct
    assert pct is not None and 60.0 <= pct <= 70.0
    d = on.to_dict()
    assert d["ended_later_s"] == on.ended_later_s and d["own_end_contended_alloc_pct"] == round(
        pct, 2
    )


def test_a_run_that_empties_its_queue_earlier_is_carried_on_to_the_span_end() -> None:
    """``h`` (4 GPUs, 100 s) preempts ``v`` (6 GPUs), which restarts when ``h`` leaves
    (~110): that run's queue empties ~890 s before the run without priorities' does. Its
    departures go on to the span's end (6 of 8 held from ~110), not measured to ~110."""
    pods = [_pod("v", 6, 0, 1000), _pod("x-h", 4, 10, 110)]
    seed = next(s for s in range(100) if high_pods(pods, 1 / 2, s) == {"x-h"})
    out = run([_node("n1", 8)], pods, [seed], share=1 / 2, drain_s=10_000)
    off, on = out["without"][0], out["with"][0]
    assert on.preemptions == 1
    assert on.contended_s == off.contended_s and 985 <= off.contended_s <= 995
    # ~100 s at 4 of 8, then ~890 s at 6 of 8
    assert on.contended_alloc_pct is not None and 71.0 <= on.contended_alloc_pct <= 74.0
    assert -900 <= on.ended_later_s <= -880 and on.own_end_contended_s < 120
    assert on.mean_alloc_pct < 55  # the window's own mean still ends at its own end


def test_a_preemptor_does_not_preempt_again_while_its_preemption_settles() -> None:
    """The replay called ``choose_preemptions`` without the daemon's ``settling``: the
    re-plan right after a preemption, which saw the preemptor still pending, preempted
    again for it on another node (on load120 one 4-GPU pod stopped four 8-GPU pods).

    Two 8-GPU nodes, each held by an 8-GPU batch pod; five high one-GPU sharing pods
    (0.9 GPU each, which never preempt) wait from 50 s; at 100 s a high 4-GPU pod
    arrives and preempts one batch pod. The re-plan serves the older sharing pods first:
    they took five of the eight GPUs freed, so it still waited (until they left, 10 s
    later). It must not stop the other batch pod too; and since the GPUs it is counted on
    are held for it (``placement.nominated``), it starts at once, the sharing pods on the
    other four."""
    batch = [_pod("b0", 8, 0, 10_000), _pod("b1", 8, 1, 10_000)]
    share = [TracePod(f"f{i}", 1000, 1024, 1, 900, (), 50 + i, 60 + i) for i in range(5)]
    pods = [*batch, *share, _pod("zz", 4, 100, 400)]
    want = {p.name for p in [*share, pods[-1]]}
    seed = next(s for s in range(1000) if high_pods(pods, 6 / 8, s) == want)
    nodes = [_node("n1", 8), _node("n2", 8)]
    on = replay_priorities(nodes, pods, seed, share=6 / 8, priorities=True, drain_s=2_000)
    assert on.preemptions == 1 and on.classes["batch"].preempted == 1
    hi = on.classes["high"].to_dict()
    assert hi["started"] == 6 and hi["never_started"] == 0
    # zz at once (the sharing pods, waiting since 50-54 s, start at 100 s or later)
    assert min(on.classes["high"].waits) <= 2
