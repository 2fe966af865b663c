"""Does the NVIDIA runtime in ``cdi`` mode find a CDI spec naming each GPU Swarm hands out?

In ``cdi`` mode the runtime resolves the GPUs of a task (the ``DOCKER_RESOURCE_<KIND>``
values ``swarm-resource`` names) as ``nvidia.com/gpu=GPU-<uuid>`` against the CDI specs
in its own spec dirs; ``nvidia-ctk cdi generate`` writes them, once. Other modes read no
spec (``jit-cdi`` makes one per container), nor does ``cdi`` for devices of the kind
``runtime.nvidia.com/gpu`` (made so too). dockerd's own CDI spec dirs (``docker info``
``CDISpecDirs``, Docker 25+; without docker info, daemon.json's) serve ``docker run
--device nvidia.com/gpu=...``: Swarm services cannot ask for devices, so they are shown,
never failed, but for a FIFO or device there, whose read dockerd's start waits on.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import replace

from swarmgpu.agent.doctor.cdifile import DENIED_TO_USER
from swarmgpu.agent.doctor.cdispec import (
    DOCKER_CDI,
    NEXT_CDI,
    TOOLKIT_CDI,
    VERSIONS,
    first_taking,
    newer,
    newest_taken,
)
from swarmgpu.agent.doctor.engine import effective_mode
from swarmgpu.agent.doctor.enginelinks import RESOLVING, as_resolved, since_29_2
from swarmgpu.agent.doctor.infoparts import engine_cdi_dirs, unread_check
from swarmgpu.agent.doctor.resources import (
    from_docker_info,
    gpu_kind,
    live_unread,
    parse_generic_resources,
)
from swarmgpu.agent.doctor.view import (
    MAX_ENGINE_CDI_DIRS,
    TOOLKIT_CDI_AUTOMATIC_KIND,
    TOOLKIT_TOML,
    CdiSpec,
    Check,
    NodeView,
    Status,
    quote,
    toolkit_cdi,
)
from swarmgpu.core.peertext import peer_text

CID = "toolkit.cdi-spec"
GENERATE = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


def check_cdi_spec(view: NodeView) -> Check:
    """``toolkit.cdi-spec``: in ``cdi`` mode, a spec of the toolkit's kind in its spec
    dirs naming each GPU advertised; dockerd's CDI spec dirs in the details."""
    if view.toolkit_toml.data is None:
        return _said_engine_hangs(view, Check(CID, Status.SKIP, "no readable toolkit "
                                              "config.toml (see toolkit.swarm-resource)"))
    unread = unread_check(CID, view.docker_info, ("CDISpecDirs", "ServerVersion"))
    if unread is not None:
        return unread
    dirs, kind = toolkit_cdi(view.toolkit_toml.data)
    return _said_engine_hangs(view, _said_engine_denied(view, _said_engine(
        view, _in_mode(view, dirs, kind, _engine_details(view, kind)))))


# moby daemon/command/daemon.go registers its CDI driver before its API serves;
# daemon/cdi.go createCDICache calls cdi.NewCache, whose refresh (CDI pkg/cdi cache.go,
# auto-refresh on by default) reads every spec file whole, and again in its watcher on a
# write, rename or removal there, holding the cache's lock, which docker info's device
# listing (Docker 28.2 and later) and `docker run --device` wait for.
_ENGINE_HANGS = ("dockerd reads each *.yaml and *.json file of its CDI spec dirs whole as "
                 "it starts, before its API serves, and again when a spec there changes: "
                 "the read of a FIFO waits for a writer, of a device may never end, so "
                 "dockerd never comes up after a restart (and, once a spec changes, "
                 "`docker info` hangs from Docker 28.2).")


def _said_engine_hangs(view: NodeView, check: Check) -> Check:
    """``check`` failed for a spec file in dockerd's CDI spec dirs that is a FIFO or a
    device (``cdifile``): dockerd's own CDI cache reads it as it starts, whatever mode
    the runtime is in. Named once where the runtime's finding named it."""
    listed, guessed = _engine_dirs(view)
    seen, _ = _engine_scanned(view, tuple(listed[:MAX_ENGINE_CDI_DIRS]))
    hangs = [s for s in view.cdi_specs if s.hangs and _in(s.path, seen)]
    if not hangs:
        return check
    if guessed and not _cdi_on(view):  # (no docker info: dockerd may read none)
        return _may_hang(check, hangs)
    said = "; ".join(f"{s.path} {s.error}" for s in hangs[:2]
                     if f"{s.path} {s.error}" not in check.found)
    found = f"{check.found} ({said})" if said else check.found
    new = [s.path for s in hangs if f"{s.path}" not in check.fix]
    fix = (f"Remove {', '.join(new)} (`ls -l` shows what it is): dockerd reads every "
           "*.yaml and *.json file of its CDI spec dirs (docker info CDISpecDirs)."
           if new else "")
    ok = check.status is Status.OK  # (a WARN's or FAIL's own fault stays said)
    return replace(check, status=Status.FAIL, found=found,
                   why=_ENGINE_HANGS if ok else f"{check.why} {_ENGINE_HANGS}".strip(),
                   fix=fix if ok else f"{fix} {check.fix}".strip())


def _said_engine_denied(view: NodeView, check: Check) -> Check:
    """``check`` naming dockerd's spec dirs the doctor, not root, may not list, or (a
    symlink) resolve: dockerd, root, reads them, and a FIFO there would go unseen. An
    ``ok`` is then a ``warn``."""
    listed, _ = _engine_dirs(view)
    seen, _ = _engine_scanned(view, tuple(listed[:MAX_ENGINE_CDI_DIRS]))
    given = engine_cdi_dirs(view.docker_info, view.daemon_json.data)[0]
    links = view.engine_cdi_denied if since_29_2(view.docker_info) else ()  # (followed)
    denied = [*(g for g in given[:len(seen)] if _norm(g) in links),
              *(s.path for s in view.cdi_specs if s.denied and s.path in map(_norm, seen))]
    if not denied:
        return check
    said = (f"dockerd's CDI spec dir {', '.join(peer_text(d, 100) for d in denied[:2])} "
            "could not be read by this user (permission denied): a FIFO or device there, "
            "which hangs dockerd's start, goes unseen")
    fix = "Run the doctor as root, as dockerd reads its CDI spec dirs."
    ok = check.status is Status.OK
    return replace(check, status=Status.WARN if ok else check.status,
                   found=f"{check.found} ({said})",
                   fix=fix if ok else f"{check.fix} {fix}".strip())


def _engine_dirs(view: NodeView) -> tuple[list[str], bool]:
    """dockerd's spec dirs (``engine_cdi_dirs``), each symlink it resolves as it starts
    replaced by its real dir (``enginelinks``), and whether daemon.json's."""
    listed, configured = engine_cdi_dirs(view.docker_info, view.daemon_json.data)
    if not since_29_2(view.docker_info):  # (its links handed CDI as they are)
        return listed, configured
    return as_resolved(listed, view.engine_cdi_links), configured


def _engine_scanned(view: NodeView, dirs: tuple[str, ...]) -> tuple[tuple[str, ...],
                                                                      tuple[str, ...]]:
    """``_scanned`` of dockerd's ``dirs``: its CDI's scan stops where the runtime's does,
    but for a dockerd that drops a dir it cannot list as it starts (``enginelinks``)."""
    return (dirs, ()) if since_29_2(view.docker_info) else _scanned(view, dirs)


def _named(d: str, view: NodeView) -> str:
    """The spec dir ``d`` as dockerd was given it, and where a link to a dir, the real dir
    it reads, or (before 29.2) that it reads none there, and the fix."""
    real = dict(view.engine_cdi_links).get(_norm(d))
    if real is None:
        return peer_text(d, 100) + _dropped(d, view)
    to = peer_text(real, 100)
    if since_29_2(view.docker_info):
        return (f"{peer_text(d, 100)} (a symlink to {to}, which dockerd {RESOLVING} and "
                "later resolves as it starts)")
    return (f"{peer_text(d, 100)} (a symlink to {to}, which a dockerd before {RESOLVING} "
            "hands CDI as is, whose scan never follows it: no spec read there; name "
            f"{to} in cdi-spec-dirs, or upgrade Docker Engine to {RESOLVING} or later)")


def _dropped(d: str, view: NodeView) -> str:
    """Where a dockerd of 29.2 or later drops the spec dir ``d`` as it starts (its
    ``os.ReadDir`` fails: ``enginelinks``), saying so and why."""
    if not since_29_2(view.docker_info):
        return ""
    why = next(((s.error or "").partition(":")[0] for s in view.cdi_specs
                if s.path == _norm(d) and (s.stops or s.next_stops)), None)
    return (f" (dropped as dockerd {RESOLVING} and later starts: it {peer_text(why, 100)})"
            if why is not None else "")


def _cdi_on(view: NodeView) -> bool:
    """daemon.json sets ``features.cdi`` true: dockerd 25+ reads its CDI spec dirs."""
    features = (view.daemon_json.data or {}).get("features")
    return isinstance(features, Mapping) and features.get("cdi") is True


def _may_hang(check: Check, hangs: list[CdiSpec]) -> Check:
    """``check`` naming the FIFOs and devices of daemon.json's CDI spec dirs where no
    docker info says dockerd reads them: Docker before 25 has no CDI, 25.0 to 28.1 read
    none without ``features.cdi`` true, so an OK is a WARN, not a FAIL."""
    said = "; ".join(f"{s.path} {s.error}" for s in hangs[:2]
                     if f"{s.path} {s.error}" not in check.found)
    new = [s.path for s in hangs if s.path not in check.fix]
    fix = (f"Remove {', '.join(new)} (`ls -l` shows what it is) before a Docker that "
           "reads CDI specs runs here." if new else "")
    why = ("If dockerd reads its CDI spec dirs (Docker 28.2 and later by default; 25.0 "
           "to 28.1 with daemon.json features.cdi true), it reads each *.yaml and *.json "
           "file whole as it starts: the read of a FIFO or device may never end, and "
           "dockerd never comes up. No docker info says which Docker runs here.")
    if check.status is not Status.OK:
        return replace(check, found=f"{check.found} ({said})" if said else check.found,
                       fix=f"{check.fix} {fix}".strip())
    return replace(check, status=Status.WARN,
                   found=f"{check.found} ({said})" if said else check.found,
                   why=why, fix=fix)


def _in_mode(view: NodeView, dirs: tuple[str, ...], kind: str,
             details: tuple[str, ...]) -> Check:
    """The answer of the toolkit's mode, of spec ``dirs`` and ``kind``."""
    mode = effective_mode(view)
    if mode != "cdi":
        return Check(CID, Status.OK, f"mode {mode or 'unknown'}: the runtime reads no CDI "
                                     "spec for Swarm's GPUs (jit-cdi makes its own)",
                     details=details)
    if kind == TOOLKIT_CDI_AUTOMATIC_KIND:
        return Check(CID, Status.OK, f"mode cdi, default-kind {kind}: the runtime makes "
                                     "the spec of each container's GPUs as it starts it "
                                     "(no spec file read)", details=details)
    view = _as_the_runtime_reads(view)
    seen, unseen = _scanned(view, dirs)
    check = _said_stop(view, seen, unseen, kind, _check_specs(view, seen, kind, details))
    check = _said_skipped(view, seen, _said_notes(view, seen, _said_left(view, seen, check)))
    return _said_next(view, seen, kind, _said_hangs(view, seen, check))


def _scanned(view: NodeView, dirs: tuple[str, ...]) -> tuple[tuple[str, ...],
                                                               tuple[str, ...]]:
    """The ``dirs`` CDI reads, up to the first it cannot look up (its scan stops there),
    and the later ones, which it never reads."""
    stops = {s.path for s in view.cdi_specs if s.stops}
    for n, d in enumerate(dirs):
        if _norm(d) in stops:
            return dirs[:n + 1], dirs[n + 1:]
    return dirs, ()


def _as_the_runtime_reads(view: NodeView) -> NodeView:
    """``view`` with each spec whose cdiVersion is newer than the CDI of the toolkit's
    version (dpkg's) takes refused, as the runtime refuses it whole; unchanged where that
    version is not read."""
    version = view.toolkit_version or ""
    newest = newest_taken(TOOLKIT_CDI, version)
    if newest is None:
        return view

    def refused(s: CdiSpec) -> CdiSpec:
        if s.error is not None or s.version not in VERSIONS or not newer(s.version, newest):
            return s
        lower = (f"set cdiVersion: {s.needs} (what its content needs), or "
                 if not newer(s.needs, newest) else "")
        return replace(s, refused=True, error=(
            f"has cdiVersion {s.version}, newer than the {newest} toolkit "
            f"{peer_text(version, 40)}'s CDI takes (the runtime refuses the spec): "
            f"{lower}upgrade nvidia-container-toolkit to "
            f"{first_taking(TOOLKIT_CDI, s.version)} or later"))
    return replace(view, cdi_specs=tuple(refused(s) for s in view.cdi_specs))


def _said_stop(view: NodeView, seen: tuple[str, ...], unseen: tuple[str, ...], kind: str,
               check: Check) -> Check:
    """``check`` naming the spec dirs CDI never reads, past the last of ``seen``, which
    it cannot look up: an OK is a WARN (a spec written there is never read)."""
    if not unseen:
        return check
    stop = next(s for s in view.cdi_specs if s.stops and s.path == _norm(seen[-1]))
    lost = [s.path for s in view.cdi_specs
            if _in(s.path, unseen) and s.error is None and s.kind == kind]
    said = f"{', '.join(unseen)} never read" + (f", {', '.join(lost)} with them"
                                                if lost else "")
    if f"{stop.path} {stop.error}" not in check.found:  # (a FAIL names it once)
        said = f"{stop.path} {stop.error}: {said}"
    fix = (f"Make {stop.path} a path the runtime can look up (each directory on the way "
           "a directory it may search), or remove it from spec-dirs under "
           f"[nvidia-container-runtime.modes.cdi] in /{TOOLKIT_TOML}.")
    if check.status is Status.OK:
        return replace(check, status=Status.WARN, found=f"{check.found} ({said})",
                       why="CDI's scan stops at a spec dir it cannot look up: a spec in a "
                           "later one (which overrides an earlier one's devices) is never "
                           "read.", fix=fix)
    return replace(check, found=f"{check.found} ({said})", fix=f"{fix} {check.fix}")


def _said_engine(view: NodeView, check: Check) -> Check:
    """``check`` naming the specs in dockerd's spec dirs whose cdiVersion is newer than
    the CDI of its version (docker info ``ServerVersion``) takes: it refuses them, so
    ``docker run --device`` of their devices fails. Swarm's tasks do not use them: an
    OK is a WARN, never a FAIL."""
    server = (view.docker_info or {}).get("ServerVersion")
    newest = newest_taken(DOCKER_CDI, server) if isinstance(server, str) else None
    if newest is None:  # (no docker info, a version not read, or no CDI before 25)
        return check
    listed, _ = _engine_dirs(view)
    seen, _ = _engine_scanned(view, tuple(listed[:MAX_ENGINE_CDI_DIRS]))
    refused = [s for s in view.cdi_specs if _in(s.path, seen) and s.error is None
               and s.version in VERSIONS and newer(s.version, newest)]
    if not refused:
        return check
    engine = f"Docker {peer_text(server, 40)}"
    said = (f"{engine}'s CDI takes cdiVersion {newest} at most and refuses "
            + ", ".join(f"{s.path} (cdiVersion {s.version})" for s in refused[:3])
            + (f" and {len(refused) - 3} more" if len(refused) > 3 else ""))
    newest_asked = min((s.version for s in refused), key=VERSIONS.index)
    lower = [f"cdiVersion: {s.needs} in {s.path}" for s in refused[:3]
             if not newer(s.needs, newest)]
    upgrade = (f"upgrade Docker Engine to {first_taking(DOCKER_CDI, newest_asked)} or "
               "later (docker run --device; Swarm services do not use dockerd's CDI).")
    fix = (f"Set {'; '.join(lower)} (what its content needs), or {upgrade}" if lower
           else upgrade[0].upper() + upgrade[1:])
    if check.status is Status.OK:
        return replace(check, status=Status.WARN, found=f"{check.found} ({said})",
                       why=f"{engine} vendors a CDI that does not know a newer spec "
                           "version: it refuses the whole spec, and `docker run --device` "
                           "of its devices fails.", fix=fix)
    return replace(check, found=f"{check.found} ({said})", fix=f"{check.fix} {fix}".strip())


def _said_notes(view: NodeView, dirs: tuple[str, ...], check: Check) -> Check:
    """``check`` naming what CDI leaves unread of the spec files it reads (a document
    past the first): an OK is a WARN, the fix to remove it."""
    notes = [s for s in view.cdi_specs if s.note is not None and _in(s.path, dirs)]
    if not notes:
        return check
    said = "; ".join(f"{s.path} {s.note}" for s in notes[:2])
    fix = "Remove what CDI leaves unread from " + ", ".join(s.path for s in notes) + "."
    if check.status is Status.OK:
        return replace(check, status=Status.WARN, found=f"{check.found} ({said})",
                       why="CDI reads the first YAML document of a spec file alone: a "
                           "device in a later one is never resolved.", fix=fix)
    return replace(check, found=f"{check.found} ({said})", fix=f"{check.fix} {fix}".strip())


def _said_next(view: NodeView, dirs: tuple[str, ...], kind: str, check: Check) -> Check:
    """``check`` noting the first of the runtime's ``dirs`` that CDI's next release stops
    its scan at (``cdispec.NEXT_CDI``) where a spec of ``kind`` the runtime reads today is
    in a later one: lost to a toolkit that vendors it. Its status is today's CDI's."""
    for n, d in enumerate(dirs):
        stop = next((s for s in view.cdi_specs if s.next_stops and s.path == _norm(d)),
                    None)
        later = dirs[n + 1:]
        lost = [s.path for s in view.cdi_specs
                if _in(s.path, later) and s.error is None and s.kind == kind]
        if stop is not None and lost:
            why = (stop.error or "").partition(":")[0]
            return replace(check, found=f"{check.found} ({NEXT_CDI} stops its scan at "
                                        f"{stop.path}, which {why}: {', '.join(later)} "
                                        f"never read, {', '.join(lost)} with them)")
    return check


def _said_hangs(view: NodeView, dirs: tuple[str, ...], check: Check) -> Check:
    """``check`` failed for a spec file in the runtime's ``dirs`` that is a FIFO or a
    device (``cdifile``): the runtime's read of it may never return, whatever the other
    specs define."""
    hangs = [s for s in view.cdi_specs if s.hangs and _in(s.path, dirs)]
    if not hangs:
        return check
    said = "; ".join(f"{s.path} {s.error}" for s in hangs[:2]
                     if f"{s.path} {s.error}" not in check.found)  # (a FAIL named it)
    found = f"{check.found} ({said})" if said else check.found
    fix = (f"Remove {', '.join(s.path for s in hangs)} (`ls -l` shows what it is): CDI "
           "reads every *.yaml and *.json file of its spec dirs.")
    why = ("CDI reads each *.yaml and *.json file of the runtime's spec dirs whole: the "
           "read of a FIFO waits for a writer, of a device may never end, so the runtime "
           "hangs starting each GPU task's container.")
    if check.status is Status.FAIL:  # (its own fault stays said)
        why = f"{check.why} {why}".strip()
    return replace(check, status=Status.FAIL, found=found, why=why,
                   fix=fix if check.status is Status.OK else f"{fix} {check.fix}".strip())


def _said_skipped(view: NodeView, dirs: tuple[str, ...], check: Check) -> Check:
    """``check`` naming the spec files in the runtime's ``dirs`` whose read fails
    (``cdifile``) or whose content CDI refuses (``refused``): CDI's ``Cache.refresh``
    records either as that spec's error and loads the other specs, so an OK is a WARN (a
    GPU only such a spec names goes unresolved, a FAIL already)."""
    skipped = [s for s in view.cdi_specs if (s.skipped or s.refused) and _in(s.path, dirs)
               and f"{s.path} {s.error}" not in check.found]
    if not skipped:
        return check
    said = "; ".join(f"{s.path} {s.error}" for s in skipped[:2])
    more = f" and {len(skipped) - 2} more" if len(skipped) > 2 else ""
    fix = _skipped_fix([s for s in skipped if s.skipped], [s for s in skipped if s.refused])
    if check.status is Status.OK:
        unread = any(s.skipped for s in skipped)
        why = ("CDI skips a spec file it cannot read" if unread else
               "CDI refuses a spec whose content it rejects (its read of the file fails), "
               "loading the others")
        return replace(check, status=Status.WARN, found=f"{check.found} ({said}{more})",
                       why=f"{why}: the devices it defines are not resolved, and the "
                           "doctor cannot tell which they are.", fix=fix)
    return replace(check, found=f"{check.found} ({said}{more})",
                   fix=f"{check.fix} {fix}".strip())


def _skipped_fix(unread: list[CdiSpec], refused: list[CdiSpec]) -> str:
    """The fix of the spec files CDI cannot read (``unread``) and of those it refuses."""
    fixes = []
    if unread:
        denied = any(DENIED_TO_USER in (s.error or "") for s in unread)
        fixes.append(f"Remove {', '.join(s.path for s in unread)} where it is no spec, or "
                     "make it one root can read (`ls -lL` shows what each is)" + (
                         "; run the doctor as root (`sudo swarmgpu doctor`) to read it as "
                         "the runtime does." if denied else "."))
    if refused:
        fixes.append(f"Correct {', '.join(s.path for s in refused)} as said, or remove it "
                     f"where it is no spec this node needs (`{GENERATE}` writes one CDI "
                     "takes).")
    return " ".join(fixes)


def _norm(d: str) -> str:
    """A spec dir as ``read`` names it (normalised, absolute)."""
    return posixpath.normpath("/" + d.lstrip("/"))


def _said_left(view: NodeView, dirs: tuple[str, ...], check: Check) -> Check:
    """``check`` naming the spec files of the runtime's dirs the doctor left unread (past
    ``MAX_CDI_SPECS`` a dir): a spec there may name a GPU, or clash with one read, so an
    OK is a WARN."""
    left = [(d, n, more) for d, n, more in view.cdi_left if _in(d, dirs)]
    if not left:
        return check
    said = "; ".join(f"{d}: the doctor read {n} of {n + more} spec files, {more} left "
                     "unread" for d, n, more in left)
    fix = (f"Move the files that are not this node's CDI specs out of "
           f"{', '.join(d for d, _, _ in left)} (the doctor reads the first "
           f"{left[0][1]} by name; the runtime reads them all).")
    if check.status is Status.OK:
        return replace(check, status=Status.WARN, found=f"{check.found} ({said})",
                       why="A spec file left unread may name a GPU twice (the runtime "
                           "then resolves neither): the doctor cannot tell.", fix=fix)
    return replace(check, found=f"{check.found} ({said})",
                   fix=f"{check.fix} {fix}".strip())


def _check_specs(view: NodeView, dirs: tuple[str, ...], kind: str,
                 details: tuple[str, ...]) -> Check:
    """The cdi mode's answer from the specs of ``kind`` in the runtime's ``dirs``."""
    theirs = [s for s in view.cdi_specs if _in(s.path, dirs)]
    bad = [s for s in theirs if s.error is not None]
    specs = [s for s in theirs if s.error is None and s.kind == kind]
    where = ", ".join(dirs) or "no spec dirs"
    fix = (f"`{GENERATE}` (again after a driver upgrade or a GPU change), or set "
           f'mode = "legacy" under [nvidia-container-runtime] in /{TOOLKIT_TOML}.')
    if not specs:
        # (room for a YAML error's line at fault: ``yamlfile.SNIPPET``)
        said = "; ".join(f"{s.path} {peer_text(s.error or '', 300)}" for s in bad[:2])
        return Check(
            CID, Status.FAIL, f"mode cdi and no {kind} CDI spec in {where}"
            + (f" ({said})" if said else ""),
            "In cdi mode the runtime resolves the GPUs Swarm hands a task (as "
            f"{kind}=GPU-<uuid>) against the CDI specs in its spec dirs: with none, every "
            "GPU task's container fails to start (unresolvable CDI devices).", fix,
            details=details)
    if (unread := live_unread(CID, view)) is not None:  # (read as no GPU: all named)
        return replace(unread, details=details)
    named, clashes = _resolved(specs)
    missing = [v for v in _advertised(view) if v not in named]
    if clashed := [v for v in missing if v in clashes]:
        return Check(
            CID, Status.FAIL, f"{' and '.join(clashes[clashed[0]])} each name "
            f"{quote(clashed)}: the runtime resolves neither",
            "CDI drops a device that two specs of one spec dir define (\"conflicting "
            "device\"), whatever a later dir says: a task Swarm hands that GPU fails to "
            "start.", "Keep one spec of the GPUs in each spec dir: remove the older file "
            "(`nvidia-ctk cdi list` shows the names that resolve).", details=details)
    paths = ", ".join(s.path for s in specs)
    if missing:
        return Check(
            CID, Status.FAIL, f"{paths} names no device {quote(missing)}",
            "A spec generated before a GPU was replaced or added, or with index names "
            "only, lacks it: a task Swarm hands that GPU fails to start.",
            f"Generate the spec again naming GPUs by UUID (`{GENERATE} "
            "--device-name-strategy=uuid`; `nvidia-ctk cdi list` shows the names it has), "
            'or set mode = "legacy" under [nvidia-container-runtime].', details=details)
    return Check(CID, Status.OK, f"mode cdi; {paths} names each GPU advertised",
                 details=details)


def _resolved(specs: list[CdiSpec]) -> tuple[frozenset[str], dict[str, list[str]]]:
    """The device names the runtime resolves, and those it drops, each with the specs of
    one dir that name it: CDI's cache refuses a device two specs of one dir (the same
    priority) define, even where a later dir defines it too."""
    by_dir: dict[tuple[str, str], list[str]] = {}
    for s in specs:
        for name in s.devices:
            by_dir.setdefault((posixpath.dirname(s.path), name), []).append(s.path)
    clashes = {name: paths for (_, name), paths in by_dir.items() if len(paths) > 1}
    return frozenset(name for _, name in by_dir) - clashes.keys(), clashes


def _in(path: str, dirs: tuple[str, ...]) -> bool:
    """``path`` (as ``read`` names it: normalised) is in one of ``dirs``, or is one (a
    dir the doctor could not list)."""
    return any(_norm(d) in (posixpath.dirname(path), path) for d in dirs)


def _advertised(view: NodeView) -> list[str]:
    """The GPU values Swarm hands out (daemon.json's, else dockerd's): GPU-/MIG- UUIDs."""
    data = view.daemon_json.data or {}
    res, _ = parse_generic_resources(data.get("node-generic-resources"), "")
    if not res and view.docker_info is not None:
        res = from_docker_info(view.docker_info) or []
    return sorted({r.value for r in res if gpu_kind(r) and not r.discrete})


def _engine_details(view: NodeView, kind: str) -> tuple[str, ...]:
    """dockerd's CDI spec dirs (docker info's, else daemon.json's) and whether a spec of
    ``kind`` is in one."""
    listed, configured = _engine_dirs(view)
    if not listed:
        return (("daemon.json leaves dockerd no CDI spec dir (features.cdi false, or "
                 "cdi-spec-dirs empty; Swarm services do not use it)") if configured else
                "dockerd names no CDI spec dirs (Docker before 25, or its CDI off; Swarm "
                "services do not use it)",)
    # (the ones read: a proxy's thousands were each named, a line of megabytes)
    dirs = tuple(listed[:MAX_ENGINE_CDI_DIRS])
    more = (f" and {len(listed) - len(dirs)} more, not read" if len(listed) > len(dirs)
            else "")
    seen, unseen = _engine_scanned(view, dirs)
    found = [s.path for s in view.cdi_specs if _in(s.path, seen) and s.kind == kind
             and s.error is None]
    said = (" as daemon.json sets them (no docker info; by default from Docker 28.2, "
            "before with features.cdi true)" if configured else "")
    there = f"{kind} in {', '.join(found)}" if found else f"no {kind} spec there"
    stop = next((s for s in view.cdi_specs if s.stops and unseen
                 and s.path == _norm(seen[-1])), None)
    stopped = (f"; its scan stops at {peer_text(stop.path, 100)}, which "
               f"{peer_text((stop.error or '').partition(':')[0], 100)}: "
               f"{', '.join(peer_text(d, 100) for d in unseen)} never read" if stop else "")
    named = ", ".join(_named(d, view) for d in
                      engine_cdi_dirs(view.docker_info, view.daemon_json.data)[0][:len(dirs)])
    return (f"dockerd reads CDI specs from {named}"
            f"{more}{said}: {there}{stopped} (docker run --device; Swarm services do not "
            "use it)",)

