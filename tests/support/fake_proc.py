"""A fake ``/proc`` for the agent's process attribution (swarmgpu.agent.procattr): the
few files it reads, written as the kernel writes them (proc(5))."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")  # the unit of /proc/<pid>/stat's starttime


def stat_line(pid: int, start_ticks: int, comm: str = "python3") -> str:
    """A ``/proc/<pid>/stat`` line: starttime (field 22) is ``start_ticks`` clock ticks
    after boot; the command name is in parentheses and may hold spaces and ``)``."""
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "0", "0", "0", "0",
              "0", "0", "0", "0", "20", "0", "1", "0", str(start_ticks), "1000", "10"]
    return f"{pid} ({comm}) {' '.join(fields)}\n"


def fake_pid(root: Path, pid: int, cgroup: str, start_s: float) -> Path:
    """``root/<pid>`` with its cgroup and a stat whose start is ``start_s`` after boot."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup)
    (d / "stat").write_text(stat_line(pid, round(start_s * CLK_TCK)))
    return d


def set_uptime(root: Path, seconds: float) -> None:
    """``root/uptime``: seconds since boot (and idle time), two decimals, as the kernel."""
    (root / "uptime").write_text(f"{seconds:.2f} {seconds * 3:.2f}\n")


def self_links(root: Path, self_pid: int, pid_ns_inode: int) -> Path:
    """``root`` as procfs shows a process its own entries (swarmgpu.agent.procroot):
    ``self`` -> its PID there, and that PID's ``ns/pid`` -> ``pid:[<inode>]``."""
    (root / str(self_pid) / "ns").mkdir(parents=True, exist_ok=True)
    (root / "self").symlink_to(str(self_pid))
    (root / str(self_pid) / "ns" / "pid").symlink_to(f"pid:[{pid_ns_inode}]")
    return root
