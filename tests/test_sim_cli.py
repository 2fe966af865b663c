"""`swarmgpu simulate` as a user runs it: progress on stderr (per policy and seed and
within a replay, with an ETA; on a terminal or with --progress, quiet in a pipe), every
table column defined, the --plot PNG titled and its path printed, and --plot refused
before the replay when matplotlib is missing."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swarmgpu.sim.cli_entry import (
    PLOT_NEEDS,
    ProgressLine,
    plot_title,
    seeds_text,
    wants_progress,
)
from swarmgpu.sim.traces import bundled


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_progress_lines_name_policy_seed_and_eta() -> None:
    out, clock = io.StringIO(), Clock()
    p = ProgressLine(4, out, clock)
    p.start("replays to 130% arrived load")
    for k, (policy, seed) in enumerate(
        [("fgd", 42), ("bestfit", 42), ("fgd", 43), ("bestfit", 43)]
    ):
        clock.t = 100.0 + 30 * (k + 1)
        p(policy, seed)
    lines = out.getvalue().splitlines()
    assert lines[0] == "simulate: replays to 130% arrived load: 4 replays (policy x seed) ..."
    assert lines[1] == "simulate: 1/4 fgd seed 42 (30 s); ETA 1 min 30 s"
    assert lines[3] == "simulate: 3/4 fgd seed 43 (1 min 30 s); ETA 30 s"
    assert lines[4] == "simulate: 4/4 bestfit seed 43 (2 min 00 s); done"


def test_progress_on_a_terminal_or_when_asked() -> None:
    assert wants_progress(None, stderr_tty=True)
    assert not wants_progress(None, stderr_tty=False)  # a pipe, a log, CI
    assert wants_progress(True, stderr_tty=False)  # --progress
    assert not wants_progress(False, stderr_tty=True)  # --no-progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_within_a_replay_with_an_eta() -> None:
    """A single seed shows how far it got: the share of its pods, with an ETA from it."""
    out, clock = Tty(), Clock()
    p = ProgressLine(1, out, clock, redraw_s=0.25)
    p.start("replays to 130% arrived load")
    for k in range(1, 5):
        clock.t = 100.0 + 10 * k
        p.within(k / 8)
    clock.t += 0.1
    p.within(0.55)  # within redraw_s of the last: not drawn
    screens = out.getvalue().split("\r\x1b[K")
    assert screens[-1] == "simulate: 0/1 replays done, 50% of their pods (40 s); ETA 40 s"
    assert len(screens) == 1 + 1 + 4
    log = io.StringIO()  # not a terminal (--progress in CI): one line per tenth
    p = ProgressLine(2, log, clock)
    for share in (0.05, 0.12, 0.13, 0.31, 1.0):
        p.within(share)
    assert [ln.split(",")[1].split("(")[0].strip() for ln in log.getvalue().splitlines()] == [
        "12% of their pods",
        "31% of their pods",
        "100% of their pods",
    ]


def test_seeds_and_plot_title() -> None:
    assert seeds_text([44, 42, 43, 50, 51, 60]) == "42-44, 50-51, 60"
    title = plot_title("openb trace 'default'", ["swarmgpu", "fgd"], [42, 43])
    assert title.splitlines() == [
        "openb trace 'default': GPU allocation against arrived GPU load",
        "policies swarmgpu, fgd; seeds 42-43 (mean of 2); arrival points 5% to 130% of "
        "the cluster's GPU, every 5%",
    ]


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The real trace's first 30 nodes and 200 pods, in its own format."""
    tmp = tmp_path_factory.mktemp("trace")
    paths = []
    for src, n in zip(bundled("default"), (30, 200), strict=True):
        with Path(src).open() as f:
            rows = list(csv.reader(f))
        dst = tmp / Path(src).name
        dst.write_text("\n".join(",".join(r) for r in rows[: n + 1]) + "\n")
        paths.append(str(dst))
    return paths[0], paths[1]


def _simulate(
    args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmgpu.cli", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_simulate_prints_progress_on_stderr(small_trace: tuple[str, str]) -> None:
    nodes, pods = small_trace
    r = _simulate(
        [
            "--nodes",
            nodes,
            "--pods",
            pods,
            "--policy",
            "bestfit,fgd",
            "--seeds",
            "1-2",
            "--progress",
        ]
    )
    assert r.returncode == 0, r.stderr
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("simulate: ")]
    # Two policies x two seeds, then the upper bound of each seed.
    assert progress[0].endswith("6 replays (policy x seed) ...")
    assert "upper bound" in progress[0]
    done = [ln for ln in progress[1:] if "of their pods" not in ln]
    assert len(done) == 6 and done[-1].startswith("simulate: 6/6 ") and "done" in done[-1]
    assert all("ETA" in ln for ln in done[:-1])
    assert {ln.split()[2] for ln in done} == {"bestfit", "fgd", "bound"}
    assert "policy" in r.stdout and "simulate:" not in r.stdout  # the table, alone
    assert "bound (lp)" in r.stdout and "gap@100%" in r.stdout


def test_simulate_json_has_the_bound_and_each_gap(small_trace: tuple[str, str]) -> None:
    """The JSON only gains keys: ``bound`` and each policy's ``gap_pct_at``."""
    nodes, pods = small_trace
    r = _simulate(["--nodes", nodes, "--pods", pods, "--policy", "bestfit", "--json"])
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    b, p = s["bound"], s["policies"]["bestfit"]
    assert b["method"] == "lp" and b["seeds"] == [42] and b["solve_s"] >= 0
    assert set(p) >= {"alloc_pct_at", "frag_pct_at", "failed_at_100", "moves", "by_seed"}
    for lv, a in p["alloc_pct_at"].items():
        assert p["gap_pct_at"][lv] == pytest.approx(b["alloc_pct_at"][lv] - a, abs=2e-3)
        assert b["alloc_pct_at"][lv] >= a
    off = _simulate(
        ["--nodes", nodes, "--pods", pods, "--policy", "bestfit", "--json", "--bound", "off"]
    )
    assert "bound" not in json.loads(off.stdout)
    assert "gap_pct_at" not in json.loads(off.stdout)["policies"]["bestfit"]


def test_simulate_prints_the_online_bound(small_trace: tuple[str, str]) -> None:
    """The row forced to F% (--online-at), each policy's own ceiling from its first
    failure (text and JSON), and --online-at 0 for none."""
    nodes, pods = small_trace
    r = _simulate(["--nodes", nodes, "--pods", pods, "--policy", "bestfit", "--online-at", "80"])
    assert r.returncode == 0, r.stderr
    assert "online bound (all placed by 80%)" in r.stdout
    assert "online ceiling: bestfit: first failure at " in r.stdout
    j = _simulate(
        ["--nodes", nodes, "--pods", pods, "--policy", "bestfit", "--json", "--online-at", "80"]
    )
    s = json.loads(j.stdout)
    p, on = s["policies"]["bestfit"], s["online_bound"]
    assert on["forced_to_pct"] == 80 and set(on["alloc_pct_at"]) == {"50", "100", "130"}
    assert 0 < p["first_failed_pct"] <= 130
    for lv, x in p["online_bound_pct_at"].items():
        assert p["alloc_pct_at"][lv] <= x <= s["bound"]["alloc_pct_at"][lv] + 2e-3
    none = json.loads(
        _simulate(
            ["--nodes", nodes, "--pods", pods, "--policy", "bestfit", "--json", "--online-at", "0"]
        ).stdout
    )
    assert "online_bound" not in none and "online_bound_pct_at" not in none["policies"]["bestfit"]
    bad = _simulate(["--nodes", nodes, "--pods", pods, "--online-at", "131"])
    assert bad.returncode == 2 and "--online-at" in bad.stderr


def test_without_highspy_the_table_says_why_there_is_no_bound(
    small_trace: tuple[str, str], tmp_path: Path
) -> None:
    shadow = tmp_path / "shadow" / "highspy"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named highspy')\n")
    nodes, pods = small_trace
    r = _simulate(
        ["--nodes", nodes, "--pods", pods, "--policy", "bestfit"],
        env={"PYTHONPATH": str(tmp_path / "shadow")},
    )
    assert r.returncode == 0, r.stderr
    assert "bound: not computed" in r.stdout and "pip install 'swarmgpu[sim]'" in r.stdout


def test_simulate_in_a_pipe_is_quiet(small_trace: tuple[str, str]) -> None:
    nodes, pods = small_trace
    quiet = _simulate(["--nodes", nodes, "--pods", pods, "--policy", "bestfit"])
    assert quiet.returncode == 0 and quiet.stderr == ""  # stderr is a pipe here


def test_every_column_of_every_table_is_defined(small_trace: tuple[str, str]) -> None:
    nodes, pods = small_trace
    runs = {
        "plain": ["--policy", "bestfit"],
        "departures": ["--policy", "bestfit", "--departures", "--speedup", "3000"],
        "priorities": ["--priorities", "0.1", "--speedup", "3000"],
    }
    for what, args in runs.items():
        r = _simulate(["--nodes", nodes, "--pods", pods, *args])
        assert r.returncode == 0, (what, r.stderr)
        table, _, footer = r.stdout.partition("\ncolumns (")
        head = next(ln for ln in table.splitlines() if ln.startswith(("policy", "run ")))
        columns = [c.strip() for c in head.split("  ") if c.strip()]
        defined = {
            ln.strip().split("  ")[0]
            for ln in footer.splitlines()[1:]
            if ln.startswith("  ") and not ln.startswith("   ")
        }
        missing = [
            c
            for c in columns
            if c not in defined and c != "policy" and re.sub(r"@\d+%", "@N%", c) not in defined
        ]
        assert not missing, (what, missing, footer)


def test_plot_is_titled_and_its_path_printed(small_trace: tuple[str, str], tmp_path: Path) -> None:
    nodes, pods = small_trace
    png = tmp_path / "a.png"
    r = _simulate(
        [
            "--nodes",
            nodes,
            "--pods",
            pods,
            "--policy",
            "bestfit",
            "--seeds",
            "1-2",
            "--plot",
            str(png),
            "--json",
        ]
    )
    assert r.returncode == 0, r.stderr
    assert f"simulate: plot written to {png.resolve()}" in r.stderr
    assert png.stat().st_size > 1000
    data = png.read_bytes()  # the title is drawn, and kept in the PNG's Title text chunk
    assert b"tEXtTitle\x00" in data and b"policies bestfit; seeds 1-2 (mean of 2)" in data
    assert Path(pods).name.encode() in data
    assert json.loads(r.stdout)["policies"]["bestfit"]["seeds"] == [1, 2]  # JSON unchanged


def test_simulate_json_into_a_pipe_is_quiet(small_trace: tuple[str, str]) -> None:
    nodes, pods = small_trace
    r = _simulate(["--nodes", nodes, "--pods", pods, "--policy", "bestfit", "--json"])
    assert r.returncode == 0, r.stderr
    assert "simulate:" not in r.stderr
    assert json.loads(r.stdout)["policies"]["bestfit"]


def test_plot_without_matplotlib_is_refused_before_the_replay(
    small_trace: tuple[str, str], tmp_path: Path
) -> None:
    # A Python where `import matplotlib` fails, as where it is not installed.
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    nodes, pods = small_trace
    r = _simulate(
        ["--nodes", nodes, "--pods", pods, "--plot", str(tmp_path / "a.png")],
        env={"PYTHONPATH": str(tmp_path / "shadow")},
    )
    assert r.returncode == 2, r
    assert PLOT_NEEDS in r.stderr and "pip install 'swarmgpu[sim]'" in r.stderr
    assert "Traceback" not in r.stderr
    assert "replays" not in r.stderr  # refused before anything ran
    assert not (tmp_path / "a.png").exists()


def test_plot_is_written_at_the_path_given(small_trace: tuple[str, str], tmp_path: Path) -> None:
    """Before: a name without .png was written as NAME.png (``--plot /tmp`` made
    /tmp.png) while stderr said NAME."""
    nodes, pods = small_trace
    out = tmp_path / "alloc"
    r = _simulate(
        [
            "--nodes",
            nodes,
            "--pods",
            pods,
            "--policy",
            "bestfit",
            "--bound",
            "off",
            "--plot",
            str(out),
        ]
    )
    assert r.returncode == 0, r.stderr
    assert f"simulate: plot written to {out.resolve()}" in r.stderr
    assert out.read_bytes().startswith(b"\x89PNG") and not out.with_suffix(".png").exists()


@pytest.mark.parametrize("where", ["missing/a.png", "."])
def test_plot_to_a_path_it_cannot_write_is_refused_before_the_replay(
    small_trace: tuple[str, str], tmp_path: Path, where: str
) -> None:
    """Before: a missing folder was a traceback after the whole replay, its table lost."""
    nodes, pods = small_trace
    plot = tmp_path / where
    r = _simulate(
        [
            "--nodes",
            nodes,
            "--pods",
            pods,
            "--policy",
            "bestfit",
            "--bound",
            "off",
            "--plot",
            str(plot),
            "--progress",
        ]
    )
    assert r.returncode == 2, r
    assert r.stderr.startswith(f"swarmgpu simulate: --plot {plot}: "), r.stderr
    assert "Traceback" not in r.stderr and "replays" not in r.stderr
    assert r.stdout == "" and list(tmp_path.iterdir()) == []


def test_online_ceiling_says_which_seeds_failed_a_pod() -> None:
    """A policy that failed a pod on one seed and none on the other: the mean first
    failure is undefined (null in the JSON), and the line said "no pod failed"."""
    from swarmgpu.sim.bound_runs import SeedBound
    from swarmgpu.sim.report import as_text, summary
    from swarmgpu.sim.runs import RunResult

    levels = {50: 50.0, 100: 90.0, 130: 95.0}
    runs = [
        RunResult("fgd", 1, dict(levels), dict.fromkeys(levels, 1.0), {100: {}}),
        RunResult("fgd", 2, dict(levels), dict.fromkeys(levels, 1.0), {100: {"share": 1}}),
    ]
    bounds = [
        SeedBound(
            seed,
            "lp",
            {50: 50.0, 100: 96.0, 130: 99.0},
            {50: 50.0, 100: 96.0, 130: 99.0},
            first_failed_pct={"fgd": first},
            policy_online_pct_at={"fgd": {50: 50.0, 100: 95.0, 130: 96.0}},
        )
        for seed, first in ((1, None), (2, 97.5))
    ]
    s = summary({"fgd": runs}, bounds)
    assert s["policies"]["fgd"]["first_failed_pct"] is None
    text = as_text(s)
    assert "no pod failed" not in text
    assert (
        "online ceiling: fgd: first failure at 97.50% arrived on 1 of 2 seeds (none "
        "failed on the others) => at most 95.00 at 100%" in text
    )
    bounds[1].first_failed_pct["fgd"] = None
    assert "online ceiling: fgd: no pod failed => " in as_text(summary({"fgd": runs}, bounds))


def test_simulate_derive_help_names_every_variant_kind_it_accepts() -> None:
    """Before: `simulate-derive --help` gave gpushare60, multigpu30, gpuspec20, cpu250 as
    the variants; `load150` (the GPU request scaled, for --priorities) was accepted but
    named only by the error for a bad one."""
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.sim.variants import KINDS

    res = CliRunner().invoke(main, ["simulate-derive", "--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert all(re.search(rf"\b{kind}(?:\d|N)", text) for kind in KINDS), text


def test_the_default_variants_help_points_to_are_listed_there() -> None:
    """Before: `--variant`'s help said "default: the twelve in docs/simulate.md", and the
    page named no such twelve (its list of unbundled variants was another one)."""
    from click.testing import CliRunner

    from swarmgpu.cli import main
    from swarmgpu.sim.variants import DEFAULT_VARIANTS

    res = CliRunner().invoke(main, ["simulate-derive", "--help"])
    assert "default: the twelve in docs/simulate.md" in " ".join(res.output.split())
    assert len(DEFAULT_VARIANTS) == 12
    page = (Path(__file__).resolve().parents[1] / "docs" / "simulate.md").read_text()
    section = page.split("## Derived workloads", 1)[1].split("\n## ", 1)[0]
    line = next((p for p in section.split("\n\n") if "Without `--variant`" in p), "")
    assert all(f"`{v}`" in line for v in DEFAULT_VARIANTS), line
