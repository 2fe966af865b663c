"""GPU health on the real test swarm: an agent on an edited ``file:`` facts source stands
in for NVML (the health signals are part of the facts schema). Xid 13 (the application's)
changes nothing; Xid 79 moves the holder off that GPU within 90 s, the log and the daemon's
metric say why, and a new service is never given it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_nodes import (
    LOGS,
    RTX4090,
    agents,
    cfg_file,
    kwargs_for_logs,
    labels_of,
    run_cli,
    start_agent,
    start_daemon,
    stop,
    swarmgpu_env,
    wait_port,
)
from swarm_harness import SwarmCluster
from test_placement_swarm import deploy, devices_of, tasks_running, wait_running

pytestmark = pytest.mark.swarm
_ = agents  # fixture, used by name
HOST = "gpu-node-2"
LOG = LOGS / "health-daemon.log"


class FactsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = RTX4090.facts().to_dict()
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)  # the agent never reads half a file

    def xid(self, uuid: str, code: int) -> None:
        g = next(g for g in self.data["gpus"] if g["uuid"] == uuid)
        h = g.setdefault("health", {"xid_events": []})
        h["xid_events"].append({"xid": code, "at": time.time()})
        self.write()


@pytest.fixture(scope="module")
def setup(swarm: SwarmCluster, agents: dict[str, Any],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("health")
    facts = FactsFile(tmp / "facts.json")
    node = swarm.node(HOST)
    stop(agents[HOST])
    agent = swarm.exec_in_netns(node, [
        sys.executable, "-m", "swarmgpu.cli", "agent", "--source", f"file:{facts.path}",
        "--hostname", HOST, "--listen", f"{node.addr}:9401", "--refresh-s", "1",
        "--identity", "swarm-pki", "--data-root", str(node.data_root),
    ], env=swarmgpu_env(), **kwargs_for_logs(LOGS / "agent-health-file.log"))
    wait_port(node.addr, 9401)
    cfg = cfg_file(tmp, swarm, sync={"interval_s": 2}, agents={"watch_s": 1},
                   health={"clean_window_s": 600})
    log_at = LOG.stat().st_size if LOG.exists() else 0  # the log is appended to
    daemon = start_daemon(swarm, cfg, LOG)
    try:
        yield {"facts": facts, "tmp": tmp, "cfg": cfg, "daemon": daemon, "log_at": log_at}
    finally:
        stop(daemon)
        stop(agent)
        agents[HOST] = start_agent(swarm, HOST)


def _log(setup: dict[str, Any]) -> str:
    """This run's part of the daemon's log."""
    return LOG.read_bytes()[setup["log_at"]:].decode(errors="replace")


def _one(swarm: SwarmCluster, svc: str) -> str:
    devs = devices_of(swarm, svc)
    assert list(devs) == [HOST] and len(devs[HOST]) == 1, devs
    return devs[HOST][0]


def test_application_xid_changes_nothing_then_xid79_moves_the_holder(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    facts: FactsFile = setup["facts"]
    deploy(swarm, setup["tmp"], "hl", {"one": {
        "labels": {"swarmgpu.gpus": "1"},
        "constraints": [f"node.hostname=={HOST}"]}})
    wait_running(swarm, "hl_one", 1, timeout=90)
    uuid = _one(swarm, "hl_one")
    task = tasks_running(swarm, "hl_one")[0]["ID"]

    facts.xid(uuid, 13)  # the application's fault: nothing moves
    time.sleep(12)  # several agent refreshes, facts watches and cycles
    assert tasks_running(swarm, "hl_one")[0]["ID"] == task
    assert _one(swarm, "hl_one") == uuid

    facts.xid(uuid, 79)  # fallen off the bus
    t0 = time.monotonic()
    wait_running(swarm, "hl_one", 1, timeout=90,
                 each=lambda t: uuid not in devices_of(swarm, "hl_one").get(HOST, [uuid]),
                 what=" off the failed GPU")
    took = time.monotonic() - t0
    print(f"Xid 79 in the facts file -> holder running on a healthy GPU: {took:.1f}s")
    assert _one(swarm, "hl_one") != uuid
    text = _log(setup)
    assert "is failed: Xid 79: GPU has fallen off the bus (suggested action: reboot)" in text
    assert "Xid 13" not in text
    # plan, status and audit (their own snapshot, the daemon's saved states) say it too.
    res = run_cli("plan", "--config", str(setup["cfg"]))
    assert res.returncode == 0, res.stderr
    assert f"GPU health: {HOST} GPU" in res.stdout and "failed: Xid 79" in res.stdout
    assert "suggested: reboot" in res.stdout
    res = run_cli("status", "--config", str(setup["cfg"]), "--json")
    gpus = [g for n in json.loads(res.stdout)["nodes"] for g in n.get("gpus", [])
            if g.get("uuid") == uuid]
    assert gpus and gpus[0]["healthy"] is False and "Xid 79" in gpus[0]["error"]
    res = run_cli("audit", "--config", str(setup["cfg"]), "--json")
    failed = [f for f in json.loads(res.stdout)["findings"] if f["kind"] == "gpu-failed"]
    assert len(failed) == 1 and uuid in failed[0]["message"], failed

    # A new service is never given the failed GPU: 6 of the 7 GPUs left, one of them
    # failed, so only the 6 healthy ones fit.
    deploy(swarm, setup["tmp"], "hl2", {"six": {
        "labels": {"swarmgpu.gpus": "6"},
        "constraints": [f"node.hostname=={HOST}"]}})
    wait_running(swarm, "hl2_six", 1, timeout=90)
    six = devices_of(swarm, "hl2_six")[HOST]
    assert len(six) == 6 and uuid not in six
    assert not set(six) & set(devices_of(swarm, "hl_one")[HOST])


def test_flapping_gpu_moves_its_holder_once_and_the_label_holds(
    swarm: SwarmCluster, setup: dict[str, Any]
) -> None:
    """Failed, clean, failed again within the clean window: the holder moves once, and
    swarmgpu.gpu.healthy-count does not bounce back in between."""
    facts: FactsFile = setup["facts"]
    swarm.cli(swarm.manager, "stack", "rm", "hl2")  # room for a move
    api = swarm.client(swarm.manager).api
    swarm.wait_for(lambda: not api.services(filters={"name": "hl2_six"}), 60, "hl2 removed")
    before = int(labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"])
    v = _one(swarm, "hl_one")
    facts.xid(v, 48)  # double-bit ECC: failed
    wait_running(swarm, "hl_one", 1, timeout=90,
                 each=lambda t: v not in devices_of(swarm, "hl_one").get(HOST, [v]),
                 what=" off the second failed GPU")
    task = tasks_running(swarm, "hl_one")[0]["ID"]
    swarm.wait_for(lambda: labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"]
                   == str(before - 1), 30, "healthy-count down by one")
    g = next(g for g in facts.data["gpus"] if g["uuid"] == v)
    g["health"] = {"xid_events": []}  # clean again (as after a reset, before the window)
    facts.write()
    time.sleep(10)
    assert labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"] == str(before - 1)
    facts.xid(v, 48)  # and failed again
    time.sleep(10)
    assert labels_of(swarm, HOST)["swarmgpu.gpu.healthy-count"] == str(before - 1)
    assert [t["ID"] for t in tasks_running(swarm, "hl_one")] == [task]  # moved once
    assert _log(setup).count(f"gpu={v} GPU") == 1  # one change logged, no bouncing
