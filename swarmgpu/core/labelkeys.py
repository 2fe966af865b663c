"""Swarm's rule for label keys and values that a placement constraint can use.

Kept apart from :mod:`swarmgpu.swarm.constraints` (the constraint language) because the
configuration checks its label prefix with it when it is loaded, below every layer that
speaks to the engine.
"""

from __future__ import annotations

import re

# swarmkit's alphaNumeric key rule and value rule, held to ASCII: what swarmgpu writes
# and accepts in its own config. (Go's (?i)[a-z] is [A-Za-z\u017f\u212a], its case folding
# adds the long s and the Kelvin sign; the constraints Swarm runs under are parsed by
# that exact rule, in swarmgpu.swarm.constraints.) Python's IGNORECASE is ASCII only with
# re.ASCII, and '$' also matches before a trailing newline, so both are matched with
# fullmatch.
KEY_RE = re.compile(r"[a-z_][a-z0-9\-_.]+", re.IGNORECASE | re.ASCII)
VALUE_RE = re.compile(r"[a-z0-9:\-_\s\.\*\(\)\?\+\[\]\\\^\$\|\/]+", re.IGNORECASE | re.ASCII)
# A generic resource kind as a node advertises it. swarmkit's genericresource.Parse splits
# each KIND=VALUE at '=' and trims the kind, and dockerd's --node-generic-resource is a CSV
# list; the kind also names the task's DOCKER_RESOURCE_<KIND> variable. So: no '=', ',',
# quote or space; the kinds in Docker's and NVIDIA's docs (NVIDIA-GPU, gpu,
# nvidia.com/gpu) are these characters.
KIND_RE = re.compile(r"[a-z0-9][a-z0-9\-_./]*", re.IGNORECASE | re.ASCII)
# Label namespaces Docker reserves for itself (docs.docker.com, "Docker object labels").
DOCKER_NAMESPACES = ("com.docker.", "io.docker.", "org.dockerproject.")


def docker_namespace(prefix: str) -> str | None:
    """The namespace Docker reserves that ``prefix`` overlaps (either starts the other),
    or None: swarmgpu's keys under it would take com.docker.stack.namespace and the
    like as swarmgpu's (the daemon's config and the docker-proxy both refuse it)."""
    return next((ns for ns in DOCKER_NAMESPACES
                 if prefix and (prefix.startswith(ns) or ns.startswith(prefix))), None)


def usable_label_key(key: str) -> bool:
    """True when ``node.labels.<key>`` can appear in a Swarm constraint."""
    return bool(KEY_RE.fullmatch(key))


def node_label_key_fault(key: str) -> str | None:
    """Why a node cannot carry ``key`` as a label an operator can see and type, or None.

    For a key swarmgpu only reads from node labels and never names in a constraint (the
    zone label), so swarmkit's constraint rule, which refuses '/', does not apply:
    topology.kubernetes.io/zone is a common one. ``docker node update --label-add`` checks
    no key (docker/cli node/update.go has no validator, the API none) and splits KEY=VALUE
    at the first '='. A blank it would take is still refused: Docker's label rule
    everywhere else (opts.ValidateLabel) refuses one in a key, and swarmkit's constraint
    parser cannot name it, so no service could be placed by that zone either. An
    invisible character (format, control) is a typo no one could see in
    ``docker node inspect``.
    """
    if not key:
        return "it is empty"
    if "=" in key:
        return "it has '=': docker node update --label-add splits KEY=VALUE at the first '='"
    for c in key:
        if c.isspace():
            return (
                f"it has a blank ({c!r}): Docker's own label rule refuses a blank in a "
                "key (docker service create --label; only docker node update checks "
                "none), and no Swarm constraint can name the node label (node.labels.KEY "
                "takes letters, digits, '-', '_', '.')"
            )
        if not c.isprintable():
            return (
                f"it has an invisible character (U+{ord(c):04X}), which no one could see "
                "in docker node inspect"
            )
    return None


def usable_resource_kind(kind: str) -> bool:
    """True when ``kind`` can be a generic resource kind in node-generic-resources."""
    return bool(KIND_RE.fullmatch(kind))


def usable_label_value(value: str) -> bool:
    return bool(VALUE_RE.fullmatch(value))
