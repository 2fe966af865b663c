"""The env lines a GPU service carries: the device templates Swarm expands per task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

from swarmgpu.manager.placement.keys import DEVICES


@cache  # one per prefix: built once, not on every service of every cycle
def env_template(prefix: str) -> str:
    """The device list of the task's slot on its node, else of its node, else none
    (``void``). Swarm expands it when it creates the container (swarmkit's template
    context has ``.Task.Slot``)."""
    return (
        'NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "'
        + prefix + DEVICES + '" .Node.ID "." .Task.Slot)) (index .Service.Labels (print "'
        + prefix + DEVICES + '" .Node.ID)) "void"}}'
    )


@cache
def env_template_per_node(prefix: str) -> str:
    """The template before per-slot lists: still read right for replicas spread one
    per node (services deployed with it keep working); packed replicas need
    ``env_template``."""
    return (
        'NVIDIA_VISIBLE_DEVICES={{or (index .Service.Labels (print "'
        + prefix + DEVICES + '" .Node.ID)) "void"}}'
    )


def device_env(prefix: str, env: Sequence[str]) -> str | None:
    """Which of swarmgpu's device templates ``env`` carries: ``"slot"``, ``"node"``
    (the older per-node one) or None."""
    if env_template(prefix) in env:
        return "slot"
    if env_template_per_node(prefix) in env:
        return "node"
    return None


ORDER_ENV = "CUDA_DEVICE_ORDER=PCI_BUS_ID"


DEVICE_VAR = "NVIDIA_VISIBLE_DEVICES"
VOID_LINE = DEVICE_VAR + "=void"  # no GPU: what the templates give outside a grant


def own_device_line(env: Sequence[str], prefix: str) -> str | None:
    """The first line of ``env`` that sets the device variable (a bare name too) and is
    not swarmgpu's: a template, or the void ``placement.ungranted: void`` writes."""
    return next((x for x in env if x.partition("=")[0] == DEVICE_VAR and x != VOID_LINE
                 and device_env(prefix, [x]) is None), None)
DEVICE_MOUNT_ROOT = "/var/run/nvidia-container-devices"  # the toolkit's root for mounts
NO_DEVICE_TARGET = "/var/run/swarmgpu-no-gpu"  # outside that root: the toolkit ignores it


@cache
def mount_target(prefix: str) -> str:
    """``placement.grants: mounts``: the target of the ``/dev/null`` bind mount that names a
    task's devices (the toolkit's ``accept-nvidia-visible-devices-as-volume-mounts``): the
    same lookups as ``env_template``, under the toolkit's root when a list is there, else
    a path outside it. Swarm expands mount targets per task as it does env, but the
    engine checks a target is absolute before expanding it: the template starts with
    the two roots' common ``/var/run/`` (a target starting ``{{`` is rejected: "invalid
    mount target, must be an absolute path", seen on the test swarm)."""
    common = "/var/run/"  # both constants above start with it
    return (
        common + '{{with or (index .Service.Labels (print "' + prefix + DEVICES
        + '" .Node.ID "." .Task.Slot)) (index .Service.Labels (print "' + prefix + DEVICES
        + '" .Node.ID))}}' + DEVICE_MOUNT_ROOT.removeprefix(common) + "/{{.}}{{else}}"
        + NO_DEVICE_TARGET.removeprefix(common) + "{{end}}"
    )


def device_mount_spec(prefix: str) -> dict[str, object]:
    """The mount placement adds to a service's ``ContainerSpec.Mounts`` (grants: mounts)."""
    return {"Type": "bind", "Source": "/dev/null", "Target": mount_target(prefix),
            "ReadOnly": True}


def device_mount(prefix: str, mount: Mapping[str, object]) -> bool:
    """Whether ``mount`` is placement's own device mount."""
    return (mount.get("Target") == mount_target(prefix)
            and str(mount.get("Source") or "") == "/dev/null")
