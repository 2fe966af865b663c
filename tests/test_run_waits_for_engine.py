"""`swarmgpu run` started before its engine (or the stack's socket proxy) waits for it
instead of exiting into a restart loop; `--once` still fails at once (exit 2), and so
when its engine goes away mid-cycle."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.empty_swarm import EmptySwarm
from support.gpu_nodes import run_cli, swarmgpu_env

from swarmgpu.cli import main
from swarmgpu.manager import daemon
from swarmgpu.swarm.client import SwarmUnavailable


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


def test_once_whose_engine_goes_away_mid_cycle_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine said "leader", then went away (a docker restart) before the cycle read
    the swarm: the cycle did nothing, and `run --once` exits 2 as when it could not ask
    at all. It said "cycle done: 0 label write(s), 1 error(s)" and exited 0: a cron job
    or a script took the cycle for made."""

    class GoneSwarm(EmptySwarm):
        def nodes(self) -> list[Any]:
            raise SwarmUnavailable("Docker Engine unreachable at unix:///gone.sock: refused")

    monkeypatch.setattr(daemon, "SwarmClient", lambda *_a, **_k: GoneSwarm())
    monkeypatch.setattr(daemon.Daemon, "_install_signals", lambda self: None)
    cfg = tmp_path / "config.yml"
    cfg.write_text(
        json.dumps(
            {
                "state_dir": str(tmp_path / "state"),
                "sync": {"watch_events": False},
                "agents": {"identity": "none"},
            }
        )
    )
    res = CliRunner().invoke(main, ["run", "--once", "--config", str(cfg)])
    assert res.exit_code == 2, res.output
    assert "gone.sock" in res.output and "cycle done" not in res.output, res.output


def test_a_sighup_while_waiting_for_the_engine_keeps_run_waiting(tmp_path: Path) -> None:
    """SIGHUP is no reload and does not end the daemon (docs/systemd.md), from its start:
    while it waited for its engine (a docker restart) the default action ended it, and
    systemd's Restart=on-failure counts a SIGHUP death as clean: it stayed down."""
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
        p.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert p.poll() is None, log.read_text()  # still waiting, not ended
    finally:
        p.kill()
        p.wait(10)
