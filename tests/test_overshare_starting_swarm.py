"""The over-share restart against a health check that keeps a task ``starting``, on the
real test swarm (``placement.overshare: restart``, a tenant that may not opt out).

Swarm calls a task ``starting`` until its container's first health check passes; a
check whose start period (and interval) is an hour keeps it there, its container
running. gpu-node-1's fake NVML reports that container's host PID over its 0.5 share
of an 80 GB A100 (tests/support/overshare_swarm.py). The pure tests
(tests/test_overshare_starting.py) judge Swarm's tasks as forged; here Swarm itself
answers: its task states, its constraint enforcer on the closed gate, its updater
after the restart stopped a ``start-first`` update's new task, and the replacement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator
from typing import Any

import pytest
from support.gpu_nodes import LOGS, eventually, log_text, wait_log
from support.overshare_swarm import fake_nvml_swarm, held_gpu, pid_of
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, deploy, stack_yaml, wait_running

pytestmark = pytest.mark.swarm
P = "swarmgpu."
WINDOW_S = 12.0
COOLDOWN_S = 3600.0  # no second restart within the test, whatever it waits
MOVE_TIMEOUT_S = 5.0  # an update's new task held starting longer is not waited for
LOG = LOGS / "overshare-starting-daemon.log"
HALF = {f"{P}gpu-product": "*A100*", f"{P}gpu-fraction": "0.5"}
# an hour before the first check runs, and its failures not counted for an hour
HELD = {"test": ["CMD-SHELL", "exit 1"], "interval": "1h", "start_period": "1h"}
STACKS = ("ost", "osu-pause", "osu-continue", "osu-rollback")
HANG_S = WINDOW_S + 120  # a hang guard, no expectation of speed


@pytest.fixture(scope="module")
def env(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    # (an "ops" tenant that may opt out: every other stack is default's, which may not)
    yield from fake_nvml_swarm(
        swarm, tmp_path_factory, LOG, STACKS, sync={"interval_s": 2},
        placement={"overshare": "restart", "overshare_window_s": WINDOW_S},
        rebalance={"cooldown_s": COOLDOWN_S, "move_timeout_s": MOVE_TIMEOUT_S},
        tenants={"ops": {"stacks": ["ops*"], "may_opt_out": True}})


Render = Callable[[str, dict[str, dict[str, Any]]], str]


def _compose(health: dict[str, Any]) -> Render:
    """stack_yaml's compose file, each service with ``health`` as its health check."""
    def render(stack: str, services: dict[str, dict[str, Any]]) -> str:
        doc = json.loads(stack_yaml(stack, services))
        for svc in doc["services"].values():
            svc["healthcheck"] = health
        return json.dumps(doc, indent=1)
    return render


def meant(swarm: SwarmCluster, service: str) -> list[dict[str, Any]]:
    """The service's tasks Swarm means to run (desired state running)."""
    api = swarm.client(swarm.manager).api
    return list(api.tasks(filters={"service": service, "desired-state": "running"}))


def _live(swarm: SwarmCluster, t: dict[str, Any]) -> bool:
    """Whether ``t``'s container runs (a host PID), whatever Swarm calls the task."""
    if not t["Status"].get("ContainerStatus", {}).get("ContainerID"):
        return False
    try:
        return pid_of(swarm, t) > 0
    except Exception:
        return False


def wait_one(swarm: SwarmCluster, service: str, states: tuple[str, ...],
             not_ids: Collection[str] = ()) -> dict[str, Any]:
    """The one task Swarm means to run, in one of ``states``, none of ``not_ids``, its
    container running."""
    def ready() -> dict[str, Any] | None:
        ts = meant(swarm, service)
        if (len(ts) == 1 and ts[0]["ID"] not in not_ids
                and ts[0]["Status"]["State"] in states and _live(swarm, ts[0])):
            return ts[0]
        return None
    return swarm.wait_for(ready, HANG_S, f"one task of {service} {'/'.join(states)}")


def over(env: dict[str, Any], gpu: str, pid: int, mib: int = 51200) -> None:
    """The fake NVML's processes: ``pid`` alone on ``gpu``, at ``mib`` (a 0.5 share of
    80 GB: 40960)."""
    env["procs"].write_text(json.dumps({gpu: [{"pid": pid, "used_mib": mib}]}))


def restarts(service: str, since: int) -> int:
    return log_text(LOG, since).count(f"restarted {service}'s task on gpu-node-1")


def cooled_not_restarted(swarm: SwarmCluster, env: dict[str, Any], service: str,
                         task: dict[str, Any], gpu: str, since: int) -> None:
    """The replacement over its share again: after a whole window the daemon says the
    cool-down holds it, and Swarm still runs that one task (no second restart)."""
    over(env, gpu, pid_of(swarm, task))
    wait_log(LOG, f"over-share restart of {service} on gpu-node-1 not done: cooling down",
             since=since, timeout=HANG_S)
    assert [t["ID"] for t in meant(swarm, service)] == [task["ID"]]
    assert restarts(service, since) == 1


def test_a_share_held_starting_by_its_health_check_is_restarted_once(
        swarm: SwarmCluster, env: dict[str, Any]) -> None:
    since = LOG.stat().st_size
    deploy(swarm, env["tmp"], "ost", {"a": {"labels": HALF}}, render=_compose(HELD))
    first = wait_one(swarm, "ost_a", ("starting",))
    gpu = held_gpu(swarm, "ost_a")
    over(env, gpu, pid_of(swarm, first))
    wait_log(LOG, "over its GPU share: service ost_a", f"tasks {first['ID']}", since=since,
             timeout=HANG_S)
    wait_log(LOG, "restarted ost_a's task on gpu-node-1", since=since, timeout=HANG_S)
    # Swarm's replacement: on the same node and GPU, held starting again by its check
    second = wait_one(swarm, "ost_a", ("starting",), {first["ID"]})
    assert second["NodeID"] == first["NodeID"] and held_gpu(swarm, "ost_a") == gpu
    cooled_not_restarted(swarm, env, "ost_a", second, gpu, since)


@pytest.mark.parametrize("failure_action", ["pause", "continue", "rollback"])
def test_a_start_first_update_held_starting_ends_in_one_task_within_its_share(
        swarm: SwarmCluster, env: dict[str, Any], failure_action: str) -> None:
    """Its owner's ``docker service update`` (its spec kept, the device map too): a
    health check that holds the new task ``starting``, ``start-first``, so Swarm keeps
    the old task running beside it. (Not a stack deployed with ``order: start-first``:
    on this swarm its first task, made before the device map, waited beside the map's
    task for good, and the gate, which opens once every waiting task is newer than the
    map, never opened.)"""
    stack = f"osu-{failure_action}"
    svc = f"{stack}_b"
    since = LOG.stat().st_size
    deploy(swarm, env["tmp"], stack, {"b": {"labels": HALF}})
    (old,) = wait_running(swarm, svc, 1, timeout=HANG_S)
    gpu = held_gpu(swarm, svc)
    swarm.cli(swarm.manager, "service", "update", "-d", "--no-resolve-image",
              "--update-order", "start-first", "--update-failure-action", failure_action,
              "--health-cmd", "exit 1", "--health-interval", "1h",
              "--health-start-period", "1h", svc)

    def both() -> list[dict[str, Any]] | None:
        ts = {t["ID"]: t for t in meant(swarm, svc)}
        new = [t for i, t in ts.items() if i != old["ID"]]
        ok = (old["ID"] in ts and ts[old["ID"]]["Status"]["State"] == "running"
              and len(new) == 1 and new[0]["Status"]["State"] == "starting"
              and new[0]["NodeID"] == old["NodeID"] and _live(swarm, new[0]))
        return new if ok else None
    (new,) = swarm.wait_for(both, HANG_S, f"{svc}'s update: old running, new starting")
    over(env, gpu, pid_of(swarm, old))
    wait_log(LOG, f"restarted {svc}'s task on gpu-node-1", since=since, timeout=HANG_S)
    # What Swarm does then: one task, neither of the two, on the same node and GPU
    last = wait_one(swarm, svc, ("starting", "running"), {old["ID"], new["ID"]})
    api = swarm.client(swarm.manager).api
    status = api.inspect_service(svc).get("UpdateStatus") or {}
    history = [(t["ID"][:6], t["DesiredState"], t["Status"]["State"],
                t["Status"].get("Err", "")) for t in api.tasks(filters={"service": svc})]
    print(f"\n{failure_action}: update {status.get('State')} ({status.get('Message')}); "
          f"replacement {last['Status']['State']}; tasks {history}")
    assert last["NodeID"] == old["NodeID"] and held_gpu(swarm, svc) == gpu
    e = container_env(swarm, last)
    assert e["NVIDIA_VISIBLE_DEVICES"] == gpu and e["CUDA_DEVICE_MEMORY_LIMIT"] == "40960m"
    # The update's new task: rejected by Swarm's constraint enforcer on the closed gate;
    # the old one no longer meant to run. The replacement is of the updated spec, held
    # starting by its check as the new task was: nothing was rolled back.
    gone = {t["ID"]: t for t in api.tasks(filters={"service": svc})}
    assert gone[new["ID"]]["DesiredState"] == "shutdown"
    assert gone[new["ID"]]["Status"]["State"] == "rejected"
    assert gone[new["ID"]]["Status"]["Err"] == "assigned node no longer meets constraints"
    assert gone[old["ID"]]["DesiredState"] == "shutdown"
    assert last["Status"]["State"] == "starting"
    assert last["Spec"]["ContainerSpec"]["Healthcheck"]["Test"] == ["CMD-SHELL", "exit 1"]
    cooled_not_restarted(swarm, env, svc, last, gpu, since)
    # Whatever its failure_action, the update ends "completed", never paused or rolled
    # back: the restart's cool-down mark is a spec write, which starts Swarm's updater
    # anew; it keeps the new task (of the updated spec, meant to run) and stops the old
    # one, so the enforcer's rejection is no failure of an update's task.
    def completed() -> dict[str, Any]:
        got = api.inspect_service(svc)
        assert (got.get("UpdateStatus") or {}).get("State") == "completed", got.get(
            "UpdateStatus")
        return dict(got["Spec"])
    spec = eventually(completed, HANG_S, f"{svc}'s update completed")
    assert spec["TaskTemplate"]["ContainerSpec"]["Healthcheck"]["Test"] == [
        "CMD-SHELL", "exit 1"]
    assert [t["ID"] for t in meant(swarm, svc)] == [last["ID"]]
