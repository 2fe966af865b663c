"""The docker-proxy's surge book alone (``swarmgpu.swarm.surges``), its engine a fake
``read``: the book through the real proxy is tests/test_dockerproxy.py."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from swarmgpu.swarm.httpframe import Refused
from swarmgpu.swarm.surges import (
    SWEEP_BATCH,
    SurgeBook,
    SurgeRefused,
    admit_or_sweep,
    out_of_sequence,
)


def _svc(ident: str, version: int, replicas: int) -> dict[str, Any]:
    return {
        "ID": ident,
        "Version": {"Index": version},
        "Spec": {"Name": ident, "Mode": {"Replicated": {"Replicas": replicas}}},
    }


class _Engine:
    """A fake ``read``: GET /services?filters={"id": [...]} lists the services it holds
    whose ID one of them starts (the engine's prefix match); it records each path."""

    def __init__(self, *services: dict[str, Any]) -> None:
        self.services = list(services)
        self.paths: list[str] = []

    def __call__(self, path: str) -> tuple[int, Any, bytes]:
        self.paths.append(path)
        ids = json.loads(parse_qs(urlsplit(path).query)["filters"][0])["id"]
        got = [s for s in self.services if any(s["ID"].startswith(i) for i in ids)]
        return 200, got, json.dumps(got).encode()


def test_a_full_book_forgets_services_the_engine_no_longer_lists() -> None:
    """Stacks removed mid-move filled the book for good; full, it asks the engine and
    drops only the services it no longer lists: one listed at its raised count keeps
    its entry, and its raise from that count is still refused."""
    book = SurgeBook(cap=3)
    for ident in ("kept", "gone1", "gone2"):
        book.admit(ident, 5, 1, 2)
    engine = _Engine(_svc("kept", 6, 2))  # the raise applied
    admit_or_sweep(book, engine, "new", 9, 1, 2)
    assert len(book) == 2 and len(engine.paths) == 1
    assert urlsplit(engine.paths[0]).path == "/services"
    with pytest.raises(SurgeRefused, match="already"):
        book.admit("kept", 6, 2, 3)


def test_a_sweep_never_drops_a_listed_raise_in_force() -> None:
    """A book full of services the engine lists at their raised count (or still at the
    raise's version: it may yet apply) stays full and refuses a new raise, saying so;
    one listed past its raise at another count goes, as a later read of it would."""
    book = SurgeBook(cap=3)
    for ident in ("raised", "pending", "lowered"):
        book.admit(ident, 5, 1, 2)
    engine = _Engine(_svc("raised", 6, 2), _svc("pending", 5, 1), _svc("lowered", 7, 1))
    admit_or_sweep(book, engine, "new", 9, 1, 2)  # "lowered" made room
    engine.services.append(_svc("new", 10, 2))  # its raise applied
    with pytest.raises(SurgeRefused, match="tracks 3 raised services the engine lists"):
        admit_or_sweep(book, engine, "newer", 9, 1, 2)
    assert len(book) == 3


@pytest.mark.parametrize(
    "answer",
    [
        (500, {"message": "rpc error: code = Unavailable"}, b"..."),
        (200, {"ID": "x"}, b"{}"),  # not a list
        (200, [{"Spec": {}}], b"[]"),  # a service without an ID
        (200, [{"ID": "gone1", "Version": {"Index": "7"}, "Spec": {}}], b"[]"),
        Refused(504, "the engine did not answer in time"),
        OSError("connection refused"),
    ],
)
def test_a_sweep_whose_answer_is_not_the_list_drops_nothing(answer: Any) -> None:
    """An answer the proxy cannot read as the engine's list says nothing of what is
    gone: nothing is dropped, and the raise is refused naming the read and the fix."""
    book = SurgeBook(cap=1)
    book.admit("gone1", 5, 1, 2)

    def read(path: str) -> tuple[int, Any, bytes]:
        if isinstance(answer, Exception):
            raise answer
        return answer

    with pytest.raises(SurgeRefused, match=r"GET /services.*(try again|restart)"):
        admit_or_sweep(book, read, "new", 9, 1, 2)
    assert len(book) == 1


def test_a_sweep_asks_in_batches_of_bounded_length() -> None:
    """Each GET names at most SWEEP_BATCH IDs (its query stays short), and each booked
    service is asked once."""
    n = 2 * SWEEP_BATCH + 1
    book = SurgeBook(cap=n)
    for i in range(n):
        book.admit(f"s{i:024d}", 5, 1, 2)
    engine = _Engine()
    admit_or_sweep(book, engine, "new", 9, 1, 2)
    asked = [json.loads(parse_qs(urlsplit(p).query)["filters"][0])["id"] for p in engine.paths]
    assert [len(a) for a in asked] == [SWEEP_BATCH, SWEEP_BATCH, 1]
    assert len({i for a in asked for i in a}) == n
    assert all(len(p) < 4096 for p in engine.paths)
    assert len(book) == 1


def test_only_a_raise_known_not_taken_is_withdrawn() -> None:
    """The engine's version check refusing an update is known: not applied. Any other
    500 (a raft proposal that timed out can still commit) keeps the raise booked, and
    so does a raise whose entry an earlier raise at that version made."""
    assert out_of_sequence(
        b'{"message": "rpc error: code = Unknown desc = update out of sequence"}'
    )
    for other in (
        b'{"message": "context deadline exceeded"}',
        b"update out of sequence",
        b'{"message": "update out of sequence: name conflicts"}',
        b"[]",
    ):
        assert not out_of_sequence(other), other
    book = SurgeBook()
    assert book.admit("s", 5, 1, 2)
    assert not book.admit("s", 5, 1, 2)  # the same raise again: the entry was there
    book.withdraw("s", 4)  # not the version that made it
    assert len(book) == 1
    book.withdraw("s", 5)
    assert len(book) == 0
