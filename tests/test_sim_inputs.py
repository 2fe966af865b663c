"""Hostile input files and options of ``swarmgpu simulate`` and ``simulate-derive``: each
is read as the openb format means or refused naming the file, the line and the fix
(docs/simulate.md, "Input files")."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.fifo import make_fifo, read_within

from swarmgpu.cli import main
from swarmgpu.sim import variants
from swarmgpu.sim.cli_entry import plot_unwritable, run_simulate
from swarmgpu.sim.priorities import run_cli
from swarmgpu.sim.trace import TraceError, load_nodes, load_pods
from swarmgpu.sim.traces import OPENB
from swarmgpu.sim.variants import read_rows, write_variants

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
DEFAULT_PODS = OPENB / "openb_pod_list_default.csv"


def test_an_error_names_the_line_the_row_is_on(tmp_path: Path) -> None:
    # Rows were counted, not lines: a blank line or a quoted field over two lines put
    # every later error one line early (and "also on line" of a twice-given name too).
    f = tmp_path / "p.csv"
    f.write_text(POD_HEADER + "p1,1,1,1,500,\n\np2,x,1,1,500,\n")
    for read in (load_pods, read_rows):  # simulate, simulate-derive
        with pytest.raises(TraceError, match=rf"^{f}:4: column cpu_milli = 'x'"):
            read(f)
    f.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos\n"
        'p1,1,1,1,500,"LS\nBE"\np2,1,1,1,500,LS\np1,1,1,1,500,LS\n'
    )
    with pytest.raises(TraceError, match=rf"^{f}:5: pod name 'p1' also on line 2;"):
        load_pods(f)
    f.write_text(POD_HEADER + "p1,1,1,1,500,\n\n\np2,1,1,1,500\n")
    with pytest.raises(TraceError, match=rf"^{f}:5: 5 fields where the header has 6"):
        load_pods(f)


def test_a_fifo_or_a_device_is_refused_not_waited_on(tmp_path: Path) -> None:
    # A FIFO with no writer hung the open for ever; a pipe (--pods <(zcat pods.csv.gz))
    # was read once per replay, the second read finding it empty ("missing column(s)"),
    # and simulate-derive hashed that empty second read into its manifest.
    fifo = make_fifo(tmp_path / "pods.csv")
    for read in (load_pods, load_nodes, read_rows):
        err = read_within(lambda read=read: read(fifo), fifo)  # type: ignore[misc]
        assert isinstance(err, TraceError), err
        assert str(err) == (
            f"{fifo}: a FIFO (a named pipe), not a regular file; save the "
            "list as a file and give its path"
        )
    with pytest.raises(TraceError, match=r"^/dev/zero: a character device, not a regular"):
        load_pods("/dev/zero")
    with pytest.raises(TraceError, match=rf"^{tmp_path}: a directory, not a regular file"):
        load_nodes(tmp_path)


def test_a_node_with_more_gpus_than_any_node_has_is_refused(tmp_path: Path) -> None:
    # gpu = 1000000000 built a billion GPU objects: a MemoryError traceback, after the
    # machine's memory was gone.
    f = tmp_path / "n.csv"
    f.write_text(NODE_HEADER + "n1,1000,1000,8,T4\nn2,1000,1000,1000000000,T4\n")
    with pytest.raises(TraceError) as err:
        load_nodes(f)
    assert str(err.value) == (
        f"{f}:3: column gpu = 1000000000; at most 64 GPUs a node (as "
        "the swarmgpu agent reports; openb's nodes have 8 at most)"
    )
    f.write_text(NODE_HEADER + "n1,1000,1000,64,T4\n")
    assert len(load_nodes(f)[0].gpus) == 64


def test_a_share_on_several_gpus_is_refused_at_its_line(tmp_path: Path) -> None:
    # Read, then refused once a replay asked its demand, as "pod p1: a share ..." with no
    # file or line to find it by.
    f = tmp_path / "p.csv"
    f.write_text(POD_HEADER + "p0,1,1,1,500,\np1,1,1,2,500,\n")
    with pytest.raises(TraceError) as err:
        load_pods(f)
    assert str(err.value) == (
        f"{f}:3: num_gpu 2 with gpu_milli 500; a share (gpu_milli "
        "below 1000) is of one GPU: give num_gpu 1, or gpu_milli 1000 "
        "for 2 whole GPUs"
    )


def test_a_pod_that_leaves_before_it_arrives_is_refused(tmp_path: Path) -> None:
    # --departures read it as a pod that lives 0 s, with nothing said.
    f = tmp_path / "p.csv"
    f.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
        "p0,1,1,1,500,10,10\np1,1,1,1,500,100,10\n"
    )
    with pytest.raises(TraceError) as err:
        load_pods(f)
    assert str(err.value) == (
        f"{f}:3: deletion_time 10 is before creation_time 100; a pod "
        "leaves after it arrives (seconds, as openb's)"
    )


NODES = NODE_HEADER + "n1,32000,65536,2,T4\n"
PODS = POD_HEADER + "p1,1000,100,1,500,\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("nodes", "pods", "why"),
    [
        # an IndexError traceback (no departures); a table of zeros (--departures, priorities)
        (NODES, POD_HEADER, "{pods}: no pods; give an openb pod list"),
        # no departures: the replay drew pods for ever, to reach 130% of the cluster's GPU
        (
            NODES,
            POD_HEADER + "p1,1000,100,0,0,\n",
            "{pods}: no pod asks for a GPU (num_gpu and gpu_milli are 0 in every row); simulate "
            "replays GPU pods: give a pod list with some",
        ),
        # a ZeroDivisionError traceback, in every mode
        (NODE_HEADER, PODS, "{nodes}: no nodes; give an openb node list"),
        (
            NODE_HEADER + "n1,32000,65536,0,T4\n",
            PODS,
            "{nodes}: no node has a GPU (column gpu is 0 in every row); simulate replays GPU "
            "pods: give a node list with some",
        ),
    ],
)
def test_a_trace_with_nothing_to_replay_is_refused(
    tmp_path: Path, nodes: str, pods: str, why: str
) -> None:
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(nodes)
    p.write_text(
        pods.replace(",gpu_spec\n", ",gpu_spec,creation_time,deletion_time\n").replace(
            ",\n", ",,1,5\n"
        )
    )
    want = why.format(nodes=n, pods=p)
    for departures in (False, True):
        text, rc = run_simulate(
            str(n), str(p), ["fgd", "swarmgpu"], [1], False, None, departures, bound="off"
        )
        assert (rc, text) == (2, want)
    text, rc = run_cli(str(n), str(p), [1], 0.5, 1.0, "online", False)
    assert (rc, text) == (2, f"swarmgpu simulate: {want}")


def test_a_replay_that_would_take_millions_of_arrivals_is_refused(tmp_path: Path) -> None:
    # The replay draws pods until their GPU asks reach 130% of the cluster's: one
    # 1-milli share among CPU pods on 100 8-GPU nodes took about 2,000,000 draws, then
    # as many arrivals to replay (hours, and the memory for them).
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODE_HEADER + "".join(f"n{i},96000,786432,8,V100M32\n" for i in range(100)))
    p.write_text(POD_HEADER + "p1,1000,100,1,1,\np2,1000,100,0,0,\n")
    text, rc = run_simulate(str(n), str(p), ["fgd"], [1], False, None, bound="off")
    assert rc == 2
    assert text == (
        f"{p}: its pods ask 1 GPU-milli in all, 0.5 a pod: reaching 130% of the "
        "cluster's 800,000 would take about 2,080,000 arrivals, more than the "
        "1,000,000 simulate replays; give a pod list asking more GPU or a node "
        "list with fewer GPUs (--departures replays the list as it is)"
    )


@pytest.mark.parametrize(
    ("policies", "speedup", "why"),
    [
        # a table of the bound alone, exit 0
        ([], 1.0, "--policy: no policy given; choose from swarmgpu, "),
        # the same replay twice, its row saying "seeds 2" for one seed
        (["fgd", "bestfit", "fgd"], 1.0, "--policy: fgd more than once; give each policy once"),
        # taken (and ignored) without --departures
        (["fgd"], 0.0, "--speedup 0: must be > 0 (1 = the trace's own times)"),
    ],
)
def test_policies_and_speedup_out_of_range_are_refused(
    tmp_path: Path, policies: list[str], speedup: float, why: str
) -> None:
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES)
    p.write_text(PODS)
    text, rc = run_simulate(
        str(n), str(p), policies, [1], False, None, speedup=speedup, bound="off"
    )
    assert rc == 2 and text.startswith(why), text


@pytest.mark.parametrize("mode", ["--departures", "--priorities"])
def test_a_speedup_too_small_for_the_traces_times_is_refused(tmp_path: Path, mode: str) -> None:
    # A creation time over --speedup 1e-300 is past a float: OverflowError, a traceback.
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES)
    p.write_text(POD_HEADER.replace("\n", ",creation_time,deletion_time\n")
                 + f"p1,1000,100,1,500,,0,10\np2,1000,100,1,500,,{10**15},{10**15}\n")
    args = ["simulate", "--nodes", str(n), "--pods", str(p), "--speedup", "1e-300", mode]
    args += ["--bound", "off"] if mode == "--departures" else ["0.5"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert res.output.startswith("swarmgpu simulate: --speedup 1e-300: must be at least 1e-15 "), \
        res.output


@pytest.mark.parametrize("online_at", [93, 1, 129])
def test_an_online_at_between_the_levels_is_refused(tmp_path: Path, online_at: int) -> None:
    # The row is solved at a recorded level (every 5%): --online-at 93 printed no row and
    # said nothing, read as "no policy placed every pod arrived by 93%".
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES)
    p.write_text(PODS)
    text, rc = run_simulate(str(n), str(p), ["bestfit"], [1], False, None, online_at=online_at)
    assert rc == 2, text
    assert text.startswith(f"--online-at {online_at}: a level the replays record"), text
    assert "multiple of 5" in text


def test_a_number_too_large_to_be_read_exactly_is_refused(tmp_path: Path) -> None:
    # Read through a float: 12345678901234567891 milli CPU became 12345678901234567168.
    f = tmp_path / "p.csv"
    f.write_text(POD_HEADER + "p1,12345678901234567891,1,1,500,\n")
    with pytest.raises(TraceError) as err:
        load_pods(f)
    assert str(err.value) == (
        f"{f}:2: column cpu_milli = '12345678901234567891' is not a "
        "whole number from 0 to 1,000,000,000,000,000"
    )
    f.write_text(POD_HEADER + "p1,1000000000000000,1e3,1,1000.0,\n")  # the largest; 1e3
    (pod,) = load_pods(f)
    assert (pod.cpu_milli, pod.memory_mib, pod.gpu_milli) == (10**15, 1000, 1000)


@pytest.mark.parametrize("raw", ["\u00b2", "9" * 5000, "12345678901234567891"])
def test_simulate_derive_refuses_a_number_it_cannot_read(tmp_path: Path, raw: str) -> None:
    # A superscript 2 passed str.isdigit, then int() raised; 5,000 digits passed too, and
    # int() refused past 4,300: ValueError tracebacks.
    f = tmp_path / "p.csv"
    f.write_text(POD_HEADER + f"p1,1,1,{raw},1000,\n")
    with pytest.raises(TraceError) as err:
        read_rows(f)
    assert str(err.value) == (
        f"{f}:2: column num_gpu = {raw!r} is not a whole number from 0 to 1,000,000,000,000,000"
    )


def test_gpu_spec_models_are_read_as_the_daemon_reads_gpu_product(tmp_path: Path) -> None:
    # Parts were kept unstripped: gpu_spec " " (a blank cell) pinned the pod to a model
    # named " ", which no node has, so no policy ever placed it and nothing said why.
    f = tmp_path / "p.csv"
    f.write_text(POD_HEADER + "p1,1,1,1,500, \np2,1,1,1,500,T4 | V100M16||\n")
    assert [p.gpu_spec for p in load_pods(f)] == [(), ("T4", "V100M16")]


def test_seeds_reversed_are_named_as_such_once() -> None:
    # "'51-42' is not N or LOW-HIGH" after "--seeds: --seeds '51-42':": it is LOW-HIGH,
    # backwards, and the option was named twice.
    res = CliRunner().invoke(main, ["simulate", "--seeds", "51-42"])
    assert res.exit_code == 2
    assert res.output == (
        "swarmgpu simulate: --seeds '51-42': 51 is above 42 in LOW-HIGH; e.g. --seeds 42-51\n"
    )


@pytest.mark.parametrize(
    ("args", "why"),
    [
        # each was taken and ignored: a table of what the user did not ask for, exit 0
        (["--speedup", "2"], "--speedup applies with --departures or --priorities"),
        (["--drain", "60"], "--drain applies with --priorities"),
        (["--departures", "--drain", "60"], "--drain applies with --priorities"),
        (["--departures", "--online-at", "80"], "--online-at applies without --departures"),
        (["--bound", "off", "--online-at", "80"], "--online-at applies with a bound"),
        (["--policy", "fgd", "--workload", "oracle"], "--workload applies with --policy swarmgpu"),
        (["--priorities", "0.5", "--rebalance-moves", "2"], "--rebalance-moves applies without"),
        (["--priorities", "0.5", "--policy", "fgd"], "--policy applies without --priorities"),
        (["--priorities", "0.5", "--departures"], "--departures applies without --priorities"),
        (["--priorities", "0.5", "--plot", "a.png"], "--plot applies without --priorities"),
        (["--priorities", "0.5", "--bound", "mip"], "--bound applies without --priorities"),
        (["--priorities", "0.5", "--online-at", "80"], "--online-at applies without"),
        (["--priorities", "0.5", "--progress"], "--progress applies without --priorities"),
        (["--trace", "cpu050"], "--trace applies without"),
    ],
)
def test_an_option_the_mode_does_not_use_is_refused(
    tmp_path: Path, args: list[str], why: str
) -> None:
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES)
    p.write_text(PODS)
    base = ["simulate", "--nodes", str(n), "--pods", str(p), "--seeds", "1"]
    res = CliRunner().invoke(main, base + args)
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"swarmgpu simulate: {why}"), res.output


def test_options_the_mode_uses_are_taken(tmp_path: Path) -> None:
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES)
    p.write_text(
        PODS.replace(",gpu_spec\n", ",gpu_spec,creation_time,deletion_time\n").replace(
            ",\n", ",,1,5\n"
        )
    )
    base = ["simulate", "--nodes", str(n), "--pods", str(p), "--seeds", "1", "--json"]
    for args in (
        ["--departures", "--speedup", "2", "--bound", "off", "--workload", "oracle"],
        ["--priorities", "0.5", "--speedup", "2", "--drain", "60", "--policy", "swarmgpu"],
        ["--priorities", "0.5", "--no-progress", "--workload", "oracle"],
        ["--policy", "fgd,swarmgpu", "--workload", "oracle", "--bound", "off", "--online-at", "0"],
    ):
        res = CliRunner().invoke(main, base + args)
        assert res.exit_code == 0, (args, res.output)


def test_pods_pinned_to_a_model_no_node_has_are_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No policy can place them; the table showed them failed, with nothing said why.
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES + "n2,32000,65536,0,A100\n")  # an A100 node with no GPU places none
    rows = "p1,1,1,1,500,A100\np2,1,1,1,500,t4\np3,1,1,1,500,H100|A100\np4,1,1,1,500,T*\n"
    p.write_text(  # times for --departures; a CPU pod's spec places nothing
        (POD_HEADER + rows + "p5,1,1,0,0,H100\n")
        .replace(",gpu_spec\n", ",gpu_spec,creation_time,deletion_time\n")
        .replace("\n", ",1,5\n")
        .replace("deletion_time,1,5", "deletion_time")
    )
    for departures in (False, True):
        text, rc = run_simulate(str(n), str(p), ["fgd"], [1], False, None, departures, bound="off")
        assert rc == 0, text
        assert capsys.readouterr().err == (
            f"simulate: 2 GPU pods of {p} ask for GPU models no node of {n} has (A100, "
            "H100): no policy can place them (the nodes' models: T4)\n"
        )
    text, rc = run_cli(str(n), str(p), [1], 0.5, 1.0, "online", False)
    assert rc == 0, text
    assert capsys.readouterr().err.count("no policy can place them") == 1


def test_pods_asking_more_gpus_than_any_node_of_their_model_has_are_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No policy can place them (a pod's GPUs are on one node); the table showed them
    # failed, with nothing said why. Pinned to a model no node has: said as such, once.
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES + "n2,32000,65536,4,V100\n")  # T4: 2 a node, V100: 4
    rows = (
        "p1,1,1,1,500,T4\n"  # a share: any GPU holds it
        "p2,1,1,3,1000,t4\n"  # 3 whole T4s: no T4 node has 3
        "p3,1,1,4,1000,\n"  # 4 of any model: the V100 node has 4
        "p4,1,1,5,1000,\n"  # 5 of any model: no node has 5
        "p5,1,1,3,1000,T4|V100\n"  # 3 of T4 or V100: the V100 node has 4
        "p6,1,1,3,1000,A100\n"  # a model no node has: said by the note on models
    )
    p.write_text(
        (POD_HEADER + rows)
        .replace(",gpu_spec\n", ",gpu_spec,creation_time,deletion_time\n")
        .replace("\n", ",1,5\n")
        .replace("deletion_time,1,5", "deletion_time")
    )
    said = (
        f"simulate: 1 GPU pod of {p} asks for GPU models no node of {n} has (A100): no "
        "policy can place them (the nodes' models: T4, V100)\n"
        f"simulate: 2 GPU pods of {p} ask more GPUs than any node of {n} with their GPU "
        "model has: no policy can place them (a pod's GPUs are on one node): p2 asks 3 of "
        "t4 (at most 2 a node), p4 asks 5 of any model (at most 4 a node)\n"
    )
    for departures in (False, True):
        text, rc = run_simulate(str(n), str(p), ["fgd"], [1], False, None, departures, bound="off")
        assert rc == 0, text
        assert capsys.readouterr().err == said
    text, rc = run_cli(str(n), str(p), [1], 0.5, 1.0, "online", False)
    assert rc == 0, text
    assert capsys.readouterr().err.count("more GPUs than any node") == 1


def test_pods_asking_more_cpu_or_memory_than_any_node_with_their_gpus_are_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A node list with cpu_milli in cores (64 for 64,000) failed every GPU pod: a table
    # of 0.00% with nothing said why. So did a pod bigger than every node of its model.
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODE_HEADER + "n1,64,262144,8,T4\nn2,96000,393216,8,V100\n")
    p.write_text(
        POD_HEADER
        + "p1,1000,1024,1,1000,T4\n"  # 1 CPU on a node of 64 milli-CPU
        + "p2,500,1024,1,500,\n"  # a share: the V100 node holds it
        + "p3,120000,1024,8,1000,V100\n"  # 120 CPUs on a node of 96
        + "p4,1000,737280,8,1000,\n"  # 720 GiB: no node of any model has it
    )
    text, rc = run_simulate(str(n), str(p), ["fgd"], [1], False, None, bound="off")
    assert rc == 0, text
    assert capsys.readouterr().err == (
        f"simulate: 3 GPU pods of {p} ask more CPU or memory than any node of {n} with "
        "their GPUs has: no policy can place them (cpu_milli is thousandths of a CPU, "
        "memory_mib MiB): p1 asks 1000 milli-CPU and 1024 MiB of T4 (at most 64 milli-CPU "
        "and 262144 MiB a node), p3 asks 120000 milli-CPU and 1024 MiB of V100 (at most "
        "96000 milli-CPU and 393216 MiB a node), p4 asks 1000 milli-CPU and 737280 MiB of "
        "any model (at most 96000 milli-CPU and 393216 MiB a node)\n"
    )


@pytest.mark.parametrize(
    ("header", "row", "why"),
    [
        (POD_HEADER, ",1,1,1,500,\n", "pod name is empty; give each row a name"),
        (POD_HEADER, " ,1,1,1,500,\n", "pod name is empty; give each row a name"),
        (NODE_HEADER, ",1,1,1,T4\n", "node name is empty; give each row a name"),
        (
            POD_HEADER,
            "p2,1,1,1,500,T4|A\x1b[2J\n",
            "gpu_spec 'T4|A\\x1b[2J' has control characters; remove them",
        ),
        (
            NODE_HEADER,
            "n2,1,1,1,T\u202e4\n",
            "model 'T\\u202e4' has control characters; remove them",
        ),
    ],
)
def test_an_empty_name_or_a_model_with_control_characters_is_refused(
    tmp_path: Path, header: str, row: str, why: str
) -> None:
    # Names key the replay and are printed; models are printed in the note above.
    f = tmp_path / "f.csv"
    first = "p1,1,1,1,500,\n" if header == POD_HEADER else "n1,1,1,1,T4\n"
    f.write_text(header + first + row)
    read = load_pods if header == POD_HEADER else load_nodes
    with pytest.raises(TraceError) as err:
        read(f)
    assert str(err.value) == f"{f}:3: {why}"


def test_derive_hashes_the_pod_list_it_read_without_opening_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # write_variants read the list bounded, then opened it again for the manifest's
    # sha256 with an unbounded read_bytes(): a list replaced by a FIFO in between hung
    # it, /dev/zero there took all the memory, and a file swapped in was hashed as the
    # source. The digest is of the very bytes the rows were read from now.
    pods = tmp_path / "pods.csv"
    pods.write_text("\n".join(DEFAULT_PODS.read_text().splitlines()[:201]) + "\n")
    want = hashlib.sha256(pods.read_bytes()).hexdigest()
    real = variants.read_rows

    def then_swapped(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        pods.unlink()
        make_fifo(pods)
        return got

    monkeypatch.setattr(variants, "read_rows", then_swapped)
    made = read_within(lambda: write_variants(pods, tmp_path / "v", ["cpu250"]), pods)
    assert not isinstance(made, BaseException), made
    assert made["source_sha256"] == want


def test_a_header_that_only_looks_right_is_named_with_the_fix(tmp_path: Path) -> None:
    # Each was "missing column(s) [...]" listing columns the header seemed to have: a
    # space after each comma, capitals, semicolons or tabs (a spreadsheet's export), an
    # empty file.
    f = tmp_path / "p.csv"
    cases = [
        ("name, cpu_milli, memory_mib, num_gpu, gpu_milli\np, 1, 1, 1, 500\n",
         "the header has ' cpu_milli' for 'cpu_milli', ' memory_mib' for 'memory_mib' and "
         "2 more (spaces or capitals); write each name exactly as openb's"),
        ("NAME,CPU_MILLI,MEMORY_MIB,NUM_GPU,GPU_MILLI\np,1,1,1,500\n",
         "the header has 'NAME' for 'name', 'CPU_MILLI' for 'cpu_milli' and 3 more"),
        ("name;cpu_milli;memory_mib;num_gpu;gpu_milli\np;1;1;1;500\n",
         "its columns are separated by ';'; simulate reads comma-separated lists: save it "
         "as CSV with commas"),
        ("name\tcpu_milli\tmemory_mib\tnum_gpu\tgpu_milli\np\t1\t1\t1\t500\n",
         "its columns are separated by tabs"),
        ("", "empty; expected a header line starting name,cpu_milli,memory_mib,num_gpu,"
             "gpu_milli"),
        ("\n\n", "empty; expected a header line"),
    ]
    for text, want in cases:
        f.write_text(text)
        for read in (load_pods, read_rows):
            with pytest.raises(TraceError) as err:
                read(f)
            assert want in str(err.value), (text, str(err.value))
            assert str(err.value).startswith(f"{f}: ")


def test_a_file_that_is_not_utf8_is_named_at_its_line(tmp_path: Path) -> None:
    # The offset was of the 8 KiB chunk being decoded, not of the file ("at byte 3975"
    # for a byte at 44,935), and a UTF-16 or gzip file was "invalid start byte".
    f = tmp_path / "p.csv"
    rows = "".join(f"p{i},1000,1024,1,1000,\n" for i in range(2000))
    f.write_bytes((POD_HEADER + rows).encode() + b"p\xe9,1,1,1,1000,\n")
    for read in (load_pods, read_rows):
        with pytest.raises(TraceError, match=rf"^{f}:2002: not a UTF-8 CSV \(byte 0xe9 on "
                           r"this line\); save it as UTF-8$"):
            read(f)
    f.write_bytes("name,cpu_milli\n".encode("utf-16"))
    with pytest.raises(TraceError, match=rf"^{f}: not a UTF-8 CSV: UTF-16 text \(its byte "
                       r"order mark\); save it as UTF-8$"):
        load_pods(f)
    f.write_bytes(gzip.compress((POD_HEADER + rows).encode()))
    with pytest.raises(TraceError, match=rf"^{f}: not a UTF-8 CSV: gzip-compressed; "
                       r"decompress it \(gunzip\) and give the \.csv$"):
        load_pods(f)


def test_a_negative_seed_is_refused() -> None:
    # random.Random(-5) draws as Random(5): "--seeds -5" was seed 5 under another name,
    # and "--seeds -5,5" the same replay twice in the means (a seed given twice is
    # refused for that very reason).
    res = CliRunner().invoke(main, ["simulate", "--seeds", "-5,5"])
    assert res.exit_code == 2
    assert res.output == (
        "swarmgpu simulate: --seeds '-5,5': -5 is below 0; a seed is a whole number from "
        "0 (the replay draws with seed -5 as with 5); e.g. --seeds 42-51\n"
    )


def test_priorities_on_pods_without_times_name_priorities(tmp_path: Path) -> None:
    # The fix said "run without --departures" to a user who had given --priorities.
    nodes, pods = tmp_path / "n.csv", tmp_path / "p.csv"
    nodes.write_text(NODE_HEADER + "n1,64000,262144,8,T4\n")
    pods.write_text(POD_HEADER + "p1,1000,1024,1,1000,\n")
    text, code = run_cli(str(nodes), str(pods), [42], 0.5, 1.0, "online", False)
    assert code == 2
    assert text == (
        f"swarmgpu simulate: {pods}: 1 pod(s) (first p1) have no creation_time/"
        "deletion_time, which --priorities needs (it replays the pods' arrivals and "
        "departures); use an 11-column openb pod file (e.g. openb_pod_list_default.csv) "
        "or run without --priorities"
    )


def test_a_plot_path_that_is_a_fifo_is_refused_before_the_replay(tmp_path: Path) -> None:
    # It passed the check (a FIFO is "writable"), and after the whole replay savefig
    # failed ("File or stream is not seekable"), the table lost.
    fifo = make_fifo(tmp_path / "alloc.png")
    assert plot_unwritable(str(fifo)) == (
        f"--plot {fifo}: a FIFO (a named pipe), not a regular file; give the path of the "
        "PNG file to write"
    )
    assert plot_unwritable("/dev/null") is None  # written and thrown away, as asked


@pytest.mark.parametrize("departures", [False, True])
def test_an_empty_plot_path_is_refused_not_ignored(tmp_path: Path, departures: bool) -> None:
    # --plot '' replayed and drew nothing, with nothing said (with --departures too,
    # which refuses --plot).
    n, p = tmp_path / "n.csv", tmp_path / "p.csv"
    n.write_text(NODES)
    p.write_text(PODS)
    text, rc = run_simulate(str(n), str(p), ["fgd"], [1], False, "", departures, bound="off")
    assert rc == 2, text
    assert text.startswith("--plot '': an empty path" if not departures else "--plot draws"), text


def test_derive_into_a_file_says_it_is_a_file(tmp_path: Path) -> None:
    # "cannot create the output folder (File exists)": it exists, as a file.
    out = tmp_path / "variants"
    out.write_text("")
    res = CliRunner().invoke(main, ["simulate-derive", "--out", str(out), "--variant", "cpu250"])
    assert res.exit_code == 2
    assert res.output == (
        f"swarmgpu simulate-derive: {out}: a file, not a folder; give --out a folder "
        "(made if missing) for the derived lists\n"
    )


@pytest.mark.parametrize(
    ("times", "why"),
    [
        ("x,5", "column creation_time = 'x' is not a whole number from 0 to "
                "1,000,000,000,000,000"),
        ("5,-1", "column deletion_time = '-1' is not a whole number from 0 to "
                 "1,000,000,000,000,000"),
        ("10,5", "deletion_time 5 is before creation_time 10; a pod leaves after it arrives"),
    ],
)
def test_simulate_derive_refuses_times_simulate_refuses(
    tmp_path: Path, times: str, why: str
) -> None:
    # derive sorted a creation_time it could not read as 0 and wrote it out; simulate
    # then refused the derived file, at a line of the derived file (its pods renamed).
    f = tmp_path / "p.csv"
    f.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
        f"p1,1,1,1,1000,1,2\np2,1,1,1,1000,{times}\n"
    )
    with pytest.raises(TraceError) as err:
        read_rows(f)
    assert str(err.value).startswith(f"{f}:3: {why}")


def test_derive_refuses_an_empty_out_rather_than_writing_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --out '' was Path(''), the current folder: the lists and a manifest.json written
    # among whatever is there
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["simulate-derive", "--out", "", "--variant", "cpu250"])
    assert res.exit_code == 2, res.output
    assert "--out '': an empty path; give a folder for the derived lists" in res.output
    assert list(tmp_path.iterdir()) == []
