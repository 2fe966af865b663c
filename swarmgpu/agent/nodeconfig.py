"""`swarmgpu node-config`: the daemon.json and config.toml fragments a GPU node needs,
and the optional HAMi-core set-up for hard limits on shared GPUs.

Pure: facts in, printable text out. The fragments are exactly what ``swarmgpu doctor``
checks for (runtime.default, resources.generic, toolkit.swarm-resource), so a node
configured from them passes those checks.
"""

from __future__ import annotations

import json
import re
from typing import Any

from swarmgpu.agent.doctor import (
    AS_VOLUME_MOUNTS,
    ENVVAR_UNPRIVILEGED,
    HAMI_LIBS,
    HAMI_LOCK_DIR,
    HAMI_PRELOAD,
    SWARMGPU_KIND,
    TOOLKIT_TOML,
    env_name,
)
from swarmgpu.core.model import NodeFacts

# Swarm accepts any kind, but the kind ends up in an environment variable name and in
# "KIND=VALUE" strings: keep to letters, digits, '-', '_' and '.'.
_KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$")


def advertised_values(facts: NodeFacts) -> list[str]:
    """One named value per schedulable device: the GPU's UUID, or its MIG devices' UUIDs.

    A GPU in MIG mode is handed out by its MIG devices (the toolkit accepts MIG UUIDs);
    its own UUID would give a task the whole GPU with no MIG device in it.
    """
    out: list[str] = []
    for g in sorted(facts.gpus, key=lambda g: g.index):
        if g.mig_enabled and g.mig_devices:
            out.extend(m.uuid for m in g.mig_devices)
        else:
            out.append(g.uuid)
    return out


def daemon_json_fragment(facts: NodeFacts, kind: str = SWARMGPU_KIND) -> dict[str, Any]:
    return {
        "default-runtime": "nvidia",
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
        "node-generic-resources": [f"{kind}={v}" for v in advertised_values(facts)],
    }


def node_config(facts: NodeFacts, *, kind: str = SWARMGPU_KIND, grants: str = "env") -> str:
    """Both fragments, each with one line of why, ready to print. ``grants``: the
    daemon's ``placement.grants`` (``mounts``: the toolkit keys of NVIDIA's own defence,
    which ``swarmgpu doctor --grants mounts`` checks)."""
    if grants not in ("env", "mounts"):
        raise ValueError(f"grants {grants!r}: use env or mounts (the daemon's placement.grants)")
    if not _KIND_RE.match(kind):
        raise ValueError(f"kind {kind!r}: use letters, digits, '-', '_' or '.', starting with a "
                         f"letter (e.g. {SWARMGPU_KIND})")
    if not facts.gpus:
        raise ValueError(f"node {facts.hostname or '?'}: the facts list no GPUs, so there is "
                         "nothing to advertise; check the source (`swarmgpu facts`)")
    fragment = json.dumps(daemon_json_fragment(facts, kind), indent=2)
    mig = any(g.mig_enabled and g.mig_devices for g in facts.gpus)
    lines = [
        f"# /etc/docker/daemon.json (merge into the existing object; then "
        f"`systemctl restart docker`) for {facts.hostname or 'this node'}",
        "# why: Swarm has no per-service runtime, so the NVIDIA runtime must be the default;",
        f"#      each GPU is listed by UUID so Swarm hands tasks named GPUs ({kind}=<uuid>),",
        "#      never a count, which the toolkit would misread as a GPU index.",
    ]
    if mig:
        lines.append("#      GPUs in MIG mode are listed by their MIG devices' UUIDs.")
    lines += [
        fragment,
        "",
        f"# /etc/{TOOLKIT_TOML.removeprefix('etc/')} (top level, above the first [section]; "
        "read for every container, no restart)",
        f"# why: Swarm puts the reserved GPUs in {env_name(kind)}; the toolkit honours only "
        "the variables",
        "#      named here, otherwise every container sees every GPU "
        "(nvidia-container-toolkit#57).",
        f'swarm-resource = "{env_name(kind)}"',
        *(_mounts_lines() if grants == "mounts" else [
            "# and, with toolkit 1.18.x only (Swarm support returned to jit-cdi mode in 1.19.0):",
            '# [nvidia-container-runtime]',
            '# mode = "legacy"']),
        "",
        *hami_setup(),
    ]
    return "\n".join(lines) + "\n"


def _mounts_lines() -> list[str]:
    """placement.grants: mounts -- NVIDIA's own defence, as the Kubernetes device plugin's
    volume-mounts strategy uses it (docs/security.md, "GPU access only through a grant")."""
    return [
        "# placement.grants: mounts -- GPUs only through swarmgpu's grants",
        "# why: the toolkit then ignores NVIDIA_VISIBLE_DEVICES (and swarm-resource's",
        "#      variables) of unprivileged containers -- a stack's own \"all\", a CUDA",
        "#      image's -- and reads device lists only from /dev/null mounts under",
        "#      /var/run/nvidia-container-devices, which placement writes.",
        f"{ENVVAR_UNPRIVILEGED} = false",
        f"{AS_VOLUME_MOUNTS} = true",
        "# a grant of several GPUs is one mount naming them all: only legacy mode splits it",
        "# (move an existing [nvidia-container-runtime] table's mode line instead)",
        "[nvidia-container-runtime]",
        'mode = "legacy"',
    ]


def hami_setup() -> list[str]:
    """The optional HAMi-core set-up (doctor's sharing.mode ``hard``), as comment lines:
    commands to run, not a file fragment."""
    lib, preload, lock = ("/" + HAMI_LIBS[0], "/" + HAMI_PRELOAD, "/" + HAMI_LOCK_DIR)
    return [
        "# Optional: hard limits for shared GPUs (swarmgpu.gpu-fraction) with HAMi-core",
        "# why: without it a share is bookkeeping: nothing stops one container from taking",
        "#      the whole GPU; with it, a shared service that mounts these paths is held to",
        "#      its CUDA_DEVICE_MEMORY_LIMIT / CUDA_DEVICE_SM_LIMIT (stacks/examples/"
        "shared-gpu-hami.yml).",
        "#   # libvgpu.so from a HAMi-core build (github.com/Project-HAMi/HAMi-core, "
        "`make build-in-docker`)",
        f"#   install -D -m 0644 build/libvgpu.so {lib}",
        f"#   echo {lib} > {preload}   # mounted at /etc/ld.so.preload in the container",
        f"#   mkdir -m 1777 -p {lock}   # lock directory; kept across reboots with:",
        f"#   echo 'd {lock} 1777 root root -' > /etc/tmpfiles.d/vgpulock.conf",
        "#   swarmgpu doctor   # sharing.mode: hard",
    ]
