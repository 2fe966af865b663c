"""`swarmgpu config check --env-file /etc/swarmgpu/env FILE` checks the file as the
systemd unit's daemon reads it: with the SWARMGPU_* overrides of the unit's
EnvironmentFile (and not this shell's). Without it, a file that `config check` passed
in a shell stopped the daemon at its restart (exit 2, GPU placement down) on an
override only the unit's environment set."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.config_check import config_check

from swarmgpu.cli import main
from swarmgpu.core.envfile import parse_env_file


def _check(tmp_path: Path, env_text: str, monkeypatch: pytest.MonkeyPatch,
           shell: dict[str, str] | None = None) -> tuple[int, str]:
    for var, value in (shell or {}).items():
        monkeypatch.setenv(var, value)
    return config_check(tmp_path, env_text)


def test_an_override_of_the_units_environment_file_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWARMGPU_SYNC_INTERVAL_S", raising=False)
    code, out = _check(tmp_path, "# the unit's\nDOCKER_HOST=unix:///run/docker.sock\n"
                       "SWARMGPU_SYNC_INTERVAL_S=0.5\n", monkeypatch)
    assert code == 2, out
    assert "SWARMGPU_SYNC_INTERVAL_S: sync.interval_s: must be >= 1 second" in out, out


def test_the_shells_own_overrides_are_not_the_units(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon under systemd never sees this shell's variables."""
    code, out = _check(tmp_path, "SWARMGPU_LOG_LEVEL=DEBUG\n", monkeypatch,
                       shell={"SWARMGPU_SYNC_INTERVAL_S": "0.5"})
    assert code == 0, out
    assert out.endswith(": ok\n"), out


@pytest.mark.parametrize(("text", "says"), [
    ("SWARMGPU_SYNC_INTERVAL_S=30 \\\n  40\n", "line 1: a line continued"),
    ("SWARMGPU_SYNC_INTERVAL_S\n", "line 1: not KEY=value"),
    ("SWARMGPU_LOG_LEVEL='DEBUG\n", "line 1: a quote without its pair"),
    ("SWARMGPU_LOG_LEVEL=\"a\\\"b\"\n", "line 1: a backslash"),
])
def test_a_line_the_check_would_read_otherwise_than_systemd_is_refused(
        text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_env_file(text)


def test_values_are_read_as_systemd_reads_them() -> None:
    got = parse_env_file("; a comment\n# another\n\n  A = 1 \nB=\"two words\"\nC='x y'\n"
                         "D=\nE=a=b\n")
    assert got == {"A": "1", "B": "two words", "C": "x y", "D": "", "E": "a=b"}


def test_an_env_file_that_cannot_be_read_is_an_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yml"
    cfg.write_text("")
    res = CliRunner().invoke(main, ["config", "check", "--env-file", str(tmp_path / "none"),
                                    str(cfg)])
    assert res.exit_code == 2, res.output
    assert "env" in res.output and "cannot read" in res.output, res.output


def test_a_crlf_file_is_read_as_systemd_reads_it() -> None:
    # systemd ends a line at \r as at \n (env-file.c: NEWLINE "\n\r"): a file saved on
    # Windows starts the daemon fine; the check kept the \r in each value and refused
    # `"0.0.0.0:9402"\r` as an unpaired quote, `:9402\r` as no port.
    got = parse_env_file("SWARMGPU_HTTP_LISTEN=\"0.0.0.0:9402\"\r\nSWARMGPU_LOG_LEVEL=DEBUG\r\n")
    assert got == {"SWARMGPU_HTTP_LISTEN": "0.0.0.0:9402", "SWARMGPU_LOG_LEVEL": "DEBUG"}


def test_a_lone_carriage_return_ends_a_line_as_for_systemd() -> None:
    # systemd sets both; the check read one value `1\rSWARMGPU_DRY_RUN=true`, and never
    # saw the override the daemon applies.
    got = parse_env_file("A=1\rSWARMGPU_DRY_RUN=true\n")
    assert got == {"A": "1", "SWARMGPU_DRY_RUN": "true"}


def test_a_comment_ending_in_a_backslash_is_refused() -> None:
    # systemd before 254 (Debian 12 has 252) reads the next line as comment too, 254
    # and later as a variable: the check read it as one, and systemd 252 ignored it.
    with pytest.raises(ValueError, match="line 1: a comment line ending in a backslash"):
        parse_env_file("# dry run for now \\\nSWARMGPU_DRY_RUN=true\n")


def test_a_nul_byte_is_refused_naming_its_line() -> None:
    with pytest.raises(ValueError, match="line 2: a NUL byte"):
        parse_env_file("A=1\nSWARMGPU_STATE_DIR=/var/lib/x\0\nSWARMGPU_DRY_RUN=true\n")
