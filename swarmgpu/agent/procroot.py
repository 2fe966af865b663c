"""Whether a ``--proc-root`` shows the host's processes, or only its own container's.

NVML names GPU processes by their PID in the host's PID namespace; the agent finds each
one's container under ``<proc-root>/<pid>``. An agent in a container with its own PID
namespace (Docker's default, without ``--pid host``) whose ``--proc-root`` is that
container's own ``/proc`` sees no process of any other container: every GPU process
stays unattributed, silently, and the over-share check has nothing to judge.

Told apart without guessing from PID numbers:

- ``<proc-root>/self/ns/pid`` names the agent's own PID namespace (the link is the
  agent's, whichever procfs it is read through). The host's, the kernel's initial one,
  has a fixed inode (``PROC_PID_INIT_INO``, include/linux/proc_ns.h): an agent there
  sees every process through any procfs of it: fine.
- Otherwise the agent is in a child namespace. Whether the procfs is that namespace's
  own (the fault) or an ancestor's (the host's, as ``-v /proc:/host/proc:ro`` mounts
  it, or with nested containers an outer one's): the ``NSpid`` line of
  ``<proc-root>/self/status`` lists the agent's PID in each namespace from the
  procfs's down to its own, so one number means its own. Where the line is missing
  (kernels before 4.1), ``<proc-root>/1/ns/pid`` naming the agent's own namespace says
  it; failing both, PID numbers are compared (``<proc-root>/self`` is the agent's
  ``os.getpid()`` in its own procfs), which an ancestor's procfs that happens to number
  the agent the same would fool: the finding says it was a guess.
- Whose: ``<proc-root>/1/ns/pid`` names the namespace of that procfs's PID 1, its
  own. The host's inode: fine. Another: an outer container's (``NESTED``), where NVML's
  host PIDs name other processes or none (the fault). Reading it needs the right to
  ptrace PID 1 (``CAP_SYS_PTRACE``, or the agent privileged), which a container rarely
  has: unreadable, or naming no PID namespace, it is taken for the host's and the
  finding says so (nested containers cannot be told apart then; docs/doctor.md).

A path without ``self`` is no procfs at all. An unreadable link (a kernel or sandbox
that hides it) says nothing: unknown, and nothing is claimed (no false alarm).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from swarmgpu.core.boundedfile import FileRefused, read_bounded

INIT_PID_NS = 0xEFFFFFFC  # PROC_PID_INIT_INO: the initial (host) PID namespace's inode
_NS = re.compile(r"pid:\[(\d{1,20})\]")
_NSPID = re.compile(r"^NSpid:[ \t]*(\d+(?:[ \t]+\d+)*)[ \t]*$", re.MULTILINE)
_MAX_STATUS = 64 << 10  # /proc/<pid>/status is a few KiB
FIX = ("mount the host's /proc into the agent's container and point --proc-root at it "
       "(-v /proc:/host/proc:ro --proc-root /host/proc, as stacks/swarmgpu.yml does), or run the "
       "agent with the host's PID namespace (--pid host)")


class ProcRootKind(StrEnum):
    HOST = "host"  # shows every process of the node
    OWN = "own-namespace"  # a container's own /proc: no other container's process
    NESTED = "outer-namespace"  # an outer container's /proc, not the host's
    NOT_PROC = "not-proc"  # no procfs there at all
    UNKNOWN = "unknown"  # the links could not be read: nothing said


@dataclass(frozen=True)
class ProcRootView:
    path: str
    kind: ProcRootKind
    found: str  # what was read, in words

    @property
    def blind(self) -> bool:
        """The agent cannot see other containers' GPU processes through this path."""
        return self.kind in (ProcRootKind.OWN, ProcRootKind.NESTED, ProcRootKind.NOT_PROC)


def proc_root_view(proc_root: str, pid: int | None = None) -> ProcRootView:
    """What ``proc_root`` shows a process ``pid`` (default: this one); module docstring."""
    pid = os.getpid() if pid is None else pid
    root = Path(proc_root)
    try:
        self_pid = os.readlink(root / "self")
    except FileNotFoundError:
        return ProcRootView(proc_root, ProcRootKind.NOT_PROC,
                            f"{proc_root} has no 'self' entry: it is not a /proc (procfs)")
    except OSError as exc:
        return ProcRootView(proc_root, ProcRootKind.UNKNOWN,
                            f"{proc_root}/self not readable ({exc.strerror or exc})")
    try:
        ns = _NS.fullmatch(os.readlink(root / "self" / "ns" / "pid"))
    except OSError as exc:
        return ProcRootView(proc_root, ProcRootKind.UNKNOWN,
                            f"{proc_root}/self/ns/pid not readable ({exc.strerror or exc})")
    if ns is None:
        return ProcRootView(proc_root, ProcRootKind.UNKNOWN,
                            f"{proc_root}/self/ns/pid names no PID namespace")
    if int(ns[1]) == INIT_PID_NS:
        return ProcRootView(proc_root, ProcRootKind.HOST,
                            f"{proc_root}: this process runs in the host's PID namespace")
    init_link = _link(root / "1" / "ns" / "pid")
    own, doubt = _own_namespace(root, self_pid, pid, ns[1], init_link)
    if own:
        return ProcRootView(
            proc_root, ProcRootKind.OWN,
            f"{proc_root} is this container's own /proc (its PID namespace "
            f"pid:[{ns[1]}], not the host's): GPU processes of other containers are "
            f"not in it{doubt}")
    here = f"this process is PID {pid} in its container, {self_pid[:20]} there"
    init = _NS.fullmatch(init_link) if isinstance(init_link, str) else None
    if init is None:  # no right to ptrace PID 1 (or hidepid), or no namespace named
        why = (f"not readable: {init_link.strerror or init_link}"
               if isinstance(init_link, OSError) else "names no PID namespace")
        return ProcRootView(
            proc_root, ProcRootKind.HOST,
            f"{proc_root} is an outer PID namespace's /proc ({here}): the host's unless "
            f"containers are nested ({proc_root}/1/ns/pid {why})")
    if int(init[1]) != INIT_PID_NS:
        return ProcRootView(
            proc_root, ProcRootKind.NESTED,
            f"{proc_root} is an outer container's /proc (its PID namespace pid:[{init[1]}], "
            f"not the host's; {here}): NVML's host PIDs name other processes there, or none")
    return ProcRootView(proc_root, ProcRootKind.HOST, f"{proc_root} is the host's /proc ({here})")


def _link(path: Path) -> str | OSError:
    try:
        return os.readlink(path)
    except OSError as exc:
        return exc


def _own_namespace(root: Path, self_pid: str, pid: int, ns: str,
                   init_link: str | OSError) -> tuple[bool, str]:
    """Whether the procfs at ``root`` is the agent's own PID namespace's (module
    docstring), and the doubt to add to the finding where PID numbers decided it."""
    try:
        status = read_bounded(root / "self" / "status", _MAX_STATUS).decode("ascii", "replace")
    except (OSError, FileRefused):
        status = ""
    nspid = _NSPID.search(status)
    if nspid is not None:
        return len(nspid[1].split()) == 1, ""
    if isinstance(init_link, str) and _NS.fullmatch(init_link):
        return init_link == f"pid:[{ns}]", ""
    return self_pid == str(pid), (
        f" (told by PID numbers alone: {root}/self/status has no NSpid line and "
        f"{root}/1/ns/pid is not readable; an outer /proc numbering this process "
        f"{pid} too would read the same)")
