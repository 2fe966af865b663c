"""A path with a NUL byte in the config (YAML's "\\0"): no file has such a name, so it is
read as a file that is not there, never a ValueError traceback (``core.boundedfile``)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from swarmgpu.cli.config import load_checked
from swarmgpu.core.boundedfile import read_bounded
from swarmgpu.core.config import ConfigError


@pytest.mark.parametrize("key", ["agents:\n  token_file", "http:\n  token_file",
                                 "placement:\n  workload"])
def test_config_check_of_a_path_with_a_nul_byte_raises_no_value_error(
        tmp_path: Path, key: str) -> None:
    # open() raised ValueError("embedded null byte"), which no reader caught: `config
    # check` ended in a traceback.
    cfg = tmp_path / "c.yml"
    cfg.write_text(f'{key}: "{tmp_path}/a\\0b"\n')
    with contextlib.suppress(ConfigError):  # (the workload file is said as not read)
        load_checked(str(cfg))


def test_a_path_with_a_nul_byte_is_a_file_that_is_not_there(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="NUL"):
        read_bounded(f"{tmp_path}/a\0b", 10)


@pytest.mark.parametrize("key", ["state_dir", "agents:\n  token_file", "sync:\n  prefix"])
def test_a_lone_surrogate_is_refused_at_check_not_a_traceback_at_start(
        tmp_path: Path, key: str) -> None:
    # YAML's "\ud800" is a lone surrogate, which UTF-8 cannot encode: no path, name or
    # label holds one. config check said ok and `swarmgpu run` ended in a
    # UnicodeEncodeError traceback making the state directory.
    cfg = tmp_path / "c.yml"
    cfg.write_text(f'{key}: "/x/\\ud800"\n')
    with pytest.raises(ConfigError) as exc:
        load_checked(str(cfg))
    said = str(exc.value)
    assert "a lone surrogate (\\ud800)" in said and "remove it" in said, said
