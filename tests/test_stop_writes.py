"""A stopping daemon (SIGTERM, SIGINT) ends its step between two writes: the writes in
flight land, no further one starts, and the step's rest is left, counted in one log
line, for the next leader or start to plan again from what Swarm stores
(``manager.engine.stop``). A first label sync of a thousand nodes is a thousand writes:
it ran past systemd's TimeoutStopSec=90s and was SIGKILLed. A second signal ends the
daemon at once."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from support.forged import RecordingSwarm, sw_node, sw_svc
from support.gpu_nodes import RTX4090

from swarmgpu.core.config import AgentsConfig, Config, SyncConfig
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager import daemon as daemon_mod
from swarmgpu.manager.cycle.placement import PlacementStep
from swarmgpu.manager.daemon import Daemon
from swarmgpu.manager.engine.actuator import Writes
from swarmgpu.manager.engine.stop import Stopped, StopRequest
from swarmgpu.manager.engine.writes import WRITE_PARALLEL, write_each
from swarmgpu.manager.nodes.agent_client import FactsResult
from swarmgpu.manager.nodes.sync import Snapshot

P = "swarmgpu."
NODES = 40  # GPU nodes whose labels the first sync writes


class StoppedDuringAWrite(RecordingSwarm):
    """The daemon's stop is asked (SIGTERM) while the first node write is in flight."""

    def __init__(self, stop: Callable[[], None] | None = None) -> None:
        super().__init__([sw_node(f"n-{i:02d}", f"gpu-{i:02d}") for i in range(NODES)], [], [])
        self.stop = stop

    def update_node_labels(
        self,
        node_id: str,
        compute: Callable[[Mapping[str, str]], Mapping[str, str] | None],
        **kw: Any,
    ) -> bool:
        if self.stop is not None and not self.calls:
            self.stop()
        time.sleep(0.005)  # a round trip: the other writers start meanwhile
        return super().update_node_labels(node_id, compute, **kw)


def _daemon(
    sw: RecordingSwarm, tmp: Path, *, dry_run: bool = False, placement: bool = False
) -> Daemon:
    cfg = Config(
        dry_run=dry_run,
        state_dir=str(tmp),
        sync=SyncConfig(watch_events=False),
        agents=AgentsConfig(timeout_s=0.5, identity="none"),
    )
    d = Daemon(cfg, swarm=sw)  # type: ignore[arg-type]
    if placement:
        d.use([PlacementStep(d)])
    return d


def _facts(i: int) -> NodeFacts:
    """The RTX 4090 machine's facts with GPU UUIDs of its own (one GPU in two nodes'
    facts is a conflict the daemon warns about)."""
    text = json.dumps(RTX4090.facts().to_dict())
    return NodeFacts.from_dict(json.loads(text.replace("GPU-5ca1ab1e-", f"GPU-{i:08x}-")))


def _snapshot(sw: RecordingSwarm) -> Snapshot:
    now = time.time()
    return Snapshot(
        sw.nodes(),
        sw.services(),
        sw.tasks(),
        {
            n.id: FactsResult(n.id, n.hostname, "", _facts(i), None, now)
            for i, n in enumerate(sw.nodes())
        },
    )


def _run(d: Daemon, sw: RecordingSwarm) -> list[str]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO")
    try:
        d.run_steps(_snapshot(sw))
    finally:
        logger.remove(sink)
    return lines


def _left(lines: list[str]) -> int | None:
    said = [m for m in lines if "stopping" in m and "not made" in m]
    assert len(said) <= 1, said  # one line, not one per write
    if not said:
        return None
    found = re.search(r"(\d+) write\(s\)", said[0])
    assert found, said[0]
    return int(found.group(1))


@pytest.mark.parametrize("placement", [False, True], ids=["labels-alone", "held-for-placement"])
def test_a_stop_mid_label_sync_lets_the_writes_in_flight_land_and_leaves_the_rest(
    tmp_path: Path, placement: bool
) -> None:
    """Before, every one of the 40 nodes was written after the stop was asked."""
    sw = StoppedDuringAWrite()
    d = _daemon(sw, tmp_path, placement=placement)
    sw.stop = d.stop_event.set
    lines = _run(d, sw)
    written = [nid for kind, nid in sw.calls if kind == "node"]
    # The write the stop came in, and those already in flight beside it, landed whole.
    assert 1 <= len(written) <= WRITE_PARALLEL, written
    for nid in written:
        assert sw.node(nid).labels[f"{P}gpu.count"] == "8"
    assert _left(lines) == NODES - len(written), lines
    assert not [m for m in lines if "write failed" in m]  # left, not failed


def test_without_a_stop_every_write_is_made_and_no_stop_is_said(tmp_path: Path) -> None:
    sw = StoppedDuringAWrite()
    lines = _run(_daemon(sw, tmp_path), sw)
    assert len(sw.calls) == NODES
    assert _left(lines) is None


def test_a_stop_after_a_completed_step_writes_its_held_labels_unchanged(tmp_path: Path) -> None:
    """The stop asked once the cycle's writes are done changes nothing of them."""
    sw = StoppedDuringAWrite()
    d = _daemon(sw, tmp_path, placement=True)
    _run(d, sw)
    assert len(sw.calls) == NODES
    d.stop_event.set()
    sw.calls.clear()
    lines = _run(d, sw)  # converged: nothing to write, nothing left
    assert sw.calls == [] and _left(lines) is None


def test_dry_run_plans_and_says_every_write_with_a_stop_asked(tmp_path: Path) -> None:
    sw = StoppedDuringAWrite()
    d = _daemon(sw, tmp_path, dry_run=True)
    d.stop_event.set()
    lines = _run(d, sw)
    assert sw.calls == []
    assert len([m for m in lines if "dry-run: would set" in m]) == NODES
    assert _left(lines) is None


def _stopped_mid_write(parallel: int) -> tuple[StopRequest, StoppedDuringAWrite]:
    """A write to every node, the stop asked during the first write."""
    stop = StopRequest()
    sw = StoppedDuringAWrite(stop.set)
    sw.before_write = stop.check  # type: ignore[attr-defined]
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    with pytest.raises(Stopped):
        write_each(
            [n.id for n in sw.nodes()],
            lambda nid: gate.node_labels(nid, lambda cur: {**cur, "x": "1"}),
            parallel=parallel,
        )
    return stop, sw


def test_one_at_a_time_the_step_ends_right_after_the_write_in_flight() -> None:
    """Writes made one by one (``write_each`` with ``parallel=1``, the mover's): the
    write the stop came in lands, the next does not start."""
    stop, sw = _stopped_mid_write(1)
    assert sw.calls == [("node", "n-00")]
    assert stop.left == NODES - 1


def test_in_parallel_each_write_not_made_is_counted_once() -> None:
    stop, sw = _stopped_mid_write(WRITE_PARALLEL)
    assert 1 <= len(sw.calls) <= WRITE_PARALLEL
    assert stop.left == NODES - len(sw.calls)


def test_a_service_write_is_left_as_a_node_write_is() -> None:
    stop = StopRequest()
    sw = RecordingSwarm([], [sw_svc("a", {})], [])
    sw.before_write = stop.check  # type: ignore[attr-defined]
    gate = Writes(sw, dry_run=False, who="test")  # type: ignore[arg-type]
    stop.set()
    with pytest.raises(Stopped):
        gate.service_spec("id-a", lambda spec: {**spec, "Labels": {"x": "1"}})
    with pytest.raises(Stopped):
        gate.swarm_labels(lambda cur: {**cur, "x": "1"})
    assert sw.calls == [] and stop.left == 2


@pytest.mark.parametrize(
    "first,second",
    [
        (signal.SIGTERM, signal.SIGTERM),
        (signal.SIGINT, signal.SIGTERM),
        (signal.SIGTERM, signal.SIGINT),
    ],
)
def test_a_second_signal_ends_the_daemon_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: signal.Signals, second: signal.Signals
) -> None:
    """The first SIGTERM or SIGINT asks for a clean stop; a second one (an operator who
    will not wait, Ctrl-C twice) ends the process now, by that signal. Before, it only
    asked for the stop again."""
    ended: list[int] = []
    monkeypatch.setattr(daemon_mod, "end_by_signal", ended.append)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    d = _daemon(RecordingSwarm([], [], []), tmp_path)
    try:
        d._install_signals()
        signal.getsignal(first)(first, None)  # type: ignore[operator,misc]
        assert d.stop_event.wait(5) and ended == []
        signal.getsignal(second)(second, None)  # type: ignore[operator,misc]
        end = time.monotonic() + 5  # the signal watcher acts in its own thread
        while not ended and time.monotonic() < end:
            time.sleep(0.01)
        assert ended == [second]
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
