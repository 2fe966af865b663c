"""A leader's term lost in the middle of label sync (a write found another manager
elected: ``cycle.term``). No further write went out, but each one left still read its
node, was refused at the last moment (``NotLeader``) and said so as a failed label write:
a thousand-node first sync logged a thousand "label write failed" errors and counted them
in ``swarmgpu_errors_total{kind="label_write"}`` on a plain change of leader. The write
gate now ends the step there, as a stop does: the writes not started are left (the new
leader's daemon plans them), none said failed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.forged import RecordingSwarm, sw_node
from support.loglines import log_lines

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.core.model import Gpu, NodeFacts
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import TermEnded, check_term, undoing
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.swarm.client import NotLeader

NODES = 40


class DeposedDuringAWrite(RecordingSwarm):
    """The first node write finds another manager elected; every later write asks the
    term, as the client does (``may_write``), after reading its node."""

    def __init__(self) -> None:
        super().__init__([sw_node(f"n-{i:02d}", f"gpu-{i:02d}") for i in range(NODES)], [], [])
        self.deposed: Callable[[], None] = lambda: None
        self.reads = 0

    def update_node_labels(self, node_id: str,
                           compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
                           **kw: Any) -> bool:
        self.reads += 1
        if self.reads == 1:
            self.deposed()
        time.sleep(0.002)  # a round trip: the other writers start meanwhile
        if self.may_write is not None and not self.may_write():
            raise NotLeader("unix:///test no longer leads the swarm: the write was not "
                            "made (the leader's daemon decides)")
        return super().update_node_labels(node_id, compute, **kw)


def _snapshot(sw: RecordingSwarm) -> Snapshot:
    now = time.time()
    return Snapshot(sw.nodes(), sw.services(), sw.tasks(), {
        n.id: FactsResult(n.id, n.hostname, "", NodeFacts(n.hostname, gpus=(
            Gpu(0, f"GPU-{i:08x}-0000-0000-0000-000000000000", "NVIDIA A100", 81920),)),
            None, now)
        for i, n in enumerate(sw.nodes())})


@pytest.fixture
def infos() -> Iterator[list[str]]:
    yield from log_lines("INFO")


def test_a_term_lost_mid_label_sync_leaves_the_rest_unsaid_as_failed(
        tmp_path: Path, infos: list[str]) -> None:
    sw = DeposedDuringAWrite()
    cfg = Config(state_dir=str(tmp_path), sync=SyncConfig(watch_events=False),
                 agents=AgentsConfig(timeout_s=0.5, identity="none"))
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.term.start()
    sw.deposed = d.term.end
    d.run_steps(_snapshot(sw))
    assert [m for m in infos if "label write failed" in m] == []
    assert d.metrics.registry.get_sample_value(
        "swarmgpu_errors_total", {"kind": "label_write"}) in (None, 0.0)
    assert sw.reads < NODES, "every write left still read its node"


def test_an_undo_after_the_term_ended_still_asks_and_is_said_by_its_writer() -> None:
    """The over-share restart's reopened gate (``stop.undoing``) is not ended at the gate:
    it asks the term, is refused (``NotLeader``) and its writer warns the gate stays shut
    until the new leader's placement reopens it."""
    with undoing():
        check_term(True)
    check_term(False)
    with pytest.raises(TermEnded):
        check_term(True)
