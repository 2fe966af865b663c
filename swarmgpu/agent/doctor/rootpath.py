"""A path of the node under ``--root`` as the node itself sees it: symlinks resolved inside
the root, as the kernel would after ``chroot(root)``.

Followed by the host's kernel, ``<root>/etc/docker/daemon.json -> /srv/conf/daemon.json``
reads the host's /srv (another node's file, or none): an image or a mounted disk is full
of absolute links. Here an absolute target starts again at the root, ``..`` stops at it,
and past 40 links (the kernel's MAXSYMLINKS) the lookup is a loop.

The walk holds a directory fd for each part and looks each name up relative to it, never
letting the kernel follow a link (``O_NOFOLLOW``): a path resolved first and opened later
escapes the root when a part is swapped for a symlink in between (an image being
unpacked, a container writing its own rootfs). Linux's ``openat2(RESOLVE_IN_ROOT)`` does
this in one call, but Python has no wrapper for it.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_SYMLINKS = 40  # linux include/linux/namei.h
# linux include/uapi/linux/limits.h: a path's bytes with the final NUL, one name's bytes
# (every common file system's limit). Past them the kernel says "File name too long".
PATH_MAX = 4096
NAME_MAX = 255


class SymlinkLoop(OSError):
    """ELOOP of the walk's own count: past :data:`MAX_SYMLINKS` links, a loop. Any other
    ELOOP under a root is the last part's ``O_NOFOLLOW`` open meeting a link where the
    walk saw none (replaced since): no loop, a root being written. (A directory on the way
    replaced so is :class:`RootChanged`.)"""


class RootChanged(OSError):
    """A part on the way changed between the walk's look and its use: a directory when
    looked at and a file or link when walked into, or a link when looked at and none
    when read. The kernel's ENOTDIR or EINVAL would read as the node's own layout (its
    /etc a file); it is a root being written. ``filename`` is the part's path."""

    def __init__(self, err: int, path: str, was: str) -> None:
        super().__init__(
            err, f"changed while the doctor read it ({was}: the root is being written)", path
        )


# A directory on the way: only walked through, never read (O_PATH needs no permission
# but search), and never a link the kernel follows.
_DIR_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


@contextmanager
def entry_in_root(root: str, rel: str) -> Iterator[tuple[int | None, str]]:
    """``(dir_fd, name)`` of ``<root>/<rel>`` with every symlink on the way, the last
    part's included, resolved inside ``root``: ``name`` is one entry of the directory
    ``dir_fd`` (open until the block ends), not a symlink when looked at. Open it with
    ``O_NOFOLLOW`` relative to ``dir_fd``: swapped for a link since, it fails. On the node
    itself (``is_host``) ``dir_fd`` is None and ``name`` the whole path, for the kernel to
    resolve. The OSError of a part that cannot be looked at (absent, not a directory, no
    permission), as the node's own open would fail; :class:`SymlinkLoop` past
    :data:`MAX_SYMLINKS` links; :class:`RootChanged` where a part changed while walked."""
    if is_host(root):
        yield None, str(Path(root) / rel)
        return
    dirs = [os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]  # ``..`` pops one
    try:
        todo = _parts(rel)[::-1]  # a stack: the next part last
        names: list[str] = []  # the parts walked into (dirs[1:]), to name one that changed
        links = 0
        while todo:
            part = todo.pop()
            if part == "..":
                if len(dirs) > 1:
                    os.close(dirs.pop())
                    names.pop()
                continue
            here = str(Path(root, *names, part))
            # Looked at first (lstat), so a part that differs when used is known to have
            # changed, not to have been so on the node.
            mode = os.stat(part, dir_fd=dirs[-1], follow_symlinks=False).st_mode
            if not stat.S_ISLNK(mode):
                if not todo:
                    yield dirs[-1], part
                    return
                if not stat.S_ISDIR(mode):  # as the node's own open would fail
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), here)
                try:
                    dirs.append(os.open(part, _DIR_FLAGS, dir_fd=dirs[-1]))
                except NotADirectoryError:  # O_DIRECTORY with O_NOFOLLOW: a file or link now
                    raise RootChanged(
                        errno.ENOTDIR, here, "a directory when looked at, not when walked into"
                    ) from None
                names.append(part)
                continue
            try:
                target = os.readlink(part, dir_fd=dirs[-1])
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: no symlink any more
                    raise
                raise RootChanged(
                    errno.EINVAL, here, "a symlink when looked at, not when read"
                ) from None
            links += 1
            if links > MAX_SYMLINKS:
                raise SymlinkLoop(errno.ELOOP, os.strerror(errno.ELOOP), str(Path(root) / rel))
            if target.startswith("/"):
                while len(dirs) > 1:
                    os.close(dirs.pop())
                names.clear()
            todo.extend(_parts(target)[::-1])
        yield dirs[-1], "."  # the path ends at a directory walked (the root, after a ``..``)
    finally:
        for fd in dirs:
            os.close(fd)


def refusal(path: str) -> str | None:
    """Why the kernel refuses ``path`` to any program, None when it takes it. A config file
    may hold any string (JSON spells a NUL ``\\u0000``): looked up, a NUL or a lone
    surrogate is ValueError here, a path past the limits ENAMETOOLONG on the node only
    (the walk looks up one part at a time), so it is asked first."""
    if "\0" in path:
        return "contains a NUL character: no path can (the kernel ends a path at it)"
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:  # a lone surrogate: JSON's \ud800 decodes to one
        return "contains a character no path can (a lone UTF-16 surrogate)"
    if len(raw) >= PATH_MAX:
        return (
            f"is {len(raw)} bytes long: the kernel takes at most {PATH_MAX - 1} "
            f"(PATH_MAX, {PATH_MAX} bytes with the final NUL)"
        )
    longest = max((len(p) for p in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        return (
            f"has a part {longest} bytes long: a file name is at most {NAME_MAX} bytes (NAME_MAX)"
        )
    return None


def stat_in_root(root: str, rel: str) -> os.stat_result:
    """``os.stat`` of ``<root>/<rel>`` as the node sees it (``entry_in_root``)."""
    with entry_in_root(root, rel) as (dir_fd, name):
        if dir_fd is None:
            return os.stat(name)
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def lstat_in_root(root: str, rel: str) -> os.stat_result:
    """``os.lstat`` of ``<root>/<rel>``: the links on the way resolved inside the root
    (``entry_in_root``), the last part looked at itself, a link not followed (Go's
    ``os.Lstat``)."""
    parent, name = posixpath.split(posixpath.normpath("/" + rel))
    if not name:  # (the root itself)
        return os.stat(root)
    with entry_in_root(root, parent.lstrip("/")) as (dir_fd, entry):
        if dir_fd is None:
            return os.lstat(posixpath.join(entry, name))
        fd = os.open(entry, _DIR_FLAGS, dir_fd=dir_fd)  # (a file there: ENOTDIR)
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)


def listdir_in_root(root: str, rel: str) -> list[str]:
    """The names in the directory ``<root>/<rel>`` as the node sees it."""
    with _opened_dir(root, rel) as where:
        return os.listdir(where)


def subdirs_in_root(root: str, rel: str) -> frozenset[str]:
    """The names in the directory ``<root>/<rel>`` that are directories themselves, not
    links to one: what Go's ``os.ReadDir`` calls ``IsDir`` (CDI's spec scan skips them)."""
    with _opened_dir(root, rel) as where, os.scandir(where) as entries:
        return frozenset(e.name for e in entries if e.is_dir(follow_symlinks=False))


@contextmanager
def _opened_dir(root: str, rel: str) -> Iterator[int | str]:
    """The directory ``<root>/<rel>`` (``entry_in_root``) for ``os.listdir`` or
    ``os.scandir``: an fd open until the block ends; on the node itself its path."""
    with entry_in_root(root, rel) as (dir_fd, name):
        if dir_fd is None:
            yield name
            return
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=dir_fd)
        try:
            yield fd
        finally:
            os.close(fd)


def is_host(root: str) -> bool:
    """The root is this machine's own /: the doctor runs on the node it checks."""
    return os.path.realpath(root) == "/"


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]
