"""A stopping daemon (SIGTERM, SIGINT) starts no further read of the nodes' metrics
pages: the scrapes in flight end by their deadline, those not started are counted in the
step's one stop line, and the cycle ends there, so no later step (the rebalancer, the
map) takes a node not read for one whose metrics are unknown (``manager.engine.stop``).
With 1,000 nodes' pages hung the scrape is ceil(1000 / 16) deadlines of
``rebalance.scrape_timeout_s`` (3 s), 190 s, which the stop waited out: past systemd's
TimeoutStopSec=90s. The exporters here are one loopback port that takes connections and
never answers."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.forged import RecordingSwarm, sw_node
from support.gpu_nodes import RTX4090
from support.loglines import log_lines

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.rebalanceconfig import RebalanceConfig
from swarmgpu.manager.cycle.session import Slot
from swarmgpu.manager.cycle.wiring import daemon_steps
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import Stopped, StopRequest
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.rebalance import scrape
from swarmgpu.manager.rebalance.scrape import NodeScrape, scrape_all
from swarmgpu.swarm.client import SwarmNode

NODES = 200  # ready nodes whose metrics pages hang: 13 rounds of 16 scrapes
READ_S = 0.3  # each scrape's deadline, reached
PARALLEL = 16  # agents.parallel's default, the scrape's too


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts every connection (in the kernel) and answers nothing."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    yield s.getsockname()[1]
    s.close()


class Scrapes:
    """The real scrape of each node, counted; the stop is asked (SIGTERM) while the
    third is in flight."""

    def __init__(self, stop: threading.Event | None) -> None:
        self.stop = stop
        self.started: list[str] = []
        self.stop_at: float | None = None
        self._lock = threading.Lock()
        self._scrape = scrape.scrape_node

    def __call__(self, node: SwarmNode, *args: object, **kw: object) -> NodeScrape:
        with self._lock:
            self.started.append(node.id)
            if len(self.started) == 3 and self.stop is not None:
                self.stop_at = time.monotonic()
                self.stop.set()
        return self._scrape(node, *args, **kw)  # type: ignore[arg-type]


def _nodes(n: int = NODES) -> list[SwarmNode]:
    return [sw_node(f"n-{i:03d}", f"gpu-{i:03d}", {"gpu": "true"}) for i in range(n)]


def _template(port: int) -> str:
    return f"http://{{addr}}:{port}/metrics"


def test_a_stop_mid_scrape_starts_no_further_read_and_counts_those_left(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the 197 scrapes after the stop were made too: 13 rounds of deadlines."""
    stop = StopRequest()
    scrapes = Scrapes(stop)
    monkeypatch.setattr(scrape, "scrape_node", scrapes)
    with pytest.raises(Stopped):
        scrape_all(_nodes(), _template(silent_port), READ_S, PARALLEL, stop=stop)
    assert scrapes.stop_at is not None
    # The scrapes in flight when it came (one round at most) ended; no later one began:
    # counted, not timed.
    assert 3 <= len(scrapes.started) <= PARALLEL, scrapes.started
    assert stop.reads_left == NODES - len(scrapes.started)
    assert stop.left == 0  # no write counted


def test_without_a_stop_every_node_is_scraped(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = StopRequest()
    scrapes = Scrapes(None)
    monkeypatch.setattr(scrape, "scrape_node", scrapes)
    got = scrape_all(_nodes(40), _template(silent_port), READ_S, PARALLEL, stop=stop)
    assert sorted(got) == sorted(n.id for n in _nodes(40)) == sorted(scrapes.started)
    assert all(s.error and "timed out" in s.error for s in got.values())
    assert stop.reads_left == 0


# --- the daemon's metrics step ------------------------------------------------------------


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("DEBUG")


def _facts(i: int) -> NodeFacts:
    """The RTX 4090 machine's facts with GPU UUIDs of its own (one GPU in two nodes'
    facts is a conflict the daemon warns about)."""
    text = json.dumps(RTX4090.facts().to_dict())
    return NodeFacts.from_dict(json.loads(text.replace("GPU-5ca1ab1e-", f"GPU-{i:08x}-")))


def _daemon(tmp: Path, port: int) -> tuple[Daemon, Snapshot]:
    """The daemon's own steps over ``NODES`` GPU nodes, their agents' facts read, their
    metrics pages hung."""
    sw = RecordingSwarm(_nodes(), [], [])
    cfg = Config(
        state_dir=str(tmp),
        sync=SyncConfig(watch_events=False),
        agents=AgentsConfig(identity="none"),
        rebalance=RebalanceConfig(metrics_url_template=_template(port), scrape_timeout_s=READ_S),
    )
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    d.use(daemon_steps(d))
    now = time.time()
    facts = {
        n.id: FactsResult(n.id, n.hostname, "", _facts(i), None, now)
        for i, n in enumerate(sw.nodes())
    }
    return d, Snapshot(sw.nodes(), sw.services(), sw.tasks(), facts)


def _stop_line(lines: list[str]) -> str:
    said = [m for m in lines if "stopping" in m and "not made" in m]
    assert len(said) == 1, lines[-20:]  # one line, not one per node
    return said[0]


def test_a_stop_mid_scrape_ends_the_cycle_and_says_the_reads_left(
    tmp_path: Path, silent_port: int, monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """Before: the step scraped every node (13 rounds), and the line the stop left said
    nothing of it. No later step runs on the half scrape: the rebalancer records no
    node as UNKNOWN for a page the stop kept from being read, the map is not rebuilt."""
    d, snapshot = _daemon(tmp_path, silent_port)
    scrapes = Scrapes(d.stop_event)
    monkeypatch.setattr(scrape, "scrape_node", scrapes)
    d.run_steps(snapshot)
    assert scrapes.stop_at is not None
    # The scrapes in flight when it came (one round at most) ended; no later round began:
    # counted, not timed (13 rounds were scraped before).
    assert 3 <= len(scrapes.started) <= PARALLEL, scrapes.started
    line = _stop_line(lines)
    found = re.search(r"(\d+) write\(s\) and (\d+) metrics read\(s\) of step metrics", line)
    assert found, line
    assert int(found.group(1)) == 0  # the step makes no write
    assert int(found.group(2)) == NODES - len(scrapes.started)
    assert d.last_session is not None
    written = d.last_session.written()
    assert Slot.METRICS not in written and Slot.MOVES not in written, written
    assert Slot.OVERSHARE not in written, written  # observe (the map) did not run
    assert not [m for m in lines if "cycle failed" in m or "Traceback" in m], lines[-20:]


def test_without_a_stop_the_metrics_step_scrapes_every_node_and_says_no_stop(
    tmp_path: Path, silent_port: int, monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    d, snapshot = _daemon(tmp_path, silent_port)
    scrapes = Scrapes(None)
    monkeypatch.setattr(scrape, "scrape_node", scrapes)
    d.run_steps(snapshot)
    assert sorted(scrapes.started) == sorted(n.id for n in snapshot.nodes)
    assert d.last_session is not None
    assert set(d.last_session.scrapes) == {n.id for n in snapshot.nodes}
    assert Slot.OVERSHARE in d.last_session.written()  # every step ran
    assert not [m for m in lines if "stopping" in m]
    assert d.stop_event.reads_left == 0
