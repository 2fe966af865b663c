"""core.boundedfile: a named file is read only as a small regular file, never blocking."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from support.fifo import make_fifo, read_within

from swarmgpu.core.boundedfile import (
    NotRegularFile,
    TooLarge,
    read_bounded,
    read_bounded_text,
    read_head,
    size_text,
)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "f")
    got = read_within(lambda: read_bounded(fifo, 100), fifo)
    assert isinstance(got, NotRegularFile) and got.kind.startswith("a FIFO"), got
    assert got.why == "a FIFO (a named pipe), not a regular file"


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), ("/", "a directory")]
)
def test_a_device_or_directory_is_refused(path: str, kind: str) -> None:
    with pytest.raises(NotRegularFile, match=kind):
        read_bounded(path, 100)


def test_a_name_under_a_dir_fd_is_read_and_a_symlink_there_never_followed(
    tmp_path: Path,
) -> None:
    (tmp_path / "f").write_text("inside")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        assert read_head("f", 100, dir_fd=fd) == b"inside"
        with pytest.raises(OSError) as err:
            read_head("link", 100, dir_fd=fd)
        assert err.value.errno == errno.ELOOP
    finally:
        os.close(fd)


def test_a_symlink_to_a_device_is_the_device(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/dev/zero")
    with pytest.raises(NotRegularFile, match="character device"):
        read_bounded(tmp_path / "link", 100)


def test_a_file_over_the_limit_is_refused_after_limit_plus_one_bytes(tmp_path: Path) -> None:
    f = tmp_path / "big"
    f.write_bytes(b"x" * (3 << 20))
    assert len(read_head(f, 1 << 20)) == (1 << 20) + 1
    with pytest.raises(TooLarge, match="larger than 1 MiB; not read"):
        read_bounded(f, 1 << 20)
    assert read_bounded(f, 3 << 20) == b"x" * (3 << 20)


def test_absent_is_the_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "nope", 10)


def test_text_has_line_ends_as_text_mode_open_gives_them(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_bytes(b"a\r\nb\rc\n")
    assert read_bounded_text(f, 100) == f.read_text(encoding="utf-8") == "a\nb\nc\n"
    f.write_bytes(b"\xff")
    with pytest.raises(UnicodeDecodeError):
        read_bounded_text(f, 100)


def test_size_text_names_the_unit() -> None:
    assert [size_text(n) for n in (1 << 20, 8 << 20, 64 << 10, 4096, 100)] == [
        "1 MiB",
        "8 MiB",
        "64 KiB",
        "4 KiB",
        "100 bytes",
    ]
