"""Trace loading and a short replay on a subsample of the openb trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.sim.cli_entry import parse_seeds, run_simulate
from swarmgpu.sim.replay import replay
from swarmgpu.sim.trace import TraceError, load_nodes, load_pods

TRACES = Path("/work/shared/traces/openb")
needs_trace = pytest.mark.skipif(not TRACES.exists(), reason="openb trace not present")


def write(tmp: Path, name: str, text: str) -> str:
    p = tmp / name
    p.write_text(text)
    return str(p)


def test_both_pod_csv_shapes(tmp_path: Path) -> None:
    long = write(tmp_path, "l.csv",
                 "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                 "creation_time,deletion_time,scheduled_time\n"
                 "p1,6000,12288,1,460,V100M16|V100M32,LS,Running,10,20,10\n")
    short = write(tmp_path, "s.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np2,1,2,2,1000\n")
    (p1,) = load_pods(long)
    assert p1.gpu_spec == ("V100M16", "V100M32") and p1.deletion_time == 20
    assert p1.demand().gpu_milli == 460
    (p2,) = load_pods(short)
    assert p2.creation_time is None and p2.demand().num_gpu == 2


def test_bad_csv_names_the_column(tmp_path: Path) -> None:
    bad = write(tmp_path, "b.csv", "name,cpu\nx,1\n")
    with pytest.raises(TraceError, match="missing column"):
        load_pods(bad)
    worse = write(tmp_path, "w.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,a,1,1,1\n")
    with pytest.raises(TraceError, match="cpu_milli"):
        load_pods(worse)


def test_parse_seeds() -> None:
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("1,3-4") == [1, 3, 4]
    with pytest.raises(ValueError, match="LOW-HIGH"):
        parse_seeds("x")


@needs_trace
def test_replay_is_deterministic_on_a_subsample() -> None:
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")[:60]
    pods = load_pods(TRACES / "openb_pod_list_default.csv")[:400]
    a = replay(nodes, pods, "swarmgpu", 7)
    b = replay(nodes, pods, "swarmgpu", 7)
    assert a.alloc_pct_at == b.alloc_pct_at and a.placed == b.placed
    assert 0 < a.alloc_pct_at[100] <= 100
    assert {50, 100, 130} <= set(a.alloc_pct_at)
    c = replay(nodes, pods, "fgd", 7)
    assert c.alloc_pct_at[130] > 50


def test_unknown_policy_exit_code(tmp_path: Path) -> None:
    text, rc = run_simulate("n.csv", "p.csv", ["nope"], [1], False, None, False, None)
    assert rc == 2 and "unknown policy" in text
