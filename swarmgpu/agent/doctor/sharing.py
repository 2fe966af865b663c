"""Can this node enforce a GPU share (HAMi-core), or only watch it?"""

from __future__ import annotations

from swarmgpu.agent.doctor.view import (
    HAMI_LIBS,
    HAMI_LOCK_DIR,
    HAMI_PRELOAD,
    HOST_PRELOAD,
    Check,
    HamiView,
    NodeView,
    Status,
)


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
