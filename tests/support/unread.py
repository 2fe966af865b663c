"""Specs and task answers that cannot be read as Docker sends them, and a client whose
engine lists such answers (``listed_client``).

First written in tests/test_unread_answers.py."""

from __future__ import annotations

from typing import Any

from swarmgpu.swarm.client import SwarmClient

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


class ListedApi:
    """An engine whose every list answers ``raw`` as given (a proxy's objects, nulls or
    strings among them), and whose inspect finds the object of that ID there."""

    def __init__(self, raw: list[Any]) -> None:
        self.raw = raw

    def nodes(self, filters: Any = None) -> list[Any]:
        return self.raw

    def services(self) -> list[Any]:
        return self.raw

    def tasks(self, filters: Any = None) -> list[Any]:
        return self.raw

    def inspect_node(self, node_id: str) -> Any:
        return next(n for n in self.raw if n["ID"] == node_id)

    def inspect_service(self, service_id: str) -> Any:
        return next(s for s in self.raw if s["ID"] == service_id)


def listed_client(raw: list[Any]) -> SwarmClient:
    """A SwarmClient whose engine lists ``raw`` (``ListedApi``), no write observers."""
    sw = SwarmClient.__new__(SwarmClient)
    sw.endpoint, sw._api = "unix:///test", ListedApi(raw)  # type: ignore[assignment]
    sw.on_write = sw.on_landed = None
    return sw
