"""The GPU machines the test swarm's workers stand in for: real `topo -m` captures.

One definition, used by the swarm fixture (to advertise the same GPU UUIDs as Swarm
generic resources that the agents report) and by the tests that start agents.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from support.fake_pynvml.builder import RTX4090_MIB
from support.paths import CAPTURES, REPO, TOPOLOGY
from support.swarm_harness import SwarmCluster
from swarmgpu.agent.facts.topo import TopoSource
from swarmgpu.core.model import NodeFacts


@dataclass(frozen=True)
class FakeGpuNode:
    hostname: str
    capture: str
    product: str
    memory_mib: int
    mig: str | None = None

    def source(self) -> TopoSource:
        return TopoSource(TOPOLOGY / self.capture, hostname=self.hostname,
                          product=self.product, memory_mib=self.memory_mib,
                          mig_layout=self.mig)

    def facts(self) -> NodeFacts:
        return self.source().read()

    def uuids(self) -> list[str]:
        return [g.uuid for g in self.facts().gpus]

    def agent_argv(self, addr: str, port: int = 9401, *extra: str,
                   data_root: Path | None = None) -> list[str]:
        """The agent's command line. With ``data_root`` (a test node's engine) it serves
        that node's Swarm certificate, as on a real member (``--identity swarm-pki``);
        without, and without identity flags in ``extra``, plain HTTP, said explicitly."""
        argv = [sys.executable, "-m", "swarmgpu.cli", "agent",
                "--source", f"topo:{TOPOLOGY / self.capture}", "--product", self.product,
                "--memory-mib", str(self.memory_mib), "--hostname", self.hostname,
                "--listen", f"{addr}:{port}", "--refresh-s", "1"]
        if self.mig:
            argv += ["--mig", self.mig]
        if data_root is not None:
            argv += ["--identity", "swarm-pki", "--data-root", str(data_root)]
        elif not {"--identity", "--tls-cert"} & set(extra):
            argv += ["--identity", "none"]
        return argv + list(extra)


def captured_memory_mib(capture: str) -> int:
    """A GPU's memory as a real one reports it: GFD's ``nvidia.com/gpu.memory`` in a
    capture of tests/fixtures/captures (the driver's MiB, below the name's round GiB)."""
    return int(json.loads((CAPTURES / capture).read_text())["nvidia.com/gpu.memory"])


# GPU 0 of the DGX runs MIG (mixed strategy), the other seven are whole GPUs. Memory: a
# real DGX A100-SXM4-40GB's (40537 MiB), not the name's 40 GiB.
DGX_A100 = FakeGpuNode(
    "gpu-node-1", "topo_dgx_a100_nv12.txt", "NVIDIA A100-SXM4-40GB",
    captured_memory_mib("gfd_labels_a100-sxm4-40gb_mig-none_drv450_cloudnativedocs.json"),
    mig="0:3g.20gb,2g.10gb,1g.5gb*2")
# The 4090 box has only a topo -m capture: its memory is cited, not captured
# (RTX4090_MIB: a public nvidia-smi output, tests/fixtures/SOURCES.md).
RTX4090 = FakeGpuNode("gpu-node-2", "topo_pcie_8x_rtx4090_pix_sys.txt",
                      "NVIDIA GeForce RTX 4090", RTX4090_MIB)
GPU_NODES = {n.hostname: n for n in (DGX_A100, RTX4090)}


def swarmgpu_env(**extra: str) -> dict[str, str]:
    """Environment for swarmgpu processes started by tests (works without install)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real `swarmgpu` CLI as a user would."""
    return subprocess.run([sys.executable, "-m", "swarmgpu.cli", *args], capture_output=True,
                          text=True, env=env or swarmgpu_env(), timeout=timeout, check=False)


def kwargs_for_logs(path: Any) -> dict[str, Any]:
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # a fresh checkout has no artifacts/
    fh = open(path, "ab")  # noqa: SIM115 - handed to Popen, closed at interpreter exit
    return {"stdout": fh, "stderr": subprocess.STDOUT}


LOGS = REPO / "artifacts" / "swarm-tests"


# The daemon's HTTP token in the tests' configs: a daemon that listens on the manager's
# bridge address asks who you are (docs/security.md); tests read it with HTTP_AUTH.
HTTP_TOKEN = "test-http-token-0123456789abcdef"
HTTP_AUTH = {"Authorization": f"Bearer {HTTP_TOKEN}"}


def cfg_file(tmp: Path, swarm: SwarmCluster, **extra: Any) -> Path:
    """A daemon config for the test swarm: the shipped defaults (agents.identity
    swarm-pki: the daemon presents the manager's certificate from its engine's data
    root; http.auth auto, with the token HTTP_TOKEN) but for the addresses and a fast
    cycle. The agents run outside Swarm (no agents' service, as under systemd):
    ``agents.service`` "", else the daemon and audit say no such service exists."""
    token = tmp / "http-token"
    token.write_text(HTTP_TOKEN + "\n")
    cfg: dict[str, Any] = {
        "docker_host": swarm.manager.docker_host,
        "state_dir": str(tmp / "state"),
        "agents": {"timeout_s": 2, "service": ""},
        "sync": {"interval_s": 1},
        "http": {"listen": "127.0.0.1:0", "token_file": str(token)},
    }
    for k, v in extra.items():
        if isinstance(v, dict):
            cfg.setdefault(k, {}).update(v)
        else:
            cfg[k] = v
    path = tmp / "config.yml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def labels_of(swarm: SwarmCluster, hostname: str) -> dict[str, str]:
    node = swarm.node(hostname)
    raw = swarm.client(swarm.manager).api.inspect_node(node.node_id)
    return dict(raw["Spec"].get("Labels") or {})


def node_version(swarm: SwarmCluster, hostname: str) -> int:
    node = swarm.node(hostname)
    return int(swarm.client(swarm.manager).api.inspect_node(node.node_id)["Version"]["Index"])


def wait_port(addr: str, port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {addr}:{port}")


# For tests whose agents speak plain HTTP on purpose (hostile stand-ins, a file source):
# cfg_file(..., agents=PLAIN_AGENTS). Everything else runs the shipped default, swarm-pki.
PLAIN_AGENTS: dict[str, Any] = {"identity": "none"}


def start_agent(swarm: SwarmCluster, hostname: str, *extra: str, secure: bool = True) -> Any:
    """The agent of ``hostname``, as the shipped units run it: serving that node's own
    Swarm certificate from its engine's data root (``secure=False``: plain HTTP)."""
    node = swarm.node(hostname)
    LOGS.mkdir(parents=True, exist_ok=True)
    root = node.data_root if secure and "--identity" not in extra else None
    argv = GPU_NODES[hostname].agent_argv(node.addr, 9401, *extra, data_root=root)
    proc = swarm.exec_in_netns(node, argv,
                               env=swarmgpu_env(),
                               **kwargs_for_logs(LOGS / f"agent-{hostname}.log"))
    wait_port(node.addr, 9401)
    # Something else on the port (a leftover of another test) would answer instead of
    # the agent, which then dies on its bind: make sure it is ours that listens.
    time.sleep(0.3)
    if proc.poll() is not None:
        raise RuntimeError(f"agent on {hostname} exited ({proc.returncode}); port 9401 taken? "
                           f"see {LOGS / f'agent-{hostname}.log'}")
    return proc


def start_daemon(swarm: SwarmCluster, cfg: Path, log: Path, **env: str) -> Any:
    """The real daemon (`swarmgpu run`, continuous mode) in the manager's namespace,
    its output appended to ``log``; ``env`` is added to its environment."""
    LOGS.mkdir(parents=True, exist_ok=True)
    return swarm.exec_in_netns(
        swarm.manager, [sys.executable, "-m", "swarmgpu.cli", "run", "--config", str(cfg)],
        env=swarmgpu_env(**env), **kwargs_for_logs(log))


def stop(proc: Any) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except Exception:
        proc.kill()


@contextlib.contextmanager
def running_daemon(swarm: SwarmCluster, tmp: Path, log: Path, **cfg: Any) -> Iterator[Path]:
    """A module's daemon: its config (``cfg_file(tmp, swarm, **cfg)``, yielded) and the
    daemon running on it (``start_daemon``, output in ``log``) until the block ends."""
    path = cfg_file(tmp, swarm, **cfg)
    proc = start_daemon(swarm, path, log)
    try:
        yield path
    finally:
        stop(proc)


def run_agents(swarm: SwarmCluster) -> Iterator[dict[str, Any]]:
    """An agent per GPU node of the test swarm, serving its real capture on :9401."""
    procs = {h: start_agent(swarm, h) for h in GPU_NODES}
    yield procs
    for p in procs.values():
        stop(p)


T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float, what: str,
               interval: float = 0.3) -> T:
    """``check()``'s value once it stops raising AssertionError, within ``timeout``
    seconds; past it, the last AssertionError, prefixed with ``what``.

    For what a process writes *after* the state a test waited for (a log line, a label,
    a metric, the daemon's record of a move): the test waits for what it asserts, with a
    deadline, instead of asserting the moment the earlier state shows."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} (waited {timeout:g} s): {exc}") from exc
        time.sleep(interval)


def log_text(path: Path, since: int = 0) -> str:
    """A log's text from byte ``since`` (a test's own part of a shared log)."""
    return path.read_bytes()[since:].decode(errors="replace")


def wait_log(path: Path, *lines: str, since: int = 0, timeout: float = 30) -> str:
    """The log's text (from byte ``since``) once it holds every one of ``lines``."""
    def check() -> str:
        text = log_text(path, since)
        missing = [ln for ln in lines if ln not in text]
        assert not missing, f"{path.name} lacks {missing}; its end: {text[-2000:]}"
        return text
    return eventually(check, timeout, f"{path.name} to hold {len(lines)} line(s)")


def remove_stacks(swarm: SwarmCluster, *stacks: str) -> None:
    """``docker stack rm`` each, waiting until it is gone (`SwarmCluster.remove_stack`)."""
    for stack in stacks:
        swarm.remove_stack(stack)
