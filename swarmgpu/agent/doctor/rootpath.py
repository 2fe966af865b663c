"""A path of the node under ``--root`` as the node itself sees it: symlinks resolved inside
the root, as the kernel would after ``chroot(root)``.

Followed by the host's kernel, ``<root>/etc/docker/daemon.json -> /srv/conf/daemon.json``
reads the host's /srv (another node's file, or none): an image or a mounted disk is full
of absolute links. Here an absolute target starts again at the root, ``..`` stops at it,
and past 40 links (the kernel's MAXSYMLINKS) the lookup is a loop.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_SYMLINKS = 40  # linux include/linux/namei.h


def in_root(root: str, rel: str) -> Path:
    """``<root>/<rel>`` with every symlink on the way resolved inside ``root``. A part
    that cannot be looked at (absent, not a directory) ends the walk: the rest is joined
    as written, so opening the result fails as the node's own open would. Raises
    OSError(ELOOP) past :data:`MAX_SYMLINKS` links."""
    base = Path(root)
    if is_host(root):  # the node itself: its kernel resolves as it should
        return base / rel
    done: list[str] = []
    todo = _parts(rel)[::-1]  # a stack: the next part last
    links = 0
    while todo:
        part = todo.pop()
        if part == "..":
            if done:
                done.pop()
            continue
        here = base.joinpath(*done, part)
        try:
            st = os.lstat(here)
        except OSError:
            return here.joinpath(*todo[::-1])
        if not stat.S_ISLNK(st.st_mode):
            done.append(part)
            continue
        links += 1
        if links > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(base / rel))
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        todo.extend(_parts(target)[::-1])
    return base.joinpath(*done)


def is_host(root: str) -> bool:
    """The root is this machine's own /: the doctor runs on the node it checks."""
    return os.path.realpath(root) == "/"


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]
