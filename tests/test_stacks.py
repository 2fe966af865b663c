"""The stack files people copy: stacks/swarmgpu.yml (swarmgpu deployed on Swarm) and
stacks/examples/*.yml (annotated GPU services).

Each parses as YAML, `docker stack config` accepts it (when the CLI has that command),
every example's request labels parse, its gate constraint and env template are exactly
the documented ones (or it carries the hold, to be deployed as written), and `swarmgpu
render` places it on a small cluster made of the test swarm's two GPU machines
(tests/support/gpu_nodes.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.gpu_nodes import GPU_NODES
from support.paths import REPO

from swarmgpu.core.config import load_config
from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.commands.render import render_stack
from swarmgpu.manager.placement import ORDER_ENV, env_template, gate_constraint, hold_constraint
from swarmgpu.manager.services.requests import GpuRequest, RequestError, parse_all
from swarmgpu.manager.services.sharing import env_lines
from swarmgpu.swarm.client import SwarmNode
from swarmgpu.swarm.labels import desired_labels

P = "swarmgpu."
STACKS = REPO / "stacks"
# examples/hami/ holds the ones that need a node set-up (HAMi-core) the demo swarm lacks
EXAMPLES = sorted((STACKS / "examples").rglob("*.yml"))
ALL_STACKS = [STACKS / "swarmgpu.yml", *EXAMPLES]


def _id(p: Path) -> str:
    return str(p.relative_to(STACKS))


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), (
        f"{path}: not a stack (no top-level services)")
    return data


def annotated(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services with a swarmgpu request label."""
    out = {}
    for name, svc in stack["services"].items():
        labels = (svc.get("deploy") or {}).get("labels") or {}
        if any(str(k).startswith(P) for k in labels):
            out[name] = svc
    return out


def test_there_are_examples() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"llm-nvlink", "shared-gpu", "mig-slice", "pinned-pair"} <= names, names


@pytest.mark.parametrize("path", ALL_STACKS, ids=_id)
def test_stack_parses(path: Path) -> None:
    load(path)


@cache
def _has_stack_config() -> bool:
    if shutil.which("docker") is None:
        return False
    res = subprocess.run(["docker", "stack", "config", "--help"], capture_output=True,
                         text=True, check=False, timeout=30)
    return res.returncode == 0


@pytest.mark.parametrize("path", ALL_STACKS, ids=_id)
def test_docker_stack_config_accepts(path: Path, tmp_path: Path) -> None:
    if not _has_stack_config():
        pytest.skip("this docker CLI has no `docker stack config` (needs 20.10+)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["DOCKER_CONFIG"] = str(tmp_path)  # never the user's contexts
    res = subprocess.run(["docker", "stack", "config", "-c", path.name], cwd=path.parent,
                         env=env, capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 0, f"docker stack config rejects {path}: {res.stderr}"
    assert "services:" in res.stdout


def test_deploy_config_is_valid() -> None:
    cfg = load_config(STACKS / "swarmgpu-config.yml", env={})
    assert cfg.agents.port == 9401


def test_swarmgpu_stack_shape() -> None:
    """The agent cannot be placed by swarmgpu's own labels (chicken and egg)."""
    services = load(STACKS / "swarmgpu.yml")["services"]
    agent, daemon = services["agent"], services["daemon"]
    assert agent["deploy"]["mode"] == "global"
    agent_cons = agent["deploy"]["placement"]["constraints"]
    assert not any(c.startswith(f"node.labels.{P}") for c in agent_cons), agent_cons
    assert agent["command"][0] == "agent" and "0.0.0.0:9401" in agent["command"]
    assert daemon["command"][0] == "run"
    assert "node.role==manager" in daemon["deploy"]["placement"]["constraints"]


def test_swarmgpu_stack_is_least_privilege_with_identity_on() -> None:
    """Issue 25: only docker-proxy mounts the Docker socket; the daemon reaches the
    engine through it; agent and daemon read their node's Swarm certificates (root in
    the container only for the 0600 key, no capabilities); identity is never off."""
    services = load(STACKS / "swarmgpu.yml")["services"]
    agent, daemon, proxy = services["agent"], services["daemon"], services["docker-proxy"]

    def mounts(svc: dict[str, Any]) -> list[str]:
        return [str(v) for v in svc.get("volumes", [])]

    socket_users = [n for n, svc in services.items()
                    if any("docker.sock" in m.split(":")[-1] for m in mounts(svc)
                           if not m.startswith("swarmgpu-proxy"))]
    assert socket_users == ["docker-proxy"], socket_users
    assert proxy["command"][0] == "docker-proxy"
    assert proxy["deploy"]["placement"]["constraints"] == ["node.role==manager"]
    assert "SWARMGPU_DOCKER_HOST=unix:///run/swarmgpu/docker.sock" in daemon["environment"]
    assert "swarmgpu-proxy:/run/swarmgpu" in mounts(daemon)
    for svc in (agent, daemon):
        assert svc["cap_drop"] == ["ALL"]
        assert any(m.endswith("/swarm/certificates:ro") for m in mounts(svc)), mounts(svc)
    cmd = agent["command"]
    assert cmd[cmd.index("--identity") + 1] == "swarm-pki"
    cfg = load_config(STACKS / "swarmgpu-config.yml", env={})
    assert cfg.agents.identity == "swarm-pki"
    assert cfg.agents.url_template.startswith("https://")


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_example_requests_parse_and_are_gated(path: Path) -> None:
    stack = load(path)
    services = annotated(stack)
    assert services, f"{path}: no service carries a swarmgpu request"
    for name, svc in services.items():
        labels = {str(k): str(v) for k, v in svc["deploy"]["labels"].items()}
        req = parse_all(labels, prefix=P)
        assert not isinstance(req, RequestError), f"{path} {name}: {req}"
        assert isinstance(req, GpuRequest)
        cons = svc["deploy"]["placement"]["constraints"]
        env = svc.get("environment") or []
        assert isinstance(env, list), f"{path} {name}: environment as a list, please"
        if hold_constraint(P) in cons:  # deployed as written: the daemon adds gate and env
            assert not any(c.startswith(f"node.labels.{P}service.") for c in cons), cons
            continue
        # The documented gate for `docker stack deploy -c FILE <file stem>`.
        assert gate_constraint(P, f"{path.stem}_{name}") in cons, (path, name, cons)
        assert env_template(P) in env and ORDER_ENV in env, (path, name, env)
        if req.is_fraction:  # the container is told its share (swarmgpu.manager.services.sharing)
            assert all(e in env for e in env_lines(P)), (path, name, env)
        if int(svc["deploy"].get("replicas", 1)) > 1:
            assert svc["deploy"]["placement"].get("max_replicas_per_node") == 1


def _cluster() -> tuple[list[SwarmNode], dict[str, NodeFacts]]:
    """The two GPU machines of the test swarm, as `swarmgpu render` would see them."""
    nodes, facts = [], {}
    for i, (host, fake) in enumerate(sorted(GPU_NODES.items())):
        f = fake.facts()
        node_id = f"node{i}{host.replace('-', '')}"
        labels = {**desired_labels(f), "topology.zone": "rack-a" if i == 0 else "rack-b"}
        nodes.append(SwarmNode(
            id=node_id, hostname=host, addr=f"10.0.0.{i + 1}", role="worker", state="ready",
            availability="active", labels=labels, engine_labels={}, version=1,
            generic_resources={"NVIDIA-GPU": tuple(g.uuid for g in f.gpus)},
            discrete_resources={}))
        facts[node_id] = f
    return nodes, facts


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_render_places_every_example(path: Path) -> None:
    nodes, facts = _cluster()
    stem = path.stem
    text, plan = render_stack(path.read_text(), stem, nodes, [], [], facts, prefix=P)
    by_name = {sp.name: sp for sp in plan.services}
    out = yaml.safe_load(text)
    for name, svc in annotated(load(path)).items():
        sp = by_name[f"{stem}_{name}"]
        assert sp.status == "placed", f"{path} {name}: {sp.status}: {sp.reason}"
        replicas = int(svc["deploy"].get("replicas", 1))
        assert len(sp.placements) == replicas
        rendered = out["services"][name]
        cons = rendered["deploy"]["placement"]["constraints"]
        # The gate the file already has is kept, not doubled.
        assert cons.count(gate_constraint(P, f"{stem}_{name}")) == 1
        devices = {k: v for k, v in rendered["deploy"]["labels"].items()
                   if k.startswith(f"{P}devices.")}
        assert len(devices) == replicas, devices
        for pl in sp.placements:
            uuids = devices[f"{P}devices.{pl.node_id}"].split(",")
            assert uuids == list(pl.uuids)
            if f"{P}mig" in svc["deploy"]["labels"]:
                assert all(u.startswith("MIG-") for u in uuids), uuids


def test_shared_gpu_example_shares_one_gpu() -> None:
    nodes, facts = _cluster()
    path = STACKS / "examples" / "shared-gpu.yml"
    _, plan = render_stack(path.read_text(), "shared-gpu", nodes, [], [], facts, prefix=P)
    held = {(pl.node_id, pl.uuids) for sp in plan.services for pl in sp.placements}
    assert len(held) == 1, f"0.25 + 0.25 + 0.5 of a GPU should fit one GPU: {held}"


# --- the Grafana dashboard --------------------------------------------------------------

DASHBOARD = STACKS / "grafana-dashboard.json"
# Exported by the daemon for per-service GPU use (labels service, node, node_id, gpu).
SERVICE_METRICS = {"swarmgpu_service_gpu_util", "swarmgpu_service_gpu_memory_used_mib"}
_PROMQL_WORDS = {"by", "sum", "avg", "max", "min", "count", "rate", "increase", "or",
                 "vector", "histogram_quantile", "le", "service", "node", "node_id", "gpu",
                 "kind", "outcome", "instance", "hostname", "label_replace"}


def _exposed_names() -> set[str]:
    """Every sample name the agents and the daemon expose."""
    from prometheus_client import generate_latest

    from swarmgpu.agent.metrics import AgentStats, render_metrics
    from swarmgpu.core.samples import GpuSample
    from swarmgpu.manager.cycle.daemon_metrics import DaemonMetrics

    names: set[str] = set()
    for fam in DaemonMetrics().registry.collect():
        names.add(fam.name)
        names.update(fam.name + s for s in ("_total", "_bucket", "_sum", "_count"))
    facts = GPU_NODES["gpu-node-1"].facts()
    from dataclasses import replace

    from swarmgpu.agent.metrics import DCGM_FIELDS

    every = {f.attr: 1.0 for f in DCGM_FIELDS}  # every dcgm-exporter field the agent serves
    samples = [replace(GpuSample(g.uuid, g.index, 1.0, 1, 1, 1.0, 1.0, 1.0), **every)
               for g in facts.gpus]
    text = render_metrics(facts, samples, AgentStats(facts_age_s=1, scrape_duration_s=0.1))
    text += generate_latest(DaemonMetrics().registry)
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{")[0].split(" ")[0])
    return names | SERVICE_METRICS


def test_dashboard_names_only_real_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    used = set()
    for e in exprs:
        bare = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^]]*\]', "", e)  # selectors, strings, ranges
        used |= {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare)
                 if w not in _PROMQL_WORDS}
    unknown = used - _exposed_names()
    assert not unknown, f"dashboard queries metrics nobody exports: {sorted(unknown)}"
    assert used >= SERVICE_METRICS, "per-service GPU panels missing"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_hami_example_mounts_what_doctor_checks() -> None:
    from swarmgpu.agent.doctor import HAMI_LIBS, HAMI_LOCK_DIR, HAMI_PRELOAD

    svc = load(STACKS / "examples" / "hami" / "shared-gpu-hami.yml")["services"]["vllm"]
    mounts = {m["source"]: m["target"] for m in svc["volumes"]}
    assert mounts == {"/" + HAMI_LIBS[0]: "/" + HAMI_LIBS[0],
                      "/" + HAMI_PRELOAD: "/etc/ld.so.preload",
                      "/" + HAMI_LOCK_DIR: "/" + HAMI_LOCK_DIR}


def _image_state_dir() -> tuple[int, int, int]:
    """(uid, gid, mode) the Dockerfile's runtime stage gives /var/lib/swarmgpu: what a
    new named volume mounted there takes (Docker copies the image directory's owner and
    mode onto it)."""
    text = (REPO / "Dockerfile").read_text()
    runtime = text[text.rindex("\nFROM "):].replace("\\\n", " ")
    own = re.search(r"chown (\d+):(\d+) /var/lib/swarmgpu\b", runtime)
    mode = re.search(r"chmod (0?[0-7]{3,4}) /var/lib/swarmgpu\b", runtime)
    assert own, "the Dockerfile no longer chowns /var/lib/swarmgpu"
    return int(own.group(1)), int(own.group(2)), int(mode.group(1), 8) if mode else 0o755


def test_the_stacks_daemon_can_write_its_state_dir() -> None:
    """The stack's daemon is uid 0 (gid 0) with every capability dropped, so no
    CAP_DAC_OVERRIDE: its state volume (agent last-seen times, GPU health hysteresis)
    must be writable by plain owner/group/other bits. A volume owned 10001:10001 0755
    was not: every cycle warned 'cannot save ...: Permission denied'."""
    daemon = load(STACKS / "swarmgpu.yml")["services"]["daemon"]
    assert "ALL" in daemon["cap_drop"]
    uid, _, group = str(daemon["user"]).partition(":")
    gid = int(group or 0)  # uid 0 without a group: root's, 0
    env = dict(str(e).split("=", 1) for e in daemon["environment"])
    state_dir = env.get("SWARMGPU_STATE_DIR", "/var/lib/swarmgpu")
    assert any(str(v).endswith(f":{state_dir}") for v in daemon["volumes"]), (
        f"the daemon's state dir {state_dir} is not a volume")
    owner, owner_gid, mode = _image_state_dir()
    writable = (mode & 0o300 == 0o300 if int(uid) == owner
                else mode & 0o030 == 0o030 if gid == owner_gid
                else mode & 0o003 == 0o003)
    assert writable, (f"{state_dir} is {owner}:{owner_gid} {mode:o} in the image: the "
                      f"daemon ({uid}:{gid}, no capabilities) cannot write it")


def test_the_daemon_and_proxy_run_on_a_read_only_root() -> None:
    """Both are root in their containers (the node key; the Docker socket): a read-only
    root filesystem keeps a compromised process from rewriting the image's code the
    healthcheck runs again, or planting files a later exec finds. Their writes go to
    volumes (state, the proxy's socket) and, for the daemon, to a tmpfs /tmp: the TLS
    key copy load_cert_chain reads from a path (swarm/identity.py), in memory, never on
    a volume (a type: tmpfs volume: the form docker stack deploy makes a Swarm mount of)."""
    services = load(STACKS / "swarmgpu.yml")["services"]
    for name in ("daemon", "docker-proxy"):
        assert services[name].get("read_only") is True, f"{name}: read_only: true expected"
    tmpfs = [v for v in services["daemon"]["volumes"]
             if isinstance(v, dict) and v.get("type") == "tmpfs"]
    assert [v["target"] for v in tmpfs] == ["/tmp"], services["daemon"]["volumes"]


@pytest.mark.parametrize("name", ["agent", "daemon", "docker-proxy"])
def test_an_update_that_fails_rolls_back_stop_first(name: str) -> None:
    """A new image or config whose task fails (or never turns healthy) is rolled back,
    not paused: Swarm's default, pause, left that node on the failing spec (the leader's
    manager without a daemon that acts) until someone ran `docker service rollback`.
    Stop-first both ways: start-first runs two daemons beside one leading engine, two
    proxies on one socket path, two agents on one host port."""
    deploy = load(STACKS / "swarmgpu.yml")["services"][name]["deploy"]
    update, rollback = deploy.get("update_config") or {}, deploy.get("rollback_config") or {}
    assert update.get("failure_action") == "rollback", update
    assert update.get("order") == "stop-first" and rollback.get("order") == "stop-first"
