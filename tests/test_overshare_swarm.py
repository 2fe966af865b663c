"""A shared GPU's holder over its share, on the real test swarm, start to finish.

gpu-node-1's agent serves a fake NVML (an 8x A100-SXM4-80GB layout from real captures)
whose running processes are the host PIDs of real task containers; everything after
NVML is real: the PID's cgroup, the node's dockerd labels, the agent's /metrics, the
daemon's scrape, its log, /metrics, the map document, `swarmgpu audit`, and
(``placement.overshare: restart``) the restart of the offender's task only.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from support.gpu_nodes import HTTP_AUTH, LOGS, eventually, run_cli, wait_log
from support.overshare_swarm import fake_nvml_swarm, held_gpu, pid_of
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, deploy, tasks_running, wait_running

from swarmgpu.agent.procattr import SERVICE_LABEL, TASK_LABEL, engine_labels
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.swarm.client import SwarmClient
from swarmgpu.swarm.identity import client_context, default_cert_paths

pytestmark = pytest.mark.swarm
P = "swarmgpu."
HTTP_PORT = 9412
WINDOW_S = 12.0
LOG = LOGS / "overshare-daemon.log"


@pytest.fixture(scope="module")
def env(swarm: SwarmCluster, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    yield from fake_nvml_swarm(
        swarm, tmp_path_factory, LOG, ("os",), sync={"interval_s": 2},
        http={"listen": f"{swarm.manager.addr}:{HTTP_PORT}"},
        placement={"overshare": "restart", "overshare_window_s": WINDOW_S},
        rebalance={"cooldown_s": 0})


def http(swarm: SwarmCluster, route: str) -> str:
    req = urllib.request.Request(f"http://{swarm.manager.addr}:{HTTP_PORT}{route}",
                                 headers=HTTP_AUTH)
    with urllib.request.urlopen(req, timeout=3) as resp:
        return str(resp.read().decode())


def agent_page(swarm: SwarmCluster, addr: str) -> str:
    """The agent's /metrics as the daemon reads it: over TLS, as this swarm's manager
    (processes are listed only to a manager of the agent's own cluster)."""
    client = SwarmClient(swarm.manager.docker_host)
    crt, key, _ = default_cert_paths(str(swarm.manager.data_root))
    tls = client_context(client.trust_root(), str(client.info()["Swarm"]["Cluster"]["ID"]),
                         crt, key)
    got = boundedhttp.get(f"https://{addr}:9401/metrics", timeout_s=5, max_bytes=1 << 22,
                          tls=tls)
    return got.body.decode()


def test_over_share_is_reported_then_only_the_offender_restarts(
        swarm: SwarmCluster, env: dict[str, Any]) -> None:
    a100 = {"swarmgpu.gpu-product": "*A100*"}
    half = {**a100, "swarmgpu.gpu-fraction": "0.5"}
    t0 = time.monotonic()
    never = {**a100, "swarmgpu.gpu-fraction": "0.25", "swarmgpu.rebalance": "never"}
    # The halves first, then the quarter in a re-deploy of the stack: services of one
    # priority are served by age, and a stack deploy creates its services in no set
    # order (the quarter placed first would share its GPU with one half).
    deploy(swarm, env["tmp"], "os", {"a": {"labels": half}, "b": {"labels": half}})
    wait_running(swarm, "os_a", 1, timeout=90)
    wait_running(swarm, "os_b", 1, timeout=90)
    deploy(swarm, env["tmp"], "os", {"a": {"labels": half}, "b": {"labels": half},
                                     "c": {"labels": never}})
    (ta,) = wait_running(swarm, "os_a", 1, timeout=90)
    (tb,) = wait_running(swarm, "os_b", 1, timeout=90)
    (tc,) = wait_running(swarm, "os_c", 1, timeout=90)
    t_running = time.monotonic() - t0
    gpu = held_gpu(swarm, "os_a")
    assert held_gpu(swarm, "os_b") == gpu  # two halves packed on one 80 GB GPU
    assert container_env(swarm, ta)["CUDA_DEVICE_MEMORY_LIMIT"] == "40960m"
    gpu_c = held_gpu(swarm, "os_c")
    assert gpu_c != gpu
    # a leaks to 50 GiB of its 40 GiB share; b stays at 4 GiB; c (rebalance: never) is
    # over its 20 GiB too, and must be left alone
    env["procs"].write_text(json.dumps({
        gpu: [{"pid": pid_of(swarm, ta), "used_mib": 51200},
              {"pid": pid_of(swarm, tb), "used_mib": 4096}],
        gpu_c: [{"pid": pid_of(swarm, tc), "used_mib": 30000}]}))
    t1 = time.monotonic()
    swarm.wait_for(lambda: "over its GPU share: service os_a" in LOG.read_text(), 30,
                   "the daemon's log line naming os_a")
    t_logged = time.monotonic() - t1
    # the agent found each PID's container in its cgroup (it has no engine access; the
    # daemon named the task and service from Swarm's task list)
    node1 = swarm.node("gpu-node-1")
    page = agent_page(swarm, node1.addr)
    cid = ta["Status"]["ContainerStatus"]["ContainerID"]
    assert any(f'container="{cid[:12]}"' in ln and f'pid="{pid_of(swarm, ta)}"' in ln
               and ln.endswith(" 51200.0") for ln in page.splitlines()), page[-2000:]
    wait_log(LOG, f"tasks {ta['ID']}")
    # an agent given --docker-host would name them itself, from the engine's labels
    lookup = engine_labels(node1.docker_host)
    got = lookup(cid)
    assert got is not None and (got[SERVICE_LABEL], got[TASK_LABEL]) == ("os_a", ta["ID"])
    assert lookup("0" * 64) == {}  # no such container: no owner
    assert "over its GPU share: service os_b" not in LOG.read_text()
    # the daemon's /metrics, its map document and `audit` (written or read after the log
    # line the test waited for: each waited for in turn)
    def metrics_say() -> None:
        metrics = http(swarm, "/metrics")
        assert 'swarmgpu_service_gpu_memory_used_mib{gpu="' in metrics
        mine = [ln for ln in metrics.splitlines() if 'service="os_a"' in ln]
        assert any(ln.startswith("swarmgpu_service_gpu_memory_used_mib")
                   and ln.endswith(" 51200.0") for ln in mine), mine
        assert any(ln.startswith("swarmgpu_service_gpu_memory_share_mib")
                   and ln.endswith(" 40960.0") for ln in mine), mine

    def map_says() -> None:  # a badge on a's holder entry, none on b's
        doc = json.loads(http(swarm, "/api/v1/cluster"))
        holders = {h["service"]: h for n in doc["nodes"] for g in n["gpus"]
                   for h in g["holders"] if g["uuid"] == gpu}
        assert holders["os_a"]["over_share"] is True
        assert holders["os_b"]["over_share"] is False

    def audit_says() -> None:
        res = run_cli("audit", "--config", str(env["cfg"]), "--json")
        found = [f for f in json.loads(res.stdout)["findings"] if f["kind"] == "over-share"]
        assert sorted(f["subject"] for f in found) == ["os_a", "os_c"], found

    for check in (metrics_say, map_says, audit_says):
        eventually(check, 30, check.__name__)
    # restart: after the window, a's task only; b keeps its container
    swarm.wait_for(lambda: (lambda ts: ts and ts[0]["ID"] != ta["ID"])(
        tasks_running(swarm, "os_a")), WINDOW_S + 60, "os_a restarted")
    t_restarted = time.monotonic() - t1
    (tb2,) = tasks_running(swarm, "os_b")
    assert tb2["ID"] == tb["ID"]
    assert [t["ID"] for t in tasks_running(swarm, "os_c")] == [tc["ID"]]
    wait_log(LOG, "over-share restart of os_c on gpu-node-1 not done: opted out")
    (ta2,) = wait_running(swarm, "os_a", 1)
    assert ta2["NodeID"] == ta["NodeID"] and held_gpu(swarm, "os_a") == gpu
    for t in (ta2, tb2):  # docker inspect of every replica: same GPU, same share
        e = container_env(swarm, t)
        assert e["NVIDIA_VISIBLE_DEVICES"] == gpu and e["CUDA_DEVICE_MEMORY_LIMIT"] == "40960m"
    print(f"\ntimings: deploy->running {t_running:.1f}s, over-share->log {t_logged:.1f}s, "
          f"over-share->a restarted {t_restarted:.1f}s (window {WINDOW_S:.0f}s)")


def test_a_node_naming_a_victim_restarts_nothing(swarm: SwarmCluster,
                                                 env: dict[str, Any]) -> None:
    """gpu-node-1's agent lies: lines naming os_b (a running 0.5 share, the victim) at
    80,000 MiB, one from no container, one from os_c's container (another service on
    that node). Swarm's task list says neither is os_b's: both are unattributed, os_b is
    never over its share, and its gate and task stay through more than a window."""
    (tb,) = wait_running(swarm, "os_b", 1, timeout=90)
    (tc,) = wait_running(swarm, "os_c", 1, timeout=90)
    gpu = held_gpu(swarm, "os_b")
    c_cid = tc["Status"]["ContainerStatus"]["ContainerID"]
    claim = {"service": "os_b", "task": tb["ID"]}
    env["procs"].write_text(json.dumps({gpu: [
        {"pid": 4_000_001, "used_mib": 80000, "forge": {**claim, "container": ""}},
        {"pid": pid_of(swarm, tc), "used_mib": 80000, "forge": {**claim, "container": c_cid}},
    ]}))
    t0 = time.monotonic()
    swarm.wait_for(lambda: LOG.read_text().count("unattributed GPU process") >= 2, 30,
                   "the daemon's unattributed lines")
    wait_log(LOG, "named 'os_b' by the node", "no container id",
             "its container is a task of os_c, not of os_b")

    def metrics_say() -> None:
        metrics = http(swarm, "/metrics")
        assert any(ln.startswith("swarmgpu_unattributed_gpu_memory_mib") and "gpu-node-1" in ln
                   and ln.endswith(" 160000.0") for ln in metrics.splitlines()), \
            metrics[-3000:]

    def map_says() -> None:
        doc = json.loads(http(swarm, "/api/v1/cluster"))
        (g,) = [g for n in doc["nodes"] for g in n["gpus"] if g["uuid"] == gpu]
        assert {x["pid"] for x in g["unattributed"]} == {4_000_001, pid_of(swarm, tc)}

    def audit_says() -> None:
        res = run_cli("audit", "--config", str(env["cfg"]), "--json")
        kinds = {(f["kind"], f["subject"]) for f in json.loads(res.stdout)["findings"]}
        assert ("unattributed-gpu-process", "gpu-node-1") in kinds
        assert ("over-share", "os_b") not in kinds

    for check in (metrics_say, map_says, audit_says):
        eventually(check, 30, check.__name__)
    # more than a whole window later: the victim's gate and task are where they were
    time.sleep(max(0.0, WINDOW_S + 8 - (time.monotonic() - t0)))
    assert "over its GPU share: service os_b" not in LOG.read_text()
    assert "restart of os_b" not in LOG.read_text()
    nid = swarm.node("gpu-node-1").node_id
    labels = swarm.client(swarm.manager).api.inspect_node(nid)["Spec"]["Labels"] or {}
    assert labels.get(f"{P}service.os_b") == "true"
    assert [t["ID"] for t in tasks_running(swarm, "os_b")] == [tb["ID"]]
