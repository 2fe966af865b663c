"""A repin on the real test swarm: a ``mode: global`` half-GPU service runs on both GPU
nodes; on gpu-node-2 its half and another service's half sit on two GPUs, so the daemon's
fragmentation policy moves the global share onto the other half's GPU, on that node.
Only gpu-node-2's task is replaced (gpu-node-1's keeps its task ID), and the new container
sees the new GPU.

Agents serve the real captures with idle metrics; the daemon is the real CLI. First in
dry-run: ``plan`` lists the same-node move and nothing moves; then with
``rebalance.dry_run: false`` and the daemon killed right after the repin's step 2 (gate
closed, ledger on the new GPU); the next daemon finishes it from Swarm's state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import GPU_NODES, LOGS, cfg_file, run_cli, start_agent, start_daemon, stop
from support.swarm_fragmentation import HALF, deploy_on, no_gpu_held
from support.swarm_harness import SwarmCluster
from support.swarm_rebalance import IDLE, holder_gpu, labels, node_labels
from support.swarm_services import container_env, tasks_running, wait_running

from swarmgpu.manager.placement import env_template, gate_constraint
from swarmgpu.manager.services.sharing import env_lines

pytestmark = pytest.mark.swarm
P = "swarmgpu."
LOG = LOGS / "repin-daemon.log"
API_PORT = 9402
G = "rp-global"
STACKS = ("rpa", "rpb")


@pytest.fixture(scope="module")
def rp(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("repin")
    workload = tmp / "workload.yml"  # placement's model, pinned: halves and whole GPUs
    workload.write_text(json.dumps([{"share": 0.5}, {"gpus": 1}]))
    profile = tmp / "idle.yml"
    profile.write_text(json.dumps(IDLE))
    agents = {h: start_agent(swarm, h, "--metrics-profile", str(profile)) for h in GPU_NODES}
    state: dict[str, Any] = {"tmp": tmp, "proc": None}

    def start(dry_run: bool, **env: str) -> Path:
        if state["proc"] is not None and state["proc"].poll() is None:
            stop(state["proc"])
        cfg = cfg_file(tmp, swarm, sync={"interval_s": 1},
                       placement={"workload": str(workload)},
                       http={"listen": f"{swarm.manager.addr}:{API_PORT}"},
                       rebalance={"dry_run": dry_run, "policies": "fragmentation",
                                  "hotspot": {"window_s": 4}, "max_gap_s": 3,
                                  "min_samples": 3, "cooldown_s": 600, "move_timeout_s": 60,
                                  "fragmentation": {"moves_per_hour": 4,
                                                    "moves_per_100_placements": 100}})
        state["proc"] = start_daemon(swarm, cfg, LOG, **env)
        return cfg

    state["start"] = start
    no_gpu_held(swarm)
    yield state
    if state["proc"] is not None and state["proc"].poll() is None:
        stop(state["proc"])
    for a in agents.values():
        stop(a)


def test_fragmentation_repins_a_global_share_on_its_node_only(swarm: SwarmCluster,
                                                               rp: dict[str, Any]) -> None:
    mark = LOG.stat().st_size if LOG.exists() else 0
    try:
        run(swarm, rp, mark)
    finally:
        swarm.cli(swarm.manager, "service", "rm", G, check=False)
        for stack in STACKS:
            swarm.cli(swarm.manager, "stack", "rm", stack, check=False)


def run(swarm: SwarmCluster, rp: dict[str, Any], mark: int) -> None:
    tmp = rp["tmp"]
    cfg = rp["start"](dry_run=True)
    # a (never rebalanced) and b: two halves packed on one GPU of gpu-node-2.
    never = {"labels": {**HALF["labels"], f"{P}rebalance": "never"}}
    deploy_on(swarm, tmp, "rpa", "a", never, "gpu-node-2")
    deploy_on(swarm, tmp, "rpb", "b", HALF, "gpu-node-2")
    _host, a_uuid = holder_gpu(swarm, "rpa_a")
    assert holder_gpu(swarm, "rpb_b") == ("gpu-node-2", a_uuid), "placement packs halves"
    # The global half: on gpu-node-2 it goes to another GPU (a's is full).
    swarm.cli(swarm.manager, "service", "create", "-d", "--no-resolve-image", "--name", G,
              "--mode", "global", "--label", f"{P}gpu-fraction=0.5",
              "--constraint", gate_constraint(P, G), "--env", env_template(P),
              *(x for line in env_lines(P) for x in ("--env", line)),
              "--restart-delay", "1s", "local/busybox:latest", "sleep", "3600")
    wait_running(swarm, G, 2, timeout=90)
    before = {swarm.node(t["NodeID"]).hostname: t["ID"] for t in tasks_running(swarm, G)}
    assert sorted(before) == sorted(GPU_NODES)
    g_uuid = node_labels(swarm, "gpu-node-2")[f"{P}assign.{G}"].split("@")[0]
    assert g_uuid != a_uuid
    n1_ledger = node_labels(swarm, "gpu-node-1")[f"{P}assign.{G}"]
    # b leaves: a's GPU and the global share's are each half used on gpu-node-2.
    swarm.remove_stack("rpb")

    def proposed() -> dict[str, Any] | None:
        res = run_cli("plan", "--config", str(cfg), "--json")
        assert res.returncode == 0, res.stderr
        moves = (json.loads(res.stdout).get("moves") or {}).get("proposed") or []
        return next((m for m in moves if m["service"] == G), None)

    # Dry-run: the same-node move is proposed (plan shows it) and nothing moves.
    m = swarm.wait_for(proposed, 60, "the repin proposed (dry-run)")
    assert (m["from"], m["to"], m["uuids"], m["trigger"]) == \
        ("gpu-node-2", "gpu-node-2", [a_uuid], "fragmentation"), m
    assert m["frag_gain_milli"] > 0 and "same node" in m["reason"]
    assert "(same node: only this node's task is replaced)" in \
        run_cli("plan", "--config", str(cfg)).stdout
    time.sleep(3)
    assert f"{P}state.move" not in labels(swarm, G)
    assert {swarm.node(t["NodeID"]).hostname: t["ID"] for t in tasks_running(swarm, G)} == \
        before
    # Writes on, the daemon killed right after step 2 (gate closed, ledger on a's GPU):
    # the next daemon carries the repin to its end from Swarm's state alone.
    rp["start"](dry_run=False, SWARMGPU_TEST_CRASH_AFTER="repin-step-2")
    assert rp["proc"].wait(60) == 137
    assert f"{P}state.move" in labels(swarm, G)
    assert f"{P}service.{G}" not in node_labels(swarm, "gpu-node-2")
    rp["start"](dry_run=False)
    swarm.wait_for(lambda: f"{P}state.moved-at" in labels(swarm, G), 120,
                   f"{G} repinned on gpu-node-2")

    def host(t: dict[str, Any]) -> str:
        return swarm.node(t["NodeID"]).hostname

    tasks = wait_running(swarm, G, 2, timeout=60,
                         each=lambda t: host(t) != "gpu-node-2" or t["ID"] != before[host(t)],
                         what=", gpu-node-2's replaced")
    (t2,) = [t for t in tasks if host(t) == "gpu-node-2"]
    now = {swarm.node(t["NodeID"]).hostname: t["ID"] for t in tasks_running(swarm, G)}
    assert now["gpu-node-1"] == before["gpu-node-1"]  # the other node's task untouched
    assert now["gpu-node-2"] != before["gpu-node-2"]
    env = container_env(swarm, t2)
    assert env["NVIDIA_VISIBLE_DEVICES"] == a_uuid
    n2 = node_labels(swarm, "gpu-node-2")
    assert n2[f"{P}assign.{G}"] == f"{a_uuid}@500" and n2[f"{P}service.{G}"] == "true"
    assert node_labels(swarm, "gpu-node-1")[f"{P}assign.{G}"] == n1_ledger
    assert labels(swarm, G)[f"{P}devices.{swarm.node('gpu-node-2').node_id}"] == a_uuid
    assert f"{P}state.move" not in labels(swarm, G)
    assert [t["ID"] for t in tasks_running(swarm, "rpa_a")]  # a still runs
    with open(LOG, "rb") as fh:
        fh.seek(mark)
        log = fh.read().decode("utf-8", "replace")
    assert log.count("move gpu-node-2 -> gpu-node-2 dry-run") == 1, log[-3000:]
    assert log.count("move gpu-node-2 -> gpu-node-2 started") == 1, log[-3000:]
    assert log.count("move gpu-node-2 -> gpu-node-2 done") == 1
    assert "gpu-node-1 -> gpu-node-1" not in log and "-> gpu-node-1 started" not in log
