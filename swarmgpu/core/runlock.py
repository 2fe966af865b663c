"""One daemon per state directory: ``swarmgpu run`` holds an exclusive ``flock`` on a file
there for its whole life, with its PID in it. A second run beside the first (a second
shell, a unit and a container sharing ``/var/lib/swarmgpu``, a start-first update) asks
the same engine, finds it the leader too, and both would act: twice the moves and
preemptions of one decision, two writers of the same state files. The kernel drops the
lock when the process ends, however it ends: a crash leaves no stale lock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_FILE = "daemon.lock"


class Held(Exception):
    """Another process holds the lock."""


def hold(state_dir: str) -> IO[str]:
    """Take ``state_dir``'s lock for this process, or raise ``Held`` naming the holder's
    PID. ``OSError`` when the directory or file cannot be made or opened (read-only, not
    a directory): the caller decides. Keep the returned file open: closing it unlocks."""
    d = Path(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / LOCK_FILE
    fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the process's life
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        pid = fh.read(32).strip()
        fh.close()
        who = f"PID {pid}" if pid.isdigit() else "a process whose PID it has not written yet"
        raise Held(
            f"another swarmgpu run ({who}) holds {path}: one daemon per state_dir, "
            "as two beside one engine both act as its leader; stop that one first "
            f"(systemctl stop swarmgpu, or kill {pid or 'it'}), or give this one "
            "another state_dir if it talks to another engine"
        ) from None
    except OSError:
        fh.close()
        raise
    fh.truncate(0)
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh
