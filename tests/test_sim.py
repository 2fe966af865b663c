"""Trace loading and a short replay on a subsample of the openb trace."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from support.paths import TRACES
from support.sim import node_spec, trace_pod
from support.traced import traced_peak

from swarmgpu.allocator.core import Allocator
from swarmgpu.allocator.values import Choice, Demand
from swarmgpu.sim import trace
from swarmgpu.sim.cli_entry import parse_seeds, resolve_trace, run_simulate
from swarmgpu.sim.rebalance import MoveRescuer, Running, move_rescue
from swarmgpu.sim.replay import replay
from swarmgpu.sim.report import plot, run_many, summary
from swarmgpu.sim.timeline import replay_departures
from swarmgpu.sim.trace import TraceError, TracePod, load_nodes, load_pods
from swarmgpu.sim.traces import NAMES as TRACE_NAMES
from swarmgpu.sim.traces import bundled
from swarmgpu.sim.variants import read_rows


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


def test_move_rescue_frees_a_whole_gpu() -> None:
    # a: GPU0 holds a 0.3 share, GPU1 is full; b: GPU0 has 0.5 free. A whole-GPU task fits
    # nowhere until the 0.3 share moves from a to b.
    alloc = Allocator()
    alloc.add_node(node_spec("a", 2))
    alloc.add_node(node_spec("b", 1))
    running: Running = {}
    for tid, (node, gpu, milli) in enumerate([("a", 0, 300), ("a", 1, 1000), ("b", 0, 500)]):
        d = Demand(gpu_milli=milli) if milli < 1000 else Demand(num_gpu=1)
        c = Choice(node, (gpu,), (milli,), 0.0, "", 0, 0)
        alloc.commit(c)
        running.setdefault(node, {})[tid] = (d, c)
    want = Demand(num_gpu=1)
    assert not isinstance(alloc.place(want), Choice)
    assert move_rescue(alloc, running, want, budget=0) is None
    got = move_rescue(alloc, running, want, budget=2)
    assert got is not None and len(got.moves) == 1
    assert got.placed.node == "a" and got.moves[0].new.node == "b"
    assert sorted(alloc.snapshot()["b"]) == [200]


def test_rescue_that_cannot_help_leaves_state_alone() -> None:
    alloc = Allocator()
    alloc.add_node(node_spec("a", 1))
    c = Choice("a", (0,), (1000,), 0.0, "", 0, 0)
    alloc.commit(c)
    running: Running = {"a": {1: (Demand(num_gpu=1), c)}}
    before = alloc.snapshot()
    assert MoveRescuer()(alloc, running, Demand(num_gpu=1), 3) is None
    assert alloc.snapshot() == before


def test_departures_free_room_and_count_failures() -> None:
    nodes = [node_spec("n", 2)]
    pods = [trace_pod("p1", 0, 10, 2), trace_pod("p2", 5, 20), trace_pod("p3", 10, 30, 2)]
    r = replay_departures(nodes, pods, "swarmgpu", 1)
    # p2 finds no GPU (p1 holds both); p3 arrives as p1 leaves and gets both.
    assert r.placed == 2 and r.failed == {"1gpu": 1}
    assert r.failed_gpu_milli == 1000 and r.asked_gpu_milli == 5000
    assert r.span_s == 10 and r.peak_alloc_pct == 100.0
    assert r.mean_alloc_pct == pytest.approx(100.0)  # both GPUs busy over 0..10
    assert r.mean_demand_pct == pytest.approx(125.0)  # p2 wanted one more from t=5


def test_departures_need_times() -> None:
    with pytest.raises(TraceError, match="--departures"):
        replay_departures([node_spec("n", 1)], [TracePod("x", 0, 0, 1, 1000)], "fgd", 1)


def test_departures_cli_rejects_a_file_without_times(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,8000,8000,1,T4\n")
    pods = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n")
    text, rc = run_simulate(nodes, pods, ["swarmgpu"], [1], False, None, True, None)
    assert rc == 2 and "creation_time" in text


def test_plot_writes_a_png(tmp_path: Path) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                  + "".join(f"n{i},32000,65536,2,T4\n" for i in range(8)))
    pods = str(TRACES / "openb_pod_list_default.csv")
    s = summary(run_many(nodes, pods, ["swarmgpu", "bestfit"], [1], workers=1))
    out = tmp_path / "a.png"
    plot(s, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_with_moves_reports_moves_within_the_budget(tmp_path: Path) -> None:
    import csv
    import json

    # A slice of the real trace, written back in its own format: 40 nodes, 300 pods.
    src_nodes = TRACES / "openb_node_list_gpu_node.csv"
    src_pods = TRACES / "openb_pod_list_default.csv"
    for src, n in ((src_nodes, 40), (src_pods, 300)):
        with src.open() as f:
            rows = list(csv.reader(f))
        (tmp_path / src.name).write_text("\n".join(",".join(r) for r in rows[: n + 1]) + "\n")
    text, rc = run_simulate(str(tmp_path / src_nodes.name), str(tmp_path / src_pods.name),
                            ["swarmgpu"], [42, 43], True, None, False, 2.0)
    assert rc == 0, text
    got = json.loads(text)["policies"]["swarmgpu"]
    assert set(got["by_seed"]) == {"42", "43"}
    assert 0 <= got["moves_at_100"] <= got["moves"]
    for one in got["by_seed"].values():
        assert one["moves"] <= int(0.02 * one["pods"])  # 2 per 100 arrived pods
        assert one["alloc_pct_at"]["130"] >= one["alloc_pct_at"]["100"] > 0


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_every_bundled_trace_loads(name: str) -> None:
    nodes, pods = bundled(name)
    assert len(load_nodes(nodes)) == 1213
    assert len(load_pods(pods)) > 1000


def test_simulate_trace_option_fills_what_is_not_given(tmp_path: Path) -> None:
    """`--trace NAME` supplies the bundled files; an explicit --nodes/--pods wins."""
    from click.testing import CliRunner

    from swarmgpu.cli import main

    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                  + "".join(f"n{i},32000,65536,2,T4\n" for i in range(4)))
    res = CliRunner().invoke(main, ["simulate", "--trace", "gpushare40", "--nodes", nodes,
                                    "--policy", "bestfit", "--json"])
    assert res.exit_code == 0, res.output
    assert resolve_trace("cpu050", None, None) == tuple(str(p) for p in bundled("cpu050"))
    assert resolve_trace("default", nodes, None) == (nodes, str(bundled("default")[1]))
    res = CliRunner().invoke(main, ["simulate", "--trace", "nosuch"])
    assert res.exit_code == 2 and "gpushare40" in res.output


def test_wheel_ships_the_trace_and_its_attribution(tmp_path: Path) -> None:
    """What `pip install swarmgpu` gets: every bundled CSV plus ATTRIBUTION.md, and the
    GPU map's static files beside the manager's code."""
    import subprocess
    import sys
    import zipfile

    from support.paths import REPO

    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "-q", "-w", str(tmp_path), str(REPO)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = tmp_path.glob("swarmgpu-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"swarmgpu/sim/traces/openb/{p.name}" for p in TRACES.iterdir()}
    assert "swarmgpu/sim/traces/openb/ATTRIBUTION.md" in want and want <= names
    web = REPO / "swarmgpu" / "manager" / "web"
    assert {f"swarmgpu/manager/web/{p.name}" for p in web.iterdir()
            if p.is_file()} <= names


@pytest.mark.parametrize("cpu_heavy", [False, True])
def test_placing_each_arrival_equals_a_full_cycle_per_arrival(cpu_heavy: bool) -> None:
    """``simulate`` plans each arrival with ``Planner.place_arrivals`` (the new services
    only) and a full cycle every 50 arrivals; the daemon runs a full cycle per
    service-create event. Same decisions, same ledger, same learned model."""
    import random

    from swarmgpu.sim.swarm_replay import Replay

    nodes_csv, pods_csv = bundled("default")
    rng = random.Random(7)
    nodes = rng.sample(load_nodes(nodes_csv), 40)
    pods = load_pods(pods_csv)
    if cpu_heavy:  # a third CPU-only pods, as in the cpu250-style variants
        cpu = [p for p in pods if p.total_gpu_milli == 0]
        gpu = [p for p in pods if p.total_gpu_milli > 0]
        pods = rng.sample(gpu, 260) + rng.sample(cpu, 130)
    else:
        pods = rng.sample(pods, 400)

    def ledger(rp: Replay) -> dict[str, dict[str, str]]:
        return {n.id: {k: v for k, v in n.labels.items() if ".assign." in f".{k}"}
                for n in rp.world.nodes.values()}

    full = Replay(nodes, pods, 42, at_arrival=False, batch=1)
    a = full.run()
    fast = Replay(nodes, pods, 42, at_arrival=True, batch=50)
    b = fast.run()
    assert full.cycles > 5 * fast.cycles
    assert a.alloc_pct_at == b.alloc_pct_at and a.failed_at == b.failed_at
    assert ledger(full) == ledger(fast) and any(ledger(fast).values())
    assert full.planner.model.weights == fast.planner.model.weights


POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


@pytest.mark.parametrize(("row", "match"), [
    ("x,inf,1,1,1", "cpu_milli = 'inf'"),  # was an OverflowError traceback
    ("x,1,1,1,nan", "gpu_milli = 'nan'"),
    ("x,-5,1,1,1", "cpu_milli = '-5'"),  # was taken as -5 milli CPU
    ("x,1,-1,1,1", "memory_mib = '-1'"),
    ("x,1,1,1,2.7", "gpu_milli = '2.7'"),  # was cut to 2
    ("x,1,1,1,5000", "gpu_milli 5000"),  # was a whole GPU
    ("x,1,1,0,500", "num_gpu 0"),  # was a share on no GPU, refused only mid-replay
])
def test_pod_csv_values_out_of_range_are_refused(tmp_path: Path, row: str, match: str) -> None:
    p = write(tmp_path, "p.csv", POD_HEADER + row + "\n")
    with pytest.raises(TraceError, match=re.escape(match)) as e:
        load_pods(p)
    assert f"{p}:2" in str(e.value)


def test_pod_csv_whole_numbers_written_as_floats_still_load(tmp_path: Path) -> None:
    (pod,) = load_pods(write(tmp_path, "p.csv", POD_HEADER + "x,1000.0,2,1,1000\n"))
    assert pod.cpu_milli == 1000


def test_node_csv_negative_gpus_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,-2,V100M16\n")
    with pytest.raises(TraceError, match="gpu = '-2'"):
        load_nodes(p)


def test_ambiguous_pod_csv_is_refused(tmp_path: Path) -> None:
    """A name given twice would collide in the replay (pods are keyed by name), a column
    given twice silently kept its last value."""
    dup = write(tmp_path, "d.csv", POD_HEADER + "x,1,1,1,500\ny,1,1,1,500\nx,1,1,1,500\n")
    with pytest.raises(TraceError, match=r"d\.csv:4: pod name 'x' also on line 2"):
        load_pods(dup)
    col = write(tmp_path, "c.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,cpu_milli\n"
                                   "x,1,1,1,500,9\n")
    with pytest.raises(TraceError, match=r"column\(s\) \['cpu_milli'\] more than once"):
        load_pods(col)
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                                     "n1,1,1,1,P100\nn1,1,1,1,P100\n")
    with pytest.raises(TraceError, match="node name 'n1' also on line 2"):
        load_nodes(nodes)


def test_pod_csv_encoding_and_control_characters(tmp_path: Path) -> None:
    bom = tmp_path / "bom.csv"  # as Excel saves a CSV: the header still matches
    bom.write_bytes(b"\xef\xbb\xbf" + POD_HEADER.encode() + b"x,1,1,1,500\r\n")
    assert [p.name for p in load_pods(bom)] == ["x"]
    latin = tmp_path / "l.csv"
    latin.write_bytes(POD_HEADER.encode() + b"caf\xe9,1,1,1,500\n")
    with pytest.raises(TraceError, match="not a UTF-8 CSV"):  # was a UnicodeDecodeError
        load_pods(latin)
    esc = write(tmp_path, "e.csv", POD_HEADER + '"\x1b]0;pwned\x07a\nb",1,1,1,500\n')
    with pytest.raises(TraceError) as e:
        load_pods(esc)
    assert "\x1b" not in str(e.value) and "\n" not in str(e.value)
    assert "control characters" in str(e.value)
    assert "'\\x1b]0;pwned\\x07a\\nb'" in str(e.value)  # shown once-escaped


def test_parse_seeds_refuses_ambiguous_or_huge() -> None:
    with pytest.raises(ValueError, match="LOW-HIGH"):
        parse_seeds("44-42")
    with pytest.raises(ValueError, match="42 more than once"):  # was two identical replays
        parse_seeds("42,42")
    with pytest.raises(ValueError, match="42 more than once"):
        parse_seeds("40-45,42")
    with pytest.raises(ValueError, match="at most 1000 seeds"):  # was a list of 10^8 ints
        parse_seeds("1-100000000")
    assert len(parse_seeds("1-1000")) == 1000
    with pytest.raises(ValueError, match="at most 1000 seeds"):
        parse_seeds(",".join(map(str, range(1001))))


@pytest.mark.parametrize(("moves", "speedup", "match"), [
    (float("nan"), 1.0, "--rebalance-moves nan"),  # was a ValueError traceback mid-replay
    (float("inf"), 1.0, "--rebalance-moves inf"),  # was an OverflowError traceback
    (None, float("nan"), "--speedup nan"),
    (None, float("inf"), "--speedup inf"),
])
def test_non_finite_options_are_refused(tmp_path: Path, moves: float | None, speedup: float,
                                        match: str) -> None:
    nodes = write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,8000,8000,1,T4\n")
    pods = write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,"
                                    "deletion_time\np,1,1,1,1000,1,2\n")
    for departures in (False, True):
        if speedup != 1.0 and not departures:
            continue
        text, rc = run_simulate(nodes, pods, ["fgd"], [1], False, None, departures, moves,
                                speedup, bound="off")
        assert rc == 2 and match in text, text


def _peak(read: Callable[[], object]) -> tuple[TraceError, int]:
    """The TraceError ``read`` raises, and the most memory it held (bytes, traced)."""
    def refused() -> TraceError:
        with pytest.raises(TraceError) as e:
            read()
        return e.value

    return traced_peak(refused)


def test_a_pod_list_past_the_row_cap_is_refused_while_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every row was read (list(reader)) before anything was checked: 10 million rows took
    # all the memory first. 50,000 rows at a cap of 1,000 show it stops at the cap.
    monkeypatch.setattr(trace, "MAX_ROWS", 1000, raising=False)
    f = tmp_path / "big.csv"
    with f.open("w") as fh:
        fh.write(POD_HEADER)
        fh.writelines(f"p{i},1000,100,1,500\n" for i in range(50_000))
    for read in (lambda: load_pods(f), lambda: read_rows(f)):  # simulate, simulate-derive
        err, peak = _peak(read)
        assert str(err) == (f"{f}: more than 1,000 rows; not read (simulate takes at most "
                            "1,000 pods or nodes; openb's lists have about 8,000): give "
                            "a shorter list, e.g. a sample of this one")
        assert peak < 2 * 1024 * 1024, peak  # all 50,000 rows: ~30 MiB


def test_a_long_list_is_held_as_pods_and_nodes_not_as_rows_of_text(tmp_path: Path) -> None:
    # Every row was kept as a dict of strings until the last was read: ~1.4 KB a pod and
    # ~2 KB a node at the peak (1.5 and 2 GB RSS at the 1,000,000-row cap); the typed
    # pods and nodes made of them are ~0.4 KB.
    n = 20_000
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                    "creation_time,deletion_time,scheduled_time\n"
                    + "".join(f"openb-pod-{i:05d},12000,16384,1,1000,,LS,Running,{i * 1000},"
                              f"{i * 2000},{i * 1000}\n" for i in range(n)))
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                     + "".join(f"openb-node-{i:05d},96000,786432,8,V100M32\n" for i in range(n)))
    for read, f in ((load_pods, pods), (load_nodes, nodes)):
        got, peak = traced_peak(lambda: read(f))  # noqa: B023 - called at once
        assert len(got) == n
        assert peak < 600 * n, (f.name, peak // n)


def test_a_pod_list_past_the_size_cap_is_refused_while_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "MAX_TEXT", 131_072, raising=False)
    f = tmp_path / "big.csv"
    f.write_text(POD_HEADER + "".join(f"p{i},1000,100,1,500\n" for i in range(20_000)))
    err, _ = _peak(lambda: load_pods(f))
    assert str(err).startswith(f"{f}: more than 131,072 characters (0.125 MiB); not read "), err


def test_a_line_or_header_too_long_is_refused_before_it_is_split(tmp_path: Path) -> None:
    # A 6 MB header of 3 million columns was read and split whole (a 24 MiB list) before
    # the missing column was named; a 2 GB line, all of it.
    f = tmp_path / "wide.csv"
    f.write_text("name," + "x," * 3_000_000 + "\n")
    err, peak = _peak(lambda: load_pods(f))
    assert str(err) == (f"{f}:1: a line longer than 65,536 characters; not read (openb's "
                        "lines have about 100): is it a pod list?")
    assert peak < 2 * 1024 * 1024, peak
    f.write_text(",".join(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"]
                          + [f"c{i}" for i in range(60)]) + "\n")
    err, _ = _peak(lambda: load_pods(f))
    assert str(err) == f"{f}: 65 columns; at most 64 (openb's have 11): is it a pod list?"


def test_a_row_with_more_or_fewer_fields_than_the_header_is_refused(tmp_path: Path) -> None:
    # DictReader put a row's extra fields under None (dropped unseen) and filled a short
    # row's missing columns with None, read as empty: a shifted column read as another.
    f = tmp_path / "pods.csv"
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
    f.write_text(head + "p1,1000,100,1,1000\np2,1000,100,1,1000,7\n")
    with pytest.raises(TraceError) as err:
        load_pods(f)
    assert str(err.value) == (f"{f}:3: 6 fields where the header has 5; give each row one "
                              "field per column")
    f.write_text(head + "p1,1000,100,1\n")
    with pytest.raises(TraceError) as err:
        load_pods(f)
    assert str(err.value) == (f"{f}:2: 4 fields where the header has 5; give each row one "
                              "field per column")
    f.write_text(head + "p1,1000,100,1,1000\n\np2,1000,100,0,0\n")  # a blank line is no row
    assert [p.name for p in load_pods(f)] == ["p1", "p2"]


@pytest.mark.parametrize("seeds", ["\uff14\uff12", "\u0664\u0662", "1,\u0663",
                                   "4\uff12-50", "\u0967-3"])
def test_seeds_of_other_than_ascii_digits_are_refused_naming_them(seeds: str) -> None:
    # int() reads any Unicode digit: fullwidth 42 was seed 42, unsaid
    with pytest.raises(ValueError) as e:
        parse_seeds(seeds)
    assert f"--seeds {seeds!r}" in str(e.value) and "ASCII digits" in str(e.value), e.value
