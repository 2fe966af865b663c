"""How `render` reads its stack files: as every file swarmgpu is named (core.yamlfile,
core.boundedfile): only a regular file, at most 8 MiB, an error naming the path and the
fix otherwise (exit 2: not the stack's fault); stdin only when asked for with ``-``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.fifo import make_fifo, read_within

from swarmgpu.cli import main
from swarmgpu.core.yamlfile import MAX_TEXT

STACK = 'version: "3.8"\nservices:\n  web:\n    image: nginx:1.27\n'


def _check(*args: str, stdin: str | bytes | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["render", "--check", *args], input=stdin)
    return res.exit_code, res.output


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """A plain ``open`` of a FIFO blocks until a writer comes: render waited for ever."""
    fifo = make_fifo(tmp_path / "s.yml")
    code, out = read_within(lambda: _check(str(fifo)), fifo)
    assert code == 2, out
    assert f"{fifo}: a FIFO (a named pipe), not a regular file" in out, out
    assert "or - to read it from stdin" in out, out


def test_a_device_is_refused_unread() -> None:
    code, out = _check("/dev/zero")
    assert code == 2, out
    assert "/dev/zero: a character device, not a regular file" in out, out


def test_a_file_over_the_limit_is_refused_naming_it(tmp_path: Path) -> None:
    big = tmp_path / "big.yml"
    # Multi-byte text: the limit is of the file's bytes, not of its characters.
    big.write_text(STACK + "# " + "é" * (MAX_TEXT // 2) + "\n")
    code, out = _check(str(big))
    assert code == 2, out
    assert f"{big}: larger than 8 MiB; not read" in out, out


def test_a_file_not_utf8_names_it_and_the_fix(tmp_path: Path) -> None:
    f = tmp_path / "s.yml"
    f.write_bytes(STACK.encode("utf-16"))  # with its byte order mark
    code, out = _check(str(f))
    assert code == 2, out
    assert f"{f}: " in out and "UTF-16" in out and "save it as UTF-8" in out, out


def test_a_stack_from_stdin_is_read_with_a_dash(tmp_path: Path) -> None:
    code, out = _check("-", "-n", "web", stdin=STACK)
    assert code == 0 and "valid (1 service(s)" in out, out
    code, out = _check("-", stdin=STACK)  # no file name to name the stack after
    assert code == 2 and "-n NAME" in out, out


@pytest.mark.parametrize("flag", ["-c", "--compose-file"])
def test_stdin_is_one_file_of_several(tmp_path: Path, flag: str) -> None:
    over = tmp_path / "over.yml"
    over.write_text('version: "3.8"\nservices:\n  web:\n    image: nginx:1.28\n')
    code, out = _check(flag, "-", flag, str(over), "-n", "web", stdin=STACK)
    assert code == 0, out
    code, out = _check(flag, "-", flag, "-", "-n", "web", stdin=STACK)
    assert code == 2 and "stdin (-) once" in out, out


@pytest.mark.parametrize("key", [
    "deploy:\n      resources:\n        reservations:\n          memory",
    "deploy:\n      resources:\n        reservations:\n          cpus",
    "deploy:\n      replicas",
    "deploy:\n      mode",
    "platform",
    "deploy:\n      resources:\n        reservations:\n          devices:\n"
    "            - capabilities: [gpu]\n              count",
])
def test_a_huge_bad_value_is_named_cut_not_echoed_whole(key: str) -> None:
    """``memory`` echoed the whole bad value (up to the 8 MiB a stack may hold) into its
    error, where ``cpus`` cut it: every stack value named in an error is cut the same
    way, its start and its length."""
    value = "x" * 1_000_000
    code, out = _check("-n", "s", "-", stdin=f"{STACK}    {key}: {value}\n")
    assert code == 1, out[:300]
    assert "... [1000000 characters]" in out, out[:300]
    assert len(out) < 2000, out[:300]
