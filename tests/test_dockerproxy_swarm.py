"""The daemon through `swarmgpu docker-proxy` on the real test swarm (issue 25, part 5).

The proxy listens on a unix socket in front of the manager's engine; the real daemon
(shipped defaults: identity swarm-pki, agents serving their node certificates) is
pointed at it and nothing else. Full cycles work through it: label sync, placement of
a one-GPU service (its device list and gate), the workload model stored on the swarm
object with POST /swarm/update. No call the daemon makes is refused, and a call
outside the list (containers, secrets, a service create) is refused with 403 before it
reaches the engine.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest
from gpu_nodes import (
    LOGS,
    agents,
    cfg_file,
    kwargs_for_logs,
    labels_of,
    start_daemon,
    stop,
    swarmgpu_env,
)
from swarm_harness import SwarmCluster
from test_placement_swarm import deploy, stack_yaml, wait_running

from swarmgpu.allocator.workload import STATE_KEY

pytestmark = pytest.mark.swarm
_ = agents  # fixture, used by name
P = "swarmgpu."
STACK = "dproxy"
PROXY_LOG = LOGS / "docker-proxy.log"
DAEMON_LOG = LOGS / "docker-proxy-daemon.log"


def _swarm_labels(swarm: SwarmCluster) -> dict[str, str]:
    spec = swarm.client(swarm.manager).api.inspect_swarm()["Spec"]
    return dict(spec.get("Labels") or {})


def _drop_workload(swarm: SwarmCluster) -> None:
    """Start without a stored model, so the daemon must write one through the proxy."""
    api = swarm.client(swarm.manager).api
    raw = api.inspect_swarm()
    labels = dict(raw["Spec"].get("Labels") or {})
    if labels.pop(P + STATE_KEY, None) is not None:
        api.update_swarm(version=raw["Version"]["Index"], swarm_spec={**raw["Spec"],
                                                                      "Labels": labels})


@pytest.fixture(scope="module")
def proxied(swarm: SwarmCluster, agents: dict[str, Any],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("dproxy")
    LOGS.mkdir(parents=True, exist_ok=True)
    PROXY_LOG.write_text("")
    DAEMON_LOG.write_text("")
    sock = tmp / "docker.sock"
    proxy = swarm.exec_in_netns(swarm.manager, [
        sys.executable, "-m", "swarmgpu.cli", "docker-proxy", "--listen", f"unix://{sock}",
        "--upstream", swarm.manager.docker_host], env=swarmgpu_env(),
        **kwargs_for_logs(PROXY_LOG))
    swarm.wait_for(lambda: sock.exists(), 20, "the proxy's socket")
    _drop_workload(swarm)
    cfg = cfg_file(tmp, swarm, docker_host=f"unix://{sock}", sync={"interval_s": 2})
    daemon = start_daemon(swarm, cfg, DAEMON_LOG)
    try:
        yield {"sock": sock, "tmp": tmp, "daemon": daemon}
    finally:
        swarm.cli(swarm.manager, "stack", "rm", STACK, check=False)
        stop(daemon)
        stop(proxy)


def test_full_daemon_cycles_through_the_proxy(swarm: SwarmCluster,
                                              proxied: dict[str, Any]) -> None:
    swarm.wait_for(lambda: labels_of(swarm, "gpu-node-2").get(P + "gpu.product")
                   == "NVIDIA-GeForce-RTX-4090", 60, "labels synced through the proxy")
    deploy(swarm, proxied["tmp"], STACK, {"one": {"labels": {P + "gpus": "1",
                                                             P + "gpu-product": "*4090*"}}},
           stack_yaml)
    (task,) = wait_running(swarm, f"{STACK}_one", 1, 90)
    assert swarm.node(task["NodeID"]).hostname == "gpu-node-2"
    assert any(k.startswith(P + "assign.") for k in labels_of(swarm, "gpu-node-2"))
    swarm.wait_for(lambda: P + STATE_KEY in _swarm_labels(swarm), 60,
                   "the workload model stored on the swarm object (POST /swarm/update)")
    assert proxied["daemon"].poll() is None, f"daemon died; see {DAEMON_LOG}"
    log = PROXY_LOG.read_text()
    assert "refused" not in log, f"the daemon made a call outside the list:\n{log[-2000:]}"
    assert "POST /swarm/update" not in DAEMON_LOG.read_text()  # no error quoting it


def test_calls_outside_the_list_are_refused(swarm: SwarmCluster,
                                            proxied: dict[str, Any]) -> None:
    api = docker.APIClient(base_url=f"unix://{proxied['sock']}", timeout=10)
    assert api.nodes(), "a listed call works"
    before = len(swarm.client(swarm.manager).api.containers(all=True))
    for call in (lambda: api.containers(all=True),
                 lambda: api.secrets(),
                 lambda: api.create_container("local/busybox:latest", "true"),
                 lambda: api.create_service({"ContainerSpec": {"Image": "local/busybox"}},
                                            name="dproxy-evil"),
                 lambda: api.leave_swarm(force=True)):
        with pytest.raises(docker.errors.APIError) as exc:
            call()
        assert exc.value.status_code == 403, exc.value
    assert len(swarm.client(swarm.manager).api.containers(all=True)) == before
    assert not [s for s in swarm.client(swarm.manager).api.services()
                if s["Spec"]["Name"] == "dproxy-evil"]
    assert PROXY_LOG.read_text().count("refused") >= 5
