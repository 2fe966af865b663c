"""An engine gone in the middle of a leader's cycle (dockerd restarted, its proxy gone,
the manager demoted or without quorum: a read answered 503): who leads is unknown from
then on, as when a cycle's first ask fails. /healthz said so (``"leader": null``), but
the term went on: ``swarmgpu_is_leader`` stayed 1, and the next cycle, finding this
engine the leader again, took up the last term's in-memory state (the planner, the
mover's budget, the agents' loss times) though another manager may have led meanwhile
(raft elects another while dockerd restarts)."""

from __future__ import annotations

import tempfile

import pytest
from support.empty_swarm import EmptySwarm

from swarmgpu.core.config import AgentsConfig, Config, HttpConfig, SyncConfig
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.swarm.client import SwarmUnavailable


def _gone() -> dict[str, str]:
    raise SwarmUnavailable("Docker Engine unreachable at unix:///test: connection refused")


def test_an_engine_gone_mid_cycle_ends_the_term_and_the_next_one_starts_afresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    cfg = Config(state_dir=tempfile.mkdtemp(), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none", watch_s=0),
                 http=HttpConfig(listen="127.0.0.1:0"))
    swarm = EmptySwarm()
    d = Daemon(cfg, swarm=swarm)  # type: ignore[arg-type]
    d.use(daemon_steps(d))
    assert not d.cycle().aborted and d.leader  # a term
    stood: list[int] = []
    monkeypatch.setattr(d.pipeline, "stand_by", lambda: stood.append(1))
    monkeypatch.setattr(swarm, "swarm_labels", _gone)  # (the snapshot's first read)
    assert d.cycle().aborted
    assert d.health()["leader"] is None
    assert d.term.lost, "the term went on though who leads was unknown"
    assert d.metrics.registry.get_sample_value("swarmgpu_is_leader") == 0
    monkeypatch.setattr(swarm, "swarm_labels", dict)
    stood.clear()
    assert not d.cycle().aborted and d.leader
    assert stood, "the new term took up the last one's state"
