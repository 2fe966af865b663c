"""Rebalancing on the real test swarm: agents serving scripted metrics profiles, the
daemon (real CLI) moving one replica; containers checked for their new devices."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_nodes import GPU_NODES, LOGS, cfg_file, kwargs_for_logs, start_agent, stop, swarmgpu_env
from swarm_harness import SwarmCluster
from test_placement_swarm import container_env, deploy, tasks_running, wait_running

pytestmark = pytest.mark.swarm
P = "swarmgpu."
IDLE = {"default": {"util_pct": 5, "fb_used_mib": 1000}}


@pytest.fixture(scope="module")
def rb(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("rebalance")
    profiles = {h: tmp / f"{h}.yml" for h in GPU_NODES}
    for p in profiles.values():
        p.write_text(json.dumps(IDLE))
    agents = {h: start_agent(swarm, h, "--metrics-profile", str(profiles[h])) for h in GPU_NODES}
    cfg = cfg_file(tmp, swarm, sync={"interval_s": 1}, rebalance={
        "dry_run": False, "policies": "hotspot", "hot_window_s": 4, "max_gap_s": 3,
        "min_samples": 3, "cooldown_s": 600, "move_timeout_s": 60})
    state: dict[str, Any] = {"cfg": cfg, "tmp": tmp, "profiles": profiles}

    def start(**env: str) -> Any:
        state["proc"] = swarm.exec_in_netns(
            swarm.manager, [sys.executable, "-m", "swarmgpu.cli", "run", "--config", str(cfg)],
            env=swarmgpu_env(**env), **kwargs_for_logs(LOGS / "rebalance-daemon.log"))
        return state["proc"]

    state["start"] = start
    start()
    yield state
    stop(state["proc"])
    for a in agents.values():
        stop(a)


def labels(swarm: SwarmCluster, svc: str) -> dict[str, str]:
    return dict(swarm.client(swarm.manager).api.inspect_service(svc)["Spec"]["Labels"] or {})


def holder_gpu(swarm: SwarmCluster, svc: str) -> tuple[str, str]:
    """(hostname, UUID) of the service's one holding, from the node ledger."""
    for h in GPU_NODES:
        node = swarm.node(h)
        lab = swarm.client(swarm.manager).api.inspect_node(node.node_id)["Spec"]["Labels"] or {}
        if f"{P}assign.{svc}" in lab:
            return h, lab[f"{P}assign.{svc}"].split("@")[0]
    raise AssertionError(f"{svc} holds nothing")


def hot(path: Path, uuid: str | None) -> None:
    doc: dict[str, Any] = dict(IDLE)
    if uuid:
        doc["gpus"] = {uuid: [{"at": 0, "util_pct": 97}]}
    path.write_text(json.dumps(doc))


def where(swarm: SwarmCluster, svc: str) -> dict[str, str]:
    """hostname -> NVIDIA_VISIBLE_DEVICES of each running container of the service."""
    return {swarm.node(t["NodeID"]).hostname: container_env(swarm, t)["NVIDIA_VISIBLE_DEVICES"]
            for t in tasks_running(swarm, svc)}


def test_hot_spot_moves_exactly_one_replica_and_spike_moves_none(
        swarm: SwarmCluster, rb: dict[str, Any]) -> None:
    frac = {"labels": {"swarmgpu.gpu-fraction": "0.5"}}
    deploy(swarm, rb["tmp"], "rb", {"a": frac, "b": frac})
    wait_running(swarm, "rb_a", 1)
    wait_running(swarm, "rb_b", 1)
    host, uuid = holder_gpu(swarm, "rb_a")
    assert holder_gpu(swarm, "rb_b") == (host, uuid)  # packed on one GPU
    other = next(h for h in GPU_NODES if h != host)
    # A 2 s spike (window 4 s): nothing moves.
    hot(rb["profiles"][host], uuid)
    time.sleep(2)
    hot(rb["profiles"][host], None)
    time.sleep(6)
    assert all(f"{P}state.moved-at" not in labels(swarm, s) for s in ("rb_a", "rb_b"))
    # Sustained: exactly one move, of rb_a (equal shares go by name), to the other node.
    hot(rb["profiles"][host], uuid)
    swarm.wait_for(lambda: f"{P}state.moved-at" in labels(swarm, "rb_a"), 60, "rb_a moved")
    new_host, new_uuid = holder_gpu(swarm, "rb_a")
    assert new_host == other
    assert where(swarm, "rb_a") == {other: new_uuid}
    assert where(swarm, "rb_b") == {host: uuid}
    time.sleep(5)  # still hot, but b holds the GPU alone now and a is cooling down
    assert f"{P}state.moved-at" not in labels(swarm, "rb_b")
    assert len(tasks_running(swarm, "rb_a")) == 1
    log = (LOGS / "rebalance-daemon.log").read_text()
    assert log.count("'service': 'rb_a'} move") >= 2  # started + done, with the reason
    assert "above 85% util" in log


def test_killed_mid_move_finishes_or_rolls_back(swarm: SwarmCluster, rb: dict[str, Any]) -> None:
    _host, _uuid = holder_gpu(swarm, "rb_b")
    frac = {"labels": {"swarmgpu.gpu-fraction": "0.5"}}
    stop(rb["proc"])  # the next daemon places c on b's hot GPU, then dies mid-move
    proc = rb["start"](SWARMGPU_TEST_CRASH_AFTER="move-step-1")
    deploy(swarm, rb["tmp"], "rc", {"c": frac})
    assert proc.wait(60) == 137
    moving = [s for s in ("rb_b", "rc_c") if f"{P}state.move" in labels(swarm, s)]
    assert len(moving) == 1
    rb["start"]()
    (svc,) = moving
    swarm.wait_for(lambda: f"{P}state.move" not in labels(swarm, svc), 60, "move ended")
    for s in ("rb_b", "rc_c"):
        (_t,) = wait_running(swarm, s, 1)
        h, u = holder_gpu(swarm, s)
        assert where(swarm, s) == {h: u}
    spec = swarm.client(swarm.manager).api.inspect_service(svc)["Spec"]
    assert spec["Mode"]["Replicated"]["Replicas"] == 1
