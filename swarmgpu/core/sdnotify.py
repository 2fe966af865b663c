"""systemd's notify protocol, for ``Type=notify`` units with a watchdog (daemon, agent).

One datagram per message to ``$NOTIFY_SOCKET`` (``READY=1``, ``WATCHDOG=1``,
``STOPPING=1``); outside systemd there is no socket and nothing is sent, nor where
``$NOTIFY_SOCKET`` is neither an absolute path nor ``@`` and a name (systemd refuses it).
A message that cannot be sent is logged once (callers go on: systemd acts on the silence).
"""

from __future__ import annotations

import errno
import os
import socket

from loguru import logger

# The failure last logged; None after a send that worked, so a new failure is said again.
# Every caller ignores sd_notify's answer, and WATCHDOG=1 is sent at each cycle or read.
_said: str | None = None


def sd_notify(message: str) -> bool:
    """Tell systemd (Type=notify) about readiness/liveness; no-op outside systemd."""
    global _said
    raw = os.environ.get("NOTIFY_SOCKET")
    if not raw:
        return False
    # As libsystemd: an absolute path or an '@' abstract name, else nothing is sent (a
    # relative one would reach whatever socket has that name in the working directory).
    if raw[0] not in "/@" or len(raw) < 2:
        why = "it is neither an absolute path nor '@' and a name, which systemd refuses"
    else:
        addr = "\0" + raw[1:] if raw.startswith("@") else raw
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.connect(addr)
                s.sendall(message.encode())
            _said = None
            return True
        except OSError as e:
            code = errno.errorcode.get(e.errno or 0)
            why = (
                f"{e.strerror or e}"
                + (f" ({code})" if code else "")
                + "; is the socket reachable from here (a container, another mount "
                "namespace)?"
            )
    if why != _said:
        _said = why
        logger.warning(
            "cannot send {} to systemd: NOTIFY_SOCKET={!r}: {} (a unit that "
            "never hears READY=1 fails its start at TimeoutStartSec=, one whose "
            "WATCHDOG=1 stops is restarted at WatchdogSec=; said once)",
            message,
            raw[:120],
            why,
        )
    return False


def watchdog_s() -> float | None:
    """The unit's WatchdogSec= as systemd passes it (``$WATCHDOG_USEC``), when it is ours:
    as libsystemd's sd_watchdog_enabled, 0 (or the infinity, 2**64-1) is no watchdog, and
    ``$WATCHDOG_PID``, when set, must be our PID (else the watchdog is another process's,
    one that started us with its environment)."""
    raw = os.environ.get("WATCHDOG_USEC", "")
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 2**64 - 1:
        return None
    pid = os.environ.get("WATCHDOG_PID")
    if pid is not None and not (pid.isascii() and pid.isdigit() and int(pid) == os.getpid()):
        return None
    return int(raw) / 1e6
