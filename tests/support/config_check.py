"""`swarmgpu config check` run in-process on a config file written to a test's tmp_path,
with ``--env-file`` (the systemd unit's EnvironmentFile) or the shell's environment:
the env-file and SWARMGPU_* name tests (test_config_check_env_file,
test_config_env_names)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from swarmgpu.cli import main

CONFIG = "sync:\n  interval_s: 30\n"


def config_check(tmp_path: Path, env_text: str | None = None,
                 config: str = CONFIG) -> tuple[int, str]:
    """The exit code and output of `config check` on ``config``: with ``--env-file`` of
    ``env_text`` where given, else with this process's environment alone."""
    cfg = tmp_path / "config.yml"
    cfg.write_text(config)
    args = ["config", "check", str(cfg)]
    if env_text is not None:
        env = tmp_path / "env"
        env.write_text(env_text)
        args = ["config", "check", "--env-file", str(env), str(cfg)]
    res = CliRunner().invoke(main, args)
    return res.exit_code, res.output
