"""Every command's error lines start with ``swarmgpu COMMAND:`` (cli/said.py).

Before, what the commands share (the configuration, reading the swarm, opening a fact
source) said ``swarmgpu:`` alone, so `plan` said "swarmgpu: cannot read the swarm"
where `audit` said "swarmgpu audit: cannot read the swarm", and a script running
several could not tell which one failed. A `render` that cannot reach the engine now
names `render --check`, which checks the stack with no Docker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.cli.exitcodes import CONFIG_ERROR

NO_DOCKER = "unix:///nonexistent/docker.sock"
VALID = ("services:\n  a:\n    image: busybox\n    deploy:\n      labels:\n"
         "        swarmgpu.gpus: \"1\"\n")


@pytest.mark.parametrize("command", [["plan"], ["status"], ["audit"], ["apply", "--service", "x"],
                                     ["run", "--once"], ["doctor", "--root", "."]])
def test_a_configuration_error_names_the_command(tmp_path: Path, command: list[str]) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n  port: 9401.7\n")
    res = CliRunner().invoke(main, [*command, "--config", str(cfg)])
    # run's is CONFIG_ERROR (the unit's RestartPreventExitStatus=), the others' 2
    assert res.exit_code == (CONFIG_ERROR if command[0] == "run" else 2), res.output
    want = f"swarmgpu {command[0]}: configuration error: {cfg}:2: agents.port:"
    assert res.stderr.startswith(want), res.stderr


@pytest.mark.parametrize("command", ["plan", "status", "audit"])
def test_an_unreachable_engine_names_the_command(command: str) -> None:
    res = CliRunner().invoke(main, [command], env={"DOCKER_HOST": NO_DOCKER})
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"swarmgpu {command}: cannot read the swarm: "), res.stderr


def test_render_without_the_engine_names_render_check(tmp_path: Path) -> None:
    src = tmp_path / "s.yml"
    src.write_text(VALID)
    res = CliRunner().invoke(main, ["render", str(src)], env={"DOCKER_HOST": NO_DOCKER})
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("swarmgpu render: cannot read the swarm: "), res.stderr
    assert res.stderr.rstrip().endswith(
        "; to check the stack without Docker: swarmgpu render --check"), res.stderr
    # and what it says is so: --check reads no swarm
    res = CliRunner().invoke(main, ["render", "--check", str(src)],
                             env={"DOCKER_HOST": NO_DOCKER})
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("command", ["facts", "node-config", "agent", "doctor"])
def test_a_source_that_cannot_be_opened_names_the_command(command: str) -> None:
    res = CliRunner().invoke(main, [command, "--source", "nonesuch:x"])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"swarmgpu {command}: "), res.stderr


def test_config_check_keeps_file_first_lines(tmp_path: Path) -> None:
    # config check's errors are located (FILE:LINE:), as a compiler's: no prefix there.
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents:\n  port: 9401.7\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2 and res.stderr.startswith(f"{cfg}:2: agents.port:"), res.stderr
