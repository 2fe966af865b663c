"""The parts of ``docker info`` the checks read, each read as dockerd sends it.

dockerd answers each part with one type (moby api/types/system.Info): a part of another
type comes from something in between (a proxy, a fixture) and is not read: a check that
needs it fails, naming the part and the fix (:func:`unread_check`), while the others
run and report as ever. Read through :func:`info_part`, a string where an object belongs
(or a number where a list does) crashed the doctor. Go sends a nil map or slice as null:
for those parts (``NIL_OK``) null reads as absent, as it did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmgpu.agent.doctor.view import DOCKERD_CDI_DIRS, Check, Status
from swarmgpu.core.peertext import peer_text, quoted

# part (dotted: inside Swarm) -> the type dockerd sends it as
PARTS: dict[str, type] = {
    "Swarm": dict,
    "Swarm.LocalNodeState": str,
    "Swarm.ControlAvailable": bool,
    "Swarm.NodeID": str,
    "Swarm.Error": str,
    "DefaultRuntime": str,
    "Runtimes": dict,
    "GenericResources": list,
    "CgroupDriver": str,
    "DockerRootDir": str,
    "CDISpecDirs": list,
    "ServerVersion": str,
}
# part -> the checks that read it (and fail, naming it, when it is not read); where
# daemon.json lists no generic resources, toolkit.swarm-resource and (in cdi mode)
# toolkit.cdi-spec read GenericResources too (``resources.live_unread``)
READERS: dict[str, tuple[str, ...]] = {
    "Swarm": ("docker.engine", "agents.service"),
    "Swarm.LocalNodeState": ("docker.engine",),
    "Swarm.ControlAvailable": ("docker.engine", "agents.service"),
    "Swarm.NodeID": ("docker.engine",),
    "Swarm.Error": ("docker.engine",),
    "DefaultRuntime": ("runtime.default",),
    "Runtimes": ("runtime.default",),
    "GenericResources": ("resources.generic",),
    "CgroupDriver": ("cgroup.dev-char-links",),
    "DockerRootDir": ("agent.identity",),
    "CDISpecDirs": ("toolkit.cdi-spec",),
    # (dockerd's CDI version, and whether its start resolves its spec dirs' links)
    "ServerVersion": ("toolkit.cdi-spec",),
}
TEXTS = frozenset({"CDISpecDirs"})  # Go []string: each entry a text
# Go maps and slices: nil is null
NIL_OK = frozenset({"Runtimes", "GenericResources", "CDISpecDirs"})
_WHAT = {dict: "an object", list: "a list", str: "a text", bool: "true or false"}
FIX = ("Check the proxy in front of the engine (DOCKER_HOST names it): dockerd answers "
       "`docker info` with each part of its own type (`curl --unix-socket "
       "/var/run/docker.sock http://localhost/info` shows dockerd's own answer).")
SHOWN = 100  # characters of a part's value in a finding: a proxy's may be megabytes


def shown(value: object, limit: int = SHOWN) -> str:
    """A value of the engine's answer for a finding: at most ``limit`` characters, no
    control characters, its length when cut."""
    return peer_text(value, limit)


def _lookup(info: Mapping[str, Any] | None, part: str) -> tuple[bool, Any]:
    """(present, value) of the dotted ``part``; absent where an object on the way is
    absent or not an object (that one is named instead)."""
    value: Any = info
    for key in part.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def part_problem(info: Mapping[str, Any] | None, part: str) -> str | None:
    """Why ``part`` of ``info`` is not read (not its type), None when it is or is
    absent."""
    present, value = _lookup(info, part)
    want = PARTS[part]
    if not present or (value is None and part in NIL_OK):
        return None
    if part in TEXTS and type(value) is list:
        odd = [v for v in value if type(v) is not str]
        return f"docker info's {part} holds {quoted(odd[0], 60)}, not only texts" if odd \
            else None
    # bool is an int to Python, and True no text: only the type itself will do
    if type(value) is want or (want is dict and isinstance(value, Mapping)):
        return None
    got = "null" if value is None else f"{type(value).__name__} {quoted(value, 60)}"
    return f"docker info's {part} is {got}, not {_WHAT[want]}"


def info_part(info: Mapping[str, Any] | None, part: str) -> Any:
    """``part`` of ``info`` (dotted: ``Swarm.NodeID``) as dockerd sends it; None when it
    is absent, or not read (``part_problem`` says why)."""
    present, value = _lookup(info, part)
    if not present or part_problem(info, part) is not None:
        return None
    return value


def generic_entries(info: Mapping[str, Any] | None,
                    ) -> tuple[list[tuple[str, str]] | None, list[str]]:
    """GenericResources as (kind, value) pairs (None: absent, or not read), and why
    each entry left out is not read: each entry is an object holding a
    NamedResourceSpec or DiscreteResourceSpec object, its Kind a text, its Value a text
    (named; absent: '', which Go omits) or a number (discrete; absent: 0, likewise)."""
    listed = info_part(info, "GenericResources")
    if listed is None:
        return None, []
    out: list[tuple[str, str]] = []
    said: list[str] = []
    for n, entry in enumerate(listed):
        where = f"docker info's GenericResources[{n}]"
        if not isinstance(entry, Mapping):
            said.append(f"{where} is {quoted(entry, 60)}, not an object")
            continue
        for key, value_type in (("NamedResourceSpec", str), ("DiscreteResourceSpec", int)):
            spec = entry.get(key)
            if spec is None:
                continue
            kind = spec.get("Kind") if isinstance(spec, Mapping) else None
            # Go omits a Value of 0 or '' (omitempty): dockerd advertises "KIND=" (swarmkit
            # genericresource.Parse) as a named resource of value ''
            value = (spec.get("Value", 0 if value_type is int else "")
                     if isinstance(spec, Mapping) else None)
            if (not isinstance(kind, str) or not isinstance(value, value_type)
                    or isinstance(value, bool)):
                said.append(f"{where}.{key} is {quoted(spec, 60)}, not an object with "
                            f"a Kind text and a Value {_WHAT.get(value_type, 'number')}")
                continue
            out.append((kind, str(value)))
    return out, said


def info_problems(info: Mapping[str, Any] | None) -> list[str]:
    """Each part the checks read that is not read, naming it (an object not read hides
    the parts inside it), a generic resource's entries too."""
    return [*(p for part in PARTS if (p := part_problem(info, part)) is not None),
            *generic_entries(info)[1]]


def unread_check(cid: str, info: Mapping[str, Any] | None,
                 parts: tuple[str, ...]) -> Check | None:
    """Check ``cid`` failed, naming each of ``parts`` (and, for GenericResources, each
    entry) not read, with the fix; None when every one reads or is absent. Only the
    checks that read a part fail for it: the others run and report as ever."""
    said = [p for part in parts if (p := part_problem(info, part)) is not None]
    if "GenericResources" in parts:
        said.extend(generic_entries(info)[1])
    if not said:
        return None
    more = f"; and {len(said) - 3} more" if len(said) > 3 else ""
    return Check(cid, Status.FAIL, "; ".join(said[:3]) + more,
                 "dockerd never answers so: something between the doctor and dockerd "
                 "changes its answers, and this check compares nothing with a part it "
                 "cannot read.", FIX)


def engine_cdi_dirs(info: Mapping[str, Any] | None,
                    daemon: Mapping[str, Any] | None) -> tuple[list[str], bool]:
    """dockerd's CDI spec dirs, and whether daemon.json's: docker info's ``CDISpecDirs``;
    without docker info, those daemon.json sets as dockerd reads it (its config loading):
    ``cdi-spec-dirs``, else ``DOCKERD_CDI_DIRS``; none for ``features.cdi`` false or
    ``[""]``. (Before 28.2 dockerd read them only with ``features.cdi`` true: they are
    shown, never failed.)"""
    if info is not None:
        return [d for d in info_part(info, "CDISpecDirs") or () if isinstance(d, str)], False
    data = daemon or {}
    features = data.get("features")
    if isinstance(features, Mapping) and features.get("cdi") is False:
        return [], True
    listed = data.get("cdi-spec-dirs")
    if listed is None:  # (absent, or null: a nil list to dockerd, which takes its defaults)
        listed = DOCKERD_CDI_DIRS
    # (another type: dockerd refuses to start on it, docker.daemon-json says so)
    dirs = [d for d in listed if isinstance(d, str)] if isinstance(listed, (list, tuple)) \
        else []
    return ([] if dirs == [""] else dirs), True
