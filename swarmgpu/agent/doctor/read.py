"""Reading a node's root (or a fixture tree) once into a NodeView; never executes anything
from it."""

from __future__ import annotations

import codecs
import errno
import json
import os
import posixpath
import re
import stat
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from swarmgpu.agent.doctor.cdifile import SpecUnread, not_regular, unread
from swarmgpu.agent.doctor.cdispec import (
    NEXT_CDI,
    field,
    go_text,
    no_edits,
    refusal,
    unknown_edit_key,
    versions,
)
from swarmgpu.agent.doctor.enginelinks import as_resolved, resolved_links, since_29_2
from swarmgpu.agent.doctor.infoparts import engine_cdi_dirs
from swarmgpu.agent.doctor.resources import norm_bus_id
from swarmgpu.agent.doctor.rootpath import (
    RootChanged,
    SymlinkLoop,
    entry_in_root,
    is_host,
    listdir_in_root,
    lstat_in_root,
    stat_in_root,
    subdirs_in_root,
)
from swarmgpu.agent.doctor.runtimepath import find_runtime
from swarmgpu.agent.doctor.view import (
    DAEMON_JSON,
    DEVICE_MANIFEST,
    DPKG_STATUS,
    FIXTURE_DOCKER_INFO,
    FIXTURE_FACTS,
    HAMI_LIBS,
    HAMI_LOCK_DIR,
    HAMI_PRELOAD,
    HOST_PRELOAD,
    MAX_CDI_BYTES,
    MAX_CDI_SPECS,
    MAX_ENGINE_CDI_DIRS,
    TOOLKIT_PACKAGES,
    TOOLKIT_TOML,
    CdiSpec,
    DoctorError,
    HamiView,
    NodeView,
    Parsed,
    RuntimeLookup,
    Version,
    toolkit_cdi,
)
from swarmgpu.core.boundedfile import NotRegularFile, read_head
from swarmgpu.core.model import FactsError, NodeFacts
from swarmgpu.core.peertext import quoted
from swarmgpu.core.yamlfile import not_utf8, parse_first_yaml


def _under(root: str, rel: str) -> Path:
    """``<root>/<rel>`` as written: the name a finding gives the file."""
    return Path(root) / rel


# A daemon.json, config.toml or /proc file is a few KiB; dpkg's status file a few MiB.
MAX_FILE_BYTES = 1 << 20
MAX_DPKG_BYTES = 64 << 20


class Unreadable(Exception):
    """A node file that is there but cannot be read as a small regular file."""

    def __init__(self, why: str, fix: str) -> None:
        super().__init__(why)
        self.why = why
        self.fix = fix


def _read_head(root: str, rel: str, limit: int) -> bytes | None:
    """Up to ``limit`` + 1 bytes of the file, None when absent (``core.boundedfile``: a
    FIFO would block the open, /dev/zero never end; a misconfigured node, or an untrusted
    image under --root, may put either where a config file belongs). Symlinks resolve
    inside the root, the file opened relative to its directory's fd (``rootpath``)."""
    path = _under(root, rel)
    try:
        with entry_in_root(root, rel) as (dir_fd, name):
            return read_head(name, limit, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise Unreadable("is not a regular file (a directory, FIFO or device)",
                         f"Replace {path} with the file itself (`ls -lL {path}` shows "
                         "what is there).") from None
    except OSError as exc:
        raise _unreadable(path, exc, is_host(root)) from exc


def _read_text(root: str, rel: str, limit: int = MAX_FILE_BYTES) -> str | None:
    """The file's text, None when absent; Unreadable names why and the fix."""
    path = _under(root, rel)
    data = _read_head(root, rel, limit)
    if data is None:
        return None
    if len(data) > limit:
        raise Unreadable(f"is larger than {limit >> 20} MiB",
                         f"Replace {path} with the real file (`ls -lL {path}`).")
    return data.decode("utf-8", errors="replace")


def _unreadable(path: Path, exc: OSError, host: bool) -> Unreadable:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Unreadable("cannot be read: permission denied",
                          "Run the doctor as root (`sudo swarmgpu doctor`): dockerd and "
                          "the toolkit read it as root.")
    if isinstance(exc, RootChanged):
        return Unreadable(f"cannot be read: {exc.filename} {exc.strerror}",
                          f"Run the doctor again once nothing writes the root (`ls -l "
                          f"{exc.filename}` shows what is there now).")
    if exc.errno == errno.ELOOP and not host and not isinstance(exc, SymlinkLoop):
        # O_NOFOLLOW met a link the walk did not see: one link, no loop (SymlinkLoop is)
        return Unreadable("became a symlink while it was read (replaced after the doctor "
                          "looked at it: the root is being written)",
                          f"Run the doctor again once nothing writes the root (`ls -l "
                          f"{path}` shows what is there now); a link that stays is "
                          "followed inside the root.")
    if exc.errno == errno.ELOOP:
        return Unreadable("is a symlink loop",
                          f"Point {path} at the real file (`ls -lL {path}` shows the loop).")
    return Unreadable(f"cannot be read ({exc.strerror})",
                      f"Make {path} a readable regular file (`ls -lL {path}`).")


def _read_or_none(root: str, rel: str, limit: int = MAX_FILE_BYTES) -> str | None:
    """A file a check can do without: one that cannot be read counts as absent."""
    try:
        return _read_text(root, rel, limit)
    except Unreadable:
        return None


def _read_fixture(root: str, rel: str) -> str | None:
    try:
        return _read_text(root, rel)
    except Unreadable as exc:
        raise DoctorError(f"{_under(root, rel)} {exc.why}") from exc


def _is(root: str, rel: str, test: Callable[[int], bool]) -> bool:
    """``test`` (stat.S_ISDIR, stat.S_ISREG) of the path as the node sees it."""
    try:
        return test(stat_in_root(root, rel).st_mode)
    except OSError:
        return False


def _parse_daemon_json(root: str) -> Parsed:
    path = _under(root, DAEMON_JSON)
    try:
        raw = _read_head(root, DAEMON_JSON, MAX_FILE_BYTES)
        if raw is not None and len(raw) > MAX_FILE_BYTES:
            _read_text(root, DAEMON_JSON)  # raises, naming the size
    except Unreadable as exc:
        return Parsed(str(path), error=exc.why, fix=exc.fix)
    if raw is None:
        return Parsed(str(path))
    # As dockerd decodes it (moby daemon/config getConflictFreeConfiguration): a UTF-8 or
    # UTF-16 byte order mark is honoured (Notepad, Windows PowerShell), else strict UTF-8,
    # and an empty or blank file is an empty configuration.
    codec = ("utf-16" if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
             else "utf-8-sig")
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError as exc:
        return Parsed(str(path), error=f"not valid {exc.encoding.upper().removesuffix('-SIG')} "
                                       f"at byte {exc.start}",
                      fix="Save it as UTF-8 (dockerd refuses to start with it as it is).")
    if not text.strip():
        return Parsed(str(path), data={}, empty=True)
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
    try:
        text = _read_text(root, TOOLKIT_TOML)
    except Unreadable as exc:
        return Parsed(str(path), error=exc.why, fix=exc.fix)
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
    """``1.17.8-1`` -> ((1, 17, 8), False); ``1.19.0~rc.2-1`` -> ((1, 19, 0), True).
    ASCII digits, 9 at most a part (int() raised past 4,300: a traceback)."""
    m = re.match(r"^(?:\d{1,9}:)?(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?([~+-].*)?$",
                 text.strip(), re.ASCII)
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
    text = _read_fixture(root, DEVICE_MANIFEST)
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
    nodes = {}
    for rel in sorted([*_dev_names(root, prefix="nvidia"), *_dev_names(root, "nvidia-caps")]):
        try:
            st = stat_in_root(root, f"dev/{rel}")
        except OSError:
            continue  # dangling or vanished: reported as missing if it is needed
        if stat.S_ISDIR(st.st_mode):
            continue
        nodes[rel] = (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(
            st.st_mode) else None
    try:
        chars = frozenset(listdir_in_root(root, "dev/char"))
    except OSError:  # absent or unreadable: no /dev/char to check
        chars = None
    return nodes, chars


def _dev_names(root: str, sub: str = "", prefix: str = "") -> list[str]:
    """The names in ``<root>/dev/<sub>`` starting with ``prefix``, relative to dev."""
    try:
        names = listdir_in_root(root, posixpath.join("dev", sub))
    except OSError:  # absent or unreadable: nothing there
        return []
    return [posixpath.join(sub, n) for n in names if n.startswith(prefix)]


def _read_sysfs_numa(root: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        entries = listdir_in_root(root, "sys/bus/pci/devices")
    except OSError:  # no sysfs (a container, an image): the hint is optional
        return out
    for name in entries:
        text = _read_or_none(root, f"sys/bus/pci/devices/{name}/numa_node")
        if text is not None and text.strip().lstrip("-").isdigit():
            out[norm_bus_id(name)] = int(text.strip())
    return out


def _load_fixture_json(root: str, rel: str) -> Any:
    path = _under(root, rel)
    text = _read_fixture(root, rel)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DoctorError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DoctorError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_view(root: str = "/", *, facts: NodeFacts | None = None,
              docker_info: Mapping[str, Any] | None = None,
              facts_error: str | None = None) -> NodeView:
    """Read the node under ``root`` once. Raises DoctorError when that is impossible.
    Facts that list no GPUs because the source could not (NVML without a driver) are no
    facts: compared with them, every advertised GPU would look stale."""
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
    if facts is not None and facts.gpus_unread:
        facts_error = facts_error or "; ".join(facts.errors)
        facts = None
    if docker_info is None:
        docker_info = _load_fixture_json(root, FIXTURE_DOCKER_INFO)
    status_text = _read_or_none(root, DPKG_STATUS, MAX_DPKG_BYTES)
    devices_text = _read_or_none(root, "proc/devices")
    cgroups_text = _read_or_none(root, "proc/cgroups")
    nodes, chars = _read_devices(root)
    daemon_json = _parse_daemon_json(root)
    toolkit_toml = _parse_toolkit_toml(root)
    engine = _engine_dirs(docker_info, daemon_json.data)
    links, denied = resolved_links(root, engine)  # (an older dockerd's: the details)
    specs, left = _read_cdi(root, toolkit_toml.data, as_resolved(engine, links)
                            if since_29_2(docker_info) else engine)
    return NodeView(
        root=root,
        daemon_json=daemon_json,
        runtime=_runtime(root, daemon_json),
        toolkit_toml=toolkit_toml,
        toolkit_version=dpkg_version(status_text) if status_text is not None else None,
        proc_devices=parse_proc_devices(devices_text) if devices_text is not None else None,
        dev_nodes=nodes,
        dev_char=chars,
        cgroup_v2=_is(root, "sys/fs/cgroup/cgroup.controllers", stat.S_ISREG),
        cgroup_v1_devices=None if cgroups_text is None else _devices_enabled(cgroups_text),
        sysfs_numa=_read_sysfs_numa(root),
        facts=facts,
        facts_error=facts_error,
        docker_info=docker_info,
        hami=_read_hami(root),
        cdi_specs=specs,
        cdi_left=left,
        engine_cdi_links=links,
        engine_cdi_denied=denied,
    )


def _engine_dirs(info: Mapping[str, Any] | None, daemon: Mapping[str, Any] | None
                 ) -> list[str]:
    """dockerd's spec dirs the doctor reads (its first ``MAX_ENGINE_CDI_DIRS``), as
    ``_read_cdi`` names them."""
    return [posixpath.normpath("/" + d.lstrip("/"))
            for d in engine_cdi_dirs(info, daemon)[0][:MAX_ENGINE_CDI_DIRS]]


def _read_cdi(root: str, toolkit: Mapping[str, Any] | None, engine: list[str]
              ) -> tuple[tuple[CdiSpec, ...], tuple[tuple[str, int, int], ...]]:
    """The CDI specs in the toolkit's spec dirs and in dockerd's (``engine_cdi_dirs``, its
    first ``MAX_ENGINE_CDI_DIRS``), each read once; a directory absent or not listed has
    none, one CDI reads no spec in (``_spec_dir``) is itself named unread; the dirs of more than
    ``MAX_CDI_SPECS`` files, with how many were left unread."""
    budget = MAX_CDI_BYTES  # (spec text left to parse)
    dirs = dict.fromkeys(posixpath.normpath("/" + d.lstrip("/")) for d in
                         (*toolkit_cdi(toolkit)[0], *engine[:MAX_ENGINE_CDI_DIRS]))
    specs: list[CdiSpec] = []
    left: list[tuple[str, int, int]] = []
    for d in dirs:
        listed = _spec_dir(root, d)
        if not isinstance(listed, list):
            specs.extend([listed] if listed is not None else [])
            continue
        # (only what CDI reads counts toward the bound; a .yml is named, never parsed)
        names = sorted(n for n in listed if n.endswith((".yaml", ".json", ".yml")))
        if names:  # (CDI's scan skips a directory, a link to one read as a file)
            subdirs = _subdirs(root, d)
            names = [n for n in names if n not in subdirs]
        yml = [n for n in names if n.endswith(".yml")][:MAX_CDI_SPECS]
        names = [n for n in names if not n.endswith(".yml")]
        for n in sorted([*names[:MAX_CDI_SPECS], *yml]):
            path = posixpath.join(d, n)
            if n.endswith(".yml"):
                specs.append(CdiSpec(path, error=_NOT_READ_YML))
                continue
            specs.append(spec := _cdi_spec(root, path, budget))
            budget -= spec.size
        if len(names) > MAX_CDI_SPECS:
            left.append((d, MAX_CDI_SPECS, len(names) - MAX_CDI_SPECS))
    return tuple(specs), tuple(left)


def _spec_dir(root: str, d: str) -> list[str] | CdiSpec | None:
    """The names in the spec dir ``d`` as CDI's scan (spec-dirs.go scanSpecDirs, its
    ``filepath.Walk`` in every release to v1.1.0) finds them: None where it is absent
    (the scan goes on); else, where it reads no spec in it, why, as a CdiSpec. Walk
    looks ``d`` up without following a link (``os.Lstat``): a link, a file, or a dir it
    cannot list is skipped, a path it cannot look up stops the scan. (CDI's main branch,
    unreleased, lists with ``os.ReadDir``: a link followed, a dir not listed a stop:
    ``cdispec.NEXT_CDI``.)"""
    mode = 0
    try:
        mode = lstat_in_root(root, d.lstrip("/")).st_mode
        if stat.S_ISDIR(mode):
            return listdir_in_root(root, d.lstrip("/"))
    except (FileNotFoundError, RootChanged):  # (absent: CDI's scan goes on; written)
        return None
    except (OSError, ValueError) as exc:  # (a file on the way, a loop; a NUL)
        return _unlisted(d, exc, looked=stat.S_ISDIR(mode))
    if stat.S_ISLNK(mode):
        return CdiSpec(d, error="is a symlink, which CDI's scan does not follow: it "
                                "reads no spec there (name the directory itself in the "
                                f"spec dirs; {NEXT_CDI} follows it)")
    return CdiSpec(d, error="is not a directory: CDI reads no spec there", next_stops=True)


def _unlisted(d: str, exc: OSError | ValueError, looked: bool) -> CdiSpec:
    """The spec dir ``d`` the doctor could not list (``looked``: a dir, its names not
    read) or look up. CDI skips a dir it cannot list; one it cannot look up for any
    reason but its absence stops its scan, reading no later dir. Denied to a user, the
    runtime (root) may read it: named so, and no stop."""
    if isinstance(exc, PermissionError) and os.geteuid() != 0:
        return CdiSpec(d, error=f"cannot be {'listed' if looked else 'looked up'}: "
                                "permission denied (run the doctor as root, as the "
                                "runtime reads it)", denied=True)
    why = ((exc.strerror if isinstance(exc, OSError) else None)
           or "a NUL in its name").lower()
    if looked:  # (CDI's next release stops there: ``cdi._said_next``)
        return CdiSpec(d, error=f"cannot be listed ({why}): CDI reads no spec there",
                       next_stops=True)
    return CdiSpec(d, error=f"cannot be looked up ({why}): CDI stops its scan of the "
                            "spec dirs there, reading no spec of a later one", stops=True)


def _subdirs(root: str, d: str) -> frozenset[str]:
    try:
        return subdirs_in_root(root, d.lstrip("/"))
    except (OSError, ValueError):  # (listed a moment ago: a root being written)
        return frozenset()


# CDI's scan reads *.json and *.yaml alone (container-device-interface spec-dirs.go)
_NOT_READ_YML = ("is named .yml, which CDI never reads (only *.yaml and *.json): rename "
                 "it to .yaml")


_REFUSED_TEXT = "CDI refuses the spec"


class _SpecError(Exception):
    pass


def _spec_bytes(root: str, path: str) -> bytes | None:
    """Up to ``MAX_FILE_BYTES`` + 1 bytes of a spec file, None where gone; SpecUnread
    where it is no regular file (looked at first: never opened, ``cdifile``) or its read
    fails."""
    if (odd := not_regular(root, path)) is not None:
        raise SpecUnread(odd)
    try:
        with entry_in_root(root, path.lstrip("/")) as (dir_fd, name):
            return read_head(name, MAX_FILE_BYTES, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except (NotRegularFile, OSError) as exc:
        raise unread(path, exc) from None


def _spec_text(root: str, path: str) -> str:
    """A spec file's text; Unreadable where CDI cannot read it either: gone (a link to
    nothing), or not UTF-8 (go-yaml v2, its reader, stops at such a byte; a UTF-16 one
    it reads, by its byte order mark, is named so); SpecUnread (``_spec_bytes``)."""
    data = _spec_bytes(root, path)
    if data is None:  # (listed a moment ago: a link to nothing, or removed since)
        raise SpecUnread(CdiSpec(path, error="cannot be read: it is gone, or a symlink to "
                                             "nothing (CDI refuses it)", skipped=True))
    if len(data) > MAX_FILE_BYTES:
        raise Unreadable(f"is larger than {MAX_FILE_BYTES >> 20} MiB, the most the doctor "
                         "reads of a spec file", "")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bom = data.startswith((b"\xff\xfe", b"\xfe\xff"))  # (UTF-16 or 32: go-yaml reads it)
        said = "CDI reads it, the doctor does not" if bom else _REFUSED_TEXT
        raise Unreadable(f"is {not_utf8(exc)} ({said})", "") from None


def _cdi_spec(root: str, path: str, budget: int) -> CdiSpec:
    """One spec file: its kind and device names (CDI's ``kind``, ``devices[].name``); one
    past ``budget`` characters of text left to parse (``MAX_CDI_BYTES``) is named unread."""
    try:
        text = _spec_text(root, path)
        if len(text) > budget:
            return CdiSpec(path, error=f"not parsed: past the {MAX_CDI_BYTES >> 20} MiB of "
                                       "spec text the doctor parses in all (move the "
                                       "files that are no CDI specs out of the spec dirs)")
        # (CDI's sigs.k8s.io/yaml: go-yaml v2, which reads the first document alone)
        data, more = parse_first_yaml(text, path, _SpecError)
    except Unreadable as exc:  # (not UTF-8: go-yaml refuses it; the doctor's bound: not)
        return CdiSpec(path, error=exc.why, refused=exc.why.endswith(f"({_REFUSED_TEXT})"))
    except SpecUnread as exc:
        return exc.spec
    except _SpecError as exc:  # (the file named once: the check names it first)
        said = str(exc).removeprefix(f"{path}: ")
        # (not valid YAML, or a key twice, CDI's go-yaml refuses too; not the doctor's bounds)
        return CdiSpec(path, error=said, size=len(text),
                       refused=any(w in said for w in ("not valid YAML", "given twice")))
    kind = field(data, "kind")
    if not isinstance(kind, str):
        return CdiSpec(path, error="names no kind (not a CDI spec)", size=len(text), refused=True)
    devices = field(data, "devices")
    devices = devices if isinstance(devices, list) else []
    if (unknown := _unknown_key(data, devices) or unknown_edit_key(data, devices)):
        return CdiSpec(path, error=unknown, size=len(text), refused=True)
    names = [_device_name(d) for d in devices]
    if None in names:  # (CDI: "invalid device, empty device name", "cannot unmarshal")
        return CdiSpec(path, error="names a device of no name, or of one not text (CDI "
                                   "refuses the whole spec): generate it again, or name "
                                   "each device", size=len(text), refused=True)
    if (refused := refusal(data, kind, devices)) is not None:  # (its version, kind)
        return CdiSpec(path, error=refused, size=len(text), refused=True)
    if bad := [n for n in names if n and _name_invalid(n)]:  # ("failed add device")
        return CdiSpec(path, error=f"names device {quoted(bad[0])}, not a valid CDI device "
                                   "name (CDI refuses the whole spec): name it with "
                                   "letters, digits and _-.: only, a letter or digit "
                                   "first and last", size=len(text), refused=True)
    if (empty := no_edits(names, devices)) is not None:  # ("empty device edits")
        return CdiSpec(path, error=empty, size=len(text), refused=True)
    # (CDI refuses the whole spec: "invalid spec, multiple device")
    if twice := [n for n, k in Counter(names).items() if k > 1 and n]:
        return CdiSpec(path, error=f"names device {quoted(twice[0])} twice (CDI refuses "
                                   "the whole spec)", size=len(text), refused=True)
    if not names:  # (CDI: "invalid spec, no devices", checked last)
        return CdiSpec(path, error="names no device (CDI refuses the whole spec): generate "
                                   "it again, or remove it", size=len(text), refused=True)
    note = ("has a second YAML document (---), which CDI never reads (it reads the first "
            "alone)") if more else None
    version, needs = versions(data, kind, devices)
    return CdiSpec(path, kind, frozenset(n for n in names if n), size=len(text), note=note,
                   version=version, needs=needs)


# The keys of CDI's Spec and Device (specs-go config.go; annotations since v0.6.0)
_SPEC_KEYS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_KEYS = ("name", "annotations", "containerEdits")


def _unknown_key(data: object, devices: list[object]) -> str | None:
    """Why CDI refuses the spec for a key its Spec or one of its Devices does not know,
    whatever its case, as its strict decoding (DisallowUnknownFields) refuses it; None
    when it knows each (those of containerEdits: ``cdispec.unknown_edit_key``)."""
    for where, mapping, known in (("", data, _SPEC_KEYS),
                                  *((f" in device {n}", d, _DEVICE_KEYS)
                                    for n, d in enumerate(devices, 1))):
        keys = mapping if isinstance(mapping, dict) else {}
        lower = {k.lower() for k in known}
        if odd := [k for k in keys if not (isinstance(k, str) and k.lower() in lower)]:
            return (f"has the key {quoted(odd[0])}{where}, which CDI's spec does not know "
                    f"(CDI refuses the whole spec): remove it, or spell it as one of "
                    f"{', '.join(known)}")
    return None


def _device_name(device: object) -> str | None:
    """A device's name as CDI reads it (``cdispec.go_text``: ``name: 0`` is "0"; its
    go-yaml v2 reads a plain ``yes`` as a boolean, so "true": ``_cdi_spec`` parses so);
    None where CDI refuses the spec for it (no name, null, a list or map)."""
    return go_text(field(device, "name")) or None


def _name_invalid(name: str) -> bool:
    """CDI's ValidateDeviceName refuses ``name``: ASCII letters and digits, with ``_``,
    ``-``, ``.`` and ``:`` between them, and a letter or digit first and last."""
    def alnum(c: str) -> bool:
        return c.isascii() and c.isalnum()
    return not (alnum(name[0]) and alnum(name[-1])
                and all(alnum(c) or c in "_-.:" for c in name[1:-1]))


def _runtime(root: str, daemon_json: Parsed) -> RuntimeLookup | None:
    runtimes = (daemon_json.data or {}).get("runtimes")
    nvidia = runtimes.get("nvidia") if isinstance(runtimes, dict) else None
    path = nvidia.get("path") if isinstance(nvidia, dict) else None
    return find_runtime(root, path) if isinstance(path, str) and path else None


def _read_hami(root: str) -> HamiView:
    libs: dict[str, bool] = {}
    for rel in HAMI_LIBS:
        try:
            head = _read_head(root, rel, 3)
        except Unreadable:
            continue  # a directory, a FIFO, a loop: no library there
        if head is not None:
            libs["/" + rel] = head == b"\x7fELF"
    preloads: dict[str, tuple[str, ...]] = {}
    for rel in (HAMI_PRELOAD, HOST_PRELOAD):
        text = _read_or_none(root, rel)
        if text is not None:
            # ld.so.preload: whitespace- or colon-separated paths, '#' comments
            words = re.split(r"[\s:]+", re.sub(r"#.*", "", text))
            preloads["/" + rel] = tuple(w for w in words if w)
    return HamiView(libs, preloads, _is(root, HAMI_LOCK_DIR, stat.S_ISDIR))


def _devices_enabled(proc_cgroups: str) -> bool:
    for line in proc_cgroups.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "devices":
            return parts[3] == "1"
    return False
