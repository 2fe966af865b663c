"""The daemon's own reads of the engine decoded strictly: no key twice in one object.

docker-py decodes every JSON answer with ``Response.json()`` (``APIClient._result``),
the standard library's, which keeps the last of two repeated keys silently: a task
``{"NodeID": "a", "NodeID": "b"}`` from a proxy in front of the engine (or a forged
answer) was read as on node b, where another reader of the same text may see a.
``strict_results`` makes a client's ``_result`` refuse such an answer
(``RepeatedAnswer``: the key, and the text to find the object by). A node or service
list reads its entries apart (``list_entries``): the one with the repeated key is
marked (``Repeated``) and fails alone; every other answer is refused whole.
"""

from __future__ import annotations

import json
import re
from typing import Any

from swarmgpu.core.jsonkeys import RepeatedKey, unique_keys
from swarmgpu.core.peertext import quoted

REPEATED_FIX = "check the proxy in front of the engine (Docker names each key once)"
_SPACE = re.compile(r"[ \t\n\r]*")
_STRICT = json.JSONDecoder(object_pairs_hook=unique_keys)
_PLAIN = json.JSONDecoder()


class RepeatedAnswer(ValueError):
    """An engine answer that names ``key`` twice in one object; ``text``: the answer."""

    def __init__(self, key: str, text: str) -> None:
        super().__init__(f"the engine's answer names {quoted(key, 80)} twice in one object "
                         f"(which one is meant cannot be told): it is not read; {REPEATED_FIX}")
        self.key, self.text = key, text


class Repeated(dict[str, Any]):
    """A list's entry that names a key twice in one object, decoded as ``json`` would (the
    last one kept): ``why`` says which key and the fix. Its reader fails it alone."""

    why: str = ""


def strict_results(api: Any) -> None:
    """Make ``api`` (docker-py's ``APIClient``) decode its JSON answers refusing an object
    that names a key twice (``RepeatedAnswer``); its other answers as they were."""
    plain = api._result

    def result(response: Any, json: bool = False, binary: bool = False) -> Any:
        if not json:
            return plain(response, json=json, binary=binary)
        api._raise_for_status(response)
        try:
            return response.json(object_pairs_hook=unique_keys)
        except RepeatedKey as exc:
            raise RepeatedAnswer(exc.key, response.text) from None

    api._result = result


def list_entries(exc: RepeatedAnswer, kind: str) -> list[Any]:
    """The entries of the engine's list of ``kind`` (``exc.text``), each decoded apart:
    one that names a key twice is a ``Repeated``. An answer that is no list, or whose
    repeated key is outside its entries, is refused whole (``exc``)."""
    text = exc.text
    at = _SPACE.match(text).end()  # type: ignore[union-attr]  # (matches "" at worst)
    if text[at:at + 1] != "[":
        raise exc
    out: list[Any] = []
    at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    while text[at:at + 1] not in ("]", ""):
        try:
            value, end = _STRICT.raw_decode(text, at)
        except RepeatedKey as one:
            value, end = _PLAIN.raw_decode(text, at)
            value = _repeated(value, one.key, kind, len(out) + 1)
        out.append(value)
        at = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        if text[at:at + 1] == ",":
            at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    return out


def _repeated(value: Any, key: str, kind: str, pos: int) -> Any:
    """Entry ``pos`` of a list of ``kind``, which names ``key`` twice, as a ``Repeated``
    (an entry that is no object: as it is, its reader refuses it so)."""
    if not isinstance(value, dict):
        return value
    out = Repeated(value)
    out.why = (f"the engine's answer names {quoted(key, 80)} twice in one object of {kind} "
               f"{pos} (ID {quoted(value.get('ID'), 80)}), so which one is meant cannot be "
               f"told: it is not read; {REPEATED_FIX}")
    return out
