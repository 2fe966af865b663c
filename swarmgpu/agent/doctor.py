"""`swarmgpu doctor`: is this node set up so that Swarm GPU services get exactly their GPUs?

The GPU-on-containers debugging handbook, made into checks. Each check reads a
:class:`NodeView` (everything taken from the node's files once, under a root directory)
and returns a :class:`Check`: id, status, what was found, why it matters, and the fix.
The checks are pure, so tests point them at fixture trees (``tests/doctor_roots/``).

Never executes anything from the root: the toolkit's version comes from the dpkg
status file, device numbers from ``os.stat`` (or, in a fixture tree, from the
manifest ``dev/.swarmgpu-devices.json``, since committed files cannot be device nodes).
See docs/doctor.md for every check and the fixture conventions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from swarmgpu.core.model import FactsError, NodeFacts

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "status": str(self.status), "found": self.found,
            "why": self.why, "fix": self.fix, "details": list(self.details),
        }


@dataclass(frozen=True)
class Parsed:
    """One config file: its data, or why it could not be read (both None: absent)."""

    path: str
    data: dict[str, Any] | None = None
    error: str | None = None

    @property
    def missing(self) -> bool:
        return self.data is None and self.error is None


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
    docker_info: Mapping[str, Any] | None = None
    hami: HamiView | None = None
    # What the local agent on :9401 speaks: "http", "https", or None (not probed/none)
    agent_scheme: str | None = None


@dataclass(frozen=True)
class HamiView:
    """HAMi-core's pieces on the node: library files (path -> looks like ELF), preload
    files (path -> the libraries they name), the lock directory."""

    libs: dict[str, bool] = field(default_factory=dict)
    preloads: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lock_dir: bool = False


# --- reading the root ---------------------------------------------------------------


def _under(root: str, rel: str) -> Path:
    return Path(root) / rel


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DoctorError(f"{path}: cannot read ({exc.strerror}); run as root?") from exc


def _parse_daemon_json(root: str) -> Parsed:
    path = _under(root, DAEMON_JSON)
    text = _read_text(path)
    if text is None:
        return Parsed(str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Parsed(str(path), error=f"not valid JSON: {exc.msg} at line {exc.lineno} "
                                       f"column {exc.colno}")
    if not isinstance(data, dict):
        return Parsed(str(path), error=f"expected a JSON object, got {type(data).__name__}")
    return Parsed(str(path), data=data)


def _parse_toolkit_toml(root: str) -> Parsed:
    path = _under(root, TOOLKIT_TOML)
    text = _read_text(path)
    if text is None:
        return Parsed(str(path))
    try:
        return Parsed(str(path), data=tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        return Parsed(str(path), error=f"not valid TOML: {exc}")


def dpkg_version(status_text: str, packages: Sequence[str] = TOOLKIT_PACKAGES) -> str | None:
    """Installed version of the first of ``packages`` found in a dpkg status file."""
    found: dict[str, str] = {}
    for stanza in re.split(r"\n\s*\n", status_text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line[:1].isspace():
                fields[key.strip()] = value.strip()
        name = fields.get("Package", "")
        if name in packages and fields.get("Status", "").endswith(" installed"):
            found[name] = fields.get("Version", "")
    return next((found[p] for p in packages if found.get(p)), None)


def parse_version(text: str) -> tuple[Version, bool] | None:
    """``1.17.8-1`` -> ((1, 17, 8), False); ``1.19.0~rc.2-1`` -> ((1, 19, 0), True)."""
    m = re.match(r"^(?:\d+:)?(\d+)\.(\d+)(?:\.(\d+))?([~+-].*)?$", text.strip())
    if not m:
        return None
    prerelease = bool(m.group(4)) and m.group(4).startswith("~")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)), prerelease


def parse_proc_devices(text: str) -> dict[str, int]:
    """The "Character devices:" part of /proc/devices: name -> major."""
    out: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            in_char = line.strip().startswith("Character")
            continue
        parts = line.split()
        if in_char and len(parts) == 2 and parts[0].isdigit():
            out.setdefault(parts[1], int(parts[0]))
    return out


def _parse_devnum(value: Any, where: str) -> tuple[int, int] | None:
    if value is None:
        return None
    m = re.match(r"^(\d+):(\d+)$", str(value))
    if not m:
        raise DoctorError(f"{where}: {value!r} is not MAJOR:MINOR (e.g. \"195:0\"), or null "
                          "for a path that exists but is not a character device")
    return int(m.group(1)), int(m.group(2))


def _read_devices(root: str) -> tuple[dict[str, tuple[int, int] | None], frozenset[str] | None]:
    manifest = _under(root, DEVICE_MANIFEST)
    text = _read_text(manifest)
    if text is not None:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DoctorError(f"{manifest}: not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("nodes", {}), dict):
            raise DoctorError(f"{manifest}: expected {{\"nodes\": {{\"nvidia0\": \"195:0\"}}, "
                              "\"char\": [\"195:0\"]}")
        nodes = {str(k): _parse_devnum(v, f"{manifest}: nodes.{k}")
                 for k, v in data.get("nodes", {}).items()}
        char = data.get("char")
        return nodes, None if char is None else frozenset(str(c) for c in char)
    dev = _under(root, "dev")
    nodes = {}
    for path in sorted([*dev.glob("nvidia*"), *dev.glob("nvidia-caps/*")]):
        if path.is_dir():
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # dangling or vanished: reported as missing if it is needed
        rel = str(path.relative_to(dev))
        nodes[rel] = (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(
            st.st_mode) else None
    char_dir = dev / "char"
    chars = frozenset(p.name for p in char_dir.iterdir()) if char_dir.is_dir() else None
    return nodes, chars


def _read_sysfs_numa(root: str) -> dict[str, int]:
    out: dict[str, int] = {}
    base = _under(root, "sys/bus/pci/devices")
    if not base.is_dir():
        return out
    for d in base.iterdir():
        text = _read_text(d / "numa_node")
        if text is not None and text.strip().lstrip("-").isdigit():
            out[norm_bus_id(d.name)] = int(text.strip())
    return out


def _load_fixture_json(root: str, rel: str) -> Any:
    path = _under(root, rel)
    text = _read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DoctorError(f"{path}: not valid JSON: {exc}") from exc


def read_view(root: str = "/", *, facts: NodeFacts | None = None,
              docker_info: Mapping[str, Any] | None = None) -> NodeView:
    """Read the node under ``root`` once. Raises DoctorError when that is impossible."""
    if not Path(root).is_dir():
        raise DoctorError(f"root {root!r} is not a directory; pass --root DIR of a node's "
                          "filesystem (default /)")
    if facts is None:
        raw = _load_fixture_json(root, FIXTURE_FACTS)
        if raw is not None:
            try:
                facts = NodeFacts.from_dict(raw, where=str(_under(root, FIXTURE_FACTS)))
            except FactsError as exc:
                raise DoctorError(str(exc)) from exc
    if docker_info is None:
        docker_info = _load_fixture_json(root, FIXTURE_DOCKER_INFO)
    status_text = _read_text(_under(root, DPKG_STATUS))
    devices_text = _read_text(_under(root, "proc/devices"))
    cgroups_text = _read_text(_under(root, "proc/cgroups"))
    nodes, chars = _read_devices(root)
    return NodeView(
        root=root,
        daemon_json=_parse_daemon_json(root),
        toolkit_toml=_parse_toolkit_toml(root),
        toolkit_version=dpkg_version(status_text) if status_text is not None else None,
        proc_devices=parse_proc_devices(devices_text) if devices_text is not None else None,
        dev_nodes=nodes,
        dev_char=chars,
        cgroup_v2=_under(root, "sys/fs/cgroup/cgroup.controllers").is_file(),
        cgroup_v1_devices=None if cgroups_text is None else _devices_enabled(cgroups_text),
        sysfs_numa=_read_sysfs_numa(root),
        facts=facts,
        docker_info=docker_info,
        hami=_read_hami(root),
    )


def _read_hami(root: str) -> HamiView:
    libs: dict[str, bool] = {}
    for rel in HAMI_LIBS:
        path = _under(root, rel)
        if path.is_file():
            try:
                with open(path, "rb") as fh:
                    libs["/" + rel] = fh.read(4) == b"\x7fELF"
            except OSError:
                libs["/" + rel] = False
    preloads: dict[str, tuple[str, ...]] = {}
    for rel in (HAMI_PRELOAD, HOST_PRELOAD):
        text = _read_text(_under(root, rel))
        if text is not None:
            # ld.so.preload: whitespace- or colon-separated paths, '#' comments
            words = re.split(r"[\s:]+", re.sub(r"#.*", "", text))
            preloads["/" + rel] = tuple(w for w in words if w)
    return HamiView(libs, preloads, _under(root, HAMI_LOCK_DIR).is_dir())


def _devices_enabled(proc_cgroups: str) -> bool:
    for line in proc_cgroups.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "devices":
            return parts[3] == "1"
    return False


# --- small shared helpers --------------------------------------------------------------


def norm_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` and ``0000:3b:00.0`` are the same device: ``0000:3b:00.0``."""
    s = bus_id.strip().lower()
    domain, sep, rest = s.partition(":")
    if sep and rest.count(":") == 1 and all(c in "0123456789abcdef" for c in domain):
        return f"{int(domain, 16):04x}:{rest}"
    return s


def env_name(kind: str) -> str:
    """The variable Swarm sets in a task for a generic resource (swarmkit EnvFormat)."""
    return f"DOCKER_RESOURCE_{kind.upper()}"


@dataclass(frozen=True)
class GenericResource:
    kind: str
    value: str

    @property
    def discrete(self) -> bool:
        return self.value.isdigit()


def parse_generic_resources(entries: Any, where: str) -> tuple[list[GenericResource], list[str]]:
    """``["NVIDIA-GPU=GPU-..."]`` -> resources, plus errors naming bad entries."""
    if entries is None:
        return [], []
    if not isinstance(entries, list):
        return [], [f"{where}: expected a list of \"KIND=VALUE\" strings"]
    out: list[GenericResource] = []
    errors: list[str] = []
    for n, e in enumerate(entries):
        kind, sep, value = str(e).partition("=")
        if not isinstance(e, str) or not sep or not kind.strip() or not value.strip():
            errors.append(f"{where}[{n}]: {e!r} is not KIND=VALUE (e.g. NVIDIA-GPU=GPU-<uuid>)")
            continue
        out.append(GenericResource(kind.strip(), value.strip()))
    return out, errors


def _from_docker_info(info: Mapping[str, Any]) -> list[GenericResource] | None:
    raw = info.get("GenericResources")
    if raw is None:
        return None
    out = []
    for gr in raw or []:
        for key in ("NamedResourceSpec", "DiscreteResourceSpec"):
            spec = gr.get(key) if isinstance(gr, Mapping) else None
            if isinstance(spec, Mapping):
                out.append(GenericResource(str(spec.get("Kind", "")), str(spec.get("Value", ""))))
    return out


def _gpu_kind(r: GenericResource) -> bool:
    return (r.value.startswith(("GPU-", "MIG-")) or "GPU" in r.kind.upper()
            or r.kind.lower() == "nvidia.com/gpu")


def _gpu_kinds(view: NodeView) -> list[str]:
    data = view.daemon_json.data or {}
    res, _ = parse_generic_resources(data.get("node-generic-resources"), "node-generic-resources")
    if not res and view.docker_info is not None:
        res = _from_docker_info(view.docker_info) or []
    return sorted({r.kind for r in res if _gpu_kind(r)})


def _daemon_json_unusable(view: NodeView, check_id: str) -> Check | None:
    if view.daemon_json.data is None:
        return Check(check_id, Status.SKIP,
                     f"{view.daemon_json.path} is missing or unreadable (see docker.daemon-json)")
    return None


def _quote(values: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


# --- the checks ----------------------------------------------------------------------

NODE_CONFIG_HINT = "`swarmgpu node-config` prints the fragment for this node"


def check_daemon_json(view: NodeView) -> Check:
    p = view.daemon_json
    why = ("Docker's daemon.json is where a GPU node gets its default runtime and its "
           "GPUs as Swarm generic resources.")
    if p.missing:
        return Check("docker.daemon-json", Status.FAIL, f"{p.path} does not exist", why,
                     f"Create it ({NODE_CONFIG_HINT}), then `systemctl restart docker`.")
    if p.error is not None:
        return Check("docker.daemon-json", Status.FAIL, f"{p.path}: {p.error}", why,
                     "Fix the syntax (`python3 -m json.tool` shows where); dockerd refuses "
                     "to start with an invalid daemon.json.")
    return Check("docker.daemon-json", Status.OK, f"{p.path} parses")


def check_default_runtime(view: NodeView) -> Check:
    cid = "runtime.default"
    skip = _daemon_json_unusable(view, cid)
    if skip:
        return skip
    data = view.daemon_json.data or {}
    why = ("Swarm has no per-service runtime (no --runtime, no --gpus for services): task "
           "containers run with Docker's default runtime, so unless that is the NVIDIA "
           "runtime the toolkit never sees the task and the container gets no GPU.")
    fix = ('Set "default-runtime": "nvidia" and "runtimes": {"nvidia": {"path": '
           '"nvidia-container-runtime", "runtimeArgs": []}} in daemon.json '
           f"({NODE_CONFIG_HINT}; or `nvidia-ctk runtime configure --runtime=docker "
           "--set-as-default`), then `systemctl restart docker`.")
    default = data.get("default-runtime")
    runtimes = data.get("runtimes")
    nvidia = runtimes.get("nvidia") if isinstance(runtimes, dict) else None
    path = nvidia.get("path") if isinstance(nvidia, dict) else None
    problems = []
    if default != "nvidia":
        problems.append(f"default-runtime is {json.dumps(default) if default else 'not set'}")
    if not path:
        problems.append("runtimes.nvidia (with a path) is not defined")
    if problems:
        return Check(cid, Status.FAIL, "; ".join(problems), why, fix)
    info = view.docker_info
    live = info.get("DefaultRuntime") if info is not None else None
    if info is not None and live is not None:
        live_runtimes = info.get("Runtimes") or {}
        if live != "nvidia" or "nvidia" not in live_runtimes:
            return Check(
                cid, Status.FAIL,
                f'daemon.json says "nvidia" but the running dockerd uses {live!r} '
                f"(runtimes {sorted(live_runtimes)})",
                "dockerd reads daemon.json only when it starts: the file was edited after.",
                "`systemctl restart docker` (running tasks restart with it).")
    live_note = "" if live is None else "; the running dockerd agrees"
    return Check(cid, Status.OK, f"default-runtime nvidia ({path}){live_note}")


def check_generic_resources(view: NodeView) -> Check:
    cid = "resources.generic"
    skip = _daemon_json_unusable(view, cid)
    if skip:
        return skip
    data = view.daemon_json.data or {}
    configured, errors = parse_generic_resources(
        data.get("node-generic-resources"), "daemon.json node-generic-resources")
    why_fmt = ("Swarm hands each task named values of this node's generic resources and the "
               "toolkit exposes exactly those GPUs; the list is read only when dockerd starts.")
    if errors:
        return Check(cid, Status.FAIL, "; ".join(errors), why_fmt,
                     f"Write one \"KIND=GPU-<uuid>\" per GPU ({NODE_CONFIG_HINT}).")
    live = _from_docker_info(view.docker_info) if view.docker_info is not None else None
    source = "daemon.json"
    if not configured and live:
        configured, source = live, "dockerd flags (--node-generic-resource)"
    elif live is not None and sorted(map(str, live)) != sorted(map(str, configured)):
        only_file = sorted(f"{r.kind}={r.value}" for r in set(configured) - set(live))
        only_live = sorted(f"{r.kind}={r.value}" for r in set(live) - set(configured))
        return Check(
            cid, Status.FAIL,
            f"daemon.json and the running dockerd differ: only in the file "
            f"[{_quote(only_file)}], only in dockerd [{_quote(only_live)}]", why_fmt,
            "`systemctl restart docker` so dockerd (and Swarm) read the current list.")
    gpu = [r for r in configured if _gpu_kind(r)]
    facts = view.facts
    n_gpus = len(facts.gpus) if facts is not None else None
    if not gpu:
        if n_gpus == 0:
            return Check(cid, Status.OK, "no GPUs on this node and none advertised")
        return Check(
            cid, Status.FAIL, f"no GPU generic resources in {source}",
            "Without them Swarm does not know this node has GPUs: a service reserving "
            f"{SWARMGPU_KIND} is never placed here, and one reserving nothing gets no GPU.",
            f'Add "node-generic-resources": ["{SWARMGPU_KIND}=GPU-<uuid>", ...] '
            f"({NODE_CONFIG_HINT}), then `systemctl restart docker`.")
    discrete = [r for r in gpu if r.discrete]
    if discrete:
        r = discrete[0]
        return Check(
            cid, Status.FAIL, f"{r.kind}={r.value} is a count, not GPU UUIDs",
            f"For a count Swarm sets {env_name(r.kind)}=<number reserved> in the task, and "
            "the toolkit reads that number as a GPU index: every task reserving 1 GPU gets "
            "GPU 1, all of them the same one, whatever Swarm thinks it handed out.",
            f"List one named value per GPU instead: {r.kind}=GPU-<uuid> for each "
            f"({NODE_CONFIG_HINT}).")
    if facts is None:
        return Check(cid, Status.SKIP,
                     f"{len(gpu)} GPU value(s) advertised; no GPU facts to compare them with "
                     "(run on the node with NVML, or give facts)")
    present = {g.uuid for g in facts.gpus} | {m.uuid for g in facts.gpus for m in g.mig_devices}
    advertised = {r.value for r in gpu}
    stale = sorted(advertised - present)
    missing = [g for g in facts.gpus
               if g.uuid not in advertised and not any(m.uuid in advertised for m in g.mig_devices)]
    found = []
    if stale:
        found.append(f"advertised but not on this node: {_quote(stale)}")
    if missing:
        found.append("on this node but not advertised: "
                     + _quote([f"GPU{g.index} {g.uuid}" for g in missing]))
    if found:
        return Check(
            cid, Status.FAIL, "; ".join(found),
            "A stale UUID (a replaced GPU, or another node's list copied here) is handed to a "
            "task whose container then fails to start; a GPU left out is never given to any "
            "service. " + why_fmt,
            f"Make node-generic-resources list exactly this node's GPU UUIDs "
            f"({NODE_CONFIG_HINT}), then `systemctl restart docker`.")
    return Check(cid, Status.OK,
                 f"{len(advertised)} value(s) of kind {', '.join(sorted({r.kind for r in gpu}))} "
                 f"match the {len(facts.gpus)} GPU(s) NVML sees ({source})")


def check_swarm_resource(view: NodeView) -> Check:
    cid = "toolkit.swarm-resource"
    p = view.toolkit_toml
    if p.missing:
        return Check(cid, Status.FAIL, f"{p.path} does not exist",
                     "Without the NVIDIA container toolkit no container gets a GPU.",
                     "Install nvidia-container-toolkit (NVIDIA's apt/yum repository), then "
                     "set swarm-resource as `swarmgpu node-config` prints.")
    if p.error is not None or p.data is None:
        return Check(cid, Status.FAIL, f"{p.path}: {p.error}",
                     "The toolkit cannot read its configuration.",
                     "Fix the syntax; `nvidia-ctk config default` prints a valid file.")
    kinds = _gpu_kinds(view) or [SWARMGPU_KIND]
    needed = [env_name(k) for k in kinds]
    why_all = ("Swarm passes the GPUs it reserved in DOCKER_RESOURCE_<KIND>; the toolkit only "
               "reads the variable(s) named by swarm-resource. Otherwise it falls back to "
               "NVIDIA_VISIBLE_DEVICES, which CUDA images set to \"all\": every container sees "
               "every GPU, whatever Swarm reserved.")
    fix = (f'Put swarm-resource = "{",".join(needed)}" at the top of /{TOOLKIT_TOML} (above '
           "the first [section]); no restart needed, it is read for each container.")
    misplaced = [name for name, table in p.data.items()
                 if isinstance(table, dict) and "swarm-resource" in table]
    value = p.data.get("swarm-resource")
    if value is None and misplaced:
        return Check(cid, Status.FAIL,
                     f"swarm-resource is inside [{misplaced[0]}], not at the top level",
                     "A key after a [section] header belongs to that section (a line appended "
                     "at the end of the file lands in the last one); the toolkit reads only the "
                     "top-level key. " + why_all, fix)
    if not value:
        return Check(cid, Status.FAIL,
                     "swarm-resource is not set (the shipped file has it commented out)",
                     why_all, fix)
    names = [v.strip() for v in str(value).split(",") if v.strip()]
    absent = [n for n in needed if n not in names]
    if absent:
        return Check(
            cid, Status.FAIL,
            f"swarm-resource = {json.dumps(value)} but this node advertises kind "
            f"{', '.join(kinds)}, whose variable is {', '.join(absent)}",
            "Docker's docs use kind NVIDIA-GPU, whose variable DOCKER_RESOURCE_NVIDIA-GPU the "
            "commented example DOCKER_RESOURCE_GPU never matches "
            "(NVIDIA/nvidia-container-toolkit#57). " + why_all, fix)
    return Check(cid, Status.OK, f"swarm-resource = {json.dumps(value)} covers kind "
                                 f"{', '.join(kinds)}")


def check_toolkit_mode(view: NodeView) -> Check:
    cid = "toolkit.mode"
    data = view.toolkit_toml.data
    if data is None:
        return Check(cid, Status.SKIP, "no readable toolkit config.toml (see "
                                       "toolkit.swarm-resource)")
    runtime = data.get("nvidia-container-runtime")
    mode = str(runtime.get("mode", "auto")) if isinstance(runtime, dict) else "auto"
    version_text = view.toolkit_version
    parsed = parse_version(version_text) if version_text else None
    why = ("Before v1.19.0 the NVIDIA runtime ignored swarm-resource in every mode but "
           "legacy; v1.18.0 made jit-cdi the default, so a plain upgrade silently gave every "
           "Swarm container every GPU (NVIDIA/nvidia-container-toolkit#1599, fixed by #1600).")
    fix = ("Upgrade nvidia-container-toolkit to 1.19.0 or later, or set mode = \"legacy\" "
           "under [nvidia-container-runtime] in config.toml.")
    where = f"mode {mode!r}, toolkit {version_text or 'version unknown'}"
    if mode == "legacy":
        return Check(cid, Status.OK, f"{where}: legacy mode honours swarm-resource")
    if parsed is None:
        return Check(cid, Status.WARN,
                     f"{where} (no nvidia-container-toolkit in {DPKG_STATUS}; rpm and "
                     "tarball installs are not read)", why,
                     "Check `nvidia-ctk --version`; " + fix)
    version, pre = parsed
    effective = mode
    if mode == "auto":
        effective = "jit-cdi" if version >= JIT_CDI_DEFAULT_FROM else "legacy"
    if effective == "legacy":
        return Check(cid, Status.OK, f"{where}: auto resolves to legacy before 1.18.0")
    if version < SWARM_IN_CDI_FROM or (version == SWARM_IN_CDI_FROM and pre):
        return Check(cid, Status.FAIL, f"{where}: effective mode {effective} ignores Swarm's "
                                       "GPU assignment in this version", why, fix)
    return Check(cid, Status.OK, f"{where}: {effective} honours swarm-resource since 1.19.0")


# Device nodes the driver owns: /dev name -> (/proc/devices names, expected minor).
def _expected_device(name: str) -> tuple[tuple[str, ...], int | None] | None:
    frontend = ("nvidia-frontend", "nvidia")
    fixed = {"nvidiactl": (frontend, 255), "nvidia-modeset": (frontend, 254),
             "nvidia-uvm": (("nvidia-uvm",), 0), "nvidia-uvm-tools": (("nvidia-uvm",), 1),
             "nvidia-nvswitchctl": (("nvidia-nvswitch",), None)}
    if name in fixed:
        names, minor = fixed[name]
        return names, minor
    if m := re.fullmatch(r"nvidia(\d+)", name):
        return frontend, int(m.group(1))
    if m := re.fullmatch(r"nvidia-caps/nvidia-cap(\d+)", name):
        return ("nvidia-caps",), int(m.group(1))
    if re.fullmatch(r"nvidia-nvswitch\d+", name):
        return ("nvidia-nvswitch",), None
    return None


def _required_nodes(view: NodeView) -> list[str]:
    if view.facts is not None and view.facts.gpus:
        gpus = [f"nvidia{g.index}" for g in view.facts.gpus]
    else:
        gpus = sorted(n for n in view.dev_nodes if re.fullmatch(r"nvidia\d+", n))[:1] or ["nvidia0"]
    return ["nvidiactl", "nvidia-uvm", *gpus]


def check_device_nodes(view: NodeView) -> Check:
    cid = "devices.nodes"
    why = ("The toolkit bind-mounts /dev/nvidia* into the container and allows their "
           "major:minor in its device cgroup; a node whose numbers are not the driver's (left "
           "over from an older driver, made by hand or by an image) opens the wrong device or "
           "is denied, and CUDA fails with 'no CUDA-capable device' or an NVML 'Unknown Error'.")
    if view.proc_devices is None:
        return Check(cid, Status.SKIP, f"{view.root.rstrip('/')}/proc/devices is absent")
    majors = view.proc_devices
    if not any(n in majors for n in ("nvidia-frontend", "nvidia")):
        return Check(cid, Status.FAIL, "no nvidia driver in /proc/devices",
                     "The NVIDIA kernel module is not loaded: no container can get a GPU.",
                     "Install/load the driver (`modprobe nvidia`; check `dmesg` and Secure "
                     "Boot module signing).")
    problems: list[str] = []
    fixes: list[str] = []
    if "nvidia-uvm" not in majors:
        problems.append("nvidia-uvm is not loaded")
        fixes.append("`modprobe nvidia-uvm && nvidia-modprobe -u -c=0` (and add nvidia-uvm to "
                     "/etc/modules-load.d so it loads at boot)")
    for name in _required_nodes(view):
        if name == "nvidia-uvm" and "nvidia-uvm" not in majors:
            continue
        if name not in view.dev_nodes:
            problems.append(f"/dev/{name} is missing")
            fixes.append("`nvidia-modprobe -c=0 -u` (or `nvidia-smi` once, as root) creates "
                         "the missing nodes")
    for name, num in sorted(view.dev_nodes.items()):
        expected = _expected_device(name)
        if expected is None:
            continue
        names, minor = expected
        major = next((majors[n] for n in names if n in majors), None)
        if num is None:
            problems.append(f"/dev/{name} is not a character device")
        elif major is None:
            problems.append(f"/dev/{name} is {num[0]}:{num[1]} but /proc/devices has no "
                            f"{names[0]} driver")
        elif num[0] != major or (minor is not None and num[1] != minor):
            want = f"{major}:{minor if minor is not None else '*'}"
            problems.append(f"/dev/{name} is {num[0]}:{num[1]}, the driver's is {want}")
        else:
            continue
        fixes.append(f"`rm /dev/{name}` and recreate it: `nvidia-modprobe -u -c=0` (or "
                     f"`mknod -m 666 /dev/{name} c {major if major is not None else 'MAJOR'} "
                     f"{minor if minor is not None else 'MINOR'}`)")
    if problems:
        return Check(cid, Status.FAIL, "; ".join(problems), why,
                     "; ".join(dict.fromkeys(fixes)) + ".")
    shown = ", ".join(f"{n}={v[0]}:{v[1]}" for n, v in sorted(view.dev_nodes.items())
                      if v is not None and n in _required_nodes(view))
    return Check(cid, Status.OK, f"device numbers match /proc/devices ({shown})")


def check_cgroup(view: NodeView) -> Check:
    cid = "cgroup.devices"
    if view.cgroup_v2:
        return Check(cid, Status.OK, "cgroup v2: runc enforces device access with eBPF; "
                                     "there is no devices controller to enable")
    if view.cgroup_v1_devices is None:
        return Check(cid, Status.SKIP, "neither sys/fs/cgroup/cgroup.controllers nor "
                                       "proc/cgroups under the root: cgroup version unknown")
    if view.cgroup_v1_devices:
        return Check(cid, Status.OK, "cgroup v1 with the devices controller enabled")
    return Check(
        cid, Status.FAIL, "cgroup v1 and the devices controller is absent or disabled in "
                          "/proc/cgroups",
        "nvidia-container-cli writes the GPU's major:minor into the container's devices cgroup; "
        "without the controller GPU containers fail to start ('cgroup subsystem devices not "
        "found').",
        "Remove cgroup_disable=devices from the kernel command line, or boot with cgroup v2 "
        "(systemd.unified_cgroup_hierarchy=1).")


def check_dev_char_links(view: NodeView) -> Check:
    cid = "cgroup.dev-char-links"
    info = view.docker_info
    driver = info.get("CgroupDriver") if info is not None else None
    if driver is None:
        # Docker picks the systemd driver on cgroup v2 hosts booted with systemd.
        driver = "systemd (assumed: cgroup v2)" if view.cgroup_v2 else None
    if driver is None or not str(driver).startswith("systemd"):
        return Check(cid, Status.SKIP if driver is None else Status.OK,
                     f"cgroup driver {driver or 'unknown (no docker info)'}: the /dev/char "
                     "trap needs the systemd cgroup driver")
    if view.dev_char is None and not view.dev_nodes:
        return Check(cid, Status.SKIP, "no /dev/nvidia* nodes to check")
    have = view.dev_char or frozenset()
    wanted = {n: v for n, v in view.dev_nodes.items()
              if v is not None and n in _required_nodes(view)}
    missing = sorted(f"/dev/char/{v[0]}:{v[1]} (-> {n})" for n, v in wanted.items()
                     if f"{v[0]}:{v[1]}" not in have)
    if missing:
        return Check(
            cid, Status.WARN, f"cgroup driver {driver}; missing {_quote(missing)}",
            "With the systemd cgroup driver, every `systemctl daemon-reload` makes systemd "
            "re-apply each container's device rules by /dev/char/MAJOR:MINOR path; GPUs whose "
            "link is missing are dropped, and running containers start failing with 'Failed to "
            "initialize NVML: Unknown Error' (NVIDIA/nvidia-container-toolkit#48).",
            "`nvidia-ctk system create-dev-char-symlinks --create-all` (and its udev rule so "
            "they survive reboots), or run dockerd with exec-opts native.cgroupdriver=cgroupfs.")
    return Check(cid, Status.OK, f"cgroup driver {driver}; /dev/char links exist for the "
                                 "GPU device nodes")


def check_device_order(view: NodeView) -> Check:
    cid = "gpu.order"
    facts = view.facts
    if facts is None:
        return Check(cid, Status.SKIP, "no GPU facts")
    if len(facts.gpus) < 2:
        return Check(cid, Status.OK, f"{len(facts.gpus)} GPU: nothing to order")
    fix = ("Set CUDA_DEVICE_ORDER=PCI_BUS_ID in GPU services (`--env` / compose "
           "`environment:`) so CUDA numbers the visible GPUs as nvidia-smi does, and address "
           "GPUs by UUID, never by index.")
    by_index = sorted(facts.gpus, key=lambda g: g.index)
    products = sorted({g.product for g in facts.gpus})
    found: list[str] = []
    if all(g.pci_bus_id for g in by_index):
        buses = [norm_bus_id(g.pci_bus_id) for g in by_index]
        if buses != sorted(buses):
            found.append("NVML index order differs from PCI bus order: "
                         + ", ".join(f"GPU{g.index}={b}" for g, b in zip(by_index, buses,
                                                                          strict=True)))
    if len(products) > 1:
        found.append(f"mixed products ({', '.join(products)})")
    if found:
        return Check(
            cid, Status.WARN, "; ".join(found),
            "CUDA numbers devices fastest-first by default (CUDA_DEVICE_ORDER=FASTEST_FIRST), "
            "nvidia-smi and NVML by PCI bus: inside a container 'device 0' need not be the GPU "
            "a tool, a log or an index-based setting refers to.", fix)
    return Check(cid, Status.OK, "identical GPUs with NVML indices in PCI bus order; "
                                 "CUDA_DEVICE_ORDER=PCI_BUS_ID is still the safe default")


def check_numa(view: NodeView) -> Check:
    cid = "gpu.numa"
    facts = view.facts
    if facts is None:
        return Check(cid, Status.SKIP, "no GPU facts")
    rows = []
    unknown = []
    for g in sorted(facts.gpus, key=lambda g: g.index):
        sysfs = view.sysfs_numa.get(norm_bus_id(g.pci_bus_id)) if g.pci_bus_id else None
        numa = "?" if g.numa_node is None else str(g.numa_node)
        if g.numa_node is None and sysfs is not None:
            numa += f" (sysfs says {sysfs})"
        rows.append(f"GPU{g.index}  {g.pci_bus_id or '?':<16} numa {numa:<6} "
                    f"cpus {g.cpu_affinity or '?'}")
        if g.numa_node is None or not g.cpu_affinity:
            unknown.append(f"GPU{g.index}")
    if unknown:
        return Check(
            cid, Status.WARN, f"NUMA node or CPU affinity unknown for {', '.join(unknown)}",
            "Pinning a GPU task's CPUs and memory to its GPU's NUMA node avoids cross-socket "
            "traffic (up to ~3x slower host<->GPU copies); with it unknown, swarmgpu cannot "
            "label NUMA facts or prefer GPUs on one node.",
            "Check /sys/bus/pci/devices/<bus id>/numa_node (-1: the firmware does not report "
            "NUMA; enable it / ACPI SRAT in the BIOS) and `nvidia-smi topo -m` (CPU Affinity); "
            "update the driver if NVML cannot read them.", tuple(rows))
    return Check(cid, Status.OK, f"NUMA node and CPU affinity known for {len(rows)} GPU(s)",
                 details=tuple(rows))


def sharing_mode(view: NodeView) -> str:
    """``hard`` when HAMi-core is installed for services to preload, else ``soft``."""
    h = view.hami or HamiView()
    lib = next((p for p, elf in h.libs.items() if elf), None)
    named = h.preloads.get("/" + HAMI_PRELOAD, ())
    return "hard" if lib is not None and lib in named and h.lock_dir else "soft"


def check_sharing(view: NodeView) -> Check:
    """Can this node enforce a GPU share (HAMi-core), or only watch it?"""
    cid = "sharing.mode"
    h = view.hami or HamiView()
    setup = "`swarmgpu node-config` prints the set-up; docs/requests.md, Shared GPUs"
    why = ("A swarmgpu.gpu-fraction is enforced inside the container only by HAMi-core "
           "(libvgpu.so, preloaded): it fails allocations beyond CUDA_DEVICE_MEMORY_LIMIT. "
           "A shared service that mounts the library, the preload file and the lock "
           "directory (stacks/examples/shared-gpu-hami.yml) fails to start on a node "
           "that lacks one of them.")
    rows = [f"library {p}{'' if elf else ' (not an ELF file)'}" for p, elf in h.libs.items()]
    rows += [f"preload file {p}: {' '.join(v) or '(empty)'}" for p, v in h.preloads.items()]
    rows.append(f"lock directory /{HAMI_LOCK_DIR}: {'present' if h.lock_dir else 'absent'}")
    host = [lib for lib in h.preloads.get("/" + HOST_PRELOAD, ()) if "vgpu" in lib]
    if not h.libs and not any("vgpu" in x for v in h.preloads.values() for x in v):
        return Check(cid, Status.OK,
                     "soft: HAMi-core is not installed; GPU shares are bookkeeping, not "
                     "enforced",
                     details=(f"for hard limits install HAMi-core: {setup}",))
    problems: list[str] = []
    fixes: list[str] = []
    good = [p for p, elf in h.libs.items() if elf]
    bad = [p for p, elf in h.libs.items() if not elf]
    if bad:
        problems.append(f"{', '.join(bad)} is not a shared library (no ELF header)")
        fixes.append("reinstall libvgpu.so from a HAMi-core build for this driver")
    named = h.preloads.get("/" + HAMI_PRELOAD)
    if named is None:
        problems.append(f"no preload file /{HAMI_PRELOAD}")
        fixes.append(f"echo {good[0] if good else '/' + HAMI_LIBS[0]} > /{HAMI_PRELOAD}")
    else:
        missing = [lib for lib in named if lib not in good]
        if missing or not named:
            problems.append(f"/{HAMI_PRELOAD} names {' '.join(missing) or 'nothing'}, "
                            "not an installed library (ld.so ignores it: no limit)")
            fixes.append(f"write the installed library's path into /{HAMI_PRELOAD}")
    if not good:
        problems.append("no libvgpu.so library installed")
        fixes.append(f"install libvgpu.so at /{HAMI_LIBS[0]}")
    if not h.lock_dir:
        problems.append(f"no lock directory /{HAMI_LOCK_DIR}")
        fixes.append(f"mkdir -m 1777 /{HAMI_LOCK_DIR} (builds before 2026-02 lock "
                     f"/{HAMI_LOCK_DIR}/lock at start; the stack example mounts it)")
    if host:
        problems.append(f"/{HOST_PRELOAD} preloads {' '.join(host)} into every host "
                        "process (containers never read the host's file)")
        fixes.append(f"remove it from /{HOST_PRELOAD}; containers get it from "
                     f"/{HAMI_PRELOAD} mounted at /etc/ld.so.preload")
    if problems:
        return Check(cid, Status.WARN,
                     f"{sharing_mode(view)}: HAMi-core is partly set up: "
                     + "; ".join(problems), why, "; ".join(fixes) + f" ({setup})",
                     tuple(rows))
    return Check(cid, Status.OK,
                 f"hard: HAMi-core {good[0]}, preloaded through /{HAMI_PRELOAD} (mount it "
                 f"at /etc/ld.so.preload), lock directory /{HAMI_LOCK_DIR}; a shared "
                 "service that mounts them is held to CUDA_DEVICE_MEMORY_LIMIT",
                 details=tuple(rows))


def check_agent_identity(view: NodeView) -> Check:
    """Plain HTTP lets whatever binds :9401 (any local user, while the agent restarts)
    answer for this node; the Swarm node certificate proves which node answers."""
    cid = "agent.identity"
    data_root = str((view.docker_info or {}).get("DockerRootDir") or "/var/lib/docker")
    cert = Path(view.root) / data_root.lstrip("/") / "swarm/certificates/swarm-node.crt"
    fix = (f"run the agent with --tls-cert {data_root}/swarm/certificates/swarm-node.crt "
           f"--tls-key {data_root}/swarm/certificates/swarm-node.key (systemd: "
           "LoadCredential=) and set agents.identity: swarm-pki with an https:// "
           "agents.url_template; or agents.token_file (docs/security.md)")
    if view.agent_scheme == "https":
        return Check(cid, Status.OK, "the local agent serves HTTPS")
    if view.agent_scheme == "http":
        return Check(cid, Status.WARN,
                     "the local agent serves plain HTTP"
                     + (f" though this node has its Swarm certificate ({cert})"
                        if cert.exists() else ""),
                     "anything that binds port 9401 (any local user, while the agent "
                     "restarts) can answer for this node and steer GPU placement", fix)
    return Check(cid, Status.SKIP, "no local agent answered on 127.0.0.1:9401")


CHECKS: tuple[Callable[[NodeView], Check], ...] = (
    check_daemon_json,
    check_default_runtime,
    check_generic_resources,
    check_swarm_resource,
    check_toolkit_mode,
    check_device_nodes,
    check_cgroup,
    check_dev_char_links,
    check_device_order,
    check_numa,
    check_sharing,
)


def run_checks(view: NodeView) -> list[Check]:
    return [check(view) for check in CHECKS]


def exit_code(checks: Sequence[Check]) -> int:
    """0 when nothing failed (warnings are advice), 1 when a check failed."""
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


# --- rendering ------------------------------------------------------------------------


def _summary(checks: Sequence[Check]) -> dict[str, int]:
    return {s.value: sum(1 for c in checks if c.status is s) for s in Status}


def render_text(view: NodeView, checks: Sequence[Check]) -> str:
    counts = _summary(checks)
    host = view.facts.hostname if view.facts is not None else "?"
    lines = [f"swarmgpu doctor: root {view.root}  host {host}  "
             + ", ".join(f"{n} {s}" for s, n in counts.items())]
    for c in checks:
        lines.append(f"{c.status.value.upper():<5} {c.id}: {c.found}")
        if c.status in (Status.WARN, Status.FAIL):
            lines.append(f"      why: {c.why}")
            lines.append(f"      fix: {c.fix}")
        lines.extend(f"      {d}" for d in c.details)
    return "\n".join(lines)


def render_json(view: NodeView, checks: Sequence[Check]) -> str:
    return json.dumps({
        "root": view.root,
        "hostname": view.facts.hostname if view.facts is not None else None,
        "summary": _summary(checks),
        "sharing_mode": sharing_mode(view),
        "checks": [c.to_dict() for c in checks],
    }, indent=2)


def run_doctor(root: str = "/", *, facts: NodeFacts | None = None,
               docker_info: Mapping[str, Any] | None = None,
               as_json: bool = False, agent_probed: bool = False,
               agent_scheme: str | None = None) -> tuple[str, int]:
    """Text (or JSON) to print and the exit code: 0 ok, 1 a check failed, 2 cannot run.

    ``facts`` (NVML's view) and ``docker_info`` (the running dockerd's ``docker info``)
    enable the checks that compare files with reality; without them those checks are
    skipped, unless the root is a fixture tree that carries them (see docs/doctor.md).
    """
    try:
        view = read_view(root, facts=facts, docker_info=docker_info)
    except DoctorError as exc:
        if as_json:
            return json.dumps({"root": root, "error": str(exc)}, indent=2), 2
        return f"swarmgpu doctor: {exc}", 2
    view = dataclasses.replace(view, agent_scheme=agent_scheme)
    checks = run_checks(view)
    if agent_probed:  # the live node only: a fixture tree has no agent to ask
        checks.insert(0, check_agent_identity(view))
    text = render_json(view, checks) if as_json else render_text(view, checks)
    return text, exit_code(checks)
