"""One `swarmgpu run` per state directory: a second beside the first (same manager, same
engine) would act as the leader too, so it is refused at start, naming the first's PID."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from support.gpu_nodes import run_cli, swarmgpu_env


def _env(tmp_path: Path, state: Path) -> dict[str, str]:
    return {
        **swarmgpu_env(),
        "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
        "SWARMGPU_STATE_DIR": str(state),
    }


def test_a_second_run_beside_the_first_is_refused_naming_its_pid(tmp_path: Path) -> None:
    """The first waits for its engine holding the lock; a second run on the same state
    directory exits 2 at once, naming the first's PID and the lock, before it asks the
    engine anything (it ran beside the first, both the leader's daemon). Once the first
    is gone, the lock is free: no stale lock after a kill."""
    env = _env(tmp_path, tmp_path / "state")
    log = tmp_path / "first.log"
    with log.open("wb") as fh:
        first = subprocess.Popen(
            [sys.executable, "-m", "swarmgpu.cli", "run"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "waiting for the engine" not in log.read_text() and time.monotonic() < deadline:
            assert first.poll() is None, log.read_text()
            time.sleep(0.2)
        res = run_cli("run", "--once", env=env, timeout=60)
        assert res.returncode == 2, res.stderr
        assert f"PID {first.pid}" in res.stderr and "daemon.lock" in res.stderr, res.stderr
        assert "no-engine.sock" not in res.stderr, res.stderr  # refused before the engine
        assert first.poll() is None  # the first goes on
    finally:
        first.kill()
        first.wait(10)
    res = run_cli("run", "--once", env=env, timeout=60)
    assert res.returncode == 2 and "no-engine.sock" in res.stderr, res.stderr
    assert "daemon.lock" not in res.stderr, res.stderr


def test_a_state_dir_that_cannot_hold_the_lock_is_said_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """A state_dir that cannot be written (here a file; read-only alike) starts the daemon
    as before, saying once that a second run would not be refused."""
    (tmp_path / "state").write_text("")
    res = run_cli("run", "--once", env=_env(tmp_path, tmp_path / "state"), timeout=60)
    assert res.returncode == 2 and "no-engine.sock" in res.stderr, res.stderr  # went on
    assert "cannot lock" in res.stderr and "state_dir" in res.stderr, res.stderr
