"""Checks of the engine's set-up: daemon.json, the default runtime, the GPUs as generic
resources, and the container toolkit's mode."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from swarmgpu.agent.doctor.dockerdkeys import (
    DOCKERD_VERSION,
    FLAT_OPTIONS,
    IGNORED_KEYS,
    READ_KEYS,
    SKIPPED_KEYS,
)
from swarmgpu.agent.doctor.infoparts import info_part, unread_check
from swarmgpu.agent.doctor.read import parse_version
from swarmgpu.agent.doctor.resources import (
    GenericResource,
    env_name,
    from_docker_info,
    gpu_kind,
    gpu_kinds,
    live_unread,
    parse_generic_resources,
)
from swarmgpu.agent.doctor.view import (
    AS_VOLUME_MOUNTS,
    DPKG_STATUS,
    ENVVAR_UNPRIVILEGED,
    JIT_CDI_DEFAULT_FROM,
    NODE_CONFIG_HINT,
    SWARM_IN_CDI_FROM,
    SWARMGPU_KIND,
    TOOLKIT_TOML,
    Check,
    NodeView,
    RuntimeLookup,
    Status,
    daemon_json_unusable,
    quote,
)
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import escaped, quoted


def check_daemon_json(view: NodeView) -> Check:
    p = view.daemon_json
    why = ("Docker's daemon.json is where a GPU node gets its default runtime and its "
           "GPUs as Swarm generic resources.")
    if p.missing:
        return Check("docker.daemon-json", Status.FAIL, f"{p.path} does not exist", why,
                     f"Create it ({NODE_CONFIG_HINT}), then `systemctl restart docker`.")
    if p.error is not None:
        return Check("docker.daemon-json", Status.FAIL, f"{p.path}: {p.error}", why,
                     p.fix or "Fix the syntax (`python3 -m json.tool` shows where; JSON "
                     "takes no comments or trailing commas); dockerd refuses to start with "
                     "an invalid daemon.json.")
    if p.empty:
        return Check("docker.daemon-json", Status.OK,
                     f"{p.path} is empty (dockerd reads it as no settings; the checks below "
                     "say what it lacks)")
    return Check("docker.daemon-json", Status.OK, f"{p.path} parses")


def check_daemon_keys(view: NodeView) -> Check:
    """Does dockerd know every key of daemon.json? It refuses to start on one it does not."""
    cid = "docker.daemon-keys"
    skip = daemon_json_unusable(view, cid)
    if skip:
        return skip
    unknown: list[str] = []
    first = ""  # the first unknown key, for the fix
    ignored: list[str] = []
    for key, parent in _keys_as_dockerd_reads(view.daemon_json.data or {}):
        if key in READ_KEYS or key in SKIPPED_KEYS:
            continue
        if key in IGNORED_KEYS:
            ignored.append(key)
            continue
        first = first or _q(key)
        inside = f" (inside {_q(parent)})" if parent is not None else ""
        meant = _near_miss(parent) if parent is not None else None
        meant = meant or _near_miss(key)
        unknown.append(f"{_q(key)}{inside}" + (f": did you mean {_q(meant)}?" if meant else ""))
    path = view.daemon_json.path
    if unknown:
        more = f"; and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        return Check(
            cid, Status.FAIL, "dockerd knows no option " + "; ".join(unknown[:3]) + more,
            "dockerd refuses to start with a key it does not know (\"the following directives "
            "don't match any configuration option\"): on a restart the node leaves the swarm. "
            f"An object's keys count as top-level keys. Keys as of moby {DOCKERD_VERSION}.",
            f"Rename or remove {first} in {path} (`dockerd "
            "--validate` checks the file, also for a newer dockerd that may know the key), "
            "then `systemctl restart docker`.")
    if ignored:
        key = ignored[0]
        instead = IGNORED_KEYS[key]
        return Check(
            cid, Status.WARN, f"{quote([_q(k) for k in ignored])}: the name of a dockerd flag, "
            "not a daemon.json key",
            "dockerd starts with it but ignores its value: the setting is not applied.",
            (f"Write it as {_q(instead)}" if instead else f"Remove {_q(key)}")
            + ", then `systemctl restart docker`.")
    return Check(cid, Status.OK, f"dockerd knows every key (as of moby {DOCKERD_VERSION})")


def _keys_as_dockerd_reads(data: Mapping[str, Any]) -> Iterator[tuple[str, str | None]]:
    """(key, the object it is inside or None): an object's keys are top-level keys to
    dockerd, except under FLAT_OPTIONS (moby daemon/config configValuesSet)."""
    for key, value in data.items():
        if isinstance(value, dict) and key not in FLAT_OPTIONS:
            yield from ((str(k), key) for k in value)
        else:
            yield key, None


def _near_miss(key: str) -> str | None:
    if len(key) > 64:  # no one misspells a key that long; spare the comparison
        return None
    low = key.lower()
    if low in READ_KEYS:
        return low
    if IGNORED_KEYS.get(low):
        return IGNORED_KEYS[low]
    close = difflib.get_close_matches(low, sorted(READ_KEYS), n=1, cutoff=0.8)
    return close[0] if close else None


def _q(key: str) -> str:
    """A key as JSON spells it, at most 60 characters of it."""
    return json.dumps(key[:60] + ("..." if len(key) > 60 else ""))


def _shown(value: str, limit: int = 100) -> str:
    """A value from the file as peer text is shown: control characters escaped (a NUL as
    ``\\x00``), at most ``limit`` characters of it and its length when cut."""
    cut = f"... [{len(value)} characters]" if len(value) > limit else ""
    return escaped(value[:limit]) + cut


def check_default_runtime(view: NodeView) -> Check:
    cid = "runtime.default"
    skip = daemon_json_unusable(view, cid)
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
    elif not isinstance(path, str):
        problems.append(f"runtimes.nvidia.path {json.dumps(path)} is not a path")
    elif view.runtime is not None and view.runtime.refused is not None:
        return Check(
            cid, Status.FAIL, f"runtimes.nvidia.path {_shown(path)} {view.runtime.refused}",
            "The kernel refuses such a path to every program: dockerd cannot run the "
            "runtime, and every task container run through it fails to start.",
            f"Set runtimes.nvidia.path in {view.daemon_json.path} to the runtime's path "
            '("nvidia-container-runtime", or where `command -v nvidia-container-runtime` '
            "finds it), then `systemctl restart docker`.")
    elif view.runtime is not None and view.runtime.found is None:
        # dockerd starts with it; every container it starts then fails ("no such file")
        return _runtime_missing(cid, path, view.runtime)
    if problems:
        return Check(cid, Status.FAIL, "; ".join(problems), why, fix)
    unread = unread_check(cid, view.docker_info, ("DefaultRuntime", "Runtimes"))
    if unread is not None:  # (an unread Runtimes read as none: "nvidia" not running)
        return unread
    live = info_part(view.docker_info, "DefaultRuntime")
    if live is not None:
        live_runtimes = info_part(view.docker_info, "Runtimes") or {}
        if live != "nvidia" or "nvidia" not in live_runtimes:
            return Check(
                cid, Status.FAIL,
                f'daemon.json says "nvidia" but the running dockerd uses {quoted(live)} '
                f"(runtimes {quote([_shown(r, 60) for r in sorted(live_runtimes)])})",
                "dockerd reads daemon.json only when it starts: the file was edited after.",
                "`systemctl restart docker` (running tasks restart with it).")
    live_note = "" if live is None else "; the running dockerd agrees"
    rt = view.runtime
    where = f", found at {rt.found} on {rt.search_from}" if rt and rt.search else ""
    return Check(cid, Status.OK, f"default-runtime nvidia ({path}{where}){live_note}")


def _runtime_missing(cid: str, path: str, rt: RuntimeLookup) -> Check:
    why = "dockerd runs every task container through that binary: each one fails to start."
    if rt.not_executable:
        first = rt.not_executable[0]
        return Check(cid, Status.FAIL,
                     f"runtimes.nvidia.path {path}: {quote(rt.not_executable)} is not "
                     "executable", why + " A file without an execute bit cannot be run.",
                     f"`chmod 755 {first}` (or reinstall nvidia-container-toolkit), then "
                     "`systemctl restart docker`.")
    fix = ("Install nvidia-container-toolkit, or set the path to where it is "
           "(`command -v nvidia-container-runtime`), then `systemctl restart docker`.")
    if not rt.search:
        return Check(cid, Status.FAIL, f"runtimes.nvidia.path {path} does not exist", why, fix)
    if rt.search_from.startswith("this environment"):
        why += (" dockerd's own PATH may differ from this environment's: `systemctl show "
                "docker -p Environment` (none set: systemd's default).")
    return Check(cid, Status.FAIL,
                 f"runtimes.nvidia.path {path} is not on {rt.search_from} "
                 f"({':'.join(rt.search) or 'empty'})",
                 "dockerd looks a bare name up on its PATH (moby daemon/runtime_unix.go, "
                 f"exec.LookPath). {why}", fix)


def check_generic_resources(view: NodeView) -> Check:
    cid = "resources.generic"
    skip = daemon_json_unusable(view, cid)
    if skip:
        return skip
    data = view.daemon_json.data or {}
    configured, errors = parse_generic_resources(
        data.get("node-generic-resources"), "daemon.json node-generic-resources")
    why_fmt = ("Swarm hands each task named values of this node's generic resources and the "
               "toolkit exposes exactly those GPUs; the list is read only when dockerd starts.")
    if errors:  # the first few: a list of thousands is one mistake repeated
        more = f"; and {len(errors) - 3} more" if len(errors) > 3 else ""
        return Check(cid, Status.FAIL, "; ".join(errors[:3]) + more, why_fmt,
                     f"Write one \"KIND=GPU-<uuid>\" per GPU ({NODE_CONFIG_HINT}).")
    unread = unread_check(cid, view.docker_info, ("GenericResources",))
    if unread is not None:  # (compared without the entries not read, GPUs look missing)
        return unread
    live = from_docker_info(view.docker_info) if view.docker_info is not None else None
    source = "daemon.json"
    if not configured and live:
        configured, source = live, "dockerd flags (--node-generic-resource)"
    elif live is not None and sorted(map(str, live)) != sorted(map(str, configured)):
        only_file = sorted(_shown(f"{r.kind}={r.value}") for r in set(configured) - set(live))
        only_live = sorted(_shown(f"{r.kind}={r.value}") for r in set(live) - set(configured))
        return Check(
            cid, Status.FAIL,
            f"daemon.json and the running dockerd differ: only in the file "
            f"[{quote(only_file)}], only in dockerd [{quote(only_live)}]", why_fmt,
            "`systemctl restart docker` so dockerd (and Swarm) read the current list.")
    gpu = [r for r in configured if gpu_kind(r)]
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
    return _against_facts(cid, gpu, facts, source, why_fmt)


def _against_facts(cid: str, gpu: list[GenericResource], facts: NodeFacts, source: str,
                   why_fmt: str) -> Check:
    """``resources.generic``'s last part: the GPU values advertised against the GPUs NVML
    sees (stale ones, ones left out, ones that could not be read)."""
    present = {g.uuid for g in facts.gpus} | {m.uuid for g in facts.gpus for m in g.mig_devices}
    advertised = {r.value for r in gpu}
    stale = sorted(advertised - present)
    # A GPU NVML could not read has no UUID to compare: an advertised value not seen may
    # be its, so neither "stale" nor "missing" can be said (gpu.facts names the GPU).
    unread = [g for g in facts.gpus if not g.healthy and g.uuid not in advertised]
    if unread and stale:
        return Check(cid, Status.SKIP,
                     f"{', '.join(f'GPU{g.index}' for g in unread)} could not be read (see "
                     f"gpu.facts): whether {quote(stale)} is on this node is not known")
    missing = [g for g in facts.gpus if g not in unread and g.uuid not in advertised
               and not any(m.uuid in advertised for m in g.mig_devices)]
    found = []
    if stale:
        found.append(f"advertised but not on this node: {quote(stale)}")
    if missing:
        found.append("on this node but not advertised: "
                     + quote([f"GPU{g.index} {g.uuid}" for g in missing]))
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
                     p.fix or "Fix the syntax; `nvidia-ctk config default` prints a valid "
                     "file.")
    if (unread := live_unread(cid, view)) is not None:  # (the kinds would be guessed)
        return unread
    kinds = gpu_kinds(view) or [SWARMGPU_KIND]
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


def effective_mode(view: NodeView) -> str | None:
    """The toolkit's mode as it resolves ``auto`` (None: unknown, no version read)."""
    runtime = (view.toolkit_toml.data or {}).get("nvidia-container-runtime")
    mode = str(runtime.get("mode", "auto")) if isinstance(runtime, dict) else "auto"
    if mode != "auto":
        return mode
    parsed = parse_version(view.toolkit_version) if view.toolkit_version else None
    if parsed is None:
        return None
    return "jit-cdi" if parsed[0] >= JIT_CDI_DEFAULT_FROM else "legacy"


def check_grants(view: NodeView) -> Check:
    """Does the toolkit read GPU grants the way the daemon writes them (placement.grants)?"""
    cid = "toolkit.grants"
    data = view.toolkit_toml.data
    if data is None:
        return Check(cid, Status.SKIP, "no readable toolkit config.toml (see "
                                       "toolkit.swarm-resource)")
    unpriv = data.get(ENVVAR_UNPRIVILEGED, True)  # the toolkit's defaults
    mounts = data.get(AS_VOLUME_MOUNTS, False)
    hint = "`swarmgpu node-config --grants mounts` prints them"
    if view.grants == "mounts":
        problems = []
        if unpriv is not False:
            problems.append(f"{ENVVAR_UNPRIVILEGED} is not false")
        if mounts is not True:
            problems.append(f"{AS_VOLUME_MOUNTS} is not true")
        if problems:
            return Check(
                cid, Status.FAIL, "; ".join(problems),
                "With placement.grants: mounts the daemon grants GPUs as /dev/null mounts "
                "under /var/run/nvidia-container-devices. Unless the toolkit reads those "
                "and ignores the variables of unprivileged containers, a stack's own "
                "NVIDIA_VISIBLE_DEVICES=all (or a CUDA image's) still sees every GPU, or "
                "the grants give no GPU at all.",
                f"Put {ENVVAR_UNPRIVILEGED} = false and {AS_VOLUME_MOUNTS} = true at the "
                f"top of /{TOOLKIT_TOML} (above the first [section]; {hint}); read for "
                "each container, no restart.")
        mode = effective_mode(view)
        if mode != "legacy":
            return Check(
                cid, Status.WARN,
                f"device lists read from mounts, variables of unprivileged containers "
                f"ignored; mode {mode or 'unknown (no toolkit version read)'}",
                "A grant of several GPUs is one mount naming them all (Swarm's templates "
                "cannot split a list into mounts): only legacy mode's nvidia-container-cli "
                "splits it; in cdi and jit-cdi modes such a container fails to start. "
                "Grants of one GPU, a share or a MIG slice work in any mode.",
                f'Set mode = "legacy" under [nvidia-container-runtime] ({hint}).')
        return Check(cid, Status.OK, "grants as mounts: device lists read from /dev/null "
                                     "mounts, variables of unprivileged containers ignored, "
                                     "legacy mode")
    if unpriv is False:
        return Check(
            cid, Status.FAIL, f"{ENVVAR_UNPRIVILEGED} = false, but the daemon grants "
                              "through NVIDIA_VISIBLE_DEVICES (placement.grants: env)",
            "The toolkit then ignores the device lists placement pins: swarmgpu's GPU "
            "services get no GPU.",
            "Set placement.grants: mounts in the daemon's config and run `swarmgpu doctor "
            f"--grants mounts`, or remove the key from /{TOOLKIT_TOML}.")
    if mounts is True:
        return Check(
            cid, Status.WARN, f"{AS_VOLUME_MOUNTS} = true with grants as env",
            "Any stack can then pick GPUs with a /dev/null mount under "
            "/var/run/nvidia-container-devices, which wins over the variable placement "
            "pins (swarmgpu audit reports such mounts as ungranted GPU access).",
            f"Remove the key, or use placement.grants: mounts ({hint}).")
    return Check(cid, Status.OK, "grants as env: NVIDIA_VISIBLE_DEVICES is read for every "
                                 "container (a stack's own value too: `swarmgpu audit` "
                                 "reports ungranted GPU access)")


SWARM_PARTS = ("Swarm", "Swarm.LocalNodeState", "Swarm.ControlAvailable", "Swarm.NodeID",
               "Swarm.Error")


def check_engine(view: NodeView) -> Check:
    """Does dockerd answer, and is it a Swarm member? Asked on the live node only."""
    cid = "docker.engine"
    why = ("The checks compare daemon.json with what the running dockerd uses, and a GPU "
           "service reaches this node only through Swarm.")
    err = view.docker_error
    if err is not None:
        if err.startswith("docker info: the engine's answer"):  # (cli.node._docker_info)
            return Check(cid, Status.FAIL, f"dockerd's answer is not read: {err}", why,
                         "Check the proxy in front of the engine (DOCKER_HOST names it): "
                         "dockerd answers docker info at once with one JSON object of a "
                         "few KiB, each key named once.")
        if "Permission denied" in err:
            fix = ("Run the doctor as root (`sudo swarmgpu doctor`), or as a member of the "
                   "docker group.")
        elif "timed out" in err or "Timeout" in err:
            fix = ("dockerd accepted the connection but did not answer within 5 s: "
                   "`systemctl status docker`, `journalctl -u docker` (a hung dockerd, "
                   "often a stuck container or storage driver).")
        else:
            fix = ("Start dockerd (`systemctl start docker`; `journalctl -u docker` says why "
                   "it stopped), or point DOCKER_HOST at its socket.")
        said = f" {err}" if err.startswith("at ") else f": {err}"  # (at ADDRESS: cli.node)
        return Check(cid, Status.FAIL, f"cannot ask dockerd{said}", why, fix)
    info = view.docker_info
    unread = unread_check(cid, info, SWARM_PARTS)
    if unread is not None:  # (an unread state read as "unknown": a join fix for nothing)
        return unread
    if info_part(info, "Swarm") is None:
        return Check(cid, Status.SKIP, "no docker info with a Swarm state")
    state = info_part(info, "Swarm.LocalNodeState") or "unknown"
    role = "manager" if info_part(info, "Swarm.ControlAvailable") else "worker"
    if state == "active":
        return Check(cid, Status.OK, f"dockerd answers; Swarm {role}, node "
                                     f"{_shown(info_part(info, 'Swarm.NodeID') or '?')}")
    error = info_part(info, "Swarm.Error")
    detail = f": {_shown(error, 300)}" if error else ""
    state = _shown(state)
    fixes = {
        "inactive": "Join the swarm: `docker swarm join --token <token> <manager>:2377` "
                    "(`docker swarm join-token worker` on a manager prints it).",
        "locked": "`docker swarm unlock` with the swarm's unlock key (autolock is on: "
                  "the engine restarted).",
        "pending": "The engine cannot reach a manager yet: check port 2377 to the managers "
                   "and their clocks; `docker swarm leave` and join again if it stays.",
    }
    return Check(cid, Status.FAIL, f"Swarm state {state}{detail}",
                 "This engine is not an active Swarm member: no service task is placed here, "
                 "GPU or not.",
                 fixes.get(state, "`docker info` shows the Swarm error; `docker swarm leave "
                                  "--force` and join again if it persists."))
