"""dockerd's CDI spec dirs as its start hands them to CDI: a dir given as a symlink, and
one it cannot list.

moby from 29.2.0 (daemon/cdi.go ``RegisterCDIDriver``, "cdi: resolve symlinks") replaces
each spec dir that ``os.Stat`` finds with ``filepath.EvalSymlinks`` of it before
``cdi.NewCache``, so its CDI (whose released ``filepath.Walk`` lstat's a dir and never
follows a link) reads the real dir: ``/etc/cdi -> /srv/cdi`` reads /srv/cdi's specs,
a FIFO there included, as it starts. An older dockerd hands CDI the link: no spec read
there. docker info from 29.2 lists the resolved dirs (the config's slice, resolved in
place), but a dir absent when dockerd started is listed as configured, and its next
start resolves it: so the doctor resolves a link it meets as that start would.

From 29.2.0 too (daemon/command/daemon.go, "cdi: skip scanning non-readable dirs") its
config loading drops a spec dir ``os.ReadDir`` fails on, absence aside (a file, a path
through one, a loop, one it may not list), before CDI's scan could stop there: a later
dir is read all the same.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Mapping
from typing import Any

from swarmgpu.agent.doctor.cdispec import newest_taken
from swarmgpu.agent.doctor.rootpath import MAX_SYMLINKS, lstat_in_root

RESOLVING = "29.2"  # (how a finding names the Docker that resolves them)
_SINCE = (((29, 2, 0), RESOLVING),)
# A release's version (``newest_taken`` reads it; its pre-releases, 29.2.0-rc.1 on, hold
# both moby commits). Anything else is a build of moby's master: hack/make.sh's "dev", a
# branch's name, pr-N, a nightly package's 0.0.0-<date>-<commit>.
_RELEASE = re.compile(r"(?:\d{1,9}:)?v?(?!0+\.)\d{1,9}\.\d{1,9}\.\d{1,9}(?!\d)", re.ASCII)


def since_29_2(info: Mapping[str, Any] | None) -> bool:
    """Whether dockerd resolves its spec dirs' links and drops those it cannot list as
    it starts: docker info's ``ServerVersion`` 29.2.0 or later; without docker info
    (daemon.json's dirs, a guess), or of no release's version (a build of master, or
    none said), as today's Docker does: read as an older one, a FIFO behind a link,
    which hangs its start, would pass."""
    server = None if info is None else info.get("ServerVersion")
    if not isinstance(server, str) or _RELEASE.match(server) is None:
        return True
    return newest_taken(_SINCE, server) is not None


def resolved_links(
    root: str, dirs: list[str]
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(dir, the real dir dockerd reads) for each of ``dirs`` (as ``read`` names them:
    normalised, absolute) that is a symlink to a directory, resolved inside ``root``; a
    link to nothing, to a file or in a loop is left (os.Stat fails, or moby's config
    check drops a dir it cannot list). And the links the doctor, not root, may not
    resolve (a dir on the way it may not search), which dockerd (root) resolves."""
    out, denied = [], []
    for d in dirs:
        try:
            if not stat.S_ISLNK(lstat_in_root(root, d.lstrip("/")).st_mode):
                continue
        except (OSError, ValueError):  # (read's own look names it)
            continue
        try:
            real = _real(root, d)
        except PermissionError:
            denied.append(d)
            continue
        if real is not None and real != d:
            out.append((d, real))
    return tuple(out), tuple(denied)


def as_resolved(dirs: list[str], links: tuple[tuple[str, str], ...]) -> list[str]:
    """``dirs`` with each link of ``links`` replaced by its real dir."""
    to = dict(links)
    return [to.get(posixpath.normpath("/" + d.lstrip("/")), d) for d in dirs]


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _real(root: str, path: str) -> str | None:
    """``path`` with every symlink on it resolved inside ``root`` (an absolute target
    starts again at the root, ``..`` stops at it), as ``filepath.EvalSymlinks`` resolves
    it on the node; None where a part is absent, a loop, a file with more after it (the
    kernel's ENOTDIR, ``file/..`` too), or the end is no directory. PermissionError where
    the doctor, not root, may not look (root may)."""
    todo = [p for p in path.split("/") if p and p != "."][::-1]
    parts: list[str] = []
    links = 0
    while todo:
        part = todo.pop()
        if part == "..":
            parts = parts[:-1]
            continue
        here = _under(root, "/".join([*parts, part]))
        try:
            mode = os.lstat(here).st_mode
            if not stat.S_ISLNK(mode):
                if todo and not stat.S_ISDIR(mode):  # (ENOTDIR, ``..`` next included)
                    return None
                parts.append(part)
                continue
            target = os.readlink(here)
        except (OSError, ValueError) as exc:
            _raise_if_denied(exc)
            return None
        links += 1
        if links > MAX_SYMLINKS:
            return None
        if target.startswith("/"):
            parts = []
        todo.extend([p for p in target.split("/") if p and p != "."][::-1])
    try:
        is_dir = stat.S_ISDIR(os.lstat(_under(root, "/".join(parts))).st_mode)
    except (OSError, ValueError) as exc:
        _raise_if_denied(exc)
        return None
    return "/" + "/".join(parts) if is_dir else None


def _raise_if_denied(exc: OSError | ValueError) -> None:
    """``exc`` raised where the doctor, not root, is denied a look root may take."""
    if isinstance(exc, PermissionError) and os.geteuid() != 0:
        raise exc
