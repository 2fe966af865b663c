"""Derived openb workloads (swarmgpu/sim/variants.py) against the published ones.

The bundled trace has four published variants (gpushare40, multigpu20, gpuspec10, cpu050):
deriving them from the bundled default must give their shape. The heavier published
variants are not bundled; their statistics are pinned below.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fifo import make_fifo, read_within

from swarmgpu.cli import main
from swarmgpu.sim.trace import TraceError, load_pods
from swarmgpu.sim.traces import OPENB
from swarmgpu.sim.variants import (
    DEFAULT_VARIANTS,
    Row,
    VariantError,
    derive,
    gpu_milli,
    kind_of,
    parse_variant,
    read_rows,
    stats,
    write_variants,
)

DEFAULT = OPENB / "openb_pod_list_default.csv"

# Statistics of the published heavier variants, computed with stats() from
# hkust-adsl/kubernetes-scheduler-simulator data/csv/openb_pod_list_<name>.csv at commit
# 8f3d641 (the same files as alibaba/clusterdata cluster-trace-gpu-v2023/csv/; CC BY 4.0).
PUBLISHED = {
    "gpushare60": {"pods": 8152, "share_request": 0.6001, "multi_request": 0.0330,
                   "spec_pods": 0.0, "cpu_pods": 0.1335},
    "gpushare80": {"pods": 8152, "share_request": 0.8004, "multi_request": 0.0254,
                   "spec_pods": 0.0, "cpu_pods": 0.1335},
    "gpushare100": {"pods": 8152, "share_request": 1.0, "multi_request": 0.0,
                    "spec_pods": 0.0, "cpu_pods": 0.1335},
    "multigpu30": {"pods": 8508, "share_request": 0.2142, "multi_request": 0.3022,
                   "spec_pods": 0.0, "cpu_pods": 0.1279},
    "multigpu40": {"pods": 8746, "share_request": 0.1834, "multi_request": 0.4024,
                   "spec_pods": 0.0, "cpu_pods": 0.1244},
    "multigpu50": {"pods": 9061, "share_request": 0.1525, "multi_request": 0.5032,
                   "spec_pods": 0.0, "cpu_pods": 0.1201},
    "gpuspec20": {"pods": 8152, "share_request": 0.2845, "multi_request": 0.0729,
                  "spec_pods": 0.2044, "cpu_pods": 0.1335},
    "gpuspec25": {"pods": 8152, "share_request": 0.2845, "multi_request": 0.0729,
                  "spec_pods": 0.2490, "cpu_pods": 0.1335},
    "gpuspec33": {"pods": 8152, "share_request": 0.2845, "multi_request": 0.0729,
                  "spec_pods": 0.3381, "cpu_pods": 0.1335},
    "cpu100": {"pods": 7853, "share_request": 0.2845, "multi_request": 0.0729,
               "spec_pods": 0.0, "cpu_pods": 0.1005},
    "cpu250": {"pods": 9420, "share_request": 0.2845, "multi_request": 0.0729,
               "spec_pods": 0.0, "cpu_pods": 0.2501},
}

# How close a derived file must be to the published one. Sampling noise sets these:
# the multi-GPU share of a gpushare file rides on a few dozen 2-8 GPU pods, and about
# 7,000 coin flips put a gpuspec fraction within +-1.5 points.
TOLERANCE = {"pods": 0.01, "share_request": 0.005, "multi_request": 0.005,
             "spec_pods": 0.02, "cpu_pods": 0.002}


@pytest.fixture(scope="module")
def default_rows() -> list[Row]:
    return read_rows(DEFAULT)[1]


def _close(name: str, got: dict[str, float], want: dict[str, float]) -> None:
    family = parse_variant(name).kind
    for key, tol in TOLERANCE.items():
        if key == "multi_request" and family == "gpushare":
            tol = 0.015
        if key == "pods":
            assert abs(got[key] - want[key]) <= tol * want[key], (name, key, got[key], want[key])
        else:
            assert abs(got[key] - want[key]) <= tol, (name, key, got[key], want[key])


@pytest.mark.parametrize("name", ["gpushare40", "multigpu20", "gpuspec10", "cpu050"])
def test_derived_matches_the_bundled_published_variant(default_rows: list[Row], name: str) -> None:
    published = stats(read_rows(OPENB / f"openb_pod_list_{name}.csv")[1])
    _close(name, stats(derive(default_rows, name)), published)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_derived_matches_the_heavier_published_variant(default_rows: list[Row], name: str) -> None:
    _close(name, stats(derive(default_rows, name)), PUBLISHED[name])


def test_gpuspec_picks_specs_per_kind_as_the_published_file(default_rows: list[Row]) -> None:
    def by_kind(rows: list[Row]) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {"share": Counter(), "whole": Counter()}
        for r in rows:
            if r["gpu_spec"] and kind_of(r) in out:
                out[kind_of(r)][r["gpu_spec"]] += 1
        return out

    published_rows = read_rows(OPENB / "openb_pod_list_gpuspec10.csv")[1]
    derived_rows = derive(default_rows, "gpuspec10")
    published, derived = by_kind(published_rows), by_kind(derived_rows)
    for kind in ("share", "whole"):
        p, d = published[kind], derived[kind]
        # The same models, in about the same proportions (a few hundred picks each).
        for spec, _ in p.most_common(4):
            assert abs(p[spec] / p.total() - d[spec] / d.total()) < 0.06, (kind, spec, p, d)

    def share_vs_whole(rows: list[Row]) -> float:
        kinds = Counter(kind_of(r) for r in rows)
        pinned = Counter(kind_of(r) for r in rows if r["gpu_spec"])
        return (pinned["share"] / kinds["share"]) / (pinned["whole"] / kinds["whole"])

    # Sharing pods are pinned less often than whole-GPU pods, in both.
    assert share_vs_whole(derived_rows) == pytest.approx(share_vs_whole(published_rows), abs=0.15)
    assert set(derived["share"]) <= {"T4", "P100", "G2|P100|T4|V100M16|V100M32"}


def test_rows_are_copies_of_input_rows_and_load_as_a_trace(default_rows: list[Row],
                                                           tmp_path: Path) -> None:
    def body(r: Row) -> tuple[str, ...]:
        return tuple(v for k, v in sorted(r.items()) if k not in ("name", "gpu_spec"))

    known = {body(r) for r in default_rows}
    made = write_variants(DEFAULT, tmp_path, ["gpushare80", "multigpu40", "gpuspec30", "cpu150"])
    for name, info in made["variants"].items():
        rows = read_rows(tmp_path / info["file"])[1]
        assert all(body(r) in known for r in rows), name
        assert len({r["name"] for r in rows}) == len(rows), name
        pods = load_pods(tmp_path / info["file"])  # what swarmgpu simulate reads
        assert len(pods) == info["pods"]
    assert made["variants"]["cpu150"]["cpu_pods"] == pytest.approx(0.15, abs=0.001)
    # From a 5-column pod list (as multigpu20 is) a gpuspec variant gains the column.
    five = tmp_path / "five.csv"
    with five.open("w") as fh:
        fh.write("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
        fh.writelines(f"p{i},1000,1024,1,{500 if i % 2 else 1000}\n" for i in range(200))
    write_variants(five, tmp_path / "five", ["gpuspec40"])
    pinned = [p for p in load_pods(tmp_path / "five" / "openb_pod_list_gpuspec40.csv")
              if p.gpu_spec]
    assert 40 <= len(pinned) <= 120
    assert (tmp_path / "manifest.json").is_file()


def test_same_seed_same_file_other_seed_other_file(default_rows: list[Row]) -> None:
    for name in ("gpushare60", "multigpu30", "gpuspec20", "cpu250"):
        assert derive(default_rows, name, 42) == derive(default_rows, name, 42)
        assert derive(default_rows, name, 42) != derive(default_rows, name, 43)
    # A variant does not depend on which others are derived with it.
    alone = derive(default_rows, "cpu100")
    derive(default_rows, "gpushare60")
    assert derive(default_rows, "cpu100") == alone


def test_names_parse_as_openb_names_them() -> None:
    assert parse_variant("gpushare100").fraction == 1.0
    assert parse_variant("gpuspec05").fraction == 0.05
    assert parse_variant("cpu250").fraction == 0.25  # per mille, as openb's cpu050 = 5%
    assert [parse_variant(n).name for n in DEFAULT_VARIANTS] == list(DEFAULT_VARIANTS)
    assert parse_variant("load150").fraction == 1.5 and parse_variant("load150").name == "load150"
    for bad, said in [("gpushare", "expected"), ("cpu25", "per mille"),
                      ("multigpu100", "below 100%"), ("gpuspec150", "more than 100%"),
                      ("../etc", "expected"), ("load100", "above 100"),
                      ("load50", "three digits"), ("load600", "at most 500")]:
        with pytest.raises(VariantError, match=said):
            parse_variant(bad)


def test_impossible_derivations_name_the_fix(default_rows: list[Row], tmp_path: Path) -> None:
    with pytest.raises(VariantError, match=r"already hold .* ask for more"):
        derive(default_rows, "multigpu05")
    no_multi = [r for r in default_rows if kind_of(r) != "multi"]
    with pytest.raises(VariantError, match="no multi-GPU pods"):
        derive(no_multi, "multigpu30")
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,2,500\n")
    with pytest.raises(TraceError, match=r"a share \(gpu_milli below 1000\) is of one GPU"):
        read_rows(bad)
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,lots,10,1,500\n")
    with pytest.raises(TraceError, match=r"bad.csv:2: column cpu_milli"):
        read_rows(bad)
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\n")
    with pytest.raises(TraceError, match="missing column"):
        read_rows(bad)


@pytest.mark.parametrize(("row", "said"), [
    ("p,1000,10,1,2000", "gpu_milli 2000 is per GPU, at most 1000"),
    ("p,1000,10,0,300", "num_gpu 0 with gpu_milli 300"),
])
def test_a_gpu_ask_simulate_refuses_is_refused_at_its_line(tmp_path: Path, row: str,
                                                           said: str) -> None:
    # Read as a whole GPU (2000) and as a CPU pod (num_gpu 0), counted so in the printed
    # shares, and copied into every derived file, which simulate then refused.
    bad = tmp_path / "bad.csv"
    bad.write_text(f"name,cpu_milli,memory_mib,num_gpu,gpu_milli\nq,1000,10,1,500\n{row}\n")
    with pytest.raises(TraceError, match=rf"^{bad}:3: {said}"):
        read_rows(bad)
    with pytest.raises(TraceError, match=rf"^{bad}:3: {said}"):  # as simulate reads it
        load_pods(bad)


def test_cli_writes_the_variants_and_reports_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["simulate-derive", "--out", str(tmp_path / "v"),
                               "--variant", "gpushare60", "--seed", "7"])
    assert res.exit_code == 0, res.output
    assert "sharing 60.0%" in res.output  # from the bundled default, as --pods was not given
    with (tmp_path / "v" / "openb_pod_list_gpushare60.csv").open() as fh:
        assert next(csv.reader(fh))[:5] == ["name", "cpu_milli", "memory_mib", "num_gpu",
                                            "gpu_milli"]
    res = runner.invoke(main, ["simulate-derive", "--pods", str(DEFAULT), "--out",
                               str(tmp_path / "w"), "--variant", "cpu25"])
    assert res.exit_code == 2
    assert "cpu050 = 5.0%" in res.output
    assert not (tmp_path / "w").exists()  # names are checked before anything is written


def test_load_adds_copies_of_gpu_pods_until_the_request_is_reached(default_rows: list[Row],
                                                                   ) -> None:
    def body(r: Row) -> tuple[str, ...]:
        return tuple(v for k, v in sorted(r.items()) if k != "name")

    got = derive(default_rows, "load150")
    have, want = Counter(map(body, got)), Counter(map(body, default_rows))
    assert not want - have  # every input pod kept
    added = have - want
    keys = sorted(k for k in default_rows[0] if k != "name")
    assert added and all(kind_of(dict(zip(keys, b, strict=True))) != "cpu" for b in added)
    before = sum(gpu_milli(r) for r in default_rows if kind_of(r) != "cpu")
    after = sum(gpu_milli(r) for r in got if kind_of(r) != "cpu")
    assert 1.5 * before <= after < 1.5 * before + 8000  # stops at the first pod past it


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["--held-out", "--help"], []])
def test_derive_own_takes_no_option_for_its_folder(tmp_path: Path, argv: list[str]) -> None:
    # benchmarks/derive_own.py once took `--help` for the folder to write into and wrote
    # fourteen pod lists under ./--help; an option or nothing prints its usage, writes none.
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "derive_own.py"
    done = subprocess.run([sys.executable, str(script), *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "derive_own.py --held-out" in done.stderr
    assert not list(tmp_path.iterdir())


def test_derive_reads_a_pod_list_as_simulate_does(tmp_path: Path) -> None:
    # simulate-derive had its own CSV reader: a BOM (as Excel saves a CSV) hid the first
    # column ("missing column ['name']"), a column given twice was taken (the last one)
    # and written out again. It reads with simulate's reader now.
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
    row = "p1,1000,1024,1,1000,,0,10\n"
    bom = tmp_path / "bom.csv"
    bom.write_text("\ufeff" + head + row, encoding="utf-8")
    header, rows = read_rows(bom)
    assert header[0] == "name" and rows[0]["name"] == "p1"
    twice = tmp_path / "twice.csv"
    twice.write_text(head.rstrip("\n") + ",cpu_milli\n" + row.rstrip("\n") + ",5\n")
    with pytest.raises(TraceError, match=r"\['cpu_milli'\] more than once"):
        read_rows(twice)
    latin = tmp_path / "latin.csv"
    latin.write_bytes((head + "p\xe9,1000,1024,1,1000,,0,10\n").encode("latin-1"))
    with pytest.raises(TraceError, match="not a UTF-8 CSV"):
        read_rows(latin)


def test_cli_names_each_file_at_the_path_it_wrote(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ``--out variants/`` (docs/simulate.md) printed variants//NAME, and
    ``--out ''``, which wrote here, printed /NAME: a file at the root (now refused:
    ``--out .`` writes here, said as NAME)."""
    small = tmp_path / "pods.csv"
    small.write_text("\n".join(DEFAULT.read_text().splitlines()[:201]) + "\n")
    monkeypatch.chdir(tmp_path)
    for out, want in [("v/", "v/openb_pod_list_cpu250.csv"), (".", "openb_pod_list_cpu250.csv")]:
        res = CliRunner().invoke(main, ["simulate-derive", "--pods", str(small), "--out", out,
                                        "--variant", "cpu250"])
        assert res.exit_code == 0, res.output
        assert res.output.startswith(f"{want}: "), res.output
        assert (tmp_path / want).is_file()


@pytest.mark.parametrize("name", ["openb_pod_list_cpu250.csv", "manifest.json"])
def test_a_fifo_at_a_target_is_refused_not_waited_on(tmp_path: Path, name: str) -> None:
    """simulate-derive opened each target with a plain open("w"): a FIFO there held it
    for ever. It is named and refused before anything is written."""
    small = tmp_path / "pods.csv"
    small.write_text("\n".join(DEFAULT.read_text().splitlines()[:201]) + "\n")
    out = tmp_path / "v"
    out.mkdir()
    fifo = make_fifo(out / name)
    res = read_within(lambda: CliRunner().invoke(main, [
        "simulate-derive", "--pods", str(small), "--out", str(out), "--variant", "cpu250"]),
        fifo)
    assert res.exit_code == 2, res.output
    assert f"{fifo}: a FIFO (a named pipe), not a regular file; remove it" in res.output
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing written, no temp left


def test_targets_are_replaced_whole(tmp_path: Path) -> None:
    """Each file is written beside its target and renamed over it: a reader (or a crash)
    sees the old file or the new one, never half of one."""
    small = tmp_path / "pods.csv"
    small.write_text("\n".join(DEFAULT.read_text().splitlines()[:201]) + "\n")
    out = tmp_path / "v"
    out.mkdir()
    old = out / "openb_pod_list_cpu250.csv"
    old.write_text("old\n")
    keep = old.open()  # the old file's reader still reads the old file
    write_variants(small, out, ["cpu250"])
    assert keep.read() == "old\n"
    keep.close()
    assert old.read_text().startswith("name,")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", old.name]
    assert old.stat().st_mode & 0o777 == 0o644
