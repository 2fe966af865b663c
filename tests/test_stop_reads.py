"""A stopping daemon (SIGTERM, SIGINT) starts no further agent read: the reads in flight
finish or reach their own deadline, the nodes not read are counted in one log line, and
no step plans from the facts half read (``manager.engine.stop``). With agents down,
reading 1,000 nodes is ceil(1000 / 16) deadlines of 3 s, 190 s, in the cycle's snapshot
and in the facts watch, which the stop waits for: past systemd's TimeoutStopSec=90s.
``swarmgpu run --once`` stops as the daemon does (it had no handler: Ctrl-C ended it
with "Aborted!", exit 1; SIGTERM killed it, in a write had there been one)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import once_slow_agents
from support.forged import RecordingSwarm, sw_node
from support.gpu_nodes import swarmgpu_env
from support.loglines import log_lines

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.stop import Stopped, StopRequest
from swarmgpu.manager.nodes import agent_client
from swarmgpu.manager.nodes.agent_client import FactsResult, fetch_all
from swarmgpu.swarm.client import SwarmNode

NODES = 200  # GPU nodes whose agents are down: 13 rounds of 16 reads
READ_S = 0.3  # each read's deadline, reached (an agent that is down)


class SlowAgents:
    """Every agent down: each read waits out its deadline. The stop is asked (SIGTERM)
    while the third read is in flight."""

    def __init__(self, stop: threading.Event | None) -> None:
        self.stop = stop
        self.read: list[str] = []
        self._lock = threading.Lock()

    def __call__(
        self, node: SwarmNode, cfg: AgentsConfig, tls: object = None, token: object = None
    ) -> FactsResult:
        with self._lock:
            self.read.append(node.id)
            if len(self.read) == 3 and self.stop is not None:
                self.stop.set()
        time.sleep(READ_S)
        return FactsResult(
            node.id,
            node.hostname,
            "http://x",
            None,
            f"agent timed out: no whole answer within {READ_S}s",
            time.time(),
        )


def _nodes() -> list[SwarmNode]:
    return [sw_node(f"n-{i:03d}", f"gpu-{i:03d}", {"gpu": "true"}) for i in range(NODES)]


def _cfg() -> AgentsConfig:
    return AgentsConfig(identity="none", timeout_s=READ_S)  # 16 in parallel, the default


def test_a_stop_mid_fetch_starts_no_further_read_and_counts_those_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the 197 reads after the stop were made too: 13 rounds of deadlines."""
    stop = StopRequest()
    agents = SlowAgents(stop)
    monkeypatch.setattr(agent_client, "fetch_facts", agents)
    with pytest.raises(Stopped):
        fetch_all(_nodes(), _cfg(), stop=stop)
    # The reads in flight when it came (one round at most) finished; no later one began:
    # counted, not timed.
    assert 3 <= len(agents.read) <= _cfg().parallel, agents.read
    assert stop.reads_left == NODES - len(agents.read)
    assert stop.left == 0  # no write counted


def test_without_a_stop_every_agent_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = StopRequest()
    agents = SlowAgents(None)
    monkeypatch.setattr(agent_client, "fetch_facts", agents)
    got = fetch_all(_nodes()[:40], _cfg(), stop=stop)
    assert len(got) == 40 and len(agents.read) == 40 and stop.reads_left == 0


@pytest.fixture
def lines() -> Iterator[list[str]]:
    yield from log_lines("DEBUG")


def _daemon(tmp: Path) -> tuple[Daemon, RecordingSwarm]:
    sw = RecordingSwarm(_nodes(), [], [])
    cfg = Config(state_dir=str(tmp), sync=SyncConfig(watch_events=False), agents=_cfg())
    return Daemon(cfg, swarm=sw), sw  # type: ignore[arg-type]


def _reads_left(lines: list[str]) -> int:
    said = [m for m in lines if "stopping" in m and "agent read(s) not made" in m]
    assert len(said) == 1, lines[-20:]  # one line, not one per node
    found = re.search(r"(\d+) agent read\(s\) not made", said[0])
    assert found, said[0]
    return int(found.group(1))


def test_a_stop_mid_snapshot_ends_the_cycle_before_any_step_plans_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """No node is taken for an agent found unreachable (a warning each, recorded as
    failing in the agents' saved state) for a read the stop kept from starting, and
    no step plans from the half-read facts; nothing is written."""
    d, sw = _daemon(tmp_path)
    agents = SlowAgents(d.stop_event)
    monkeypatch.setattr(agent_client, "fetch_facts", agents)
    report = d.cycle()
    # The reads in flight when it came (one round at most) finished; no later round
    # began: counted, not timed (13 rounds were read before).
    assert 3 <= len(agents.read) <= _cfg().parallel, agents.read
    assert _reads_left(lines) == NODES - len(agents.read)
    assert sw.calls == [] and report.writes == 0 and report.plans == []
    assert not [m for m in lines if "unreachable" in m or "cycle failed" in m], lines[-20:]
    assert d.book.records == {}  # nothing recorded of a half-read cycle


def test_a_stop_mid_facts_watch_ends_it_promptly_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    d, _ = _daemon(tmp_path)
    d.leader = True
    agents = SlowAgents(d.stop_event)
    monkeypatch.setattr(agent_client, "fetch_facts", agents)
    d._watch_facts()
    assert 3 <= len(agents.read) <= _cfg().parallel, agents.read  # (counted, as above)
    assert _reads_left(lines) == NODES - len(agents.read)


# --- swarmgpu run --once, as a user runs it -------------------------------------------------


def _once(tmp: Path, timeout_s: float) -> tuple[subprocess.Popen[str], Path]:
    """`swarmgpu run --once` over 200 GPU nodes whose agents never answer, waiting until
    its snapshot lists the nodes (the signal handlers are in place by then)."""
    log = tmp / "once.log"
    with log.open("w") as fh:
        p = subprocess.Popen(
            [sys.executable, once_slow_agents.__file__, str(tmp), str(NODES), str(timeout_s)],
            env=swarmgpu_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            text=True,
        )
    deadline = time.monotonic() + 60
    while once_slow_agents.LISTED not in log.read_text():
        assert p.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    time.sleep(0.3)  # the first round of reads is in flight
    return p, log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_once_stops_after_the_reads_in_flight_on_a_signal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Before: SIGINT ended it with "Aborted!", exit 1, nothing said of what was left;
    SIGTERM killed it at once (in a write, had there been one)."""
    p, log = _once(tmp_path, timeout_s=2.0)
    p.send_signal(sig)
    try:
        rc = p.wait(15)  # (a hang guard: the 13 rounds of 2 s deadlines take 26 s)
    finally:
        p.kill()
    text = log.read_text()
    assert rc == 0, text
    assert "Traceback" not in text and "Aborted" not in text, text
    found = re.search(r"stopping: .*?(\d+) agent read\(s\) not made", text)
    assert found, text
    # Counted, not timed: the round in flight when it came (the first, a second on a
    # slow machine) was read, no later one.
    assert int(found.group(1)) >= NODES - 2 * AgentsConfig().parallel, text
    assert f"stopped by {sig.name}" in text, text


def test_once_ends_at_once_on_a_second_signal(tmp_path: Path) -> None:
    """The reads in flight wait up to their 30 s deadline after the first Ctrl-C; the
    second one ends the process by SIGINT, as the daemon's does (before: exit 1)."""
    p, log = _once(tmp_path, timeout_s=30.0)
    try:
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert p.poll() is None, log.read_text()  # the reads in flight, 30 s each
        p.send_signal(signal.SIGINT)
        rc = p.wait(10)
    finally:
        p.kill()
    text = log.read_text()
    assert rc == -signal.SIGINT, text
    assert "Traceback" not in text, text


class TwoFetches(SlowAgents):
    """The stop is asked once the cycle's fetch and the facts watch's both have reads in
    flight (each fetch is a pool of its own threads)."""

    def __call__(
        self, node: SwarmNode, cfg: AgentsConfig, tls: object = None, token: object = None
    ) -> FactsResult:
        with self._lock:
            self.pools = getattr(self, "pools", set())
            self.pools.add(threading.current_thread().name.rsplit("_", 1)[0])
            if len(self.pools) == 2 and self.stop is not None:
                self.stop.set()
        return super().__call__(node, cfg, tls, token)


def test_a_stop_during_a_cycle_and_the_facts_watch_counts_each_fetchs_reads_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """The facts watch runs beside the cycle (the scheduler's other thread). Before,
    each line counted the change of the daemon's total since its fetch began, so the
    line said last counted the other fetch's reads too (the two lines overstated the
    reads not made by one fetch's worth)."""
    d, _ = _daemon(tmp_path)
    d.leader = True
    agents = TwoFetches(d.stop_event)
    monkeypatch.setattr(agent_client, "fetch_facts", agents)
    watch = threading.Thread(target=d._watch_facts)
    watch.start()
    d.cycle()
    watch.join(10)
    said = [m for m in lines if "stopping" in m and "agent read(s) not made" in m]
    assert len(said) == 2, lines[-20:]  # the cycle's, the watch's
    counts = [int(re.search(r"(\d+) agent read\(s\) not made", m).group(1)) for m in said]  # type: ignore[union-attr]
    assert sum(counts) == d.stop_event.reads_left == 2 * NODES - len(agents.read), said
