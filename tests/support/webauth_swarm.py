"""The environment the shipped stack file gives the daemon.

First written in tests/test_webauth_swarm.py."""

from __future__ import annotations

import yaml

from support.paths import REPO


def stack_daemon_env() -> dict[str, str]:
    """The daemon service's environment in stacks/swarmgpu.yml."""
    stack = yaml.safe_load((REPO / "stacks" / "swarmgpu.yml").read_text())
    daemon = stack["services"]["daemon"]
    assert "swarmgpu-http-token" in daemon["secrets"]
    assert stack["secrets"]["swarmgpu-http-token"] == {"external": True}
    env = dict(item.split("=", 1) for item in daemon["environment"])
    return {k: v.replace("${SWARMGPU_SYNC_INTERVAL_S:-30}", "2") for k, v in env.items()}
