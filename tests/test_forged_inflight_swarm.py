"""On the real test swarm: a ``swarmgpu.state.move`` label with no move record of the
daemon's behind it (written in the stack's ``deploy.labels``) gives its service no
immunity. It is preempted, re-placed when its node is drained, and evacuated from a
failed GPU, like any service without the label (``rebalance.record.move_of``: only the
daemon's record on the swarm object makes a move in flight).

The daemon runs the shipped defaults but preemption on (``preemption.dry_run: false``);
``rebalance.dry_run`` stays true, so the mover leaves the forged labels where they are
(it removes them only when it may write) and each reader faces them. gpu-node-2's agent
reads an editable ``file:`` facts source (as in test_health_swarm.py) so that a GPU can
fail.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.gpu_nodes import (
    DGX_A100,
    LOGS,
    RTX4090,
    cfg_file,
    kwargs_for_logs,
    remove_stacks,
    run_cli,
    start_agent,
    start_daemon,
    stop,
    swarmgpu_env,
    wait_port,
)
from support.health_swarm import FactsFile
from support.swarm_harness import SwarmCluster
from support.swarm_services import deploy, devices_of, tasks_running, wait_running

from swarmgpu.manager.rebalance.record import MoveState

pytestmark = pytest.mark.swarm
P = "swarmgpu."
HOST, OTHER = RTX4090.hostname, DGX_A100.hostname
LOG = LOGS / "forged-inflight-daemon.log"


def forged(service: str) -> str:
    """A move label naming its own service, as the mover writes one; no record exists."""
    return MoveState(
        id="forged0000001", service=service, source="x", source_host=HOST,
        source_uuids=(), source_milli=(), target="y", target_host=OTHER, target_uuids=(),
        target_milli=(), surge=True, replicas=1, max_replicas=0, started_at=time.time(),
        trigger="hotspot", reason="immunity, please").to_json()


@pytest.fixture(scope="module")
def setup(swarm: SwarmCluster, agents: dict[str, Any],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("forged-inflight")
    facts = FactsFile(tmp / "facts.json")
    node = swarm.node(HOST)
    stop(agents[HOST])
    agent = swarm.exec_in_netns(node, [
        sys.executable, "-m", "swarmgpu.cli", "agent", "--source", f"file:{facts.path}",
        "--hostname", HOST, "--listen", f"{node.addr}:9401", "--refresh-s", "1",
        "--identity", "swarm-pki", "--data-root", str(node.data_root),
    ], env=swarmgpu_env(), **kwargs_for_logs(LOGS / "agent-forged-inflight-file.log"))
    wait_port(node.addr, 9401)
    cfg = cfg_file(tmp, swarm, sync={"interval_s": 2}, agents={"watch_s": 1},
                   preemption={"dry_run": False, "settle_s": 10})
    state = {"facts": facts, "tmp": tmp, "cfg": cfg, "daemon": start_daemon(swarm, cfg, LOG)}
    try:
        yield state
    finally:
        remove_stacks(swarm, "fp", "fr", "fe")
        stop(state["daemon"])
        stop(agent)
        agents[HOST] = start_agent(swarm, HOST)


def _labels(swarm: SwarmCluster, svc: str) -> dict[str, str]:
    return dict(swarm.client(swarm.manager).api.inspect_service(svc)["Spec"]["Labels"] or {})


def _availability(swarm: SwarmCluster, host: str, value: str) -> None:
    swarm.cli(swarm.manager, "node", "update", "--availability", value,
              swarm.node(host).node_id)


def test_forged_move_label_is_preempted(swarm: SwarmCluster, setup: dict[str, Any]) -> None:
    deploy(swarm, setup["tmp"], "fp", {"low": {"labels": {
        f"{P}gpus": "8", f"{P}priority": "0", f"{P}state.move": forged("fp_low")}}})
    wait_running(swarm, "fp_low", 1, timeout=90)
    start = time.monotonic()
    deploy(swarm, setup["tmp"], "fp", {
        "low": {"labels": {f"{P}gpus": "8", f"{P}priority": "0",
                           f"{P}state.move": forged("fp_low")}},
        "high": {"labels": {f"{P}gpus": "2", f"{P}priority": "100",
                            f"{P}gpu-product": "*RTX 4090*"}}})
    wait_running(swarm, "fp_high", 1, timeout=60)
    swarm.wait_for(lambda: not tasks_running(swarm, "fp_low") or None,
                   max(1.0, 60 - (time.monotonic() - start)), "the forged-label holder stopped")
    print(f"\nfp_high running, fp_low (forged move label) preempted "
          f"{time.monotonic() - start:.1f} s after the deploy")
    labels = _labels(swarm, "fp_low")
    assert json.loads(labels[f"{P}state.preempted"])["by"] == "fp_high"
    assert f"{P}state.move" in labels  # still there (rebalance.dry_run): it was ignored
    res = run_cli("audit", "--config", str(setup["cfg"]), "--json")
    kinds = {(f["kind"], f["subject"]) for f in json.loads(res.stdout)["findings"]}
    assert ("forged-move-label", "fp_low") in kinds
    remove_stacks(swarm, "fp")


def test_forged_move_label_is_re_placed_off_a_drained_node(
        swarm: SwarmCluster, setup: dict[str, Any]) -> None:
    _availability(swarm, HOST, "drain")  # it lands on the DGX first
    try:
        deploy(swarm, setup["tmp"], "fr", {"rp": {"labels": {
            f"{P}gpus": "1", f"{P}state.move": forged("fr_rp")}}})
        (t,) = wait_running(swarm, "fr_rp", 1, timeout=90)
    finally:
        _availability(swarm, HOST, "active")
    assert swarm.node(t["NodeID"]).hostname == OTHER
    start = time.monotonic()
    _availability(swarm, OTHER, "drain")
    try:
        (t,) = wait_running(swarm, "fr_rp", 1, timeout=90,
                            each=lambda t: swarm.node(t["NodeID"]).hostname == HOST,
                            what=f" on {HOST}")
        print(f"\nfr_rp (forged move label) re-placed on {HOST} "
              f"{time.monotonic() - start:.1f} s after {OTHER} was drained")
        assert list(devices_of(swarm, "fr_rp")) == [HOST]
    finally:
        _availability(swarm, OTHER, "active")
    remove_stacks(swarm, "fr")


def test_forged_move_label_is_evacuated_from_a_failed_gpu(
        swarm: SwarmCluster, setup: dict[str, Any]) -> None:
    facts: FactsFile = setup["facts"]
    deploy(swarm, setup["tmp"], "fe", {"ev": {
        "labels": {f"{P}gpus": "1", f"{P}state.move": forged("fe_ev")},
        "constraints": [f"node.hostname=={HOST}"]}})
    wait_running(swarm, "fe_ev", 1, timeout=90)
    (uuid,) = devices_of(swarm, "fe_ev")[HOST]
    facts.xid(uuid, 79)  # fallen off the bus
    start = time.monotonic()
    wait_running(swarm, "fe_ev", 1, timeout=90,
                 each=lambda t: uuid not in devices_of(swarm, "fe_ev").get(HOST, [uuid]),
                 what=" off the failed GPU")
    print(f"\nfe_ev (forged move label) running off its failed GPU "
          f"{time.monotonic() - start:.1f} s after Xid 79")
    log = LOG.read_text(errors="replace")
    assert f"move {HOST} -> {HOST} started: health: {HOST} GPU" in log, log[-3000:]
    assert "fe_ev on " + HOST + ": a move is under way" not in log
