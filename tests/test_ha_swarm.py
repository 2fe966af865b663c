"""High availability on a real 3-manager Swarm (`swarm3`: mgr-1..3 + gpu-node-1).

`swarmgpu run` runs on EVERY manager (each in its manager's namespace, talking to its
own engine), as the README tells operators to deploy it. Shown here:

- only the leader's daemon writes (writes counted per daemon log);
- a hand edit of a swarmgpu label is repaired once, by the leader's daemon;
- stopping the leader's dockerd: a new leader is elected and its daemon repairs the
  next change, its own write; every change is repaired exactly once (none done twice,
  none lost);
- SIGTERM: the daemon finishes the step in progress (its reads; no further write
  starts: tests/test_stop_writes.py), then exits 0;
- a daemon whose engine no longer leads writes nothing, even mid-cycle (its term).

Timings are printed and written to artifacts/ha-failover.json, beside the same run's
repair by the first leader (``repair_on_leader_s``) as their reference; they are figures,
not asserted (a loaded machine stretches them): the waits' bounds are hang guards.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import DGX_A100, LOGS, cfg_file, eventually, start_agent, stop, swarmgpu_env
from support.paths import REPO
from support.swarm_harness import NodeHandle, SwarmCluster, edit_node_labels

from swarmgpu.manager.cycle.term import TERM_CHECK_S, LeaderTerm
from swarmgpu.swarm.client import NotLeader, SwarmClient
from swarmgpu.swarm.labels import desired_labels

pytestmark = pytest.mark.swarm

INTERVAL_S = 2.0
WORKER = "gpu-node-1"  # swarm3's only worker: an agent serves the DGX A100 capture
EDIT_KEY = "swarmgpu.gpu.count"
WRITE_LINE = "labels updated"
ARTIFACT = REPO / "artifacts" / "ha-failover.json"


class ManagerDaemon:
    """`swarmgpu run` in one manager's namespace, with its own config, state and log."""

    def __init__(self, swarm: SwarmCluster, mgr: NodeHandle, tmp: Path, tag: str,
                 **cfg: Any) -> None:
        d = tmp / mgr.name
        d.mkdir(parents=True, exist_ok=True)
        self.mgr = mgr
        cfg["sync"] = {"interval_s": INTERVAL_S, **cfg.get("sync", {})}
        self.cfg = cfg_file(d, swarm, docker_host=mgr.docker_host, **cfg)
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log = LOGS / f"ha-{tag}-{mgr.name}.log"
        with self.log.open("wb") as fh:  # a fresh log per run: lines are counted
            self.proc = swarm.exec_in_netns(
                mgr, [sys.executable, "-m", "swarmgpu.cli", "run", "--config", str(self.cfg)],
                env=swarmgpu_env(), stdout=fh, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def writes(self) -> int:
        return self.text().count(WRITE_LINE)

    def running(self) -> bool:
        return "daemon running" in self.text()


def _assert(ok: bool) -> None:
    assert ok


def _writes_are(daemons: dict[str, ManagerDaemon], want: dict[str, int]) -> None:
    got = total(daemons)
    assert got == want, f"writes per daemon {got}, want {want}"


def wanted() -> dict[str, str]:
    return dict(desired_labels(DGX_A100.facts()))


def node_labels(swarm: SwarmCluster, via: NodeHandle) -> dict[str, str]:
    api = swarm.client(via).api
    raw = api.inspect_node(swarm.node(WORKER).node_id)
    return dict(raw["Spec"].get("Labels") or {})


def hand_edit(swarm: SwarmCluster, via: NodeHandle, **changes: str) -> None:
    """What an operator's `docker node update --label-add` does (read-modify-write)."""
    edit_node_labels(swarm.client(via).api, swarm.node(WORKER).node_id,
                     lambda labels: labels.update(changes))


def synced(swarm: SwarmCluster, via: NodeHandle) -> bool:
    labels = node_labels(swarm, via)
    return all(labels.get(k) == v for k, v in wanted().items())


def total(daemons: dict[str, ManagerDaemon]) -> dict[str, int]:
    return {name: d.writes() for name, d in daemons.items()}


@pytest.fixture(scope="module")
def agent(swarm3: SwarmCluster) -> Iterator[Any]:
    proc = start_agent(swarm3, WORKER)
    yield proc
    stop(proc)


@pytest.fixture(scope="module")
def figures() -> Iterator[dict[str, Any]]:
    out: dict[str, Any] = {"interval_s": INTERVAL_S}
    yield out
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(json.dumps(out, indent=1))
    print(f"\nHA figures: {out}", file=sys.stderr)


def test_a_deposed_leaders_daemon_writes_nothing(swarm3: SwarmCluster) -> None:
    """A cycle found its engine the leader; by its next write another manager leads
    (here: the client talks to a follower, its term started as if it led). Once the
    term's answer is older than TERM_CHECK_S the write asks again and is refused; on the
    leader's engine the same write lands. First in the module: all three managers up."""
    swarm = swarm3
    leader = swarm.wait_for(swarm.leader, 60, "a raft leader")
    follower = next(m for m in swarm.managers if m is not leader)
    node_id = swarm.node(WORKER).node_id
    now = [0.0]
    key = "test.term"
    try:
        for mgr, lands in ((follower, False), (leader, True)):
            client = SwarmClient(mgr.docker_host)
            term = LeaderTerm(client.is_leader, clock=lambda: now[0])
            client.may_write = term.holds
            term.start()
            now[0] += TERM_CHECK_S + 0.1

            def add(cur: dict[str, str], name: str = mgr.name) -> dict[str, str]:
                return {**cur, key: name}

            if lands:
                assert client.update_node_labels(node_id, add)
                assert node_labels(swarm, leader).get(key) == mgr.name
            else:
                with pytest.raises(NotLeader):
                    client.update_node_labels(node_id, add)
                assert key not in node_labels(swarm, leader)
                assert term.lost and term.refused == 1
                with pytest.raises(NotLeader):  # the rest of its cycle: not even asked
                    client.update_node_labels(node_id, add)
    finally:
        SwarmClient(leader.docker_host).update_node_labels(
            node_id, lambda cur: {k: v for k, v in cur.items() if k != key})


def test_only_leader_acts_and_failover_loses_nothing(
        swarm3: SwarmCluster, agent: Any, tmp_path: Path, figures: dict[str, Any]) -> None:
    swarm = swarm3
    leader = swarm.wait_for(swarm.leader, 60, "a raft leader")  # (none yet: an election)
    daemons = {m.name: ManagerDaemon(swarm, m, tmp_path, "run") for m in swarm.managers}
    try:
        swarm.wait_for(lambda: all(d.running() for d in daemons.values()), 30,
                       "every manager's daemon running")
        # 1. First sync: exactly one write (the worker's labels), by the leader's daemon.
        t0 = time.monotonic()
        swarm.wait_for(lambda: synced(swarm, leader), 30, "first label sync")
        figures["first_sync_s"] = round(time.monotonic() - t0, 2)
        time.sleep(2 * INTERVAL_S)  # several cycles on every daemon: still one write
        # (the log line of a write follows the labels the test waited for: waited for)
        eventually(lambda: _writes_are(daemons, {m.name: int(m is leader)
                                                 for m in swarm.managers}),
                   10, f"one write, by the leader {leader.name}")

        # 2. A hand edit of an owned label is repaired once, by the leader's daemon; a
        #    label the operator owns survives.
        hand_edit(swarm, leader, **{EDIT_KEY: "99", "rack": "a1"})
        t1 = time.monotonic()
        swarm.wait_for(lambda: synced(swarm, leader), 10, "repair of the hand edit")
        figures["repair_on_leader_s"] = round(time.monotonic() - t1, 2)
        assert node_labels(swarm, leader)["rack"] == "a1"
        time.sleep(INTERVAL_S)
        eventually(lambda: _writes_are(daemons, {m.name: 2 * int(m is leader)
                                                 for m in swarm.managers}),
                   10, "the repair written once, by the leader")

        # 3. Fail-over. A change made just before the leader goes down is repaired by
        #    the old leader or, failing that, by the new one: exactly once either way.
        before = total(daemons)
        hand_edit(swarm, leader, **{EDIT_KEY: "98"})
        t_stop = time.monotonic()
        swarm.stop_dockerd(leader)
        figures["leader_dockerd_stop_s"] = round(time.monotonic() - t_stop, 2)
        new = swarm.wait_for(lambda: (lambda n: n if n is not None and n is not leader
                                      else None)(swarm.leader(probe_timeout=1)),
                             60, "a new raft leader")
        t_elected = time.monotonic()
        figures["election_s"] = round(t_elected - t_stop, 2)
        swarm.wait_for(lambda: synced(swarm, new), 3 * INTERVAL_S + 5,
                       "the change made before the fail-over repaired")
        late = time.monotonic() - t_elected
        figures["pre_failover_change_repaired_after_election_s"] = round(late, 2)
        # Repaired once, by the old leader or the new one (its log line follows the
        # labels: waited for), before the next change is made.
        eventually(lambda: _assert(sum(total(daemons).values()) - sum(before.values()) == 1),
                   10, "the change made before the fail-over repaired once")
        before_new = total(daemons)

        # 4. The new leader's daemon keeps acting: a change after the election is
        #    repaired, by it (the wait's bound, three intervals and 5 s, a hang guard).
        hand_edit(swarm, new, **{EDIT_KEY: "97"})
        t2 = time.monotonic()
        swarm.wait_for(lambda: synced(swarm, new), 3 * INTERVAL_S + 5,
                       "repair by the new leader's daemon")
        took = time.monotonic() - t2
        figures["repair_after_failover_s"] = round(took, 2)
        figures["takeover_after_election_s"] = round(time.monotonic() - t_elected, 2)
        # The repair is the new leader's daemon's own write, counted in its log (how soon
        # is the figure above, beside repair_on_leader_s: not asserted).
        eventually(lambda: _writes_are(daemons, {**before_new,
                                                 new.name: before_new[new.name] + 1}),
                   10, f"the repair written once, by the new leader {new.name}")

        time.sleep(2 * INTERVAL_S)
        eventually(lambda: _assert(sum(total(daemons).values()) - sum(before.values()) >= 2),
                   10, "both repairs in the logs")
        after = total(daemons)
        figures["writes_per_daemon"] = after
        figures["leaders"] = {"old": leader.name, "new": new.name}
        # Two changes since `before`, two repairs in all: none twice, none lost.
        assert sum(after.values()) - sum(before.values()) == 2, (after, before)
        assert after[new.name] - before[new.name] >= 1, "the new leader's daemon never wrote"
        third = [m.name for m in swarm.managers if m not in (leader, new)]
        assert all(after[n] == 0 for n in third), f"a follower wrote: {after}"
        assert synced(swarm, new) and node_labels(swarm, new)["rack"] == "a1"
        assert "Traceback" not in "".join(d.text() for d in daemons.values())
    finally:
        for d in daemons.values():
            stop(d.proc)


class SlowAgent:
    """Accepts connections and never answers: a facts fetch lasts the whole timeout,
    so a daemon cycle is still in progress when the test signals the daemon. Each
    connection it accepts is a line in ``accepts`` (its own start probe the first)."""

    def __init__(self, swarm: SwarmCluster, node: NodeHandle, port: int,
                 accepts: Path) -> None:
        self.accepts = accepts
        code = ("import socket,time\n"
                "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                f"s.bind(('{node.addr}', {port})); s.listen(16); held=[]\n"
                f"log=open({str(accepts)!r}, 'a', buffering=1)\n"
                "while True: held.append(s.accept()); log.write('accepted\\n')\n")
        self.proc = swarm.exec_in_netns(node, [sys.executable, "-c", code])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((node.addr, port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("slow agent did not start")

    def accepted(self) -> int:
        return self.accepts.read_text().count("accepted") if self.accepts.exists() else 0


def test_sigterm_finishes_current_step_then_exits_zero(
        swarm3: SwarmCluster, tmp_path: Path, figures: dict[str, Any]) -> None:
    swarm = swarm3
    leader = swarm.wait_for(swarm.leader, 60, "a raft leader")
    port, fetch_s = 19499, 3.0
    slow = SlowAgent(swarm, swarm.node(WORKER), port, tmp_path / "slow-agent-accepts")
    d = ManagerDaemon(swarm, leader, tmp_path, "sigterm",
                      # (no facts watch: its fetch would be another on the slow agent)
                      agents={"port": port, "timeout_s": fetch_s, "watch_s": 0},
                      sync={"interval_s": 30, "watch_events": False}, log={"level": "DEBUG"})
    try:
        swarm.wait_for(d.running, 30, "daemon running")
        # The first cycle, started with the scheduler, waits on the agent: signal once
        # its fetch is in flight (a connection beside the start probe's): after a fixed
        # second, a loaded host's cycle could be signalled before its fetch began.
        swarm.wait_for(lambda: slow.accepted() >= 2 or None, 30,
                       "the daemon's fetch waiting on the slow agent")
        d.proc.send_signal(signal.SIGTERM)
        t_sig = time.monotonic()
        rc = d.proc.wait(30)
        exit_s = time.monotonic() - t_sig
        text = d.text()
        figures["sigterm_exit_s"] = round(exit_s, 2)
        assert rc == 0, f"daemon exited {rc} on SIGTERM:\n{text[-2000:]}"
        # The cycle in flight (waiting on the slow agent) ran to its end after the signal.
        # Its end is the line about the worker's agent: a warning once the worker has
        # GPU labels (or advertises GPUs), or one that it answers but cannot be read (it
        # accepted the connection), a debug line before.
        # The managers run no agent: their refusals use the same words, so the line is
        # found by the worker's address (a manager's refusal can follow the signal when
        # the cycle reaches the agents late).
        worker_url = f"{swarm.node(WORKER).addr}:{port}/"
        step_end = -1
        for phrase in ("agent unreachable", "no agent (not a GPU", "agent cannot be read"):
            at = text.find(phrase)
            while at != -1 and worker_url not in text[at:].split("\n", 1)[0]:
                at = text.find(phrase, at + 1)
            step_end = max(step_end, at)
        order = [text.find("signal SIGTERM received"), step_end, text.find("stopped cleanly")]
        assert -1 not in order and order == sorted(order), text[-2000:]
        # The read in flight was not dropped at the signal: the step's end names its own
        # deadline (the seconds it took are the figure above, not the check).
        end_line = text[step_end:].split("\n", 1)[0]
        assert f"timed out: no whole answer within {fetch_s}s" in end_line, end_line
        assert re.search(r"Traceback|ERROR", text) is None, text[-2000:]
    finally:
        stop(d.proc)
        stop(slow.proc)

