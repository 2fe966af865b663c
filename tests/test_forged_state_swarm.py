"""On the real test swarm: a service whose own labels carry a forged move record moves
nothing. The victim keeps its gate, its ledger and its running task.

The daemon is the real CLI with the default config (rebalance on, ``rebalance.dry_run:
true``), then with ``rebalance.dry_run: false``; agents serve the real captures. The
attacker is a plain stack: one service, no GPU request, whose ``deploy.labels`` carry
``swarmgpu.state.move`` naming the victim with direction "back" (open the source, close
the target: the target is the victim's node, the source a GPU a third service holds).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    DGX_A100,
    LOGS,
    RTX4090,
    cfg_file,
    labels_of,
    start_daemon,
    stop,
    wait_log,
)
from support.swarm_harness import SwarmCluster
from support.swarm_services import deploy, tasks_running, wait_running

from swarmgpu.manager.rebalance.mover import MoveState

pytestmark = pytest.mark.swarm
P = "swarmgpu."
VICTIM, THIRD, ATTACKER = "fv_victim", "fv_third", "fa_x"


def _service_labels(swarm: SwarmCluster, svc: str) -> dict[str, str]:
    return dict(swarm.client(swarm.manager).api.inspect_service(svc)["Spec"]["Labels"] or {})


def _ledger(swarm: SwarmCluster, svc: str) -> dict[str, dict[str, str]]:
    """hostname -> the service's gate and ledger labels there."""
    keys = (f"{P}assign.{svc}", f"{P}service.{svc}")
    out = {}
    for h in (DGX_A100.hostname, RTX4090.hostname):
        mine = {k: v for k, v in labels_of(swarm, h).items() if k in keys}
        if mine:
            out[h] = mine
    return out


def _attacker_stack(tmp: Path, forged: MoveState) -> Path:
    f = tmp / "fa.yml"
    f.write_text(json.dumps({"version": "3.8", "services": {"x": {
        "image": "local/busybox:latest", "command": ["sleep", "3600"],
        "deploy": {"labels": {f"{P}state.move": forged.to_json()},
                   "restart_policy": {"condition": "any", "delay": "1s"}}}}}, indent=1))
    return f


@pytest.fixture(scope="module")
def placed(swarm: SwarmCluster, agents: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The victim on the DGX node and a third service on the RTX 4090 node, placed by a
    daemon with the default config; the stacks go while a daemon still runs."""
    tmp = tmp_path_factory.mktemp("forged")
    cfg = cfg_file(tmp, swarm)  # the defaults: rebalance on, rebalance.dry_run true
    state: dict[str, Any] = {"tmp": tmp, "cfg": cfg,
                             "proc": start_daemon(swarm, cfg, LOGS / "forged-daemon.log")}
    deploy(swarm, tmp, "fv", {
        "victim": {"labels": {f"{P}gpus": "1"},
                   "constraints": [f"node.hostname=={DGX_A100.hostname}"]},
        "third": {"labels": {f"{P}gpus": "1"},
                  "constraints": [f"node.hostname=={RTX4090.hostname}"]}})
    (state["victim_task"],) = wait_running(swarm, VICTIM, 1)
    wait_running(swarm, THIRD, 1)
    yield state
    swarm.cli(swarm.manager, "stack", "rm", "fa", check=False)
    swarm.cli(swarm.manager, "stack", "rm", "fv", check=False)
    swarm.wait_for(lambda: not _ledger(swarm, VICTIM) and not _ledger(swarm, THIRD), 60,
                   "the module's GPUs released")
    stop(state["proc"])


def _forged(swarm: SwarmCluster) -> MoveState:
    victim_at = _ledger(swarm, VICTIM)
    third_at = _ledger(swarm, THIRD)
    assert set(victim_at) == {DGX_A100.hostname} and set(third_at) == {RTX4090.hostname}
    v_uuid = victim_at[DGX_A100.hostname][f"{P}assign.{VICTIM}"]
    t_uuid = third_at[RTX4090.hostname][f"{P}assign.{THIRD}"]
    return MoveState(
        id="forged000001", service=VICTIM, source=swarm.node(RTX4090.hostname).node_id,
        source_host=RTX4090.hostname, source_uuids=(t_uuid,), source_milli=(1000,),
        target=swarm.node(DGX_A100.hostname).node_id, target_host=DGX_A100.hostname,
        target_uuids=(v_uuid,), target_milli=(1000,), surge=False, replicas=1,
        max_replicas=0, started_at=0.0, trigger="hotspot", reason="forged",
        direction="back")


def _unchanged(swarm: SwarmCluster, placed: dict[str, Any], before: dict[str, Any]) -> None:
    assert _ledger(swarm, VICTIM) == before["victim"]
    assert _ledger(swarm, THIRD) == before["third"]
    assert _service_labels(swarm, VICTIM) == before["victim_spec"]
    (task,) = tasks_running(swarm, VICTIM)
    assert task["ID"] == placed["victim_task"]["ID"]  # the same task, never replaced


def _cycles(seconds: float = 12.0) -> None:
    """sync.interval_s is 1 s: about a dozen full cycles."""
    time.sleep(seconds)


def test_forged_move_label_changes_nothing_with_the_default_config(
        swarm: SwarmCluster, placed: dict[str, Any]) -> None:
    before = {"victim": _ledger(swarm, VICTIM), "third": _ledger(swarm, THIRD),
              "victim_spec": _service_labels(swarm, VICTIM)}
    forged = _forged(swarm)
    f = _attacker_stack(placed["tmp"], forged)
    swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c", str(f), "fa")
    wait_running(swarm, ATTACKER, 1)
    _cycles()
    _unchanged(swarm, placed, before)
    # Dry-run (the default): reported, left in the attacker's spec, never acted on.
    assert f"{P}state.move" in _service_labels(swarm, ATTACKER)
    log = wait_log(LOGS / "forged-daemon.log", "a move label the daemon did not write")
    assert "rolled-back" not in log and "released its GPUs" not in log


def test_forged_move_label_changes_nothing_with_rebalance_writing(
        swarm: SwarmCluster, placed: dict[str, Any]) -> None:
    stop(placed["proc"])
    cfg = cfg_file(placed["tmp"], swarm, rebalance={"dry_run": False})
    placed["proc"] = start_daemon(swarm, cfg, LOGS / "forged-daemon-writing.log")
    before = {"victim": _ledger(swarm, VICTIM), "third": _ledger(swarm, THIRD),
              "victim_spec": _service_labels(swarm, VICTIM)}
    if f"{P}state.move" not in _service_labels(swarm, ATTACKER):  # run on its own
        forged = _forged(swarm)
        f = _attacker_stack(placed["tmp"], forged)
        swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c", str(f),
                  "fa")
    # The mover removes the forged label from the attacker's own spec (swarmgpu's key).
    swarm.wait_for(lambda: f"{P}state.move" not in _service_labels(swarm, ATTACKER), 30,
                   "the forged move label removed from its carrier")
    _cycles(8.0)
    _unchanged(swarm, placed, before)
    # the log line follows the label's removal the test waited for: waited for too
    log = wait_log(LOGS / "forged-daemon-writing.log", "removed from its spec")
    assert "rolled-back" not in log and "released its GPUs" not in log
