"""`swarmgpu config check` reports every problem of a file in one run."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.core.config import ConfigError, load_config, load_config_report

THREE_WRONG = """\
agents:
  port: 70000          # not a TCP port
  timout_s: 3          # misspelt
sync:
  interval_s: soon     # not a number
log:
  format: xml          # neither text nor json
"""


def test_config_check_prints_every_error_at_once(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SWARMGPU_SYNC_INTERVAL_S", "SWARMGPU_LOG_FORMAT", "SWARMGPU_AGENTS_PORT"):
        monkeypatch.delenv(var, raising=False)
    workload = tmp_path / "w.yml"
    workload.write_text("- {gpus: -1}\n")
    cfg = tmp_path / "c.yml"
    cfg.write_text(THREE_WRONG + f"placement:\n  workload: {workload}\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2, res.output
    lines = [ln.removeprefix(f"{cfg}: ") for ln in res.output.splitlines()]
    assert lines[0] == "5 errors"
    assert lines[1].startswith("agents.timout_s: unknown key; did you mean 'timeout_s'?")
    body = "\n".join(lines[1:])
    for key in ("agents.port: 70000", "sync.interval_s: expected a number",
                "log.format: 'xml'", "placement.workload:"):
        assert key in body, body
    assert len(lines) == 6


def test_one_error_reads_as_before(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("log:\n  format: xml\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2
    assert res.output == f"{cfg}: log.format: 'xml'; use 'text' or 'json'\n"


def test_load_config_raises_with_every_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text(THREE_WRONG)
    with pytest.raises(ConfigError) as exc:
        load_config(cfg, env={})
    assert len(exc.value.errors) == 4
    assert str(exc.value) == "\n".join(exc.value.errors)
    built, errors = load_config_report(cfg, env={})
    assert errors == exc.value.errors
    assert built.agents.port == 70000 and built.sync.interval_s == 30.0  # bad: default


def test_broken_yaml_is_one_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("agents: [\n")
    res = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert res.exit_code == 2 and res.output.startswith(f"{cfg}: config file "), res.output
    assert " errors\n" not in res.output
