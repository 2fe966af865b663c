"""swarmgpu on a real, local Swarm with no GPU: the whole product in one command.

Starts mgr-1 + gpu-node-1 (a DGX A100, GPU 0 in MIG mode) + gpu-node-2 (8x RTX 4090),
each a dockerd in its own network namespace, agents serving the real `nvidia-smi topo -m`
captures, the manager daemon, then deploys annotated stacks and shows what happened.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from support.gpu_nodes import GPU_NODES, start_agent, swarmgpu_env  # noqa: E402
from support.swarm_harness import SwarmCluster, gpu_resource_args  # noqa: E402

from swarmgpu.manager.placement import ORDER_ENV, env_template, gate_constraint  # noqa: E402

EXAMPLES = REPO / "stacks" / "examples"
# One request nothing here can satisfy, to show a pending request and its reason.
PENDING_STACK = {"version": "3.8", "services": {"huge": {
    "image": "local/busybox:latest", "command": ["sleep", "86400"],
    "environment": [env_template("swarmgpu."), ORDER_ENV],
    "deploy": {"labels": {"swarmgpu.gpus": "1", "swarmgpu.gpu-memory": "80GiB"},
               "placement": {"constraints": [gate_constraint("swarmgpu.", "demo_huge")]}}}}}


def offline_copy(path: Path) -> str:
    """An example stack as shipped, with its images swapped for the local busybox image
    (no registry here) and what needs the outside world (ports, volumes) left out."""
    stack = yaml.safe_load(path.read_text())
    for svc in stack["services"].values():
        svc["image"] = "local/busybox:latest"
        svc["command"] = ["sleep", "86400"]
        svc["stop_grace_period"] = "1s"
        for key in ("ports", "volumes", "healthcheck"):
            svc.pop(key, None)
        svc.get("deploy", {}).pop("resources", None)
    stack.pop("volumes", None)
    return json.dumps(stack, indent=1)


def cli(*args: str, cfg: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "swarmgpu.cli", *args, "--config", str(cfg)],
                         capture_output=True, text=True, env=swarmgpu_env(), check=False)
    return res.stdout + (res.stderr if res.returncode not in (0, 1) else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keep", action="store_true",
                    help="keep the swarm running (GPU map on http://127.0.0.1:9402/) "
                         "until Ctrl-C")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("the demo needs root (network namespaces, dockerd)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="swarmgpu-demo-"))
    print("starting a 3-node Swarm (one dockerd per network namespace)...", flush=True)
    cluster = SwarmCluster(managers=1, workers=2, log_dir=tmp / "logs", extra_args={
        h: gpu_resource_args(n.uuids()) for h, n in GPU_NODES.items()}).start()
    try:
        for h, n in GPU_NODES.items():
            start_agent(cluster, h)  # HTTPS with the node's own Swarm certificate
            print(f"  agent on {h}: {n.capture} as {n.product} (https, its node "
                  "certificate)", flush=True)
        # As the shipped stack does: the daemon reaches the engine only through
        # docker-proxy, which passes exactly the calls it makes (docs/security.md).
        proxy_sock = tmp / "docker.sock"
        proxy = subprocess.Popen(
            [sys.executable, "-m", "swarmgpu.cli", "docker-proxy", "--listen",
             f"unix://{proxy_sock}", "--upstream", cluster.manager.docker_host],
            env=swarmgpu_env(), stdout=open(tmp / "docker-proxy.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT)
        cluster.wait_for(proxy_sock.exists, 20, "docker-proxy's socket")
        # The shipped defaults (agents.identity swarm-pki: the daemon presents the
        # manager's certificate and checks each agent's) but for the addresses, and
        # agents.service: the demo starts its agents itself, not as a Swarm service.
        cfg = tmp / "config.yml"
        cfg.write_text(json.dumps({
            "docker_host": f"unix://{proxy_sock}", "state_dir": str(tmp / "state"),
            "sync": {"interval_s": 2}, "http": {"listen": "127.0.0.1:9402"},
            "agents": {"service": ""},
        }))
        # The daemon runs on the host: it reaches the manager's socket and every agent
        # through the test bridge, and its GPU map is on this machine's loopback.
        daemon = subprocess.Popen(
            [sys.executable, "-m", "swarmgpu.cli", "run", "--config", str(cfg)],
            env=swarmgpu_env(), stdout=open(tmp / "daemon.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT)
        print("daemon running; deploying stacks/examples/*.yml (docker stack deploy)...",
              flush=True)
        stacks = {p.stem: offline_copy(p) for p in sorted(EXAMPLES.glob("*.yml"))}
        stacks["demo"] = json.dumps(PENDING_STACK)
        for name, text in stacks.items():
            f = tmp / f"{name}.yml"
            f.write_text(text)
            cluster.cli(cluster.manager, "stack", "deploy", "--resolve-image", "never", "-c",
                        str(f), name)
            print(f"  {name}", flush=True)
        api = cluster.client(cluster.manager).api
        want = sum(int(s["deploy"].get("replicas", 1))
                   for t in stacks.values() for s in json.loads(t)["services"].values()) - 1
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            running = [t for t in api.tasks(filters={"desired-state": "running"})
                       if t["Status"]["State"] == "running"]
            if len(running) >= want:
                break
            time.sleep(1)
        time.sleep(3)
        print("\n$ swarmgpu status\n" + cli("status", cfg=cfg))
        print("$ swarmgpu plan\n" + cli("plan", cfg=cfg))
        print("$ swarmgpu audit\n" + cli("audit", cfg=cfg))
        print("what each container sees (docker inspect, NVIDIA_VISIBLE_DEVICES and a "
              "share's limits):")
        for t in sorted(running, key=lambda t: t["ServiceID"]):
            node = cluster.node(t["NodeID"])
            cid = t["Status"]["ContainerStatus"]["ContainerID"]
            env = cluster.client(node).api.inspect_container(cid)["Config"]["Env"]
            name = api.inspect_service(t["ServiceID"])["Spec"]["Name"]
            dev = next(e for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES="))
            # a shared GPU's share, as the container is told it (swarmgpu.manager.services.sharing)
            share = [e for e in env if e.startswith(("SWARMGPU_GPU_FRACTION=",
                                                     "CUDA_DEVICE_MEMORY_LIMIT="))
                     and not e.endswith("=")]
            print(f"  {name:<26} on {node.hostname}: {dev}"
                  + (f" ({' '.join(share)})" if share else ""))
        if args.keep:
            print("\nGPU map: http://127.0.0.1:9402/  (Ctrl-C to stop)")
            try:
                while daemon.poll() is None:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        return 0
    finally:
        print("\ntearing the demo swarm down...", flush=True)
        if "daemon" in locals():
            daemon.terminate()
            daemon.wait(20)
        if "proxy" in locals():
            proxy.terminate()
            proxy.wait(20)
        cluster.teardown()


if __name__ == "__main__":
    sys.exit(main())
