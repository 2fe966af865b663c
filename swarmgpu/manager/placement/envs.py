"""The env lines a GPU service carries: the device templates Swarm expands per task."""

from __future__ import annotations

from collections.abc import Sequence
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
