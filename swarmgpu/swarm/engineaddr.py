"""Which engine the daemon talks to, and what to do when it cannot be reached: for the
client's errors (``swarm.client``), which name the endpoint an operator must check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# The docker SDK's endpoint when neither a URL nor DOCKER_HOST is given.
DEFAULT_ENGINE = "unix:///var/run/docker.sock"


def engine_endpoint(base_url: str | None, env: Mapping[str, str] | None = None) -> str:
    """The endpoint a client for ``base_url`` talks to, and where that came from, for
    errors: the one an operator must check (docker contexts are not read by the SDK)."""
    env = os.environ if env is None else env
    if base_url:
        return base_url
    if env.get("DOCKER_HOST"):
        return f"{env['DOCKER_HOST']} (DOCKER_HOST)"
    return f"{DEFAULT_ENGINE} (the default; DOCKER_HOST is not set)"


_ADDRESS = "give the engine's address in docker_host (the config) or DOCKER_HOST"


def engine_fix(error: str) -> str:
    """``; fix: ...`` for an engine that cannot be reached, by the SDK's words for why;
    "" where they say nothing known (the SDK's chain of errors ended every command's
    first line with no word of what to do)."""
    if "FileNotFoundError" in error:
        return f"; fix: no engine socket there: run this on a Swarm manager, or {_ADDRESS}"
    if "PermissionError" in error or "Permission denied" in error:
        return "; fix: permission denied: run it as root or as a member of the docker group"
    if "Connection refused" in error or "ConnectionRefusedError" in error:
        return (f"; fix: nothing listens there: start dockerd (systemctl start docker), "
                f"or {_ADDRESS}")
    return ""
