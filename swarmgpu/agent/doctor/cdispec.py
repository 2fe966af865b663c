"""What CDI's own checks refuse in a CDI spec's content, once it has parsed it: its
``cdiVersion`` (a version CDI knows, and at least the one the spec's content needs) and
its ``kind`` (``vendor/class``, each name of the letters CDI takes), as container-device-
interface's ``Spec.validate`` checks them (specs-go version.go ``ValidateVersion``,
pkg/parser parser.go ``ValidateVendorName``, ``ValidateClassName``). CDI refuses the
whole spec for either: the runtime then resolves none of its devices.

The keys of ``containerEdits`` and of its parts are CDI's, whatever ``cdiVersion`` says:
its strict decoding knows those of its newest struct and refuses any other, and only the
minimum version looks at which of them a spec fills (``netDevices`` needs 1.1.0), so a
key is never checked against the declared version here either.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from swarmgpu.core.goscalar import float32_text
from swarmgpu.core.peertext import quoted

# The versions CDI knows, newest first (specs-go version.go validSpecVersions)
VERSIONS = ("1.1.0", "1.0.0", "0.8.0", "0.7.0", "0.6.0", "0.5.0", "0.4.0", "0.3.0",
            "0.2.0", "0.1.0")
_EARLIEST = "0.3.0"  # (what a spec needing no later feature needs: vEarliest)

# The newest cdiVersion the CDI an engine vendors takes (its CurrentVersion: it knows
# 0.1.0 up to it), from the engine's version on: Docker Engine's (moby vendor.mod,
# tags.cncf.io/container-device-interface v0.6.2 in 25.0.0, v0.8.1 backported to
# 25.0.17, v0.6.2 again in 26.0, v0.7.1 in 26.1.0, v0.8.0 in 27.4.0, v1.0.1 in 28.1.0,
# v1.1.0 in 29.2.0); the NVIDIA runtime's (nvidia-container-toolkit go.mod).
DOCKER_CDI = (((25, 0, 0), "0.6.0"), ((25, 0, 17), "0.8.0"), ((26, 0, 0), "0.6.0"),
              ((26, 1, 0), "0.7.0"), ((27, 4, 0), "0.8.0"), ((28, 1, 0), "1.0.0"),
              ((29, 2, 0), "1.1.0"))
TOOLKIT_CDI = (((1, 10, 0), "0.3.0"), ((1, 11, 0), "0.4.0"), ((1, 12, 0), "0.5.0"),
               ((1, 14, 0), "0.6.0"), ((1, 15, 0), "0.7.0"), ((1, 16, 0), "0.8.0"),
               ((1, 18, 0), "1.0.0"), ((1, 18, 2), "1.1.0"))
Since = tuple[tuple[int, int, int], str]

# CDI's main branch lists each spec dir with os.ReadDir (container-device-interface
# 078b4b1, "pkg/cdi: use os.ReadDir for scanning Spec directories", after v1.1.0): it
# follows a symlinked dir, and stops its scan at a dir it cannot list or that is a file,
# which every release's filepath.Walk skips. The doctor scans as released CDI does and
# names the difference where a finding meets it.
NEXT_CDI = "CDI's next release (its main branch, unreleased after v1.1.0)"


def newest_taken(table: tuple[Since, ...], version: str) -> str | None:
    """The newest cdiVersion the engine of ``version`` (``28.0.4``, ``1.17.8-1``; a
    leading ``v`` taken, and dpkg's epoch, as ``read.parse_version``) takes, by
    ``table``; None where its version is not read or older than the table (no CDI).
    ASCII digits, 9 at most a part: re's \\d and int() take any Unicode digit, and int()
    raises past 4,300 of them (a traceback)."""
    m = re.match(r"(?:\d{1,9}:)?v?(\d{1,9})\.(\d{1,9})\.(\d{1,9})(?!\d)", version, re.ASCII)
    if m is None:
        return None
    ours = (int(m[1]), int(m[2]), int(m[3]))
    return next((newest for since, newest in reversed(table) if ours >= since), None)


def first_taking(table: tuple[Since, ...], cdi_version: str) -> str | None:
    """The engine version of ``table`` from which on every one takes ``cdi_version``
    (None: none does)."""
    older = [n for n, (_, newest) in enumerate(table) if newer(cdi_version, newest)]
    at = older[-1] + 1 if older else 0
    return ".".join(map(str, table[at][0])) if at < len(table) else None


def newer(cdi_version: str, newest: str) -> bool:
    """``cdi_version`` (one CDI knows) is past ``newest``."""
    return VERSIONS.index(cdi_version) < VERSIONS.index(newest)


def field(data: object, key: str) -> object:
    """The value CDI's struct field ``key`` (in small letters) takes from the mapping
    ``data`` (None: none). sigs.k8s.io/yaml decodes as JSON, whose keys match a field
    whatever their case, and writes them sorted first (capitals before small letters):
    the last that matches is kept, ``name`` over ``Name``."""
    if not isinstance(data, dict):
        return None
    keys = [k for k in data if isinstance(k, str) and k.lower() == key]
    return data[max(keys)] if keys else None


def go_text(value: object) -> str | None:
    """A scalar bound for a Go string field as CDI reads it: its sigs.k8s.io/yaml turns a
    number or boolean into its text (``0`` is "0", ``1.0`` "1", ``1e6`` "1e+06": Go's
    text of a float32; go-yaml v2 reads a plain ``yes`` as a boolean, so "true"); None for
    null, a list or a map (null leaves the field empty; a list or map CDI refuses)."""
    if isinstance(value, bool):  # (before int: a bool is one)
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float32_text(value)
    return value if isinstance(value, str) else None


# The keys of CDI's ContainerEdits and of its parts (specs-go config.go)
EDIT_KEYS = ("env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt",
             "additionalGids")
_PART_KEYS = {
    "deviceNodes": ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions",
                    "uid", "gid"),
    "netDevices": ("hostInterfaceName", "name"),
    "hooks": ("hookName", "path", "args", "env", "timeout"),
    "mounts": ("hostPath", "containerPath", "options", "type"),
    "intelRdt": ("closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring"),
}


def unknown_edit_key(data: object, devices: list[object]) -> str | None:
    """Why CDI refuses the spec for a key its ContainerEdits, or one of their device
    nodes, net devices, hooks, mounts or intelRdt, does not know, whatever its case (its
    strict decoding); None when it knows each. Every spelling of a key is decoded, so
    each is looked at."""
    for where, edits in (("containerEdits", _every(data, "containerEdits")),
                         *((f"device {n}'s containerEdits", _every(d, "containerEdits"))
                           for n, d in enumerate(devices, 1))):
        for mapping in edits:
            if (odd := _odd_key(mapping, EDIT_KEYS)) is not None:
                return _said(odd, where, EDIT_KEYS)
            for part, known in _PART_KEYS.items():
                for value in _every(mapping, part):
                    for item in value if isinstance(value, list) else [value]:
                        if (odd := _odd_key(item, known)) is not None:
                            return _said(odd, f"{where} {part}", known)
    return None


def no_edits(names: list[str | None], devices: list[object]) -> str | None:
    """Why CDI refuses the spec for a device whose own container edits are empty (pkg/cdi
    device.go ``validate``: "invalid device, empty device edits"; the spec's edits do not
    count, ``ContainerEdits.isEmpty`` looks at the device's): None when each has one."""
    for name, device in zip(names, devices, strict=True):
        edits = field(device, "containeredits")
        if not (any(_filled(edits, k.lower()) for k in EDIT_KEYS if k != "intelRdt")
                or field(edits, "intelrdt") is not None):
            return (f"names device {quoted(name)}, which has no container edits (CDI "
                    "refuses the whole spec: \"invalid device, empty device edits\"): "
                    "generate it again, or give the device its deviceNodes")
    return None


def _every(data: object, key: str) -> list[object]:
    """The values of each spelling of ``key`` in the mapping ``data``."""
    if not isinstance(data, dict):
        return []
    return [v for k, v in data.items() if isinstance(k, str) and k.lower() == key.lower()]


def _odd_key(mapping: object, known: tuple[str, ...]) -> object:
    """The first key of ``mapping`` none of ``known`` is, whatever its case (None: none)."""
    lower = {k.lower() for k in known}
    keys = mapping if isinstance(mapping, dict) else {}
    return next((k for k in keys if not (isinstance(k, str) and k.lower() in lower)), None)


def _said(key: object, where: str, known: tuple[str, ...]) -> str:
    return (f"has the key {quoted(key)} in {where}, which CDI does not know (it refuses "
            f"the spec): remove it, or spell it as one of {', '.join(known)}")


def refusal(data: object, kind: str, devices: list[object]) -> str | None:
    """Why CDI refuses the spec ``data`` (of ``kind`` and ``devices``) for its version or
    kind, in CDI's order; None when it takes both."""
    version = go_text(field(data, "cdiversion")) or ""
    said = version.removeprefix("v")  # (CDI's newVersion: one leading v dropped)
    if said not in VERSIONS:
        return (f"has cdiVersion {quoted(version)}, which CDI does not know (it refuses "
                f"the spec): set cdiVersion: {_EARLIEST} to {VERSIONS[0]}, as its content "
                "needs")
    need, feature = _needs(data, kind, devices)
    if VERSIONS.index(need) < VERSIONS.index(said):
        needs = f"its {feature} needs" if feature else "CDI reads specs of"
        return (f"has cdiVersion {quoted(version)}, but {needs} {need} or later (CDI "
                f"refuses the spec): set cdiVersion: {need}")
    vendor, _, cls = kind.partition("/")
    if not (vendor and cls):  # (CDI's ParseQualifier: no vendor then)
        return (f"has kind {quoted(kind)}, not vendor/class (CDI refuses the spec): write "
                "it as nvidia.com/gpu is")
    for part, name in (("vendor", vendor), ("class", cls)):
        if _name_refused(name):
            return (f"has kind {quoted(kind)}, whose {part} {quoted(name)} CDI refuses: "
                    "use letters, digits and _-. only, a letter first, a letter or digit "
                    "last")
    return None


def versions(data: object, kind: str, devices: list[object]) -> tuple[str, str]:
    """The cdiVersion of a spec CDI takes (``refusal`` None), a leading v dropped, and
    the least its content needs."""
    said = (go_text(field(data, "cdiversion")) or "").removeprefix("v")
    return said, _needs(data, kind, devices)[0]


def _name_refused(name: str) -> bool:
    """CDI's validateVendorOrClassName refuses ``name``: ASCII letters first, letters,
    digits and ``_-.`` between, a letter or digit last (one letter alone is a name)."""
    def alnum(c: str) -> bool:
        return c.isascii() and c.isalnum()
    if not (name and name[0].isascii() and name[0].isalpha()):
        return True
    return len(name) > 1 and not (alnum(name[-1])
                                  and all(alnum(c) or c in "_-." for c in name[1:-1]))


def _needs(data: object, kind: str, devices: list[object]) -> tuple[str, str]:
    """The least CDI version the spec's content needs and the feature that needs it
    (specs-go version.go's requiresV110 ... requiresV040, newest first)."""
    edits = [field(data, "containeredits"), *(field(d, "containeredits") for d in devices)]
    names = [go_text(field(d, "name")) or "" for d in devices]
    checks: tuple[tuple[str, str, Callable[[], bool]], ...] = (
            ("1.1.0", "intelRdt schemata or enableMonitoring", lambda: any(
                field(r, "schemata") is not None or field(r, "enablemonitoring") is True
                for r in _each(edits, "intelrdt"))),
            ("1.1.0", "netDevices", lambda: any(_filled(e, "netdevices") for e in edits)),
            ("0.7.0", "intelRdt", lambda: any(True for _ in _each(edits, "intelrdt"))),
            ("0.7.0", "additionalGids", lambda: any(_filled(e, "additionalgids")
                                                    for e in edits)),
            ("0.6.0", "annotations", lambda: any(_filled(m, "annotations")
                                                 for m in (data, *devices))),
            ("0.6.0", "kind's class with a dot", lambda: "." in kind.partition("/")[2]),
            ("0.5.0", "device name that starts with a digit",
             lambda: any(n[:1].isascii() and n[:1].isdigit() for n in names)),
            ("0.5.0", "deviceNodes hostPath", lambda: _any_text(edits, "devicenodes",
                                                                "hostpath")),
            ("0.4.0", "mounts type", lambda: _any_text(edits, "mounts", "type")))
    for version, feature, needed in checks:
        if needed():
            return version, feature
    return _EARLIEST, ""


def _each(edits: list[object], key: str) -> list[object]:
    """The values of ``key`` the edits give, those that are there (not null)."""
    return [v for e in edits if (v := field(e, key)) is not None]


def _filled(data: object, key: str) -> bool:
    """``key`` of ``data`` is a list or map with an item (Go's ``len(...) > 0``)."""
    value = field(data, key)
    return isinstance(value, list | dict) and len(value) > 0


def _any_text(edits: list[object], key: str, inner: str) -> bool:
    """An item of the list ``key`` of an edit gives ``inner`` a text not empty."""
    lists = [v for v in _each(edits, key) if isinstance(v, list)]
    return any(go_text(field(i, inner)) for v in lists for i in v)
