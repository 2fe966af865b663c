"""A CDI spec file as the runtime's read of it meets it: what it is, looked at before the
doctor opens it, and what a read of it that fails means.

CDI reads each ``*.yaml`` and ``*.json`` file of its spec dirs whole with Go's
``os.ReadFile``, a link followed (container-device-interface v1.1.0, pkg/cdi spec.go
``ReadSpec``). A FIFO blocks that read until a writer comes, a device may never end it
(``/dev/zero``) or wait for input: the runtime hangs starting each GPU task's container.
So the doctor stats the file first and never opens one that is not a regular file.

A read that fails (permission denied, a socket's "no such device or address", a
directory's "is a directory") stops nothing: CDI's ``Cache.refresh`` (pkg/cdi cache.go)
records the error for that spec's path and returns nil to its scan, which reads the other
specs, and the toolkit only logs the errors (nvidia-container-toolkit
internal/modifier/cdi/registry.go ``fromRegistry.Modify``: ``Refresh``'s error at debug
level, ``GetErrors`` only when a device is unresolved) and injects the devices the other
specs define. The doctor warns of it, then: a failure only where the GPUs go unresolved.
"""

from __future__ import annotations

import os
import stat

from swarmgpu.agent.doctor.rootpath import SymlinkLoop, lstat_in_root, stat_in_root
from swarmgpu.agent.doctor.view import CdiSpec
from swarmgpu.core.boundedfile import NotRegularFile, file_kind

# (the check's fix then says how to read it as the runtime does)
DENIED_TO_USER = "permission denied (run the doctor as root, as the runtime reads it)"
_SKIPPED = "CDI's read of it fails and it skips it, loading the other specs"
_HANGS = (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK)  # (whose read may never end)


class SpecUnread(Exception):
    """A spec file the doctor does not read, named (``spec``) for why."""

    def __init__(self, spec: CdiSpec) -> None:
        super().__init__(spec.error)
        self.spec = spec


def not_regular(root: str, path: str) -> CdiSpec | None:
    """The spec file ``path`` named for what it is where it is no regular file, looked at
    with stat alone (a link followed, as CDI's read follows it); None for a regular file,
    or one that cannot be looked at (its read says why)."""
    rel = path.lstrip("/")
    try:
        mode = stat_in_root(root, rel).st_mode
        link = stat.S_ISLNK(lstat_in_root(root, rel).st_mode)
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    return _odd(path, file_kind(mode) + (", by a symlink" if link else ""), mode)


def _odd(path: str, kind: str, mode: int) -> CdiSpec:
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        ends = ("waits for a writer, for ever" if stat.S_ISFIFO(mode)
                else "may never end (a device is read to its end)")
        return CdiSpec(path, error=f"is {kind}, not a spec: the runtime's read of it "
                                   f"{ends}", hangs=True)
    return CdiSpec(path, error=f"is {kind}, not a spec: {_SKIPPED}", skipped=True)


def unread(path: str, exc: OSError | NotRegularFile) -> SpecUnread:
    """The spec file ``path`` whose open or read failed with ``exc``. Denied to a user,
    the runtime (root) may read it: named so."""
    if isinstance(exc, NotRegularFile):  # (a regular file when looked at: swapped since)
        # (a FIFO or device there now hangs the runtime's read as one stat saw does)
        hangs = [m for m in _HANGS if file_kind(m) == exc.kind]
        if hangs:
            return SpecUnread(_odd(path, f"{exc.kind} (replaced while the doctor read it)",
                                   hangs[0]))
        return SpecUnread(CdiSpec(path, error=f"is {exc.kind} (replaced while the doctor "
                                              "read it): run the doctor again",
                                  skipped=True))
    if isinstance(exc, PermissionError) and os.geteuid() != 0:
        said = f"cannot be read: {DENIED_TO_USER}"
    elif isinstance(exc, PermissionError):
        said = ("cannot be read (permission denied), even by root: CDI skips it, loading "
                "the other specs (an LSM or a root-squashed mount denies it)")
    elif isinstance(exc, SymlinkLoop):
        said = f"is a symlink loop: {_SKIPPED}"
    else:
        said = f"cannot be read ({(exc.strerror or 'an error').lower()}): {_SKIPPED}"
    return SpecUnread(CdiSpec(path, error=said, skipped=True))
