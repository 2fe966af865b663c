"""Shared GPUs on the real test swarm: what each container is told of its share,
read back with `docker inspect` on the dockerd of the node it runs on."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import ModuleDaemon
from support.swarm_harness import SwarmCluster
from support.swarm_services import container_env, deploy, wait_running

from swarmgpu.manager.services.sharing import env_lines

pytestmark = pytest.mark.swarm
P = "swarmgpu."
SHARE_VARS = ("SWARMGPU_GPU_FRACTION", "SWARMGPU_GPU_MEMORY_MIB", "CUDA_DEVICE_MEMORY_LIMIT",
              "CUDA_DEVICE_SM_LIMIT")


DAEMON = ModuleDaemon("sharing-daemon.log", {"sync": {"interval_s": 2}})


def test_half_of_a_40gib_gpu_is_told_its_share_and_a_whole_gpu_beside_it_nothing(
        swarm: SwarmCluster, daemon: dict[str, Any]) -> None:
    a100 = {"swarmgpu.gpu-product": "*A100*"}
    deploy(swarm, daemon["tmp"], "share", {
        "half": {"labels": {**a100, "swarmgpu.gpu-fraction": "0.5"}},
        # the whole-GPU service carries the same lines, as a stack sharing one env
        # anchor would: they must come out empty (HAMi-core: no limit)
        "whole": {"labels": {**a100, "swarmgpu.gpus": "1"}, "env": list(env_lines(P))},
    })
    (half,) = wait_running(swarm, "share_half", 1, timeout=90)
    (whole,) = wait_running(swarm, "share_whole", 1, timeout=90)
    env = container_env(swarm, half)
    assert swarm.node(half["NodeID"]).hostname == "gpu-node-1"  # the 40GB A100s
    assert {k: env[k] for k in SHARE_VARS} == {  # half of their 40537 MiB, floored
        "SWARMGPU_GPU_FRACTION": "0.5", "SWARMGPU_GPU_MEMORY_MIB": "20268",
        "CUDA_DEVICE_MEMORY_LIMIT": "20268m", "CUDA_DEVICE_SM_LIMIT": "50"}
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    wenv = container_env(swarm, whole)
    assert swarm.node(whole["NodeID"]).hostname == "gpu-node-1"
    assert {k: wenv[k] for k in SHARE_VARS} == dict.fromkeys(SHARE_VARS, "")
    assert wenv["NVIDIA_VISIBLE_DEVICES"] != env["NVIDIA_VISIBLE_DEVICES"]
    print("\nshare_half env:", {k: env[k] for k in (*SHARE_VARS, "NVIDIA_VISIBLE_DEVICES")})
    print("share_whole env:", {k: wenv[k] for k in (*SHARE_VARS, "NVIDIA_VISIBLE_DEVICES")})
