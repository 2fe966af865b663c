"""A stand-in server serving in a thread for a block's length: the one start and stop
of the loopback engine (``loop_engine``), the docker CLIs' engine (``docker_clis``) and
the plain agent (``plain_agent``)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def served(server: socketserver.BaseServer, poll_s: float = 0.5) -> Iterator[None]:
    """``server`` serving in a daemon thread for the block's length (polling for its
    shutdown each ``poll_s``), then shut down and closed (its thread joined, 5 s at
    most)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_s},
                              daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
