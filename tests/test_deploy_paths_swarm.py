"""Deploy paths on the real test swarm: the tasks each makes for a deploy, two re-deploys
with one env change, and a re-deploy without a change, and whether any task ever ran
without its device list (every container's environment is read while it exists).

- ``render``: ``swarmgpu render FILE | docker stack deploy -c -`` (the reference);
- ``hold``: the annotated file as written, with the hold constraint
  (``node.labels.swarmgpu.hold==true``), ``docker stack deploy -c FILE``;
- ``portainer``: the same file as Portainer's stack editor deploys it (its command
  line: ``docker stack deploy --prune --with-registry-auth --compose-file FILE NAME``
  from the file's directory, no pipe);
- ``gate``: the file as written with the gate constraint and env template instead of
  the hold (the form ``stacks/examples/`` used before the hold);
- ``labels``: the file with its ``swarmgpu.*`` labels only.

The first three are asserted; the last two are measured for docs/deploy.md's table.
Figures: artifacts/deploy-paths.json.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import GPU_NODES, LOGS, cfg_file, run_cli, start_daemon, stop
from support.paths import REPO
from support.swarm_harness import SwarmCluster
from support.task_watch import Seen, TaskWatch

from swarmgpu.manager.placement import env_template, gate_constraint, hold_constraint
from swarmgpu.manager.services.sharing import env_lines

pytestmark = pytest.mark.swarm
P = "swarmgpu."
UUIDS = {u for n in GPU_NODES.values() for g in n.facts().gpus
         for u in (g.uuid, *(m.uuid for m in g.mig_devices))}
PATHS = ("render", "hold", "portainer", "gate", "labels")
STEPS = ("deploy", "re-deploy 1", "re-deploy 2", "re-deploy, no change")
ARTIFACT = REPO / "artifacts" / "deploy-paths.json"


def stack_doc(path: str, stack: str, version: int) -> dict[str, Any]:
    """The file an operator writes for ``path``: one 1-GPU service ``m``; the hold paths
    also a half-GPU service ``h`` (its container is told its share)."""
    services: dict[str, Any] = {}
    for name, labels in (("m", {"swarmgpu.gpus": "1"}),
                         *((("h", {"swarmgpu.gpu-fraction": "0.5"}),)
                           if path in ("hold", "portainer") else ())):
        env = [f"VERSION={version}"]
        constraints: list[str] = []
        if path in ("hold", "portainer"):
            constraints = [hold_constraint(P)]
        elif path == "gate":
            constraints = [gate_constraint(P, f"{stack}_{name}")]
            env += [env_template(P), "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
            if "swarmgpu.gpu-fraction" in labels:
                env += list(env_lines(P))
        services[name] = {
            "image": "local/busybox:latest", "command": ["sleep", "3600"],
            "environment": env, "stop_grace_period": "1s",
            "deploy": {"labels": labels, "placement": {"constraints": constraints},
                       "restart_policy": {"condition": "any", "delay": "1s"}},
        }
    return {"version": "3.8", "services": services}


def deploy(swarm: SwarmCluster, path: str, stack: str, version: int, tmp: Path,
           cfg: Path) -> None:
    d = tmp / path
    d.mkdir(exist_ok=True)
    f = d / f"{stack}.yml"
    f.write_text(json.dumps(stack_doc(path, stack, version), indent=1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["DOCKER_CONFIG"] = str(swarm.base / "cli-config")
    docker = ["docker", "-H", swarm.manager.docker_host]
    if path == "render":  # the reference: rendered, piped
        r = run_cli("render", str(f), "-n", stack, "--config", str(cfg))
        assert r.returncode == 0, r.stderr
        res = subprocess.run([*docker, "stack", "deploy", "--resolve-image", "never", "-c",
                              "-", stack], input=r.stdout, capture_output=True, text=True,
                             env=env, timeout=60, check=False)
    elif path == "portainer":  # Portainer's own command line (no registry here: never)
        res = subprocess.run([*docker, "stack", "deploy", "--prune", "--with-registry-auth",
                              "--resolve-image", "never", "--compose-file", str(f), stack],
                             cwd=d, capture_output=True, text=True, env=env, timeout=60,
                             check=False)
    else:
        res = subprocess.run([*docker, "stack", "deploy", "--resolve-image", "never", "-c",
                              str(f), stack], capture_output=True, text=True, env=env,
                             timeout=60, check=False)
    assert res.returncode == 0, res.stderr


def has_devices(s: Seen) -> bool:
    devs = (s.env or {}).get("NVIDIA_VISIBLE_DEVICES", "")
    return bool(devs) and set(devs.split(",")) <= UUIDS


def converged(w: TaskWatch, svc: str, version: int, devices: bool) -> bool:
    """The newest task that ran runs version ``version`` (``devices``: with its device
    list)."""
    ts = [s for s in w.of(svc) if "running" in s.states and s.env is not None]
    return bool(ts) and (ts[-1].env or {}).get("VERSION") == str(version) and (
        not devices or has_devices(ts[-1]))


def stack_of(path: str) -> str:
    return f"p{path[:3]}"


def run_path(swarm: SwarmCluster, path: str, tmp: Path, cfg: Path) -> dict[str, Any]:
    stack = stack_of(path)
    names = [f"{stack}_m", *([f"{stack}_h"] if path in ("hold", "portainer") else [])]
    out: dict[str, Any] = {"path": path, "services": {}}
    with TaskWatch(swarm, names) as w:
        before = {n: 0 for n in names}
        for step, version in zip(STEPS, (1, 2, 3, 3), strict=True):
            deploy(swarm, path, stack, version, tmp, cfg)
            for n in names:
                # The gate path's re-deploys run a task with NVIDIA_VISIBLE_DEVICES=void
                # (measured, not waited out: nothing replaces it).
                swarm.wait_for(functools.partial(converged, w, n, version, path != "gate"),
                               90, f"{n} running version {version} ({path})")
            w.settle(8)  # several daemon cycles: a second replacement would show here
            for n in names:
                seen = w.of(n)
                row = out["services"].setdefault(n, {"steps": []})
                row["steps"].append({
                    "step": step, "tasks": len(seen) - before[n],
                    "ran": sum(s.ran for s in seen[before[n]:]),
                    "without_devices": sum(s.ran and not has_devices(s)
                                           for s in seen[before[n]:])})
                before[n] = len(seen)
        for n in names:
            seen = w.of(n)
            out["services"][n]["tasks"] = [
                {"id": s.task_id[:12], "states": sorted(s.states), "ran": s.ran,
                 "devices": (s.env or {}).get("NVIDIA_VISIBLE_DEVICES"),
                 "version": (s.env or {}).get("VERSION"),
                 "fraction": (s.env or {}).get("SWARMGPU_GPU_FRACTION")} for s in seen]
            out["services"][n]["unread"] = {k[:12]: v for k, v in w.unread.items()
                                            if any(s.task_id == k for s in seen)}
    swarm.remove_stack(stack)
    return out


@pytest.fixture(scope="module")
def measured(swarm: SwarmCluster, agents: dict[str, Any],
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("paths")
    cfg = cfg_file(tmp, swarm, sync={"interval_s": 2})
    log = LOGS / "deploy-paths-daemon.log"
    proc = start_daemon(swarm, cfg, log)
    results: dict[str, dict[str, Any]] = {}
    try:
        for path in PATHS:
            t0 = time.monotonic()
            results[path] = run_path(swarm, path, tmp, cfg)
            results[path]["wall_s"] = round(time.monotonic() - t0, 1)
    finally:
        stop(proc)
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        ARTIFACT.write_text(json.dumps(results, indent=1))
    results["_log"] = {"text": log.read_text()}
    return results


def steps(m: dict[str, dict[str, Any]], path: str, svc: str, key: str) -> list[int]:
    return [s[key] for s in m[path]["services"][svc]["steps"]]


def test_render_makes_one_task_per_deploy(measured: dict[str, dict[str, Any]]) -> None:
    """The reference: a deploy and two re-deploys with one env change make exactly 3
    tasks, each running with its devices; a re-deploy without a change makes none."""
    assert steps(measured, "render", "pren_m", "tasks") == [1, 1, 1, 0], measured["render"]
    assert steps(measured, "render", "pren_m", "without_devices") == [0, 0, 0, 0]


@pytest.mark.parametrize("path", ["hold", "portainer"])
def test_as_written_never_runs_without_devices(measured: dict[str, dict[str, Any]],
                                               path: str) -> None:
    """The annotated file as written, with the hold: one container per deploy and
    re-deploy (3 for a deploy and two re-deploys), none ever without its device list or
    its share. Each deploy also makes one task that never runs: the one Swarm makes from
    the file, held until the daemon replaces the hold with the gate (docs/deploy.md says
    why Swarm allows no fewer)."""
    stack = stack_of(path)
    for svc in (f"{stack}_m", f"{stack}_h"):
        row = measured[path]["services"][svc]
        assert not row["unread"], row
        assert steps(measured, path, svc, "ran") == [1, 1, 1, 1], row
        assert sum(steps(measured, path, svc, "ran")[:3]) == 3
        assert steps(measured, path, svc, "without_devices") == [0, 0, 0, 0], row
        assert steps(measured, path, svc, "tasks") == [2, 2, 2, 2], row
        assert all(t["version"] in ("1", "2", "3") for t in row["tasks"] if t["ran"])
    half = measured[path]["services"][f"{stack}_h"]["tasks"]
    assert all(t["fraction"] == "0.5" for t in half if t["ran"]), half
    log = measured["_log"]["text"]
    assert "decision (place: placement of its waiting task(s)" in log or \
        "decision (place: placement of its new task(s)" in log


def test_other_paths_measured(measured: dict[str, dict[str, Any]]) -> None:
    """The gate-in-file and labels-only paths are measured for the table (each step
    converged to its version, or the wait above failed)."""
    for path in ("gate", "labels"):
        row = measured[path]["services"][f"{stack_of(path)}_m"]
        assert len(row["steps"]) == len(STEPS), row
