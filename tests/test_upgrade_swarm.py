"""An upgrade restarts nothing: a daemon of an earlier landed release places four stacks
on the real test swarm, this tree's daemon replaces it, and every task keeps its ID.

The old release runs from its own source, taken from this repository's history
(``git archive`` of the commit: CI clones with full history; a shallow clone fetches the
commit, and a clone without it fails here, naming the commit, never skips). Two
releases: two landings back (293896d: the flat layout, agents over plain HTTP) and the
last one (ad81f4e). Their stacks are written as each release's docs wrote them, one of
them with its ``swarmgpu.*`` labels only (adopted by the old daemon).

What the new daemon would change in a running task's spec (a newer release's env
lines) is held back and listed by ``plan`` and ``audit``; ``swarmgpu apply --service``
writes it, restarting that task once.
"""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import (
    GPU_NODES,
    LOGS,
    PLAIN_AGENTS,
    cfg_file,
    kwargs_for_logs,
    run_cli,
    start_agent,
    start_daemon,
    stop,
)
from support.paths import REPO
from support.swarm_harness import SwarmCluster

from swarmgpu.manager.placement import env_template, env_template_per_node, gate_constraint
from swarmgpu.manager.services.sharing import env_lines

pytestmark = pytest.mark.swarm
P = "swarmgpu."
UUIDS = {u for n in GPU_NODES.values() for g in n.facts().gpus
         for u in (g.uuid, *(m.uuid for m in g.mig_devices))}
RELEASES = {  # commit -> (agents over plain HTTP, the env lines its docs gave a share)
    "293896d0bd8b162c973bff5673df1a4d527ee83d": (True, False),
    "ad81f4e18747b846521d114340207d41832ecb02": (False, True),
}


def old_tree(commit: str, dest: Path) -> Path:
    """The release's ``swarmgpu`` package, from this repository's history."""
    def have() -> bool:
        return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
                              capture_output=True, check=False).returncode == 0

    if not have():  # a shallow clone: fetch the commit from where it was cloned
        subprocess.run(["git", "-C", str(REPO), "fetch", "--quiet", "origin", commit],
                       capture_output=True, check=False, timeout=120)
    if not have():
        pytest.fail(f"commit {commit} is not in {REPO} and could not be fetched: this test "
                    "runs an earlier release from the repository's history (clone with "
                    "full history, as .ci/run's clone does)", pytrace=False)
    blob = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit,
                           "swarmgpu"], capture_output=True, check=True, timeout=120).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def stacks(plain: bool, share_env: bool) -> dict[str, dict[str, Any]]:
    """Four stacks as the release's docs wrote them: stack -> its one service ``s``."""
    tmpl = env_template_per_node(P) if plain else env_template(P)
    out: dict[str, dict[str, Any]] = {}
    for stack, labels, written in (
            ("uw", {"swarmgpu.gpus": "1"}, True),
            ("un", {"swarmgpu.gpus": "2", "swarmgpu.topology": "nvlink"}, True),
            ("uh", {"swarmgpu.gpu-fraction": "0.5"}, True),
            ("ua", {"swarmgpu.gpus": "1"}, False)):  # labels only: adopted
        env = ["MODEL=m"]
        constraints: list[str] = []
        if written:
            env += [tmpl, "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
            if share_env and "swarmgpu.gpu-fraction" in labels:
                env += list(env_lines(P))
            constraints = [gate_constraint(P, f"{stack}_s")]
        out[stack] = {"version": "3.8", "services": {"s": {
            "image": "local/busybox:latest", "command": ["sleep", "3600"],
            "environment": env, "stop_grace_period": "1s",
            "deploy": {"labels": labels, "placement": {"constraints": constraints},
                       "restart_policy": {"condition": "any", "delay": "1s"}}}}}
    return out


def tasks_of(api: Any, svc: str) -> list[dict[str, Any]]:
    return list(api.tasks(filters={"service": svc}))


def running(api: Any, svc: str) -> list[dict[str, Any]]:
    return [t for t in tasks_of(api, svc)
            if t["DesiredState"] == "running" and t["Status"]["State"] == "running"]


def devices(swarm: SwarmCluster, t: dict[str, Any]) -> list[str]:
    node = swarm.node(t["NodeID"])
    env = swarm.client(node).api.inspect_container(
        t["Status"]["ContainerStatus"]["ContainerID"])["Config"]["Env"]
    found: str = dict(e.split("=", 1) for e in env).get("NVIDIA_VISIBLE_DEVICES", "")
    return found.split(",")


def placed(swarm: SwarmCluster, svc: str) -> bool:
    api = swarm.client(swarm.manager).api
    ts = running(api, svc)
    return len(ts) == 1 and set(devices(swarm, ts[0])) <= UUIDS


def replaced(swarm: SwarmCluster, svc: str, old: set[str]) -> bool:
    ts = running(swarm.client(swarm.manager).api, svc)
    return len(ts) == 1 and ts[0]["ID"] not in old and set(devices(swarm, ts[0])) <= UUIDS


def start_old_daemon(swarm: SwarmCluster, tree: Path, cfg: Path, log: Path) -> Any:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DOCKER_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    return swarm.exec_in_netns(
        swarm.manager, [sys.executable, "-m", "swarmgpu.cli", "run", "--config", str(cfg)],
        cwd=str(tree), env=env, **kwargs_for_logs(log))


@pytest.mark.parametrize("commit", list(RELEASES), ids=lambda c: c[:7])
def test_upgrade_keeps_every_task(swarm: SwarmCluster, commit: str, tmp_path: Path) -> None:
    plain, share_env = RELEASES[commit]
    tree = old_tree(commit, tmp_path / "old")
    api = swarm.client(swarm.manager).api
    # Keys every release reads (an older one refuses a key it does not know); one state
    # directory, as an upgrade in place keeps it.
    (tmp_path / "old-cfg").mkdir()
    old_cfg = tmp_path / "old-cfg" / "config.yml"
    old_cfg.write_text(json.dumps({
        "docker_host": swarm.manager.docker_host, "state_dir": str(tmp_path / "state"),
        "agents": {"timeout_s": 2}, "sync": {"interval_s": 2},
        "http": {"listen": "127.0.0.1:0"}}))
    (tmp_path / "new-cfg").mkdir()
    new_cfg = cfg_file(tmp_path / "new-cfg", swarm, sync={"interval_s": 2},
                       state_dir=str(tmp_path / "state"),
                       **({"agents": PLAIN_AGENTS} if plain else {}))
    agents = [start_agent(swarm, h, secure=not plain) for h in GPU_NODES]
    log = LOGS / f"upgrade-{commit[:7]}.log"
    LOGS.mkdir(parents=True, exist_ok=True)
    log.write_text("")  # this run's only: the checks below read it
    daemon = start_old_daemon(swarm, tree, old_cfg, log)
    names = [f"{st}_s" for st in stacks(plain, share_env)]
    try:
        for st, doc in stacks(plain, share_env).items():
            f = tmp_path / f"{st}.yml"
            f.write_text(json.dumps(doc))
            swarm.cli(swarm.manager, "stack", "deploy", "--resolve-image", "never", "-c",
                      str(f), st)
        for n in names:
            swarm.wait_for(functools.partial(placed, swarm, n), 120,
                           f"{n} placed by the release {commit[:7]}")
        time.sleep(6)  # the old daemon settles
        before = {n: {t["ID"] for t in tasks_of(api, n)} for n in names}
        ids = {n: {t["ID"] for t in running(api, n)} for n in names}
        stop(daemon)
        with open(log, "a") as fh:
            fh.write(f"--- the old daemon ({commit[:7]}) stopped; this tree's starts ---\n")
        daemon = start_daemon(swarm, new_cfg, log)
        time.sleep(14)  # several cycles (2 s each, and events)
        after = {n: {t["ID"] for t in tasks_of(api, n)} for n in names}
        assert {n: {t["ID"] for t in running(api, n)} for n in names} == ids, \
            f"a task was restarted by the upgrade; see {log}"
        assert after == before, f"the upgrade made new tasks: {after} vs {before}"
        text = log.read_text().split("this tree's starts", 1)[1]
        assert "decision (" not in text, text[-3000:]
        # What it would change is held back, and listed by plan and audit.
        plan = json.loads(run_cli("plan", "--config", str(new_cfg), "--json").stdout)
        held = {s["name"]: s.get("held", []) for s in plan["services"]}
        audit = json.loads(run_cli("audit", "--config", str(new_cfg), "--json").stdout)
        listed = {f["subject"] for f in audit["findings"] if f["kind"] == "held-change"}
        assert listed == {n for n, h in held.items() if h}, (held, audit["findings"])
        if not share_env:  # the share's env lines came after this release
            assert any("SWARMGPU_GPU_FRACTION" in c for c in held["uh_s"]), held
        # The operator's word: the held change is written, that task restarts once.
        for n in sorted(n for n, h in held.items() if h):
            res = run_cli("apply", "--service", n, "--config", str(new_cfg))
            assert res.returncode == 0 and f"{n}: written: " in res.stdout, \
                res.stdout + res.stderr
            swarm.wait_for(functools.partial(replaced, swarm, n, ids[n]), 60,
                           f"{n} restarted once with its held changes")
        if not share_env:
            (t,) = running(api, "uh_s")
            env = swarm.client(swarm.node(t["NodeID"])).api.inspect_container(
                t["Status"]["ContainerStatus"]["ContainerID"])["Config"]["Env"]
            assert "SWARMGPU_GPU_FRACTION=0.5" in env, env
        time.sleep(6)
        plan = json.loads(run_cli("plan", "--config", str(new_cfg), "--json").stdout)
        assert not any(s.get("held") for s in plan["services"]), plan["services"]
    finally:
        for st in stacks(plain, share_env):
            swarm.remove_stack(st)
        time.sleep(4)  # the daemon releases their gates and ledger entries
        stop(daemon)
        for a in agents:
            stop(a)
