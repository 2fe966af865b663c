"""`swarmgpu run` started before its engine (or the stack's socket proxy) waits for it
instead of exiting into a restart loop; `--once` still fails at once (exit 2)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from support.gpu_nodes import run_cli, swarmgpu_env


def _env(tmp_path: Path) -> dict[str, str]:
    # a state_dir of its own: the default one's lock may be held by another run here
    return {
        **swarmgpu_env(),
        "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
        "SWARMGPU_STATE_DIR": str(tmp_path / "state"),
    }


def test_once_without_an_engine_exits_2_naming_it(tmp_path: Path) -> None:
    res = run_cli("run", "--once", env=_env(tmp_path), timeout=60)
    assert res.returncode == 2, res.stderr
    assert "no-engine.sock" in res.stderr


def test_run_waits_for_an_engine_that_is_not_up_yet(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with log.open("wb") as fh:
        p = subprocess.Popen(
            [sys.executable, "-m", "swarmgpu.cli", "run"],
            env=_env(tmp_path),
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "waiting for the engine" not in log.read_text() and time.monotonic() < deadline:
            assert p.poll() is None, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        assert "waiting for the engine" in text and "no-engine.sock" in text, text
        assert p.poll() is None, text  # still waiting, not exited
    finally:
        p.kill()
        p.wait(10)
