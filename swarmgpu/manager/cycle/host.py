"""What the daemon offers the steps it runs: the ``CycleHost`` protocol.

The daemon wires the parts together (``cycle.wiring``); a step sees it only through this
protocol, read-only, so none of them imports the daemon and the daemon can import any
of them. What one step hands a later one in a cycle goes through the cycle's session
(``cycle.session.CycleSession``), never through the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from swarmgpu.core.config import Config
from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics
from swarmgpu.manager.cycle.triggers import Trigger
from swarmgpu.manager.engine.stop import StopRequest
from swarmgpu.manager.nodes.agentbook import AgentBook
from swarmgpu.manager.nodes.sync import LabelSync
from swarmgpu.swarm.client import SwarmClient

Route = Callable[[], tuple[str, bytes]]
QueryRoute = Callable[[str], tuple[str, bytes]]


class CycleHost(Protocol):
    @property
    def cfg(self) -> Config: ...

    @property
    def swarm(self) -> SwarmClient: ...

    @property
    def metrics(self) -> DaemonMetrics: ...

    @property
    def book(self) -> AgentBook:
        """Each node's agent as seen so far (last good facts, failures since when)."""

    @property
    def labels(self) -> LabelSync:
        """Label sync, kept across cycles (its GPU health book: ``labels.health``)."""

    @property
    def stop_event(self) -> StopRequest:
        """The daemon's stop request (SIGTERM): a step's long reads of the nodes start
        none once it is set (``engine.stop``); its writes' gate asks it already."""

    @property
    def leader(self) -> bool:
        """Whether this daemon's engine leads the swarm (read at HTTP time too)."""

    @property
    def engine_error(self) -> str | None:
        """Why the engine could not be asked (the last ask failed), else None: who leads
        is then unknown, and no write goes out (read at HTTP time too)."""

    @property
    def engine_state(self) -> str:
        """How the engine stands while ``engine_error`` is set: "unreachable", or the
        state of its swarm node when it answers but that does not run ("locked",
        "error", "inactive": ``swarm.localstate``); "reachable" otherwise."""

    @property
    def last_cycle(self) -> str | None:
        """How the last cycle ended, in /healthz's word (``cycle.healthz.cycle_word``);
        None before the first (read at HTTP time)."""

    @property
    def last_cycle_ended(self) -> float | None:
        """When the last cycle ended (Unix time), else None."""

    @property
    def http_routes(self) -> dict[str, Route]:
        """Path -> () -> (content type, body): a step serves a page here."""

    @property
    def http_query_routes(self) -> dict[str, QueryRoute]:
        """Path -> (raw query string) -> (content type, body)."""

    def trigger(self, why: Trigger) -> None:
        """Run a cycle soon (e.g. once replaced tasks exist), counted under ``why``."""
