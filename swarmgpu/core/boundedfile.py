"""Reading a file that an operator or another program names (a config, a facts source, a
node's daemon.json) as what it must be: a small regular file.

A plain ``open`` blocks on a FIFO until a writer comes (for ever if none does), and reads
a device (``/dev/zero``) or a file far larger than any real one whole. Here the path is
opened non-blocking, the opened file (not the path, which may be swapped meanwhile) must
be a regular file, and at most the limit + 1 bytes are read. Absence and other OS errors
are the ``OSError`` each caller already reports; what is there but refused is
``FileRefused``, whose ``why`` each caller puts after the name it gives the file.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


class FileRefused(Exception):
    """A file that is there but is not read: not a regular file, or over the limit."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class NotRegularFile(FileRefused):
    """A FIFO, device, directory or socket where a file was named."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"{kind}, not a regular file")
        self.kind = kind


class TooLarge(FileRefused):
    """A regular file larger than the reader's limit; only the limit + 1 bytes were read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {size_text(limit)}; not read")
        self.limit = limit


def size_text(n: int) -> str:
    """``1 MiB``, ``64 KiB`` or ``100 bytes``: a limit as the docs give it."""
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def file_kind(mode: int) -> str:
    """What a non-regular file is, in an operator's words."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (a named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_head(path: str | os.PathLike[str], limit: int, *, dir_fd: int | None = None) -> bytes:
    """Up to ``limit`` + 1 bytes of the regular file at ``path`` (more than ``limit``:
    the caller's "too large"). ``NotRegularFile`` or the ``OSError`` of the open. With
    ``dir_fd``, ``path`` is a name in that directory, never followed if it is a symlink
    (OSError ELOOP): the caller resolved the links itself, fd by fd."""
    fd = open_regular(path, dir_fd=dir_fd)
    try:
        return _read_up_to(fd, limit + 1)
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> int:
    """A descriptor open for reading on the regular file at ``path``, for a reader that
    streams it with bounds of its own; ``NotRegularFile`` or the ``OSError`` of the open
    (``dir_fd`` as for ``read_head``)."""
    # O_NONBLOCK: opening a FIFO with no writer returns at once; O_NOCTTY: a terminal
    # named here does not become this process's controlling terminal.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if dir_fd is not None:
        flags |= os.O_NOFOLLOW
    if "\0" in os.fsdecode(path):
        # os.open raised ValueError ("embedded null byte"), which no caller reads as a
        # file not read; a config's "\0" names no file anywhere.
        raise FileNotFoundError(errno.ENOENT, "no file is named with a NUL byte",
                                os.fsdecode(path).replace("\0", "\\0"))
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(file_kind(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole regular file at ``path``, at most ``limit`` bytes; ``TooLarge`` beyond,
    ``NotRegularFile`` or the ``OSError`` of the open otherwise."""
    data = read_head(path, limit)
    if len(data) > limit:
        raise TooLarge(limit)
    return data


def read_bounded_stream(stream: BinaryIO, limit: int) -> bytes:
    """All of an open stream (a pipe given as stdin), at most ``limit`` bytes;
    ``TooLarge`` beyond, after reading only the limit + 1."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(limit)
    return data


def read_bounded_text(path: str | os.PathLike[str], limit: int, *, errors: str = "strict") -> str:
    """``read_bounded`` as text (``as_text``)."""
    return as_text(read_bounded(path, limit), errors)


def as_text(data: bytes, errors: str = "strict") -> str:
    """``data`` decoded as UTF-8, line ends made ``\\n`` as text-mode ``open`` makes them
    (``\\r\\n`` and a lone ``\\r``), so a reader moved here reads the same text."""
    text = data.decode("utf-8", errors)
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _read_up_to(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < n and (chunk := os.read(fd, min(1 << 20, n - got))):
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
