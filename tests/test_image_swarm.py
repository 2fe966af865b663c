"""The container image, built offline and run on the real test swarm.

`scripts/build-image.sh` builds local/swarmgpu inside the test manager's dockerd (no
registry, `docker build --network=none`, wheels from the host); the image is copied to
the workers with `docker save | docker load`. Then the image runs the agent as a
global Swarm service on the GPU nodes (host network, facts from a Docker config per
node), `swarmgpu run --once` on the host syncs their facts into node labels, and the
daemon itself runs from the image as a non-root user with only the socket's group.

The first run on a machine pays for debootstrap (about 2 min, cached under
/var/cache/swarmgpu-ci); later runs import the cached base and rebuild (about 30 s).
Figures go to artifacts/image-build.json.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.gpu_nodes import GPU_NODES, PLAIN_AGENTS, cfg_file, labels_of, run_cli
from support.paths import REPO
from support.swarm_harness import NodeHandle, SwarmCluster

from swarmgpu.swarm.labels import desired_labels

pytestmark = pytest.mark.swarm

TAG = "test"
IMAGE = f"local/swarmgpu:{TAG}"
AGENT_PORT = 19401  # not 9401: other modules' agents use that port on the same nodes
CACHE = Path(os.environ.get("SWARMGPU_CI_CACHE", "/var/cache/swarmgpu-ci"))
ARTIFACT = REPO / "artifacts" / "image-build.json"
P = "swarmgpu."


def _ensure_debootstrap() -> None:
    """debootstrap is needed once, to make the base; skip only if it cannot be had."""
    if (CACHE / "debian-bookworm-python.tar").is_file() or shutil.which("debootstrap"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("debootstrap missing and cannot be installed here (needs root and apt-get)")
    res = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "debootstrap"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, check=False)
    if res.returncode != 0 or shutil.which("debootstrap") is None:
        pytest.skip(f"debootstrap could not be installed (apt-get rc {res.returncode}): "
                    f"{res.stderr.strip()[-400:]}")


def _docker(node: NodeHandle, *args: str) -> list[str]:
    return ["docker", "-H", node.docker_host, *args]


def _copy_image(src: NodeHandle, dests: list[NodeHandle]) -> None:
    """`docker save | docker load`: the nodes have no registry to pull from."""
    with tempfile.NamedTemporaryFile(suffix=".tar") as tar:
        subprocess.run(_docker(src, "save", "-o", tar.name, IMAGE), check=True,
                       capture_output=True, timeout=300)

        def load(node: NodeHandle) -> None:
            res = subprocess.run(_docker(node, "load", "-i", tar.name), capture_output=True,
                                 text=True, timeout=300, check=False)
            if res.returncode != 0:
                raise AssertionError(f"docker load on {node.name} failed: {res.stderr}")

        with ThreadPoolExecutor(max_workers=len(dests)) as pool:
            list(pool.map(load, dests))


@pytest.fixture(scope="module")
def image(swarm: SwarmCluster) -> Iterator[dict[str, float]]:
    """Build local/swarmgpu:test in the manager's engine, load it on every worker."""
    _ensure_debootstrap()
    cached_base = (CACHE / "debian-bookworm-python.tar").is_file()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env.update(DOCKER_HOST=swarm.manager.docker_host, PYTHON=sys.executable,
               DOCKER_CONFIG=str(swarm.base / "cli-config"))
    t0 = time.monotonic()
    res = subprocess.run(["bash", str(REPO / "scripts" / "build-image.sh"), TAG], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    build_s = time.monotonic() - t0
    assert res.returncode == 0, (
        f"scripts/build-image.sh failed (rc {res.returncode}):\n{res.stderr[-4000:]}")
    assert res.stdout.strip() == IMAGE
    t1 = time.monotonic()
    _copy_image(swarm.manager, swarm.workers)
    copy_s = time.monotonic() - t1
    size = int(subprocess.run(_docker(swarm.manager, "image", "inspect", "--format",
                                      "{{.Size}}", IMAGE),
                              capture_output=True, text=True, check=True).stdout)
    figures = {"build_s": round(build_s, 1), "base_was_cached": cached_base,
               "copy_to_workers_s": round(copy_s, 1), "image_bytes": size,
               "image_mb": round(size / 1e6, 1)}
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(json.dumps({**figures, "build_log_tail": res.stderr[-1500:]}, indent=1))
    print(f"\nimage figures: {figures}", file=sys.stderr)
    yield figures


def test_image_is_small_non_root_and_runs(swarm: SwarmCluster,
                                          image: dict[str, float]) -> None:
    cfg = json.loads(subprocess.run(_docker(swarm.manager, "image", "inspect", IMAGE),
                                    capture_output=True, text=True, check=True).stdout)[0]
    conf = cfg["Config"]
    assert conf["Entrypoint"] == ["swarmgpu"]
    assert conf["User"] == "10001:10001"
    # OCI annotations, filled by scripts/build-image.sh from pyproject.toml and git
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    labels = conf["Labels"]
    p = "org.opencontainers.image."
    assert labels[p + "version"] == project["version"]
    assert labels[p + "licenses"] == project["license"] == "Apache-2.0"
    assert labels[p + "source"] == project["urls"]["Source"]
    assert labels[p + "title"] == "swarmgpu" and labels[p + "description"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    assert labels[p + "revision"] == head
    assert image["image_bytes"] < 250e6, f"image grew to {image['image_mb']} MB"
    out = swarm.cli(swarm.manager, "run", "--rm", "--network", "none", IMAGE, "--version")
    assert "swarmgpu" in out.stdout
    # The image needs nothing from outside: facts from a capture-made file, offline.
    facts = GPU_NODES["gpu-node-2"].facts()
    cfgdir = swarm.base / "imgtest"
    cfgdir.mkdir(exist_ok=True)
    (cfgdir / "facts.json").write_text(json.dumps(facts.to_dict()))
    out = swarm.cli(swarm.manager, "run", "--rm", "--network", "none",
                    "-v", f"{cfgdir}:/facts:ro", IMAGE,
                    "facts", "--source", "file:/facts/facts.json")
    assert "swarmgpu.gpu.count=8" in out.stdout


def _healthy(node: NodeHandle) -> bool:
    try:
        with urllib.request.urlopen(f"http://{node.addr}:{AGENT_PORT}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture
def restore_labels(swarm: SwarmCluster) -> Iterator[None]:
    """Put every node's labels back as they were: the `swarm` fixture is shared."""
    api = swarm.client(swarm.manager).api
    before = {n.node_id: dict(api.inspect_node(n.node_id)["Spec"].get("Labels") or {})
              for n in swarm.nodes}
    yield
    for node_id, labels in before.items():
        raw = api.inspect_node(node_id)
        spec = raw["Spec"]
        spec["Labels"] = labels
        api.update_node(node_id, raw["Version"]["Index"], spec)


def test_agent_global_service_feeds_labels(swarm: SwarmCluster, image: dict[str, float],
                                           tmp_path: Path, restore_labels: None) -> None:
    mgr = swarm.manager
    # One Docker config per GPU node (its real capture as a facts file); every task of
    # the one global service mounts them all and serves its own node's.
    configs = []
    for host, fake in GPU_NODES.items():
        f = tmp_path / f"{host}.json"
        f.write_text(json.dumps(fake.facts().to_dict()))
        name = f"sgfacts-{host}"
        swarm.cli(mgr, "config", "create", name, str(f))
        configs += ["--config", f"source={name},target=/etc/swarmgpu/facts/{host}.json,"
                                "mode=0444"]
    svc = "sgagent"
    t0 = time.monotonic()
    swarm.cli(mgr, "service", "create", "--detach", "--name", svc, "--mode", "global",
              "--no-resolve-image", "--network", "host", "--init",
              "--constraint", "node.role==worker",
              "--hostname", "{{.Node.Hostname}}", "--env", "NODE={{.Node.Hostname}}",
              *configs, "--entrypoint", "sh",
              IMAGE, "-c",
              f'exec swarmgpu agent --source "file:/etc/swarmgpu/facts/$NODE.json" '
              f"--listen 0.0.0.0:{AGENT_PORT} --refresh-s 5 --identity none")
    try:
        workers = swarm.workers
        swarm.wait_for(lambda: all(_healthy(w) for w in workers), 90,
                       f"agents of service {svc} healthy on every GPU node")
        up_s = time.monotonic() - t0
        # Swarm shows a task "Starting" until the image's HEALTHCHECK first passes
        # (its interval after the start), then "Running".
        def all_running() -> str | None:
            ps = swarm.cli(mgr, "service", "ps", "--format", "{{.Node}} {{.CurrentState}}", svc)
            return ps.stdout if ps.stdout.count("Running") == len(workers) else None

        swarm.wait_for(all_running, 60, f"every {svc} task Running (healthy)")
        cfg = cfg_file(tmp_path, swarm, agents={"port": AGENT_PORT, "timeout_s": 3,
                                                **PLAIN_AGENTS})
        t1 = time.monotonic()
        res = run_cli("run", "--once", "--config", str(cfg))
        assert res.returncode == 0, res.stderr
        for host, fake in GPU_NODES.items():
            want = desired_labels(fake.facts())
            got = {k: v for k, v in labels_of(swarm, host).items() if k in want}
            assert got == want, f"{host}: labels from the containerised agent differ"
        print(f"\nagent service healthy on {len(workers)} nodes after {up_s:.1f} s; "
              f"labels synced in {time.monotonic() - t1:.1f} s", file=sys.stderr)

        # The daemon from the image: uid 10001, only the engine socket's group, host
        # network in the manager's namespace. Remove one node's labels; it puts them back.
        api = swarm.client(mgr).api
        node2 = swarm.node("gpu-node-2")
        raw = api.inspect_node(node2.node_id)
        spec = raw["Spec"]
        spec["Labels"] = {k: v for k, v in (spec.get("Labels") or {}).items()
                          if not k.startswith(P)}
        api.update_node(node2.node_id, raw["Version"]["Index"], spec)
        gid = os.stat(mgr.socket).st_gid
        out = swarm.cli(mgr, "run", "--rm", "--network", "host", "--group-add", str(gid),
                        "-v", f"{mgr.socket}:/var/run/docker.sock",
                        "-e", f"SWARMGPU_AGENTS_PORT={AGENT_PORT}",
                        "-e", "SWARMGPU_AGENTS_IDENTITY=none", IMAGE, "run", "--once",
                        timeout=120)
        assert "label write" in out.stderr, out.stderr
        want = desired_labels(GPU_NODES["gpu-node-2"].facts())
        got = {k: v for k, v in labels_of(swarm, "gpu-node-2").items() if k in want}
        assert got == want, f"daemon container did not restore the labels: {out.stderr}"
        who = swarm.cli(mgr, "run", "--rm", "--network", "none", "--entrypoint", "id", IMAGE)
        assert who.stdout.startswith("uid=10001"), who.stdout
    finally:
        swarm.cli(mgr, "service", "rm", svc, check=False)
        swarm.wait_for(lambda: not any(_healthy(w) for w in swarm.workers), 60,
                       f"service {svc} gone")
        for host in GPU_NODES:
            # A config is in use until the service's tasks are gone: retry briefly.
            def removed(name: str = f"sgfacts-{host}") -> bool:
                return swarm.cli(mgr, "config", "rm", name, check=False).returncode == 0

            swarm.wait_for(removed, 30, f"config sgfacts-{host} removed")


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _answers(addr: str, port: int, path: str = "/healthz", scheme: str = "http"
             ) -> dict[str, object] | None:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # /healthz: is it up
    try:
        with urllib.request.urlopen(f"{scheme}://{addr}:{port}{path}", timeout=1,
                                    context=ctx if scheme == "https" else None) as r:
            body = json.loads(r.read())
            return body if isinstance(body, dict) else None
    except (OSError, ValueError):
        return None


def test_swarmgpu_stack_deploys_as_shipped(swarm: SwarmCluster, image: dict[str, float],
                                           restore_labels: None) -> None:
    """stacks/swarmgpu.yml itself, unedited: agents (nvml: these nodes have no driver,
    so they report zero GPUs) on the nodes labelled gpu=true, serving HTTPS with their
    node's Swarm certificate, the daemon on the manager reaching the engine only through
    the stack's docker-proxy and presenting its manager certificate, reading each agent.
    Each test node's engine has its own data root: a per-host symlink and the
    {{.Node.Hostname}} template in SWARMGPU_DOCKER_DATA_ROOT stand in for the one path
    real nodes share."""
    mgr = swarm.manager
    for w in swarm.workers:
        swarm.cli(mgr, "node", "update", "--label-add", "gpu=true", w.node_id)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    byhost = swarm.base / "byhost"
    byhost.mkdir(exist_ok=True)
    for n in swarm.nodes:
        link = byhost / n.hostname
        if not link.exists():
            link.symlink_to(n.data_root)
    env.update(DOCKER_CONFIG=str(swarm.base / "cli-config"), SWARMGPU_IMAGE=IMAGE,
               SWARMGPU_DOCKER_DATA_ROOT=f"{byhost}/{{{{.Node.Hostname}}}}",
               SWARMGPU_DOCKER_SOCKET=str(mgr.socket), SWARMGPU_SYNC_INTERVAL_S="2")
    stack = REPO / "stacks" / "swarmgpu.yml"
    # The one step the stack's header asks before deploying: the daemon HTTP's token.
    token = "stack-http-token-0123456789"
    token_file = swarm.base / "swarmgpu-http-token"
    token_file.write_text(token + "\n")
    swarm.cli(mgr, "secret", "rm", "swarmgpu-http-token", check=False)
    swarm.cli(mgr, "secret", "create", "swarmgpu-http-token", str(token_file))
    before = {w.name: labels_of(swarm, w.name) for w in swarm.workers}
    t0 = time.monotonic()
    res = subprocess.run(["docker", "-H", mgr.docker_host, "stack", "deploy",
                          "--resolve-image", "never", "-c", str(stack), "sgstack"],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, f"docker stack deploy failed: {res.stderr}"
    try:
        swarm.wait_for(lambda: all(_answers(w.addr, 9401, scheme="https")
                                   for w in swarm.workers), 90,
                       "the stack's agents answering on every gpu=true node")
        health = swarm.wait_for(lambda: _answers(mgr.addr, 9402), 60,
                                "the stack's daemon answering /healthz on the manager")
        # No driver here: each agent answers that NVML cannot start. Those are GPUs that
        # cannot be read, not zero GPUs, so the daemon (which reached the engine through
        # the stack's docker-proxy: the proxy started with its own service's ID) counts
        # them and writes no label (a count=0 would stop tasks constrained on the node's
        # labels after a driver upgrade).
        def unread() -> float | None:
            req = urllib.request.Request(f"http://{mgr.addr}:9402/metrics",
                                         headers={"Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                return None
            m = re.search(r"^swarmgpu_nodes_gpus_unread (\S+)$", text, re.M)
            return float(m.group(1)) if m and float(m.group(1)) == len(swarm.workers) \
                else None

        swarm.wait_for(unread, 60, "the stack's daemon counting each agent's GPUs unread")
        assert {w.name: labels_of(swarm, w.name) for w in swarm.workers} == before, \
            "labels written for GPUs that cannot be read"
        health = swarm.wait_for(lambda: (lambda h: h if h and h.get("leader") else None)(
            _answers(mgr.addr, 9402)), 30, "the daemon to report itself leader")
        print(f"\nswarmgpu stack up and reading its agents in {time.monotonic() - t0:.1f} s; "
              f"daemon health {health}", file=sys.stderr)
        # It listens on 0.0.0.0:9402 and asks who you are: this host is not its loopback.
        assert _status(f"http://{mgr.addr}:9402/api/v1/cluster") == 401
        assert _status(f"http://{mgr.addr}:9402/api/v1/cluster",
                       {"Authorization": f"Bearer {token}"}) == 200
        def daemon_running() -> str | None:
            ps = swarm.cli(mgr, "service", "ps", "--format", "{{.Name}} {{.CurrentState}}",
                           "sgstack_daemon")
            return ps.stdout if "Running" in ps.stdout else None

        try:
            swarm.wait_for(daemon_running, 60, "the daemon's task Running (healthy)")
        except Exception:
            logs = swarm.cli(mgr, "service", "logs", "--raw", "sgstack_daemon", check=False)
            print((logs.stdout + logs.stderr)[-3000:], file=sys.stderr)
            raise
        # Root without capabilities writes its state volume (GPU health, agents' last
        # seen): the image's state dir lets group 0 write, and the volume took that.
        logs = swarm.cli(mgr, "service", "logs", "--raw", "sgstack_daemon", check=False)
        assert "cannot save" not in logs.stdout + logs.stderr, \
            (logs.stdout + logs.stderr)[-3000:]
    finally:
        t1, since = time.monotonic(), time.time()
        swarm.cli(mgr, "stack", "rm", "sgstack", check=False)
        # Port 9401 on the workers belongs to the other modules' agents afterwards.
        swarm.wait_for(lambda: not any(_answers(w.addr, 9401, scheme="https")
                                       for w in swarm.workers), 60,
                       "the stack's agents gone")
        swarm.wait_for(lambda: _answers(mgr.addr, 9402) is None, 60, "the daemon gone")
        stop_s = time.monotonic() - t1
        print(f"swarmgpu stack stopped in {stop_s:.1f} s", file=sys.stderr)
        swarm.wait_for(lambda: swarm.cli(mgr, "secret", "rm", "swarmgpu-http-token",
                                         check=False).returncode == 0, 30, "the secret gone")
    # SIGTERM ends every role, not the grace period and a SIGKILL (exit 137): the
    # engines' own records of each stack container's stop say which signals it was sent
    # and how it ended (the seconds above are a figure, not the check).
    # (read until every container's die is recorded: the proxy ends a moment after the
    # daemon, whose port the wait above watched, so one early read can miss its exit)
    def _ended() -> list[dict[str, Any]] | None:
        got = _stop_records(swarm, "sgstack", since, time.time())
        roles = {e["service"] for e in got}
        whole = len(roles) == 3 and all(e["exit_code"] is not None for e in got)
        return got if whole else None

    ends = swarm.wait_for(_ended, 30, "the engines' records of each stack container's end",
                          interval=1.0)
    print(f"the stack's containers stopped: {ends}", file=sys.stderr)
    roles = {e["service"] for e in ends}
    assert roles == {"sgstack_agent", "sgstack_daemon", "sgstack_docker-proxy"}, ends
    for e in ends:
        assert "15" in e["signals"] and "9" not in e["signals"], \
            f"{e}: SIGKILLed after the grace period, not ended by SIGTERM: a role ignores it"
        # every role ends by its own hand, its clean exit (0); the proxy's was SIGTERM's
        # own end (143) before it had a handler (swarm.proxystop)
        assert e["exit_code"] == "0", f"{e}: did not exit cleanly on SIGTERM"


def _stop_records(swarm: SwarmCluster, stack: str, since: float, until: float
                  ) -> list[dict[str, Any]]:
    """Each of the stack's containers that died between ``since`` and ``until``, from
    its engine's events: its service, the signals the engine sent it (``kill``: 15 is
    Docker's stop, 9 the SIGKILL after the grace period) and its exit code (``die``)."""
    out: dict[str, dict[str, Any]] = {}
    for node in swarm.nodes:
        res = subprocess.run(_docker(node, "events", "--since", f"{since:.3f}", "--until",
                                     f"{until:.3f}", "--format", "{{json .}}",
                                     "--filter", "type=container",
                                     "--filter", f"label=com.docker.stack.namespace={stack}",
                                     "--filter", "event=kill", "--filter", "event=die"),
                             capture_output=True, text=True, timeout=30, check=True)
        for line in res.stdout.splitlines():
            ev = json.loads(line)
            attrs = ev["Actor"]["Attributes"]
            rec = out.setdefault(ev["Actor"]["ID"], {
                "service": attrs.get("com.docker.swarm.service.name"), "node": node.name,
                "signals": [], "exit_code": None})
            if ev["Action"] == "kill":
                rec["signals"].append(attrs.get("signal"))
            else:
                rec["exit_code"] = attrs.get("exitCode")
    return list(out.values())
