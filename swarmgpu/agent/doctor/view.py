"""What the checks read and what they return: the node's files once, as a NodeView, and
a Check per question; the paths they come from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from swarmgpu.agent.procroot import ProcRootView
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.tenants import TenantSpec
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.labels import DEFAULT_PREFIX

SWARMGPU_KIND = "NVIDIA-GPU"
# Fixture-only files: a fixture tree cannot hold device nodes, NVML or a live dockerd.
DEVICE_MANIFEST = "dev/.swarmgpu-devices.json"
FIXTURE_FACTS = ".swarmgpu-fixture/facts.json"
FIXTURE_DOCKER_INFO = ".swarmgpu-fixture/docker-info.json"

DAEMON_JSON = "etc/docker/daemon.json"
TOOLKIT_TOML = "etc/nvidia-container-runtime/config.toml"
DPKG_STATUS = "var/lib/dpkg/status"
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base")
# v1.18.0 made jit-cdi the default mode; the runtime ignored swarm-resource outside
# legacy mode until v1.19.0 (NVIDIA/nvidia-container-toolkit#1599, fixed by #1600).
JIT_CDI_DEFAULT_FROM = (1, 18, 0)
SWARM_IN_CDI_FROM = (1, 19, 0)

Version = tuple[int, int, int]

# Where the toolkit's cdi mode reads CDI specs and the kind it names GPUs by, unless
# [nvidia-container-runtime.modes.cdi] spec-dirs / default-kind say otherwise.
TOOLKIT_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
TOOLKIT_CDI_KIND = "nvidia.com/gpu"
# The kind whose devices the runtime makes a spec for as it starts each container
# (nvidia-container-toolkit modifier filterAutomaticDevices): no spec file is read
TOOLKIT_CDI_AUTOMATIC_KIND = "runtime.nvidia.com/gpu"
# dockerd's CDI spec dirs unless daemon.json's cdi-spec-dirs names others (cdi.DefaultSpecDirs)
DOCKERD_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
MAX_CDI_SPECS = 64  # spec files read per directory: a node has a few
# Spec text parsed in all (a generated one is some 50 KB): the YAML parse takes about a
# second a MiB (libyaml's parser), and an untrusted root's 64 files of 1 MiB a dir took
# most of an hour
MAX_CDI_BYTES = 2 << 20
# dockerd's CDI spec dirs looked in and shown (its CDISpecDirs, two by default): a
# proxy's answer may list thousands, each once looked in and named
MAX_ENGINE_CDI_DIRS = 8

# HAMi-core (Project-HAMi/HAMi-core), the library that enforces a GPU share inside a
# container: where HAMi installs it on a node, the preload file services mount at
# /etc/ld.so.preload, and the lock directory builds before 2026-02 (7970f7f) take.
HAMI_LIBS = ("usr/local/vgpu/libvgpu.so", "usr/local/lib/libvgpu.so", "usr/lib/libvgpu.so",
             "usr/lib/x86_64-linux-gnu/libvgpu.so")
HAMI_PRELOAD = "usr/local/vgpu/ld.so.preload"
HOST_PRELOAD = "etc/ld.so.preload"
HAMI_LOCK_DIR = "tmp/vgpulock"


class DoctorError(Exception):
    """The doctor cannot run at all (bad root, unreadable fixture file): exit code 2."""


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    id: str
    status: Status
    found: str
    why: str = ""
    fix: str = ""
    details: tuple[str, ...] = ()  # extra lines (a table), shown under the check
    # The text report's ``found`` and ``details`` where others' names in them (hostnames)
    # are cut there (``peertext.cell``); None: as the JSON, which has them whole.
    text_found: str | None = None
    text_details: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "status": str(self.status), "found": self.found,
            "why": self.why, "fix": self.fix, "details": list(self.details),
        }


@dataclass(frozen=True)
class Parsed:
    """One config file: its data, or why it could not be read (both None: absent); ``fix``
    when the file could not be read at all (permissions, a symlink loop, not a file)."""

    path: str
    data: dict[str, Any] | None = None
    error: str | None = None
    fix: str | None = None
    empty: bool = False  # blank: dockerd reads it as no settings at all

    @property
    def missing(self) -> bool:
        return self.data is None and self.error is None


@dataclass(frozen=True)
class CdiSpec:
    """A CDI spec file (``*.yaml``, ``*.json``; a ``*.yml`` one, which CDI never reads, is
    unread) as the node has it: its path as the node names it, the kind and device names
    it declares; or why it is not read."""

    path: str
    kind: str | None = None
    devices: frozenset[str] = frozenset()
    error: str | None = None
    size: int = 0  # characters of its text parsed (``MAX_CDI_BYTES``)
    stops: bool = False  # a spec dir CDI cannot look up: its scan reads no later dir
    note: str | None = None  # read, with what CDI leaves of it unread (a second document)
    version: str = ""  # its cdiVersion, read (no leading v), and the least its content needs
    needs: str = ""
    hangs: bool = False  # a FIFO or device: the runtime's read of it may never return
    skipped: bool = False  # its read fails: CDI records the error and loads the others
    refused: bool = False  # CDI refuses its content: records the error, loads the others
    next_stops: bool = False  # a spec dir CDI's unreleased main stops its scan at
    denied: bool = False  # a spec dir the doctor, not root, may not list or look up


def toolkit_cdi(data: Mapping[str, Any] | None) -> tuple[tuple[str, ...], str]:
    """The toolkit's CDI spec dirs and default kind as its config.toml sets them."""
    runtime = (data or {}).get("nvidia-container-runtime")
    modes = runtime.get("modes") if isinstance(runtime, dict) else None
    cdi = modes.get("cdi") if isinstance(modes, dict) else None
    cdi = cdi if isinstance(cdi, dict) else {}
    dirs = cdi.get("spec-dirs")
    kind = cdi.get("default-kind")
    # (none listed: CDI's WithSpecDirs, which the runtime hands them to, takes its defaults)
    listed = tuple(d for d in dirs if isinstance(d, str)) if isinstance(dirs, list) else ()
    return listed or TOOLKIT_CDI_DIRS, (kind if isinstance(kind, str) else TOOLKIT_CDI_KIND)


@dataclass(frozen=True)
class NodeView:
    """Everything the checks need, read once from the node (or a fixture tree)."""

    root: str
    daemon_json: Parsed
    toolkit_toml: Parsed
    toolkit_version: str | None  # as dpkg writes it, e.g. "1.17.8-1"
    proc_devices: dict[str, int] | None  # character devices: name -> major
    # "nvidia0" -> (major, minor); None: the path is not a character device
    dev_nodes: dict[str, tuple[int, int] | None]
    dev_char: frozenset[str] | None  # entries of /dev/char ("195:0"); None: no such dir
    cgroup_v2: bool
    cgroup_v1_devices: bool | None  # devices controller enabled (v1); None: /proc/cgroups absent
    sysfs_numa: dict[str, int] = field(default_factory=dict)  # pci bus id -> numa_node
    facts: NodeFacts | None = None
    # Why there are no facts though a source was asked (NVML cannot list the GPUs)
    facts_error: str | None = None
    facts_hung: bool = False  # the source did not answer within the doctor's deadline
    docker_info: Mapping[str, Any] | None = None
    docker_error: str | None = None  # why `docker info` could not be asked (live node)
    # where dockerd finds daemon.json's runtimes.nvidia.path (None: no path given)
    runtime: RuntimeLookup | None = None
    hami: HamiView | None = None
    # the CDI specs in the toolkit's spec dirs and dockerd's (docker info CDISpecDirs)
    cdi_specs: tuple[CdiSpec, ...] = ()
    # the spec dirs of more than MAX_CDI_SPECS files: (dir, files read, files left unread)
    cdi_left: tuple[tuple[str, int, int], ...] = ()
    # dockerd's spec dirs that are symlinks to a dir, each with its real dir, read in its
    # place where dockerd resolves them as it starts (29.2 on: ``enginelinks``)
    engine_cdi_links: tuple[tuple[str, str], ...] = ()
    # dockerd's spec dirs that are symlinks the doctor, not root, may not resolve
    engine_cdi_denied: tuple[str, ...] = ()
    # What the local agent on :9401 speaks: "http", "https", or None (not probed/none)
    agent_scheme: str | None = None
    # How the daemon grants GPUs (its placement.grants): "env", or "mounts" (doctor --grants)
    grants: str = "env"
    # What the agent's --proc-root shows (the live node, or doctor --proc-root); None: not read
    proc_root: ProcRootView | None = None
    # The daemon's agents.service (doctor --agents-service) and what Swarm says of it
    # (a manager's lists); None: not checked (another root: no swarm to ask)
    agents_service: str | None = None
    swarm: SwarmRead | None = None


@dataclass(frozen=True)
class AgentAnswer:
    """What a node's agent answered a read as the daemon's (``agent_client.fetch_facts``,
    handed over by the CLI: the agent does not import the manager): the host its facts
    name and their GPUs, or what answered instead and the fix; ``wrong``: an answer of
    another node (its certificate or its facts' host), which the daemon refuses;
    ``untold``: an answer for a node Swarm names no host of, without a node certificate
    (agents.identity none), which the daemon refuses too: nothing tells whose it is."""

    host: str | None = None
    gpus: int = 0
    cause: str = ""
    fix: str = ""
    wrong: bool = False
    untold: bool = False


@dataclass(frozen=True)
class SwarmRead:
    """Swarm's lists, as a manager answers them, or why they could not be read (a worker
    cannot list services); ``prefix``: the daemon's ``sync.prefix``, under which label
    sync's labels mark a GPU node; ``kind``: its ``placement.generic_resource_kind``, a
    GPU generic resource kind beside the usual ones; ``agents``: each node's agent's
    answer to a read as the daemon's; ``tenants``: its tenancy config's tenants, of
    which none may match the agents' service."""

    nodes: Sequence[SwarmNode] = ()
    services: Sequence[SwarmService] = ()
    tasks: Sequence[SwarmTask] = ()
    error: str | None = None
    prefix: str = DEFAULT_PREFIX
    kind: str = ""
    # the nodes and services the lists left out, without an ID (``swarm.unkeyed``)
    unkeyed: tuple[str, ...] = ()
    # node id -> its agent's answer; None: not asked (``agentanswers``)
    agents: Mapping[str, AgentAnswer] | None = None
    tenants: Sequence[TenantSpec] = ()  # the daemon's config's tenants (--config)


@dataclass(frozen=True)
class RuntimeLookup:
    """Where dockerd finds a runtime's path: the file it runs, as the node names it, or
    None; the files of that name it passes over (no execute bit); for a bare name the
    PATH searched and whose it is (the root's standard one, or this environment's); or why
    no program can look the path up at all."""

    found: str | None
    not_executable: tuple[str, ...] = ()
    search: tuple[str, ...] = ()  # empty: a path, not looked up
    search_from: str = ""
    refused: str | None = None  # why the kernel refuses the path (rootpath.refusal): unread


@dataclass(frozen=True)
class HamiView:
    """HAMi-core's pieces on the node: library files (path -> looks like ELF), preload
    files (path -> the libraries they name), the lock directory."""

    libs: dict[str, bool] = field(default_factory=dict)
    preloads: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lock_dir: bool = False


def daemon_json_unusable(view: NodeView, check_id: str) -> Check | None:
    if view.daemon_json.data is None:
        return Check(check_id, Status.SKIP,
                     f"{view.daemon_json.path} is missing or unreadable (see docker.daemon-json)")
    return None


def quote(values: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


NODE_CONFIG_HINT = "`swarmgpu node-config` prints the fragment for this node"
# The toolkit's keys for NVIDIA's own defence (placement.grants: mounts)
ENVVAR_UNPRIVILEGED = "accept-nvidia-visible-devices-envvar-when-unprivileged"
AS_VOLUME_MOUNTS = "accept-nvidia-visible-devices-as-volume-mounts"
