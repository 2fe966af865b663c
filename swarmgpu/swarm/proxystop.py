"""The docker-proxy's stop on SIGTERM or SIGINT (``docker stack rm``, ``systemctl stop``).

It had no handler: the signal ended it (exit 143) in the middle of the write it was
forwarding, the engine's answer lost to the daemon, which could not tell whether it was
applied. Now the listener closes, the turn in flight (writes and ``GET /swarm`` take
``server.whole`` one at a time) and any a connection already waits for finish within
``STOP_WAIT_S`` (the lock is not fair: the stop takes it after them), no new connection
is taken, and the process exits 0. The handlers are set before the socket is bound: set
after it, a stop just as the proxy began to listen still ended it by the signal. Reads
in flight end with it: they change nothing, and a stream (``/events``) would never end
on its own.
"""

from __future__ import annotations

import signal
import threading

# Below docker's default 10 s stop grace (then SIGKILL); systemd's default is 90 s.
STOP_WAIT_S = 8.0


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (only the main thread may set handlers; as PID 1
    in a container SIGTERM has no default action at all)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())


def finish_turn(whole: threading.Lock, wait_s: float = STOP_WAIT_S) -> bool:
    """Wait for the turns in flight to end, then keep the lock so no later one starts;
    False: one still ran at ``wait_s`` and ends with the process."""
    return whole.acquire(timeout=wait_s)
