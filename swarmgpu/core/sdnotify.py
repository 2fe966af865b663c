"""systemd's notify protocol, for ``Type=notify`` units with a watchdog (daemon, agent).

One datagram per message to ``$NOTIFY_SOCKET`` (``READY=1``, ``WATCHDOG=1``,
``STOPPING=1``); outside systemd there is no socket and nothing is sent, nor where
``$NOTIFY_SOCKET`` is neither an absolute path nor ``@`` and a name (systemd refuses it).
"""

from __future__ import annotations

import os
import socket


def sd_notify(message: str) -> bool:
    """Tell systemd (Type=notify) about readiness/liveness; no-op outside systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    # As libsystemd: an absolute path or an '@' abstract name, else nothing is sent (a
    # relative one would reach whatever socket has that name in the working directory).
    if not addr or addr[0] not in "/@" or len(addr) < 2:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(message.encode())
        return True
    except OSError:
        return False


def watchdog_s() -> float | None:
    """The unit's WatchdogSec= as systemd passes it (``$WATCHDOG_USEC``), if any."""
    raw = os.environ.get("WATCHDOG_USEC", "")
    return int(raw) / 1e6 if raw.isascii() and raw.isdigit() else None
