"""No file the repository tracks holds a merge's conflict markers: a merge committed with
them (docs/reliability.md at int80 2bdb6226: two versions of the engine-skew row, between
``<<<<<<< HEAD`` and ``>>>>>>> fix80-reader80a``) reads as both, and CI ran green on it.
Git's own markers at a line's start, seven characters: a Markdown rule (``---``) or a
Python comment of ``=`` is never seven ``=`` alone on its line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(rb"^(?:<{7}(?: .*)?|={7}|>{7}(?: .*)?)\r?$", re.MULTILINE)


def test_no_tracked_file_holds_conflict_markers() -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.split(b"\0")
    found = []
    for name in (n.decode() for n in listed if n):
        path = REPO / name
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # (a binary file: no text to merge)
            continue
        for m in MARKER.finditer(data):
            line = data.count(b"\n", 0, m.start()) + 1
            found.append(f"{name}:{line}: {m.group().decode(errors='replace')[:40]}")
    assert not found, "conflict markers committed (resolve the merge):\n" + "\n".join(found)
