"""The Compose file `docker stack deploy` takes, as `swarmgpu render` writes it.

- The format version: every engine the README supports (19.03 and later) must accept the
  file, so it is 3.8 (what 19.03 knows) unless the file asks for another 3.x that the
  output still fits. A docker CLI before 23.0 refuses a file with no ``version``
  ("unsupported Compose file version: 1.0", docker/cli#2475).
- docker/cli's own JSON schema for 3.8, vendored in ``schema/`` with its licence
  (``schema/SOURCES.md``): the output is checked against it, as the CLI will check it.
- The keys Swarm ignores (docker/cli's ``UnsupportedProperties`` and
  ``DeprecatedProperties``, and those older engines ignore) are reported; the ones the
  CLI refuses (``ForbiddenProperties``, and Compose-specification keys that format 3.8
  does not have) are errors, each with its fix.
- The keys the daemon owns (its state and device labels, another service's placement
  gate) are errors in the input: only the daemon writes them. Another constraint on a
  node label it writes (``!= true`` on a gate label) is the owner's: a warning.
- With ``render --skip-interpolation``, a ``$`` (``${VAR}``, ``$VAR``, ``$$``) in a value
  render places the service by is an error: `docker stack deploy` substitutes it after
  render read it (without the option render substitutes it first: ``interpolation``).
- The file is written so that docker/cli's YAML reader (go-yaml) reads every text as
  text (``dump_stack``).
Pure: a parsed stack in, errors and notes out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from swarmgpu.core import goscalar
from swarmgpu.core.peertext import quoted
from swarmgpu.manager.commands.restartkey import restart_errors
from swarmgpu.manager.placement import (
    DEVICES,
    OWNED_LABEL_RISK,
    gate_constraint,
    gate_of,
    owned_label_read,
)
from swarmgpu.manager.services.sharing import SHARE

COMPOSE_VERSION = "3.8"
SCHEMA_FILE = Path(__file__).with_name("schema") / "config_schema_v3.8.json"

# The service keys `docker stack deploy` does not apply, each with what to do instead;
# what docker says of each is in DOCKER_SAYS.
SWARM_IGNORES: dict[str, str] = {
    "build": "Swarm does not build: build and push the image first, then name it in image",
    "cgroup_parent": "Swarm sets no cgroup parent",
    "container_name": "Swarm names the containers (<stack>_<service>.<slot>.<task>)",
    "depends_on": "Swarm starts services in no order: make each one wait for what it "
                  "needs (a retry loop or a healthcheck)",
    "devices": "Swarm passes no devices: a GPU is asked for with swarmgpu.gpus (or "
               "deploy.resources.reservations.devices, which render translates); other "
               "devices need a bind mount",
    "domainname": "Swarm sets no domain name",
    "expose": "services on the same overlay network reach each other on every port",
    "external_links": "use a shared overlay network",
    "ipc": "Swarm sets no IPC mode (NCCL over shared memory needs a tmpfs mount at "
           "/dev/shm instead)",
    "links": "services on the same network reach each other by service name",
    "mac_address": "Swarm sets no MAC address",
    "network_mode": "Swarm uses the stack's networks (networks:)",
    "pid": "Swarm sets no PID namespace mode",
    "privileged": "Swarm runs no privileged container: grant what is needed with "
                  "cap_add (Docker 20.10 and later)",
    "restart": "write deploy.restart_policy (condition: none, on-failure or any)",
    "security_opt": "Swarm sets no security options",
    "shm_size": "mount a tmpfs at /dev/shm instead (volumes: - type: tmpfs, target: "
                "/dev/shm, tmpfs: {size: BYTES})",
    "userns_mode": "Swarm sets no user namespace mode",
}
_WARNS = "docker stack deploy warns \"Ignoring unsupported options\" and deploys without it"
# docker/cli cli/command/stack/loader.go loadComposeFile warns of the keys of
# cli/compose/types/types.go UnsupportedProperties ("Ignoring unsupported options") and
# DeprecatedProperties ("Ignoring deprecated options": container_name, expose); a key in
# neither that convert/service.go never reads (depends_on) goes without a word. restart
# is in UnsupportedProperties, yet convertRestartPolicy falls back to it when
# deploy.restart_policy is absent ("no" leaves Swarm's default, condition any).
DOCKER_SAYS: dict[str, str] = {
    "container_name": "docker stack deploy warns \"Ignoring deprecated options\" and "
                      "deploys without it",
    "expose": "docker stack deploy warns \"Ignoring deprecated options\" and deploys "
              "without it",
    "depends_on": "docker stack deploy drops it without a word (no docker/cli list names "
                  "it)",
    "restart": "docker stack deploy warns \"Ignoring unsupported options\" but still "
               "applies it when deploy.restart_policy is absent (always, unless-stopped: "
               "condition any; on-failure[:N]: on-failure; no: Swarm's default, which "
               "restarts)",
}
# Keys a docker CLI before 20.10 also ignored (its UnsupportedProperties then: cap_add and
# cap_drop left the list in docker/cli 0db61ff6da, ulimits in 940907951b).
IGNORED_BEFORE_20_10 = ("cap_add", "cap_drop", "ulimits")

# Keys docker/cli's loader reads (types.go ``ServiceConfig.Tmpfs``) and its convert never
# puts in the spec (convert/service.go: the mounts are ``Volumes(service.Volumes, ...)``
# alone), not among its UnsupportedProperties: `docker stack deploy` drops them without
# a word.
CLI_DROPS: dict[str, str] = {
    "tmpfs": "docker stack deploy drops it without a word (its mounts come from volumes: "
             "alone); mount each there instead: volumes: [{type: tmpfs, target: PATH, "
             "tmpfs: {size: BYTES}}]",
}

# docker/cli ForbiddenProperties: `docker stack deploy` refuses the file.
CLI_REFUSES: dict[str, str] = {
    "extends": "docker stack deploy does not implement extends: write the keys out",
    "volume_driver": "define a volume under the top-level volumes: with its driver, and "
                     "mount it",
    "volumes_from": "define a volume under the top-level volumes: and mount it in each "
                    "service that shares it",
    "cpu_quota": "use deploy.resources.limits.cpus",
    "cpu_shares": "use deploy.resources.limits.cpus",
    "cpuset": "use deploy.resources (Swarm cannot pin CPUs)",
    "mem_limit": "use deploy.resources.limits.memory",
    "memswap_limit": "use deploy.resources.limits.memory",
    # Compose-specification keys that format 3.8 does not have (the CLI's schema check
    # refuses them); gpus is translated before this is checked.
    "cgroupns_mode": "Compose format 3.8 has no cgroupns_mode, and Swarm would ignore it; "
                     "remove it",
    "runtime": "Swarm has no per-service runtime: make nvidia the engine's default-runtime "
               "on the GPU nodes (swarmgpu node-config; swarmgpu doctor checks it) and "
               "remove runtime",
    # Compose-specification habits with a Swarm equivalent, or none: each said with it
    # (the schema's "additional property" named the key alone).
    "cpus": "use deploy.resources.limits.cpus (and reservations.cpus, which Swarm places "
            "by), as text: \"2\"",
    "mem_reservation": "use deploy.resources.reservations.memory",
    "platform": "Swarm takes the platforms from the image's manifest at deploy; to "
                "pin one, add a constraint (node.platform.arch == x86_64) and remove "
                "platform",
    "profiles": "docker stack deploy has no profiles and deploys every service: put a "
                "profile's services in a file of their own, added with another -c",
    "pull_policy": "Swarm pulls the image on each node as a task starts (docker stack "
                   "deploy --resolve-image pins its digest); remove pull_policy",
}

_OWNED_LABELS = ("state.", DEVICES, SHARE)


def version_of(stack: Mapping[str, Any]) -> tuple[int, int] | None:
    """``"3.8"`` -> (3, 8); ``"3"``, ``""`` -> (3, 13), as docker reads them; None when
    absent or a version docker stack deploy refuses (``version_error``)."""
    v = stack.get("version")
    m = _VERSION.fullmatch(v) if isinstance(v, str) else None
    return (3, 13) if m and not m.group(1) else (3, int(m.group(1))) if m else None


# docker/cli's schema.Version takes "3.0" to "3.13" as written ("3.08", "3.8 " are
# "unsupported Compose file version"), and "" and "3" as 3.13.
_VERSION = re.compile(r"(?:3(?:\.([0-9]|1[0-3]))?)?")


def version_error(stack: Mapping[str, Any]) -> str | None:
    """Why docker stack deploy refuses the file's ``version``; None: it takes it."""
    if "version" not in stack or version_of(stack) is not None:
        return None
    v = stack["version"]
    if isinstance(v, int | float) and not isinstance(v, bool):
        return (f"version {quoted(v)} is a number, which docker stack deploy "
                f'refuses ("version must be a string"); quote it: version: "{COMPOSE_VERSION}"')
    return (f"version {quoted(v)}: docker stack deploy takes Compose format 3 only, "
            f'written "3" or "3.0" to "3.13" ("unsupported Compose file version"); write '
            f'version: "{COMPOSE_VERSION}"')


def check_version(stack: dict[str, Any], where: str) -> tuple[list[str], list[str]]:
    """Set the stack's ``version`` to what every supported engine takes; (errors, notes)."""
    if "version" not in stack:
        rest = list(stack.items())  # the version first, where people look for it
        stack.clear()
        stack["version"] = COMPOSE_VERSION
        stack.update(rest)
        return [], [f"version: \"{COMPOSE_VERSION}\" added: a docker CLI before 23.0 "
                    "refuses a stack file without one"]
    got = version_of(stack)
    if got is None:
        return [f"{where}: {version_error(stack)}"], []
    if got != (3, 8):
        old = stack["version"]
        stack["version"] = COMPOSE_VERSION
        why = ("render writes keys of 3.8 (max_replicas_per_node)" if got < (3, 8) else
               "Docker 19.03, the oldest engine swarmgpu supports, knows 3.8 at most")
        return [], [f"version: {quoted(old)} became \"{COMPOSE_VERSION}\": {why}"]
    return [], []


def check_top_level(stack: Mapping[str, Any]) -> list[str]:
    if "name" in stack:
        return ["name: docker stack deploy refuses a top-level name (Compose format 3.8 has "
                "none); remove it and name the stack on the command line (swarmgpu render "
                "-n NAME, docker stack deploy -c - NAME)"]
    return []


def check_service_keys(svc: Mapping[str, Any], where: str) -> tuple[list[str], list[str]]:
    """The keys of one service that the CLI refuses (errors) or Swarm ignores (notes)."""
    errors = [f"{where}.{k}: docker stack deploy refuses it; {fix}"
              for k, fix in CLI_REFUSES.items() if k in svc]
    errors += restart_errors(svc, where)  # (docker applies it: a value it fails on)
    notes = [f"{where}.{k}: {DOCKER_SAYS.get(k, _WARNS)}; {why}"
             for k, why in SWARM_IGNORES.items() if k in svc]
    notes += [f"{where}.{k}: a docker CLI before 20.10 warns \"Ignoring unsupported "
              "options\" and deploys without it" for k in IGNORED_BEFORE_20_10 if k in svc]
    notes += [f"{where}.{k}: {why}" for k, why in CLI_DROPS.items() if k in svc]
    return errors, notes


def owned_key_errors(labels: Mapping[str, str], constraints: Sequence[str], where: str,
                     prefix: str, service: str | None) -> list[str]:
    """Keys only the daemon writes: its state, device and share labels, and a placement
    gate that is not this service's own (``service``: ``<stack>_<name>``; None when the
    stack name is not known, then only the ``_<name>`` ending is checked)."""
    errors = [f"{where}.deploy.labels: {k}: owned by the swarmgpu daemon (it writes it "
              "after checking it against Swarm); remove it: a stack file asks with "
              f"{prefix}gpus and the other request keys (docs/requests.md)"
              for k in labels if k.startswith(tuple(prefix + o for o in _OWNED_LABELS))]
    name = where.rpartition(".")[2]
    for c in constraints:
        gated = gate_of(c, prefix)  # any other constraint on a gate label is the owner's
        if gated is None or gated == service or (service is None and gated.endswith(f"_{name}")):
            continue  # its own gate, as render writes it
        errors.append(f"{where}.deploy.placement.constraints: {quoted(c, 200)}: the placement "
                      f"gate of {quoted(gated, 200)}, owned by the swarmgpu daemon; remove it "
                      "(render writes "
                      "this service's own gate)" + _other_stack_hint(gated, service, name))
    return errors


def _other_stack_hint(gated: str, service: str | None, name: str) -> str:
    """This service's own gate under another stack name (an example file's, written for
    the name it is deployed as): then the name given, not the gate, may be what is wrong."""
    if service is None or not gated.endswith(f"_{name}"):
        return ""
    stack, given = gated[: -len(name) - 1], service[: -len(name) - 1]
    if not stack or re.fullmatch(r"[A-Za-z0-9][\w.-]*", stack, re.ASCII) is None:
        return ""  # not a name docker takes: no command to suggest
    return (f"; it is this service's own gate under stack name {stack!r} (-n {stack}), "
            f"not {quoted(given, 100)}")


def owned_label_notes(constraints: Sequence[str], where: str, prefix: str) -> list[str]:
    """A warning for each constraint on a node label placement writes that is not a
    gate (``keys.owned_label_read``): rendered as written, with the risk named."""
    return [f"{where}.deploy.placement.constraints: {quoted(c, 200)} reads {key}, "
            + OWNED_LABEL_RISK.format(gate=gate_constraint(prefix, "<service>"))
            for c in constraints if (key := owned_label_read(c, prefix)) is not None]


# What render reads to place a service (besides its request labels). docker/cli
# substitutes ${VAR}, $VAR and $$ in every value (not key) as it reads render's output:
# render substitutes these first and writes them so (interpolation.pinned), or, with
# --skip-interpolation, refuses a $ in them (interpolation_errors).
PLACED_BY = (("deploy", "placement"), ("deploy", "replicas"), ("deploy", "mode"),
             ("deploy", "resources", "reservations"), ("gpus",), ("platform",))


def interpolation_errors(svc: Mapping[str, Any], where: str, prefix: str) -> list[str]:
    """Each value with a ``$`` that render places the service by: docker would give Swarm
    another one than render checked and placed (a constraint naming ``${ZONE}`` matched
    no node), or another label (a list item's key is a value: ``${E:-swarmgpu.priority}=
    1000`` passed render --check as a label that is not swarmgpu's)."""
    found: list[tuple[str, Any]] = []
    for path in PLACED_BY:
        v: Any = svc
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        found += _dollars(v, f"{where}.{'.'.join(path)}")
    labels = svc.get("deploy", {}).get("labels") if isinstance(svc.get("deploy"), dict) \
        else None
    if isinstance(labels, list):
        for i, item in enumerate(labels):
            key, _, value = str(item).partition("=")
            # $$ in a key is a $ of its own: it never makes the key another one
            if "$" in key.replace("$$", "") or (key.startswith(prefix) and "$" in value):
                found.append((f"{where}.deploy.labels[{i}]", item))
    elif isinstance(labels, dict):
        found += [(f"{where}.deploy.labels.{k}", v) for k, v in labels.items()
                  if str(k).startswith(prefix) and "$" in str(v)]
    return [f"{at}: {quoted(v)}: docker stack deploy substitutes $ (${{VAR}}, $VAR, $$) after "
            "render has read the value, so Swarm would get another one than render checked "
            "and placed; write the value itself (or substitute that variable into the file "
            "before render)" for at, v in found]


def _dollars(v: Any, at: str) -> list[tuple[str, Any]]:
    """(where, text) for each text with a ``$`` in ``v``, however deep."""
    if isinstance(v, str):
        return [(at, v)] if "$" in v else []
    if isinstance(v, dict):
        return [x for k, e in v.items() for x in _dollars(e, f"{at}.{k}")]
    if isinstance(v, list):
        return [x for i, e in enumerate(v) for x in _dollars(e, f"{at}[{i}]")]
    return []


# Plain values go-yaml (docker/cli's reader) takes as no text, though YAML 1.1 (PyYAML)
# reads them as text, so PyYAML writes them plain: whatever core.goscalar (docker 28,
# go-yaml v3) reads as no text (08 and 1e3 floats, 0o-17 an integer, 2001-1-2t1:2:3,5Z
# a time), the words docker 27 and older (go-yaml v2) read as booleans (y, on), and a
# number as Go's strconv reads it. Wider than go-yaml is harmless: quoted text is text.
_GO_WORDS = frozenset((
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE",
    "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
    "", "~", "null", "Null", "NULL", "<<"))
_GO_NUMBER = re.compile(r"[-+]?(?:0[bBoOxX][0-9a-fA-F]+|[0-9]+\.?[0-9]*|\.[0-9]+)"
                        r"(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, with text go-yaml would read otherwise written quoted."""


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    if data in _GO_WORDS or _GO_NUMBER.fullmatch(data.replace("_", "")) \
            or goscalar.resolve(data)[0] != goscalar.STR:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    return dumper.represent_str(data)


_Dumper.add_representer(str, _text)


def dump_stack(stack: Mapping[str, Any]) -> str:
    """The stack as YAML that `docker stack deploy -c -` reads back as ``stack``: a
    quoted "08" in the input, written plain, reached the service as the number 8."""
    return yaml.dump(stack, Dumper=_Dumper, sort_keys=False, width=1000)


@cache
def _validator() -> Any:
    import jsonschema  # only render loads it

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    # docker/cli's gojsonschema takes a whole float (replicas: 2.0) for an integer, and
    # its decoder makes it 2; python-jsonschema's draft 4 does not
    base = jsonschema.Draft4Validator
    checker = base.TYPE_CHECKER.redefine("integer", lambda _, v: not isinstance(v, bool) and (
        isinstance(v, int) or (isinstance(v, float) and v.is_integer())))
    validator = jsonschema.validators.extend(base, type_checker=checker)  # type: ignore[no-untyped-call]
    return validator(schema)


def schema_errors(stack: Mapping[str, Any], limit: int = 20) -> list[str]:
    """Where ``stack`` breaks docker/cli's compose schema 3.8, as the CLI would say it."""
    out = []
    for e in sorted(_validator().iter_errors(stack), key=lambda e: list(map(str, e.path))):
        at = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        msg = _additional(e) or e.message
        msg = msg if len(msg) <= 300 else msg[:300] + "..."
        out.append(f"{at}: {msg} (docker/cli's compose schema {COMPOSE_VERSION}, which "
                   "docker stack deploy checks)")
        if len(out) == limit:
            out.append(f"... more schema errors after the first {limit}")
            break
    return out


def part_schema_errors(stack: Mapping[str, Any]) -> list[str]:
    """One of several stack files against the schema before the merge, as docker checks
    each (``schema_errors``), with the version render writes (the files' versions are
    compared apart) and less what the merged file's checks say in render's own words
    (a top-level name, a key the CLI refuses) or translate (Compose's GPU keys)."""
    doc = {k: v for k, v in stack.items() if k != "name"}
    doc["version"] = COMPOSE_VERSION
    if isinstance(services := doc.get("services"), dict):
        doc["services"] = {n: _less_own(svc) for n, svc in services.items()}
    return schema_errors(doc)


def _less_own(svc: Any) -> Any:
    """A service less ``gpus``, the keys in CLI_REFUSES and its reservations' devices."""
    if not isinstance(svc, dict):
        return svc
    out = {k: v for k, v in svc.items() if k != "gpus" and k not in CLI_REFUSES}
    deploy = out.get("deploy")
    if not isinstance(deploy, dict) or not isinstance(res := deploy.get("resources"), dict):
        return out
    held = res.get("reservations")
    if isinstance(held, dict) and "devices" in held:
        held = {k: v for k, v in held.items() if k != "devices"}
        out["deploy"] = {**deploy, "resources": {**res, "reservations": held}}
    return out


def _additional(e: Any) -> str:
    """An additionalProperties error in the CLI's own words ("Additional property X is
    not allowed"), naming each key; "" for any other error."""
    if e.validator != "additionalProperties" or not isinstance(e.instance, dict):
        return ""
    known = e.schema.get("properties", {})
    patterns = e.schema.get("patternProperties", {})
    extra = [str(k) for k in e.instance if k not in known
             and not any(re.search(p, str(k)) for p in patterns)]
    return "; ".join(f"additional property {quoted(k)} is not allowed" for k in extra)
