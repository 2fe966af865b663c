"""Specs and task answers that cannot be read as Docker sends them.

First written in tests/test_unread_answers.py."""

from __future__ import annotations

from typing import Any

UNREAD = {"TaskTemplate": {"Resources": "lots"}}


def reserving(cpus: Any = None, memory: Any = None) -> dict[str, Any]:
    """A service spec reserving ``cpus`` NanoCPUs and ``memory`` bytes, as given."""
    res: dict[str, Any] = {}
    if cpus is not None:
        res["NanoCPUs"] = cpus
    if memory is not None:
        res["MemoryBytes"] = memory
    return {"TaskTemplate": {"Resources": {"Reservations": res}}}


def task(**fields: Any) -> dict[str, Any]:
    """A task as the engine lists it, ``fields`` replacing its own."""
    raw: dict[str, Any] = {"ID": "t-bad", "ServiceID": "s", "NodeID": "n",
                           "DesiredState": "running", "Status": {"State": "running"},
                           "Spec": {"ContainerSpec": {"Env": []}}}
    raw.update(fields)
    return raw
