"""In CI a skip is a failure, unless .ci/run allows it by name (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.paths import REPO

PROBE = '''
import pytest

def test_missing_tool():
    pytest.skip("promtool not installed")

def test_allowed():
    pytest.skip("[ci-allowed: no-ipv6] cannot bind [::1]:0")

def test_tag_not_listed():
    pytest.skip("[ci-allowed: something-else] x")

@pytest.mark.skipif(True, reason="fixture not present")
def test_marker():
    pass

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    raise AssertionError

def test_passes():
    pass
'''


def _run(tmp_path: Path, ci: str | None) -> str:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "SWARMGPU_CI_ALLOWED_SKIPS"}}
    env["PYTHONPATH"] = str(REPO / "tests")
    env["SWARMGPU_CI_ALLOWED_SKIPS"] = "no-ipv6, unused"
    if ci is not None:
        env["CI"] = ci
    # -p conftest: this repository's tests/conftest.py, as a plugin for a file outside it.
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "conftest",
                          "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(probe)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    return res.stdout


def test_ci_turns_skips_into_failures_except_allowed(tmp_path: Path) -> None:
    out = _run(tmp_path, "true")
    assert "FAILED test_probe.py::test_missing_tool" in out, out
    assert "FAILED test_probe.py::test_tag_not_listed" in out, out
    assert "ERROR test_probe.py::test_marker" in out, out
    assert re.search(r"SKIPPED \[1\] test_probe.py:\d+: \[ci-allowed: no-ipv6\]", out), out
    assert "XFAIL test_probe.py::test_xfail" in out, out
    assert "PASSED test_probe.py::test_passes" in out, out


def test_outside_ci_skips_stay_skips(tmp_path: Path) -> None:
    out = _run(tmp_path, None)
    assert "FAILED" not in out and "ERROR" not in out, out
    assert out.count("SKIPPED") == 4, out
