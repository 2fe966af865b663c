"""A request that failed past its handler's own catch, said in the service's log.

socketserver's ``handle_error`` prints the traceback to stderr: raw text beside the
JSON log under ``--log-format json``, and in no log a search of the service's finds.
The agent's and the daemon's HTTP servers (``httpguard.GuardedServer``) and the
docker-proxy (``swarm.dockerproxy.ProxyServer``) say it through loguru instead; the
server goes on serving.
"""

from __future__ import annotations

import sys
from typing import Any

from loguru import logger

from swarmgpu.core.peertext import peer_text


def peer_name(client_address: Any) -> str:
    """``host:port`` of a TCP peer; a unix socket's has no address."""
    if isinstance(client_address, tuple) and len(client_address) >= 2:
        return peer_text(f"{client_address[0]}:{client_address[1]}", 100)
    return peer_text(str(client_address), 100) if client_address else "a local client"


class LoggedErrors:
    """A socketserver mixin (first among the bases): ``handle_error`` logs."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # the connection's (a timeout, a reset): no bug
            logger.warning("the connection from {} failed: {}", peer_name(client_address),
                           peer_text(exc))
            return
        logger.opt(exception=True).error(
            "a request from {} failed unexpectedly, a fault of swarmgpu (please report "
            "it with the traceback); the server goes on", peer_name(client_address))
