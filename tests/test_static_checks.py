"""mypy and ruff pass, as the README's Development section has them run: .ci/run runs
pytest alone, so these ran only by hand, and benchmarks/ broke unseen (two scripts
crashed on paths mypy would have named). mypy takes its files and strictness from
pyproject.toml (swarmgpu and benchmarks); ruff checks swarmgpu, tests and benchmarks.
Both are test extras (``pip install -e '.[test]'``, scripts/setup.sh). Each runs in a
subprocess from the repository root (mypy's cache there: a minute or two cold, seconds
warm); a failure names the first errors."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIRST = 30  # error lines a failure shows


def _passes(module: str, *args: str, timeout: float) -> None:
    """``python -m MODULE ARGS`` exits 0, or the test fails with its first errors."""
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed in {sys.executable}: it is a test extra, "
                    "install it with `pip install -e '.[test]'` (scripts/setup.sh does)")
    # Without PYTHONPATH: mypy takes what it finds through it for installed packages and
    # keeps quiet about their errors (a checkout named there: half of them unsaid).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    said = (done.stdout + done.stderr).splitlines()
    errors = [line for line in said if ": error:" in line] or said
    assert done.returncode == 0, (
        f"`{' '.join((module, *args))}` exit {done.returncode}, {len(errors)} error lines; "
        f"the first {min(FIRST, len(errors))}:\n" + "\n".join(errors[:FIRST]))


def test_mypy_passes_strict_on_the_package_and_benchmarks() -> None:
    _passes("mypy", timeout=900)


def test_ruff_passes_on_the_package_tests_and_benchmarks() -> None:
    _passes("ruff", "check", "swarmgpu", "tests", "benchmarks", timeout=300)
