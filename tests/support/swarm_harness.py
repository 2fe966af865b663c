"""A real multi-node Docker Swarm on one machine, for tests.

Each node is one network namespace + one dockerd (its own UTS namespace, so Swarm
sees its own hostname), all joined to a private bridge with a free 10.2xx.x.0/24.
Nothing here can leave the machine: the namespaces have no default route, and every
daemon runs with DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 on a locally imported image.
Recipe: one dockerd per network namespace, joined over a bridge (docs/reliability.md).

Run as a script to remove leftovers of crashed runs:
    python tests/support/swarm_harness.py cleanup-stale
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import io
import ipaddress
import itertools
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import docker
import docker.errors

T = TypeVar("T")

PREFIX = "sgt"  # every namespace, link, dir and cgroup this harness makes starts with it
RUN_ROOT = Path("/tmp")  # short on purpose: unix socket paths are limited to 108 bytes
LOCK_PATH = Path("/run/lock/swarmgpu-swarm-harness.lock")
IMAGE = "local/busybox:latest"
BUSYBOX = Path("/bin/busybox")
SWARM_PORT = 2377
# runs of `docker node|service update` that lost the race with a writer in between
UPDATE_RETRIES = 10
DEFAULT_DAEMON_JSON: dict[str, Any] = {}
# docker.types.SwarmSpec keywords for `swarm init`.
DEFAULT_SWARM_SPEC: dict[str, Any] = {}
_RUN_ID_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})")


class SwarmHarnessError(RuntimeError):
    """The test swarm could not be started, driven or torn down."""


class WaitTimeout(SwarmHarnessError, TimeoutError):
    """`SwarmCluster.wait_for` ran out of time."""


@dataclass(frozen=True)
class NodeSpec:
    """What to start: a hostname, a role, and extra dockerd flags."""

    hostname: str
    role: str  # "manager" | "worker"
    dockerd_args: tuple[str, ...] = ()


@dataclass(eq=False)  # one handle per node: compared by identity
class NodeHandle:
    """One running node. `name` is the key tests use; it equals the hostname."""

    name: str
    hostname: str
    role: str
    netns: str
    addr: str
    dir: Path
    dockerd_args: tuple[str, ...]
    node_id: str = ""  # Swarm node ID, known once joined
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def socket(self) -> Path:
        return self.dir / "d.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"

    @property
    def pidfile(self) -> Path:
        return self.dir / "d.pid"

    @property
    def data_root(self) -> Path:
        return self.dir / "data"

    @property
    def exec_root(self) -> Path:
        return self.dir / "x"

    @property
    def cgroup_parent(self) -> str:
        return self.netns  # unique per run and node: lets tear-down find every container

    def generic_resources(self) -> dict[str, list[str]]:
        """The named generic resources this node's dockerd flags advertise, by kind."""
        found: dict[str, list[str]] = {}
        args = list(self.dockerd_args)
        for flag, value in itertools.pairwise(args):
            if flag == "--node-generic-resource" and "=" in value:
                kind, _, val = value.partition("=")
                found.setdefault(kind, []).append(val)
        return found


def edit_node_labels(api: docker.APIClient, node_id: str,
                     change: Callable[[dict[str, str]], None],
                     tries: int = UPDATE_RETRIES) -> None:
    """A hand edit of a node's labels as the CLI makes it: read the node, ``change`` its
    labels in place, write them back at the version read; read again when a writer got
    in between (Swarm: "update out of sequence", the daemon under test syncing labels).
    Raises ``SwarmHarnessError`` when every one of ``tries`` lost that race."""
    for attempt in range(tries):
        raw = api.inspect_node(node_id)
        spec = raw["Spec"]
        labels = dict(spec.get("Labels") or {})
        change(labels)
        try:
            api.update_node(node_id, raw["Version"]["Index"], {**spec, "Labels": labels})
            return
        except docker.errors.APIError as exc:
            if "out of sequence" not in str(exc):
                raise
        if attempt < tries - 1:
            time.sleep(0.05 * (attempt + 1))
    raise SwarmHarnessError(f"node {node_id}: the label edit lost the race with another "
                            f"writer {tries} times (update out of sequence)")


def fake_gpu_uuids(node_index: int, count: int) -> list[str]:
    """Stable, UUID-shaped fake GPU ids: GPU-0000000N-0000-4000-8000-00000000000G."""
    return [f"GPU-{node_index:08x}-0000-4000-8000-{g:012x}" for g in range(count)]



def gpu_resource_args(uuids: Sequence[str], kind: str = "NVIDIA-GPU") -> tuple[str, ...]:
    """dockerd flags advertising one Swarm generic resource per GPU UUID."""
    args: list[str] = []
    for uuid in uuids:
        args += ["--node-generic-resource", f"{kind}={uuid}"]
    return tuple(args)


def label_args(labels: Mapping[str, str]) -> tuple[str, ...]:
    """dockerd flags setting engine labels (`engine.labels.K` in constraints)."""
    args: list[str] = []
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    return tuple(args)


def default_specs(
    managers: int = 1,
    workers: int = 2,
    extra_args: Mapping[str, Sequence[str]] | None = None,
) -> list[NodeSpec]:
    """Managers `mgr-N`, workers `gpu-node-N`; extra dockerd flags keyed by hostname."""
    if managers < 1:
        raise SwarmHarnessError(f"managers={managers}: a swarm needs at least 1 manager")
    extra = dict(extra_args or {})
    specs = [NodeSpec(f"mgr-{i}", "manager") for i in range(1, managers + 1)]
    specs += [NodeSpec(f"gpu-node-{i}", "worker") for i in range(1, workers + 1)]
    unknown = set(extra) - {s.hostname for s in specs}
    if unknown:
        raise SwarmHarnessError(
            f"extra_args names unknown hostnames {sorted(unknown)}; "
            f"known: {[s.hostname for s in specs]}"
        )
    return [NodeSpec(s.hostname, s.role, tuple(extra.get(s.hostname, ()))) for s in specs]


def preflight() -> list[str]:
    """Why this machine cannot run the test swarm; empty when it can."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (network namespaces and dockerd need root)")
    packages = {"dockerd": "docker.io", "docker": "docker.io", "ip": "iproute2",
                "nsenter": "util-linux", "unshare": "util-linux", "hostname": "hostname"}
    for tool, package in packages.items():
        if shutil.which(tool) is None:
            problems.append(f"`{tool}` not on PATH (apt-get install {package})")
    if not BUSYBOX.exists():
        problems.append(f"{BUSYBOX} missing (apt-get install busybox-static)")
    return problems


# -- small process / system helpers ------------------------------------------------


def _run(argv: Sequence[str], check: bool = True, timeout: float = 30) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise SwarmHarnessError(
            f"`{' '.join(argv)}` failed (rc {res.returncode}): {res.stderr.strip()}"
        )
    return res.stdout


def _proc_start_time(pid: int) -> str | None:
    """Kernel start time of a pid: tells a live owner from a recycled pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False  # it exited (and was reaped) between the two looks
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_pids_gone(pids: Sequence[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _alive(p)]
    return left


def _pids_referencing(path: Path) -> list[int]:
    """Pids whose command line names `path` (managed containerd, shims, dockerd)."""
    needle = str(path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _cgroup_dirs(name: str) -> list[Path]:
    """Every cgroup (v1 controllers and v2) directory named `name` at the top level."""
    root = Path("/sys/fs/cgroup")
    candidates = [root / name] + [c / name for c in root.iterdir() if c.is_dir()]
    return [c for c in candidates if c.is_dir()]


def _kill_cgroup(name: str) -> None:
    """SIGKILL every process in the cgroup tree `name`, then remove the cgroups."""
    dirs = _cgroup_dirs(name)
    pids: set[int] = set()
    for d in dirs:
        # The tree can vanish while it is walked (dockerd removing a container's cgroup).
        with contextlib.suppress(OSError):
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in procs.read_text().split())
    for pid in pids:
        _kill(pid, signal.SIGKILL)
    _wait_pids_gone(sorted(pids), 5)
    for d in dirs:
        # Deepest first: a cgroup directory can only be removed once it has no children.
        subs: list[Path] = []
        with contextlib.suppress(OSError):
            subs = [p for p in d.rglob("*") if p.is_dir()]
        for sub in sorted(subs, key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                sub.rmdir()
        with contextlib.suppress(OSError):
            d.rmdir()


def _umount_under(path: Path) -> None:
    prefix = str(path).rstrip("/") + "/"
    mounts = [
        line.split()[1].replace("\\040", " ")
        for line in Path("/proc/mounts").read_text().splitlines()
    ]
    for mnt in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True, check=False)


def _used_ipv4_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    out = _run(["ip", "-4", "-o", "addr", "show"]) + _run(
        ["ip", "-4", "route", "show", "table", "all"], check=False
    )
    for token in out.split():
        with contextlib.suppress(ValueError):
            if "/" in token:
                nets.append(ipaddress.IPv4Network(token, strict=False))
    return nets


def pick_free_subnet(rng: random.Random | None = None) -> ipaddress.IPv4Network:
    """A /24 in 10.200-249.x.0 that overlaps nothing configured on the host."""
    rng = rng or random.Random()
    used = _used_ipv4_networks()
    for _ in range(500):
        net = ipaddress.IPv4Network(f"10.{rng.randint(200, 249)}.{rng.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise SwarmHarnessError("no free /24 in 10.200.0.0-10.249.255.0: remove stale bridges")


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    """Serialises subnet choice and bridge creation between concurrent test runs."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_PATH.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def busybox_image_tar() -> bytes:
    """A rootfs with static busybox and a symlink per applet (sh, sleep, env, wget, nc...)."""
    applets = _run([str(BUSYBOX), "--list"]).split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "etc", "tmp", "root", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add(str(BUSYBOX), arcname="bin/busybox")
        for applet in applets:
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# -- the cluster ----------------------------------------------------------------------

_LIVE: set[SwarmCluster] = set()
_LIVE_LOCK = threading.Lock()
_SIGNALS_INSTALLED = False


def _teardown_all() -> None:
    with _LIVE_LOCK:
        clusters = list(_LIVE)
    for cluster in clusters:
        cluster.teardown()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _teardown_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_safety_nets() -> None:
    """atexit + SIGTERM/SIGHUP: a killed test run still removes its swarm."""
    global _SIGNALS_INSTALLED
    if _SIGNALS_INSTALLED:
        return
    _SIGNALS_INSTALLED = True
    atexit.register(_teardown_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


class SwarmCluster:
    """A real Swarm of namespaced dockerds. Use `start()`/`teardown()` or `with`."""

    def __init__(
        self,
        specs: Sequence[NodeSpec] | None = None,
        *,
        managers: int = 1,
        workers: int = 2,
        extra_args: Mapping[str, Sequence[str]] | None = None,
        log_dir: Path | None = None,
        ready_timeout: float = 60.0,
        daemon_json: Mapping[str, Any] | None = None,
        swarm_spec: Mapping[str, Any] | None = None,
    ) -> None:
        self.specs = list(specs) if specs is not None else default_specs(
            managers, workers, extra_args
        )
        if not any(s.role == "manager" for s in self.specs):
            raise SwarmHarnessError("specs has no manager: a swarm needs at least one")
        if len({s.hostname for s in self.specs}) != len(self.specs):
            raise SwarmHarnessError(f"duplicate hostnames in {[s.hostname for s in self.specs]}")
        self.run_id = secrets.token_hex(3)
        self.base = RUN_ROOT / f"{PREFIX}{self.run_id}"
        self.bridge = f"br-{PREFIX}{self.run_id}"
        self.log_dir = (log_dir or self.base / "logs") / f"{PREFIX}{self.run_id}"
        self.ready_timeout = ready_timeout
        self.daemon_json = dict(DEFAULT_DAEMON_JSON if daemon_json is None else daemon_json)
        self.swarm_spec = dict(DEFAULT_SWARM_SPEC if swarm_spec is None else swarm_spec)
        self.nodes: list[NodeHandle] = []
        self.subnet: ipaddress.IPv4Network | None = None
        self.api_version = "1.41"
        self.timings: dict[str, float] = {}
        self._clients: dict[str, docker.DockerClient] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.RLock()
        self._torn_down = False
        self._started = False

    # -- lifecycle --------------------------------------------------------------

    def __enter__(self) -> SwarmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def start(self) -> SwarmCluster:
        """Create namespaces, start every dockerd, load the image, form the swarm."""
        if self._started:
            raise SwarmHarnessError("start() called twice; create a new SwarmCluster")
        problems = preflight()
        if problems:
            raise SwarmHarnessError("cannot start the test swarm: " + "; ".join(problems))
        self._started = True
        _install_safety_nets()
        with _LIVE_LOCK:
            _LIVE.add(self)
        t0 = time.monotonic()
        try:
            self._make_network()
            self.timings["network_s"] = time.monotonic() - t0
            self._parallel(self.start_dockerd, self.nodes)
            self.timings["dockerd_ready_s"] = time.monotonic() - t0
            image = busybox_image_tar()
            self._parallel(lambda n: self._load_image(n, image), self.nodes)
            self.timings["image_s"] = time.monotonic() - t0
            self._form_swarm()
            self.timings["start_s"] = time.monotonic() - t0
        except BaseException as exc:
            tails = "\n".join(self.log_tail(n, 15) for n in self.nodes)
            self.teardown()
            if isinstance(exc, Exception):
                raise SwarmHarnessError(
                    f"test swarm failed to start: {exc}\n--- dockerd log tails ---\n{tails}"
                ) from exc
            raise
        return self

    def _make_network(self) -> None:
        self.base.mkdir(mode=0o755)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        me = os.getpid()
        (self.base / "owner").write_text(f"{me} {_proc_start_time(me)}\n")
        with _host_lock():
            self.subnet = pick_free_subnet()
            hosts = list(self.subnet.hosts())
            gateway = f"{hosts[0]}/{self.subnet.prefixlen}"
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", gateway, "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
        # With bridge netfilter on and a host dockerd's FORWARD DROP, the bridge would
        # be blocked; accept our own bridge's traffic explicitly (removed on tear-down).
        if shutil.which("iptables"):
            _run(["iptables", "-I", "FORWARD", "-i", self.bridge, "-o", self.bridge,
                  "-j", "ACCEPT"], check=False)
        for i, spec in enumerate(self.specs):
            short = ("m" if spec.role == "manager" else "w") + str(i)
            node = NodeHandle(
                name=spec.hostname,
                hostname=spec.hostname,
                role=spec.role,
                netns=f"{PREFIX}{self.run_id}-{short}",
                addr=str(hosts[10 + i]),
                dir=self.base / short,
                dockerd_args=spec.dockerd_args,
            )
            self.nodes.append(node)
            node.dir.mkdir()
            veth = f"v{PREFIX}{self.run_id}{short}"
            _run(["ip", "netns", "add", node.netns])
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
                  "netns", node.netns])
            _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
            ns = ["ip", "-n", node.netns]
            _run([*ns, "addr", "add", f"{node.addr}/{self.subnet.prefixlen}", "dev", "eth0"])
            _run([*ns, "link", "set", "eth0", "up"])
            _run([*ns, "link", "set", "lo", "up"])

    def _dockerd_argv(self, node: NodeHandle) -> list[str]:
        return [
            "nsenter", f"--net={node.netns_path}", "unshare", "--uts",
            "sh", "-c", 'hostname "$0" && exec "$@"', node.hostname,
            "dockerd",
            "--data-root", str(node.data_root),
            "--exec-root", str(node.exec_root),
            "-H", node.docker_host,
            "--pidfile", str(node.pidfile),
            "--config-file", str(node.dir / "daemon.json"),
            "--bridge=none", "--iptables=false", "--ip-masq=false",
            "--cgroup-parent", f"/{node.cgroup_parent}",
            "--containerd-namespace", node.netns,
            "--containerd-plugins-namespace", f"{node.netns}p",
            "--shutdown-timeout", "2",
            *node.dockerd_args,
        ]

    def start_dockerd(self, node: NodeHandle) -> None:
        """(Re)start a node's dockerd on its old state; a swarm member rejoins by itself."""
        if node.proc is not None and node.proc.poll() is None:
            raise SwarmHarnessError(f"dockerd of {node.name} is already running")
        # Our own config file, never the host's /etc/docker/daemon.json.
        (node.dir / "daemon.json").write_text(json.dumps(self.daemon_json))
        env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        env["DOCKER_SERVICE_PREFER_OFFLINE_IMAGE"] = "1"
        log = (self.log_dir / f"{node.name}.dockerd.log").open("ab")
        log.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
        log.flush()
        with log:
            node.proc = subprocess.Popen(
                self._dockerd_argv(node), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )
        self._clients.pop(node.name, None)
        self._wait_ready(node)

    def _wait_ready(self, node: NodeHandle) -> None:
        probe = docker.APIClient(base_url=node.docker_host, version=self.api_version, timeout=2)
        deadline = time.monotonic() + self.ready_timeout
        try:
            while True:
                assert node.proc is not None
                if node.proc.poll() is not None:
                    raise SwarmHarnessError(
                        f"dockerd of {node.name} exited with rc {node.proc.returncode}; "
                        f"log: {self.log_dir / (node.name + '.dockerd.log')}"
                    )
                if node.socket.exists():
                    with contextlib.suppress(Exception):
                        if probe.ping():
                            return
                if time.monotonic() > deadline:
                    raise SwarmHarnessError(
                        f"dockerd of {node.name} not ready after {self.ready_timeout:.0f} s"
                    )
                time.sleep(0.05)
        finally:
            probe.close()

    def stop_dockerd(self, node: NodeHandle, timeout: float = 20) -> None:
        """SIGTERM the node's dockerd and wait; data (and swarm membership) is kept."""
        self._signal_dockerd(node, signal.SIGTERM, timeout)

    def kill_dockerd(self, node: NodeHandle) -> None:
        """SIGKILL the node's dockerd: a crash, as far as the swarm can tell."""
        self._signal_dockerd(node, signal.SIGKILL, 10)

    def _signal_dockerd(self, node: NodeHandle, sig: int, timeout: float) -> None:
        client = self._clients.pop(node.name, None)
        if client is not None:
            client.close()
        pid = self._dockerd_pid(node)
        if pid is None:
            return
        _kill(pid, sig)
        if node.proc is not None and node.proc.pid == pid:
            try:
                node.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(5)
        elif _wait_pids_gone([pid], timeout):
            _kill(pid, signal.SIGKILL)

    def _dockerd_pid(self, node: NodeHandle) -> int | None:
        if node.proc is not None and node.proc.poll() is None:
            return node.proc.pid
        with contextlib.suppress(OSError, ValueError):
            pid = int(node.pidfile.read_text().strip())
            return pid if _alive(pid) else None
        return None

    def _load_image(self, node: NodeHandle, image: bytes) -> None:
        repo, tag = IMAGE.rsplit(":", 1)
        self.client(node).api.import_image_from_data(
            image, repository=repo, tag=tag, changes=['CMD ["sh"]']
        )

    def _form_swarm(self) -> None:
        managers = [n for n in self.nodes if n.role == "manager"]
        first = managers[0]
        self.client(first).swarm.init(
            advertise_addr=first.addr, listen_addr=f"{first.addr}:{SWARM_PORT}",
            **self.swarm_spec,
        )
        tokens = self.client(first).api.inspect_swarm()["JoinTokens"]

        def join(node: NodeHandle) -> None:
            self.client(node).swarm.join(
                remote_addrs=[f"{first.addr}:{SWARM_PORT}"],
                join_token=tokens["Manager" if node.role == "manager" else "Worker"],
                listen_addr=f"{node.addr}:{SWARM_PORT}",
                advertise_addr=node.addr,
            )

        # Managers one by one (each raft membership change must commit before the
        # next one), workers all at once alongside.
        workers = [n for n in self.nodes if n.role == "worker"]
        with ThreadPoolExecutor(max_workers=len(workers) + 1) as pool:
            futs = [pool.submit(join, w) for w in workers]
            for m in managers[1:]:
                join(m)
            for f in futs:
                f.result()
        for node in self.nodes:
            node.node_id = self.client(node).info()["Swarm"]["NodeID"]
        self.wait_for(self._all_ready, 30, "every node Ready in `docker node ls`")

    def _all_ready(self) -> bool:
        listed = self.client(self.manager).api.nodes()
        ready = {n["ID"] for n in listed if n["Status"]["State"] == "ready"}
        return all(node.node_id in ready for node in self.nodes)

    # -- API for tests ------------------------------------------------------------

    @property
    def manager(self) -> NodeHandle:
        """The first manager (not necessarily the leader: see `leader()`)."""
        return next(n for n in self.nodes if n.role == "manager")

    @property
    def managers(self) -> list[NodeHandle]:
        return [n for n in self.nodes if n.role == "manager"]

    @property
    def workers(self) -> list[NodeHandle]:
        return [n for n in self.nodes if n.role == "worker"]

    def node(self, name: str) -> NodeHandle:
        for n in self.nodes:
            if name in (n.name, n.node_id):
                return n
        raise KeyError(f"no node {name!r}; nodes: {[n.name for n in self.nodes]}")

    def client(self, node: NodeHandle) -> docker.DockerClient:
        """A cached docker SDK client for the node's dockerd."""
        with self._lock:
            if node.name not in self._clients:
                self._clients[node.name] = docker.DockerClient(
                    base_url=node.docker_host, version=self.api_version, timeout=30
                )
            return self._clients[node.name]

    def cli(
        self, node: NodeHandle, *args: str, check: bool = True, timeout: float = 60,
        docker: str = "docker",
    ) -> subprocess.CompletedProcess[str]:
        """Run the real `docker` CLI against the node; raises on failure if `check`.
        ``docker``: which CLI binary (a path, for one of another version).

        `node update` and `service update` are the CLI's read-modify-write of an object
        that the daemon under test may write in between (its labels, its moves): Swarm
        then answers "update out of sequence", and the CLI, as an operator would, is run
        again (at most ``UPDATE_RETRIES`` times)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        env["DOCKER_CONFIG"] = str(self.base / "cli-config")  # never the user's contexts
        argv = [docker, "-H", node.docker_host, *args]
        retry = tuple(args[:2]) in (("node", "update"), ("service", "update"))
        for attempt in range(UPDATE_RETRIES if retry else 1):
            res = subprocess.run(argv, capture_output=True, text=True, env=env,
                                 timeout=timeout)
            if (res.returncode == 0 or "update out of sequence" not in res.stderr
                    or attempt == UPDATE_RETRIES - 1):
                break
            time.sleep(0.2 * (attempt + 1))
        if check and res.returncode != 0:
            raise SwarmHarnessError(
                f"`docker {' '.join(args)}` on {node.name} failed (rc {res.returncode}): "
                f"{res.stderr.strip()}"
            )
        return res

    def exec_in_netns(
        self, node: NodeHandle, argv: Sequence[str], **popen_kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start a process inside the node's network namespace (and its hostname).

        It listens on / talks from `node.addr`; DOCKER_HOST defaults to the node's
        dockerd. It is killed (with its process group) at tear-down.
        """
        env = dict(popen_kwargs.pop("env", None) or os.environ)
        env.setdefault("DOCKER_HOST", node.docker_host)
        popen_kwargs.setdefault("start_new_session", True)
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        full = [
            "nsenter", f"--net={node.netns_path}", "unshare", "--uts",
            "sh", "-c", 'hostname "$0" && exec "$@"', node.hostname, *argv,
        ]
        proc: subprocess.Popen[Any] = subprocess.Popen(full, env=env, **popen_kwargs)
        with self._lock:
            self._procs.append(proc)
        return proc

    def leader(self, probe_timeout: float = 2.0) -> NodeHandle | None:
        """The current raft leader, asked of every running manager; None while unknown.

        A manager that lost its leader blocks node listings until a new one is elected,
        so probes are short and parallel.
        """

        def ask(mgr: NodeHandle) -> str | None:
            api = docker.APIClient(base_url=mgr.docker_host, version=self.api_version,
                                   timeout=probe_timeout)
            try:
                for n in api.nodes(filters={"role": "manager"}):
                    if n.get("ManagerStatus", {}).get("Leader"):
                        return str(n["ID"])
            except (docker.errors.DockerException, OSError, ValueError):
                return None
            finally:
                api.close()
            return None

        running = [m for m in self.managers if self._dockerd_pid(m) is not None]
        if not running:
            return None
        with ThreadPoolExecutor(max_workers=len(running)) as pool:
            answers = list(pool.map(ask, running))
        for node_id in answers:
            if node_id is not None:
                with contextlib.suppress(KeyError):
                    return self.node(node_id)
        return None

    def wait_for(
        self, pred: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
    ) -> T:
        """Poll `pred` until truthy and return its value; raise WaitTimeout naming `what`."""
        deadline = time.monotonic() + timeout
        last_exc: BaseException | None = None
        while True:
            try:
                value = pred()
                if value:
                    return value
                last_exc = None
            except Exception as exc:
                last_exc = exc
            if time.monotonic() > deadline:
                detail = f" (last error: {last_exc!r})" if last_exc else ""
                raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
            time.sleep(interval)

    def remove_stack(self, stack: str, timeout: float = 60) -> None:
        """``docker stack rm`` that waits for the stack to be gone.

        Swarm removes the services at once but their tasks stop later, and until they
        have, removing the stack's network fails ("in use by task") and the CLI exits 1.
        That one error is retried; any other fails the test.
        """
        deadline = time.monotonic() + timeout
        while True:
            res = self.cli(self.manager, "stack", "rm", stack, check=False)
            if res.returncode == 0:
                break
            if "in use by task" not in res.stderr or time.monotonic() > deadline:
                raise SwarmHarnessError(
                    f"`docker stack rm {stack}` failed (rc {res.returncode}): "
                    f"{res.stderr.strip()}"
                )
            time.sleep(0.5)
        api = self.client(self.manager).api
        self.wait_for(
            lambda: not any(s["Spec"]["Name"].startswith(f"{stack}_") for s in api.services()),
            max(1.0, deadline - time.monotonic()),
            f"stack {stack} removed",
        )

    def log_tail(self, node: NodeHandle, lines: int = 30) -> str:
        path = self.log_dir / f"{node.name}.dockerd.log"
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"[{node.name}: no log at {path}]"
        return f"[{node.name} {path}]\n" + "\n".join(text)

    # -- tear-down --------------------------------------------------------------

    def teardown(self) -> None:
        """Remove everything this cluster made; safe to call again and after failures."""
        with self._lock:
            if self._torn_down:
                return
            self._torn_down = True
        t0 = time.monotonic()
        errors: list[str] = []

        def step(what: str, fn: Callable[[], object]) -> None:
            t = time.monotonic()
            try:
                fn()
            except Exception as exc:
                errors.append(f"{what}: {exc!r}")
            key = f"teardown.{what.split(' of ')[0].replace(' ', '_')}_s"
            self.timings[key] = self.timings.get(key, 0.0) + time.monotonic() - t

        step("stop test processes", self._stop_procs)
        for node in self.nodes:
            step(f"kill containers of {node.name}", partial(_kill_cgroup, node.cgroup_parent))
        step("swarm leave", lambda: self._parallel(self._leave, self.nodes, 8))
        for client in list(self._clients.values()):
            step("close client", client.close)
        self._clients.clear()
        step("stop dockerds", lambda: self._parallel(self._stop_quietly, self.nodes, 30))
        step("cleanup", lambda: errors.extend(cleanup_run(self.run_id, self.bridge)))
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self.timings["teardown_s"] = time.monotonic() - t0
        if errors:
            # Report, never raise: tear-down runs in finalizers where raising hides the
            # test's own failure.
            print(f"swarm harness tear-down problems: {errors}", file=sys.stderr)

    def _stop_procs(self) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)

    def _leave(self, node: NodeHandle) -> None:
        if self._dockerd_pid(node) is None:
            return
        with contextlib.suppress(Exception):
            client = docker.APIClient(base_url=node.docker_host, version=self.api_version,
                                      timeout=5)
            try:
                client.leave_swarm(force=True)
            finally:
                client.close()

    def _stop_quietly(self, node: NodeHandle) -> None:
        with contextlib.suppress(Exception):
            self.stop_dockerd(node, timeout=10)

    @staticmethod
    def _parallel(
        fn: Callable[[NodeHandle], object], nodes: Sequence[NodeHandle], timeout: float = 120
    ) -> None:
        if not nodes:
            return
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            for fut in [pool.submit(fn, n) for n in nodes]:
                fut.result(timeout)


def cleanup_run(run_id: str, bridge: str | None = None) -> list[str]:
    """Remove every trace of one run (by id): processes, mounts, cgroups, netns, links, dirs.

    Works from names alone, so it also cleans runs whose Python process died.
    Returns the problems it met (it never raises).
    """
    errors: list[str] = []
    tag = f"{PREFIX}{run_id}"
    base = RUN_ROOT / tag
    # dockerds by pidfile first (graceful), then anything still naming our dir.
    pids = []
    for pidfile in base.glob("*/d.pid"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(pidfile.read_text().strip()))
    for pid in pids:
        _kill(pid, signal.SIGTERM)
    for pid in _wait_pids_gone(pids, 10):
        _kill(pid, signal.SIGKILL)
    if base.exists():
        stragglers = _pids_referencing(base)
        for pid in stragglers:
            _kill(pid, signal.SIGKILL)
        _wait_pids_gone(stragglers, 5)
    netns_names = [
        line.split()[0]
        for line in _run(["ip", "netns", "list"], check=False).splitlines()
        if line.startswith(f"{tag}-")
    ]
    for ns in netns_names:
        _kill_cgroup(ns)
        ns_pids = [int(p) for p in _run(["ip", "netns", "pids", ns], check=False).split()]
        for pid in ns_pids:
            _kill(pid, signal.SIGKILL)
        _wait_pids_gone(ns_pids, 5)
    if base.exists():
        _umount_under(base)
    for ns in netns_names:
        with contextlib.suppress(SwarmHarnessError):
            _run(["ip", "netns", "del", ns])
        if Path(f"/var/run/netns/{ns}").exists():
            errors.append(f"netns {ns} still present")
    for link in _links_of(tag):
        subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
    bridge = bridge or f"br-{tag}"
    if shutil.which("iptables"):
        # -D until it fails: removes our FORWARD rule however many times it was added.
        for _ in range(5):
            if subprocess.run(["iptables", "-D", "FORWARD", "-i", bridge, "-o", bridge,
                               "-j", "ACCEPT"], capture_output=True, check=False).returncode:
                break
    if _links_of(tag):
        errors.append(f"links still present: {_links_of(tag)}")
    if base.exists():
        shutil.rmtree(base, ignore_errors=True)
        if base.exists():
            errors.append(f"{base} could not be removed")
    return errors


def _all_links() -> list[str]:
    out = _run(["ip", "-o", "link", "show"], check=False)
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def _links_of(tag: str) -> list[str]:
    """The bridge and host-side veths of one run."""
    return [n for n in _all_links() if n == f"br-{tag}" or n.startswith(f"v{tag}")]


def _owner_alive(run_id: str) -> bool:
    owner = RUN_ROOT / f"{PREFIX}{run_id}" / "owner"
    try:
        pid_s, start = owner.read_text().split()
    except (OSError, ValueError):
        return False
    return _proc_start_time(int(pid_s)) == start


def cleanup_stale() -> list[str]:
    """Clean runs whose owning process is gone (crashed or killed test runs).

    Runs of live processes (a concurrent pytest) are left alone. Returns run ids cleaned.
    """
    ids: set[str] = set()
    for path in RUN_ROOT.glob(f"{PREFIX}*"):
        if (m := _RUN_ID_RE.match(path.name)) and len(path.name) == len(PREFIX) + 6:
            ids.add(m.group(1))
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        if m := _RUN_ID_RE.match(line):
            ids.add(m.group(1))
    for link in _all_links():
        if m := _RUN_ID_RE.match(link.removeprefix("br-").removeprefix("v")):
            ids.add(m.group(1))
    cleaned = []
    for run_id in sorted(ids):
        if not _owner_alive(run_id):
            cleanup_run(run_id)
            cleaned.append(run_id)
    return cleaned


def _main(argv: Sequence[str]) -> int:
    if list(argv) != ["cleanup-stale"]:
        print("usage: python tests/support/swarm_harness.py cleanup-stale", file=sys.stderr)
        return 2
    cleaned = cleanup_stale()
    print(f"swarm harness: cleaned {len(cleaned)} stale run(s) {cleaned}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
