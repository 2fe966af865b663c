"""GPU access only through a grant, on the real test swarm (docs/security.md).

Beside a service placement granted one GPU of gpu-node-2 (``gr_llm``), services on
the same node that see GPUs without a grant: their own ``NVIDIA_VISIBLE_DEVICES=all``
(``rg_all``), an image whose env says ``all`` as CUDA images do, present on every engine
(``rg_img``), such an image only on the worker, which the manager's engine cannot read
(``rg_unk``), and a ``/dev/null`` mount under ``/var/run/nvidia-container-devices``
(``rg_mnt``); one with ``all`` on the manager, which is no GPU node (``rg_cpu``).

``swarmgpu audit`` names the four (exit 1) and neither the granted service nor the one
off the GPU nodes; `plan` and `status` list them; the daemon in report mode writes
nothing. Then two cycles of the real daemon with ``placement.ungranted: void``: the
first writes ``NVIDIA_VISIBLE_DEVICES=void`` into the three whose variable it is, the
second writes nothing; Swarm replaces their tasks, whose containers then say ``void``
(the image's ``all`` overridden by the service's line), and the granted service's task
and env stay as they were. The mount cannot be voided by an env write: still reported.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    LOGS,
    cfg_file,
    kwargs_for_logs,
    run_cli,
    start_daemon,
    stop,
    swarmgpu_env,
)
from support.swarm_harness import SwarmCluster, busybox_image_tar
from support.swarm_services import container_env, deploy, tasks_running, wait_running

from swarmgpu.manager.placement.envs import VOID_LINE, mount_target

pytestmark = pytest.mark.swarm
CUDA_LIKE = "local/cudalike:1"  # on every engine: the manager reads its env
WORKER_ONLY = "local/workeronly:1"  # only on gpu-node-2: unknown to the manager
CUDA_CHANGES = ['CMD ["sh"]', "ENV NVIDIA_VISIBLE_DEVICES=all", "ENV CUDA_VERSION=12.4.1",
                "ENV NVIDIA_REQUIRE_CUDA=cuda>=12.4"]  # as nvidia/cuda images set them
ON_2 = ["node.hostname==gpu-node-2"]
ROGUES = ("rg_all", "rg_img", "rg_unk", "rg_mnt")
P = "swarmgpu."
PROXY_LOG = LOGS / "grants-docker-proxy.log"


def _load(swarm: SwarmCluster, ref: str, hosts: list[str]) -> None:
    repo, tag = ref.rsplit(":", 1)
    tar = busybox_image_tar()
    for host in hosts:
        swarm.client(swarm.node(host)).api.import_image_from_data(
            tar, repository=repo, tag=tag, changes=CUDA_CHANGES)


def _rogue_stack() -> str:
    def svc(env: list[str], image: str = "local/busybox:latest",
            constraints: list[str] = ON_2, **extra: Any) -> dict[str, Any]:
        return {"image": image, "command": ["sleep", "3600"], "environment": env,
                "deploy": {"placement": {"constraints": constraints},
                           "restart_policy": {"condition": "any", "delay": "1s"}}, **extra}

    return json.dumps({"version": "3.8", "services": {
        "all": svc(["NVIDIA_VISIBLE_DEVICES=all", "MODEL=x"]),
        "img": svc([], CUDA_LIKE),
        "unk": svc([], WORKER_ONLY),
        "mnt": svc([], volumes=[{"type": "bind", "source": "/dev/null",
                                 "target": "/var/run/nvidia-container-devices/all"}]),
        "cpu": svc(["NVIDIA_VISIBLE_DEVICES=all"], constraints=["node.role==manager"]),
    }}, indent=1)


@pytest.fixture(scope="module")
def env(swarm: SwarmCluster, agents: dict[str, Any],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("grants")
    _load(swarm, CUDA_LIKE, ["mgr-1", "gpu-node-1", "gpu-node-2"])
    _load(swarm, WORKER_ONLY, ["gpu-node-2"])
    # Everything through the docker-proxy, as the shipped stack runs: the image reads,
    # the void write and the device mount are what it lets through.
    sock = tmp / "docker.sock"
    PROXY_LOG.write_text("")
    proxy = swarm.exec_in_netns(swarm.manager, [
        sys.executable, "-m", "swarmgpu.cli", "docker-proxy", "--listen", f"unix://{sock}",
        "--upstream", swarm.manager.docker_host], env=swarmgpu_env(),
        **kwargs_for_logs(PROXY_LOG))
    swarm.wait_for(lambda: sock.exists(), 20, "the proxy's socket")
    report = cfg_file(tmp, swarm, sync={"interval_s": 2}, docker_host=f"unix://{sock}")
    void = tmp / "void.yml"
    void.write_text(json.dumps({**json.loads(report.read_text()),
                                "placement": {"ungranted": "void"}}))
    log = LOGS / "grants-daemon.log"
    log.write_text("")
    daemon = start_daemon(swarm, report, log)
    state: dict[str, Any] = {"tmp": tmp, "report": report, "void": void, "daemon": daemon,
                             "sock": sock}
    yield state
    stop(state["daemon"])
    stop(proxy)


def _nothing_refused() -> None:
    """Every call the daemon and the commands made passed the proxy."""
    refused = [ln for ln in PROXY_LOG.read_text().splitlines() if "refused" in ln]
    assert not refused, refused[:3]


def _spec(swarm: SwarmCluster, name: str) -> dict[str, Any]:
    return dict(swarm.client(swarm.manager).api.inspect_service(name))


def _env_of(swarm: SwarmCluster, name: str) -> list[str]:
    return list(_spec(swarm, name)["Spec"]["TaskTemplate"]["ContainerSpec"].get("Env") or [])


def _audit(cfg: Path) -> tuple[int, dict[str, str]]:
    res = run_cli("audit", "--config", str(cfg), "--json")
    assert res.returncode in (0, 1), res.stderr
    out = json.loads(res.stdout)
    return res.returncode, {f["subject"]: f["message"] for f in out["findings"]
                            if f["kind"] == "ungranted-gpu-access"}


def test_ungranted_reported_then_voided_and_the_grant_kept(
        swarm: SwarmCluster, env: dict[str, Any]) -> None:
    deploy(swarm, env["tmp"], "gr", {"llm": {"labels": {"swarmgpu.gpus": "1"},
                                             "constraints": ON_2, "env": ["MODEL=llama"]}})
    f = env["tmp"] / "rg.yml"
    f.write_text(_rogue_stack())
    swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c", str(f), "rg")
    (llm,) = wait_running(swarm, "gr_llm", 1, timeout=90)
    for name in (*ROGUES, "rg_cpu"):
        wait_running(swarm, name, 1, timeout=60)
    llm_env = container_env(swarm, llm)
    assert llm_env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")  # the grant: one GPU
    tasks_before = {n: tasks_running(swarm, n)[0]["ID"] for n in ROGUES}
    env_before = _env_of(swarm, "rg_all")  # `docker stack deploy` sorts the lines
    assert sorted(env_before) == ["MODEL=x", "NVIDIA_VISIBLE_DEVICES=all"]

    # audit: the four need action (exit 1); the granted one and the CPU node's are fine
    code, found = _audit(env["report"])
    assert code == 1
    assert set(found) == set(ROGUES), found
    assert "NVIDIA_VISIBLE_DEVICES=all in its own env" in found["rg_all"]
    assert f"its image {CUDA_LIKE} sets NVIDIA_VISIBLE_DEVICES=all" in found["rg_img"]
    assert f"unknown: image {WORKER_ONLY} (it is not on the manager's engine)" in \
        found["rg_unk"]
    assert "/dev/null mount at /var/run/nvidia-container-devices/all" in found["rg_mnt"]
    assert all("on gpu-node-2" in m and "fix:" in m for m in found.values())

    # plan --json and status (the map's document) list them with reason and fix
    res = run_cli("plan", "--config", str(env["report"]), "--json")
    listed = {u["service"]: u for u in json.loads(res.stdout)["ungranted"]}
    assert set(listed) == set(ROGUES) and not listed["rg_unk"]["known"]
    assert listed["rg_all"]["voidable"] and not listed["rg_mnt"]["voidable"]
    res = run_cli("status", "--config", str(env["report"]), "--json")
    assert {u["service"] for u in json.loads(res.stdout)["ungranted"]} == set(ROGUES)
    text = run_cli("status", "--config", str(env["report"])).stdout
    assert "ungranted GPU access:" in text and "rg_all on gpu-node-2" in text

    # report mode (the default) wrote nothing: same env, same tasks, cycles later
    time.sleep(5)
    assert _env_of(swarm, "rg_all") == env_before
    assert {n: tasks_running(swarm, n)[0]["ID"] for n in ROGUES} == tasks_before
    stop(env["daemon"])

    # placement.ungranted: void, two cycles of the real daemon (through the proxy)
    versions = {}
    for cycle in (1, 2):
        res = run_cli("run", "--once", "--config", str(env["void"]))
        assert res.returncode == 0, res.stderr
        versions[cycle] = {n: _spec(swarm, n)["Version"]["Index"] for n in ROGUES}
        if cycle == 1:
            assert res.stderr.count("ungranted GPU access voided") == 3, res.stderr
    assert versions[1] == versions[2]  # the second cycle writes nothing: idempotent
    # only that line changed, in its place
    assert _env_of(swarm, "rg_all") == [VOID_LINE if x.startswith("NVIDIA_") else x
                                        for x in env_before]
    assert _env_of(swarm, "rg_img") == [VOID_LINE]
    assert _env_of(swarm, "rg_unk") == [VOID_LINE]
    assert _env_of(swarm, "rg_mnt") == []  # a mount: no env write can stop it

    # Swarm replaces the three tasks; their containers see void (the image's all overridden)
    for name in ("rg_all", "rg_img", "rg_unk"):
        (t,) = wait_running(swarm, name, 1, timeout=60, what=" with NVIDIA_VISIBLE_DEVICES=void",
                            each=lambda t: container_env(swarm, t).get(
                                "NVIDIA_VISIBLE_DEVICES") == "void")
        assert t["ID"] != tasks_before[name]
    assert tasks_running(swarm, "rg_mnt")[0]["ID"] == tasks_before["rg_mnt"]

    # the granted service beside them: same task, same env
    (llm_after,) = tasks_running(swarm, "gr_llm")
    assert llm_after["ID"] == llm["ID"]
    assert container_env(swarm, llm_after) == llm_env

    code, found = _audit(env["void"])
    assert set(found) == {"rg_mnt"} and code == 1
    _nothing_refused()


def _mounts_of(swarm: SwarmCluster, task: dict[str, Any]) -> dict[str, str]:
    """destination -> source of the task's container's bind mounts."""
    node = swarm.node(task["NodeID"])
    cid = task["Status"]["ContainerStatus"]["ContainerID"]
    got = swarm.client(node).api.inspect_container(cid)["Mounts"]
    return {m["Destination"]: m["Source"] for m in got if m.get("Type") == "bind"}


def test_grants_as_mounts_name_the_granted_gpus_in_the_mount(
        swarm: SwarmCluster, env: dict[str, Any]) -> None:
    """placement.grants: mounts: the daemon adds its /dev/null mount to a GPU service, and
    Swarm expands its target per task to the GPUs the ledger gives it (the same list as
    the env); a service without device lists gets a target outside the toolkit's root.
    `docker stack deploy` takes the templated target as written."""
    stop(env["daemon"])
    (env["tmp"] / "mounts").mkdir()
    cfg = cfg_file(env["tmp"] / "mounts", swarm, sync={"interval_s": 2},
                   placement={"grants": "mounts"}, docker_host=f"unix://{env['sock']}")
    daemon = start_daemon(swarm, cfg, LOGS / "grants-mounts-daemon.log")
    try:
        deploy(swarm, env["tmp"], "gm", {"pair": {"labels": {"swarmgpu.gpus": "2"},
                                                  "constraints": ["node.hostname==gpu-node-1"]}})
        f = env["tmp"] / "gm-plain.yml"
        f.write_text(json.dumps({"version": "3.8", "services": {"plain": {
            "image": "local/busybox:latest", "command": ["sleep", "3600"],
            "volumes": [{"type": "bind", "source": "/dev/null", "target": mount_target(P),
                         "read_only": True}],
            "deploy": {"placement": {"constraints": ["node.hostname==gpu-node-1"]}}}}}))
        swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c", str(f),
                  "gp")

        def mounted(t: dict[str, Any]) -> bool:
            return any(d.startswith("/var/run/nvidia-container-devices/")
                       for d in _mounts_of(swarm, t))

        (pair,) = wait_running(swarm, "gm_pair", 1, timeout=90, each=mounted,
                               what=" with the device mount")
        devices = container_env(swarm, pair)["NVIDIA_VISIBLE_DEVICES"]
        assert len(devices.split(",")) == 2 and devices.startswith("GPU-")
        assert _mounts_of(swarm, pair)[f"/var/run/nvidia-container-devices/{devices}"] == \
            "/dev/null"
        (plain,) = wait_running(swarm, "gp_plain", 1, timeout=60)
        assert _mounts_of(swarm, plain) == {"/var/run/swarmgpu-no-gpu": "/dev/null"}
        # the granted mount is no finding; the plain service's copy names no GPU either
        _, found = _audit(cfg)
        assert "gm_pair" not in found and "gp_plain" not in found
        _nothing_refused()
    finally:
        stop(daemon)
