"""JSON objects that name a key once: ``json.loads(..., object_pairs_hook=unique_keys)``.

``json`` keeps the last of two repeated keys silently; another reader of the same text
(the engine's Go decoder, jq, a person) may take the first. Every JSON edge of swarmgpu
refuses the text instead, each with its own words (``RepeatedKey.key`` names the key).
"""

from __future__ import annotations

from typing import Any


class RepeatedKey(ValueError):
    """A key given twice in one object (``key``: which)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; ``RepeatedKey`` when a key comes twice."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise RepeatedKey(k)
        out[k] = v
    return out
