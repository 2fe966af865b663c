"""How the daemon's last cycle ended, for ``swarmgpu status --json``: that command builds
the cluster document itself, but ``last_cycle`` and ``last_cycle_at`` live in the
daemon's memory. Its /healthz (open to any reader) says both; they are read from the
daemon on ``http.listen`` when one answers there, and ``last_cycle_unread`` says why
not otherwise (null when read). Before, both were always null, unsaid why.
"""

from __future__ import annotations

import json
import math
from typing import Any, get_args

from swarmgpu.core.config import Config
from swarmgpu.core.healthcheck import loopback
from swarmgpu.manager.cycle.healthz import CutKind
from swarmgpu.manager.nodes import boundedhttp

TIMEOUT_S = 3.0  # a local daemon answers at once; one that does not is not waited on
MAX_BYTES = 256 * 1024  # its /healthz without detail: a few lines
WORDS = frozenset(("ok", *get_args(CutKind)))


def last_cycle(cfg: Config) -> dict[str, Any]:
    """``last_cycle``, ``last_cycle_at`` and ``last_cycle_unread`` for the document."""
    # (where the daemon binds it: '[::1:9402' and ':::9402' are no URL's host and port)
    url = f"http://{loopback(cfg.http.listen)}/healthz"
    try:
        got = boundedhttp.get(url, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES)
    except (boundedhttp.FetchError, OSError, ValueError) as exc:
        return _unread(f"no daemon answered {url} ({exc}); is it running, and is "
                       "http.listen of this config the one it serves on?")
    if got.status != 200:
        return _unread(f"the daemon's {url} answered HTTP {got.status}, not its health")
    try:
        doc = json.loads(got.body)
    except (ValueError, RecursionError):  # (RecursionError: nested too deep)
        doc = None
    word = doc.get("last_cycle") if isinstance(doc, dict) else None
    at = doc.get("last_cycle_at") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or "last_cycle" not in doc:
        return _unread(f"{url} answered no last_cycle (a swarmgpu older than this one, "
                       "or not swarmgpu's daemon); upgrade the daemon")
    if (word is not None and word not in WORDS) or not _when(at):
        return _unread(f"{url} answered a last_cycle or last_cycle_at of no form the "
                       "daemon gives; is that swarmgpu's daemon?")
    return {"last_cycle": word, "last_cycle_at": at, "last_cycle_unread": None}


def _when(at: object) -> bool:
    """Unix time or null, as the daemon says it."""
    return at is None or (isinstance(at, (int, float)) and not isinstance(at, bool)
                          and math.isfinite(at) and at >= 0)


def _unread(why: str) -> dict[str, Any]:
    return {"last_cycle": None, "last_cycle_at": None, "last_cycle_unread": why}
