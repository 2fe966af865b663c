"""A defragmenting move on the real test swarm: two GPUs each half used by a 0.5 share
(on different nodes) are merged by the daemon's fragmentation policy in one move, which
frees a whole GPU, and a whole-GPU request that was pending then runs there.

Agents serve the real captures with idle metrics; the daemon is the real CLI. First in
dry-run (the default): `plan --json` lists the move with its gain and nothing moves;
then with ``rebalance.dry_run: false``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    GPU_NODES,
    LOGS,
    cfg_file,
    eventually,
    run_cli,
    start_agent,
    start_daemon,
    stop,
)
from support.swarm_fragmentation import HALF, P, deploy_on, no_gpu_held
from support.swarm_harness import SwarmCluster
from support.swarm_rebalance import IDLE, holder_gpu, labels, node_labels, where
from support.swarm_services import deploy, tasks_running, wait_running

pytestmark = pytest.mark.swarm
API_PORT = 9402
LOG = LOGS / "fragmentation-daemon.log"


@pytest.fixture(scope="module")
def fd(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("fragmentation")
    # The workload the moves are judged against: placement's model, pinned here (the
    # learned one would carry the session's history). The shapes this test deploys, one
    # of each (the services annotated now would weigh the half twice).
    workload = tmp / "workload.yml"
    workload.write_text(json.dumps([{"share": 0.5}, {"gpus": 7}, {"gpus": 6}, {"gpus": 1}]))
    profile = tmp / "idle.yml"
    profile.write_text(json.dumps(IDLE))
    agents = {h: start_agent(swarm, h, "--metrics-profile", str(profile)) for h in GPU_NODES}
    state: dict[str, Any] = {"tmp": tmp, "proc": None}

    def start(dry_run: bool) -> Path:
        if state["proc"] is not None:
            stop(state["proc"])
        cfg = cfg_file(tmp, swarm, sync={"interval_s": 1},
                       placement={"workload": str(workload)},
                       http={"listen": f"{swarm.manager.addr}:{API_PORT}"}, rebalance={
                           "dry_run": dry_run, "policies": "fragmentation",
                           "hotspot": {"window_s": 4}, "max_gap_s": 3, "min_samples": 3,
                           "cooldown_s": 600, "move_timeout_s": 60, "fragmentation": {
                               "moves_per_hour": 4, "moves_per_100_placements": 50}})
        state["proc"] = start_daemon(swarm, cfg, LOG)
        return cfg

    state["start"] = start
    yield state
    if state["proc"] is not None:
        stop(state["proc"])
    for a in agents.values():
        stop(a)


STACKS = ("fx", "fy", "f7", "f6", "fw")


def test_two_half_used_gpus_merged_by_one_move_then_a_pending_whole_gpu_runs(
        swarm: SwarmCluster, fd: dict[str, Any]) -> None:
    tmp = fd["tmp"]
    fd["mark"] = LOG.stat().st_size if LOG.exists() else 0
    cfg = fd["start"](dry_run=True)
    no_gpu_held(swarm)
    try:
        run(swarm, fd, tmp, cfg)
    finally:
        for stack in STACKS:
            swarm.cli(swarm.manager, "stack", "rm", stack, check=False)


def log_since(mark: int) -> str:
    """This run's part of the daemons' log (the file is appended to across runs)."""
    with open(LOG, "rb") as fh:
        fh.seek(mark)
        return fh.read().decode("utf-8", "replace")


def run(swarm: SwarmCluster, fd: dict[str, Any], tmp: Path, cfg: Path) -> None:
    # x: half of a DGX GPU; y: half of an RTX 4090 (the two halves cannot meet by placement).
    deploy_on(swarm, tmp, "fx", "x", HALF, "gpu-node-1")
    deploy_on(swarm, tmp, "fy", "y", HALF, "gpu-node-2")
    x_host, x_uuid = holder_gpu(swarm, "fx_x")
    y_host, y_uuid = holder_gpu(swarm, "fy_y")
    # Every other whole GPU taken: 7 on the RTX node, 6 on the DGX (its GPU 0 runs MIG).
    deploy(swarm, tmp, "f7", {"w": {"labels": {f"{P}gpus": "7"}}})
    wait_running(swarm, "f7_w", 1)
    deploy(swarm, tmp, "f6", {"w": {"labels": {f"{P}gpus": "6"}}})
    wait_running(swarm, "f6_w", 1)
    # One whole GPU asked: none is free, though two halves are.
    deploy(swarm, tmp, "fw", {"one": {"labels": {f"{P}gpus": "1"}}})

    def proposed() -> dict[str, Any] | None:
        res = run_cli("plan", "--config", str(cfg), "--json")
        assert res.returncode == 0, res.stderr
        doc: dict[str, Any] = json.loads(res.stdout)
        moves = (doc.get("moves") or {}).get("proposed") or []
        # Proposals of cycles before f6 was placed judge another cluster.
        return doc if [m.get("frag_before_milli") for m in moves] == [750.0] else None

    doc = swarm.wait_for(proposed, 60, "a fragmentation move proposed (dry-run)")
    assert {s["name"]: s["status"] for s in doc["services"]}["fw_one"] == "pending"
    (m,) = doc["moves"]["proposed"]
    # Workload (placement's, pinned): a half, a 7-, a 6- and a 1-GPU task, 1/4 each. Each
    # node leaves 500 milli that the three whole-GPU shapes cannot use: 2 x 375 before;
    # after the move the freed GPU is unusable only to the 7- and 6-GPU shapes: 500.
    assert (m["service"], m["trigger"], m["from"], m["to"]) == \
        ("fy_y", "fragmentation", y_host, x_host)
    assert m["uuids"] == [x_uuid]
    assert m["frag_gain_milli"] == pytest.approx(250.0, abs=0.2)
    assert m["frag_before_milli"] == pytest.approx(750.0, abs=0.2)
    assert m["frag_gain_pct"] == pytest.approx(33.33, abs=0.01)
    text = run_cli("plan", "--config", str(cfg)).stdout
    assert "[fragmentation, window None]" in text
    assert "fragmentation -250 GPU-milli (0.25 GPU, 33.3% of the cluster's 750)" in text
    time.sleep(3)  # dry-run: proposed and logged, never made
    assert f"{P}state.move" not in labels(swarm, "fy_y")
    eventually(lambda: _has("service=fy_y move gpu-node-2 -> gpu-node-1 dry-run",
                            log_since(fd["mark"])), 30, "the dry-run move logged")
    before = {s: tasks_running(swarm, s)[0]["ID"] for s in ("fx_x", "fy_y")}

    t0 = time.monotonic()
    fd["start"](dry_run=False)
    swarm.wait_for(lambda: f"{P}state.moved-at" in labels(swarm, "fy_y"), 90, "fy_y moved")
    moved_s = time.monotonic() - t0
    (_t,) = wait_running(swarm, "fw_one", 1, timeout=60)
    ran_s = time.monotonic() - t0
    print(f"\nfragmentation move done {moved_s:.1f}s after the daemon started; "
          f"the pending whole-GPU request running {ran_s:.1f}s after")
    # One move: y joined x on x's GPU; x never restarted; the freed GPU went to fw_one.
    assert holder_gpu(swarm, "fy_y") == (x_host, x_uuid)
    assert where(swarm, "fy_y") == {x_host: x_uuid}
    assert [t["ID"] for t in tasks_running(swarm, "fx_x")] == [before["fx_x"]]
    assert holder_gpu(swarm, "fw_one") == (y_host, y_uuid)
    assert where(swarm, "fw_one") == {y_host: y_uuid}
    # written as the move ends, around the label the test waited for: waited for too
    eventually(lambda: _has_not(f"{P}assign.fy_y", node_labels(swarm, y_host)), 30,
               f"fy_y's ledger entry gone from {y_host}")
    spec = swarm.client(swarm.manager).api.inspect_service("fy_y")["Spec"]
    assert spec["Mode"]["Replicated"]["Replicas"] == 1
    assert f"{P}state.moved-at" not in labels(swarm, "fx_x")

    def one_move_logged() -> None:
        log = log_since(fd["mark"])
        assert log.count("move gpu-node-2 -> gpu-node-1 started") == 1
        assert log.count("move gpu-node-2 -> gpu-node-1 done") == 1

    eventually(one_move_logged, 30, "the move's started and done lines, once each")
    time.sleep(3)  # nothing left to gain: no further move
    assert f"{P}state.move" not in labels(swarm, "fx_x")


def _has(needle: str, text: str) -> None:
    assert needle in text, text[-2000:]


def _has_not(key: str, labels: dict[str, str]) -> None:
    assert key not in labels, labels
