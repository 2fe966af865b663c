"""The real daemon of a swarm test module: the `daemon` fixture (tests/conftest.py) runs
it as the module's ``DAEMON = ModuleDaemon(...)`` says.

`swarmgpu run` in the manager's network namespace, on a config from ``cfg_file`` (the
shipped defaults but for the test swarm's addresses and a fast cycle), its output
appended to ``LOGS / log``; stopped when the module ends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from support.gpu_nodes import LOGS, cfg_file, remove_stacks, start_daemon, stop
from support.swarm_harness import SwarmCluster


@dataclass(frozen=True)
class ModuleDaemon:
    log: str  # file name under LOGS, appended to
    config: Mapping[str, Any] = field(default_factory=dict)  # cfg_file's extra keys
    remove_stacks: tuple[str, ...] = ()  # removed (until gone) before the daemon stops


def run_module_daemon(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory,
                      setup: ModuleDaemon) -> Iterator[dict[str, Any]]:
    """Yields ``cfg`` (the config file), ``tmp`` (the module's directory), ``proc``,
    ``start`` (starts it again after a test stopped ``proc``), ``log`` and ``log_at``
    (the log's size before this daemon wrote to it)."""
    log = LOGS / setup.log
    tmp = tmp_path_factory.mktemp(setup.log.removesuffix(".log"))
    state: dict[str, Any] = {"tmp": tmp, "log": log,
                             "log_at": log.stat().st_size if log.exists() else 0}
    state["cfg"] = cfg = cfg_file(tmp, swarm, **setup.config)

    def start() -> None:
        state["proc"] = start_daemon(swarm, cfg, log)

    state["start"] = start
    start()
    try:
        yield state
        remove_stacks(swarm, *setup.remove_stacks)
    finally:
        stop(state["proc"])
