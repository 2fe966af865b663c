"""The benchmark scripts run: nothing else runs them, and mypy alone once found two of
them broken (failed_at_full.py's CPU-pod reading, free_at_full.py's --rebalance-moves).

Each script answers ``--help`` without starting its run, and the replay readings and
bench_scale.py's fake cluster get through their smallest real run: the whole openb
cluster, with a pod list of a dozen pods (the big ones fill it in about a thousand
arrivals, a few seconds). Pure: subprocesses, files under tmp_path only."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from swarmgpu.sim.traces import bundled
from swarmgpu.sim.variants import kind_of, read_rows, write_rows

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
# the scripts (engine_task.py and try_cli.py are modules the others import)
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if "__main__" in p.read_text())


def _run(script: str, *args: str, cwd: Path,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``benchmarks/SCRIPT ARGS`` run in ``cwd``, this checkout's swarmgpu imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(BENCH / script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


Helped = dict[str, tuple[subprocess.CompletedProcess[str], Path]]


@pytest.fixture(scope="module")
def helped(tmp_path_factory: pytest.TempPathFactory) -> Helped:
    """Each script's ``--help`` (its answer, the folder it ran in), a few at once: each
    is mostly its imports, a second or two."""
    dirs = {s: tmp_path_factory.mktemp(s.removesuffix(".py")) for s in SCRIPTS}

    def one(script: str) -> tuple[str, tuple[subprocess.CompletedProcess[str], Path]]:
        try:
            done = _run(script, "--help", cwd=dirs[script], timeout=60)
        except subprocess.TimeoutExpired:  # that script's test fails, not all of them
            done = subprocess.CompletedProcess([script], -9, "", "--help: still running at 60 s")
        return script, (done, dirs[script])

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return dict(pool.map(one, SCRIPTS))


@pytest.fixture
def few_pods(tmp_path: Path) -> Path:
    """Ten 8-GPU pods and two CPU-only ones of openb's default pod list, as a pod CSV."""
    header, rows = read_rows(bundled("default")[1])
    big = [r for r in rows if int(r["num_gpu"]) == 8][:10]
    cpu = [r for r in rows if kind_of(r) == "cpu"][:2]
    out = tmp_path / "pods" / "few.csv"
    out.parent.mkdir()
    write_rows(out, header, big + cpu)
    return out


def test_the_scripts_are_found() -> None:
    assert {"failed_at_full.py", "free_at_full.py", "bench_scale.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_answers_help_without_running(script: str, helped: Helped) -> None:
    # bench_sim.py took no options: --help ran its replay (half a minute, or the
    # minutes of --full).
    done, where = helped[script]
    if script == "derive_own.py":  # its usage on stderr, exit 2 (tests/test_variants.py)
        assert done.returncode == 2 and "derive_own.py --held-out" in done.stderr, _said(done)
    else:
        assert done.returncode == 0 and done.stdout.startswith("usage:"), _said(done)
    assert not list(where.iterdir()), "--help wrote files"


def test_free_at_full_reads_a_replay_with_moves(few_pods: Path, tmp_path: Path) -> None:
    # moved() handed the trace's pods to FragmentationMover, which takes none since the
    # mover judges by placement's model: any --rebalance-moves raised TypeError.
    done = _run("free_at_full.py", "--pods", str(few_pods), "--level", "130",
                "--rebalance-moves", "2", cwd=tmp_path)
    assert done.returncode == 0, _said(done)
    for name in ("swarmgpu", "fgd"):
        assert f"seed 42 {name} @130%: alloc" in done.stdout, _said(done)


def test_failed_at_full_reads_cpu_pods_placed_by_swarm(few_pods: Path, tmp_path: Path) -> None:
    # _Reading.place_cpu_pod lacked the scheduler the replay hands it: a replay whose
    # CPU-only pods Swarm's scheduler places (--cpu-pods swarm) raised TypeError at the
    # first one. With moves, through the watched mover, and what took the G3 nodes.
    done = _run("failed_at_full.py", "--pods", str(few_pods), "--level", "130",
                "--from", "130", "--cpu-pods", "swarm", "--rebalance-moves", "2",
                "--breakers", "G3", cwd=tmp_path)
    assert done.returncode == 0, _said(done)
    for name in ("swarmgpu", "fgd"):
        assert f"seed 42 {name} @130%: alloc" in done.stdout, _said(done)
        assert f"seed 42 {name}: untouched G3 nodes taken" in done.stdout, _said(done)


def test_bench_scale_runs_its_fake_cluster(tmp_path: Path) -> None:
    # Its FakeSwarm stands in for the client the daemon's cache reads, and lacked the
    # cache's unkeyed(): the first cycle raised AttributeError.
    done = _run("bench_scale.py", "--sizes", "10", "--cycles", "3", "--no-latency",
                cwd=tmp_path)
    assert done.returncode == 0, _said(done)
    assert "| 10 | 50 |" in done.stdout, _said(done)
