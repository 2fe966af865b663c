"""A JSON file of the daemon's state directory, replaced whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loguru import logger

from swarmgpu.core.saidonce import SaidOnce


def save_json(state_dir: str, name: str, data: Any) -> None:
    """Write ``data`` to ``state_dir/name`` through a temp file and a rename, so a reader
    sees the old file or the new one. A write that fails (ENOSPC, EROFS, EIO) raises and
    removes its temp file: a full disk kept one more half-written file each cycle."""
    d = Path(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{Path(name).stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, d / name)
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
