"""A file replaced whole or not at all: the daemon's JSON state, and the files a command
writes (``simulate-derive``'s lists), through a temp file and a rename."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from loguru import logger

from swarmgpu.core.saidonce import SaidOnce


def save_json(state_dir: str, name: str, data: Any) -> None:
    """Write ``data`` to ``state_dir/name`` through a temp file and a rename, so a reader
    sees the old file or the new one."""
    d = Path(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    replace_whole(d / name, lambda fh: json.dump(data, fh, indent=1, sort_keys=True))


def replace_whole(path: Path, write: Callable[[TextIO], object], *, newline: str | None = None,
                  mode: int | None = None) -> None:
    """``write`` the text of ``path`` into a temp file beside it, then rename it over
    ``path``: a reader sees the old file or the new one, and what was at ``path`` is
    never opened (a FIFO there would block the write). A write that fails (ENOSPC,
    EROFS, EIO) raises and removes its temp file: a full disk kept one more
    half-written file each cycle. The file is private (0600, mkstemp's) unless ``mode``
    says otherwise (a command's output others read: 0644)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", newline=newline) as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def save_said(said: SaidOnce[str], what: str, state_dir: str, save: Callable[[str], None]) -> None:
    """``save(state_dir)``, a failure warned of once while it lasts (``said``: this
    file's, one round a call), again when its errno changes or once it failed anew after
    a save: a full or read-only state directory was warned of every cycle."""
    said.begin()
    try:
        save(state_dir)
    except OSError as exc:
        if said.fresh(what, exc.errno):  # not its text: it may name the temp file
            logger.warning(
                "cannot save {} to {}: {} (said once while it lasts)", what, state_dir, exc
            )
    said.end()
