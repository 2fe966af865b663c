"""JSON read and compared strictly, for the docker-proxy's checks of a write's body
(and the engine's answers it reads whole, with the same bounds).

Two JSON decoders can read the same text differently: which of two repeated keys wins,
whether ``NaN`` is a number, which encoding a BOM-less body is in, what a lone
surrogate escape (``\\ud800``) reads as. ``load_json`` refuses all of these instead of
choosing. ``same`` compares with JSON's types
(Python's ``True == 1`` and ``1 == 1.0`` are not what the engine's Go decoder sees).
A body of more values than any spec has is refused from its text, before it is parsed:
``[{},{},...]`` takes 3 bytes a value and 64 once a dict (``MAX_JSON_VALUES``); so is
one nested deeper than any spec (``MAX_JSON_DEPTH``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from swarmgpu.core.jsonkeys import RepeatedKey, unique_keys

# Values and keys a body may hold. A service spec has about a hundred, one with thousands
# of env lines or labels some thousands; one write at the limit, checked against the
# largest spec the daemon can write, takes the proxy about 26 MiB
# (benchmarks/bench_proxy_memory.py --clients 1).
MAX_JSON_VALUES = 100_000
# Arrays and objects one inside another. A service spec nests some 8 deep (Spec.TaskTemplate
# .Resources.Reservations.GenericResources[0].DiscreteResourceSpec); the write check's deep
# copy and comparison recurse twice a level, so 600 deep, which Python's parser still
# reads, raised a RecursionError there and dropped the connection unanswered.
MAX_JSON_DEPTH = 64
# A string, or an unterminated one to the end: every quote starts a match, so the scan
# is linear (a pattern that can fail rescans the rest from each quote: \"\"\"...).
# Possessive (*+): a plain repeat kept ~170 bytes of backtracking state per escape (a
# string of 4 MiB of \\ took 290 MiB), which giving back could never use.
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.S)


# A \uD800-\uDFFF escape: only then can the text hold a surrogate (UTF-8 encodes none).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(text: str, value: Any) -> bool:
    """Whether ``value`` (parsed from ``text``) holds a surrogate no pair made a
    character of: Python keeps it and writes it back escaped, Go's decoder (the
    engine's) reads U+FFFD, so the text checked is not the text applied."""
    if not _SURROGATE_ESCAPE.search(text):
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class JsonError(ValueError):
    """A body that is not strict JSON: the message says why."""


class JsonTooLarge(JsonError):
    """A body of more than ``MAX_JSON_VALUES`` values and keys."""


class JsonTooDeep(JsonError):
    """A body nested more than ``MAX_JSON_DEPTH`` deep."""


_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _too_many(bare: str) -> bool:
    """Whether ``bare`` (the text, strings left out: what they hold is not JSON) opens
    more arrays and objects, and separates more values and keys, than
    ``MAX_JSON_VALUES``."""
    return sum(bare.count(c) for c in "[{,:") > MAX_JSON_VALUES


def _too_deep(bare: str) -> bool:
    """Whether ``bare`` (as for ``_too_many``, and within its count) opens arrays and
    objects more than ``MAX_JSON_DEPTH`` deep."""
    depth = 0
    for c in _NOT_BRACKET.sub("", bare):
        depth += 1 if c in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            return True
    return False


def shape_fault(text: str) -> str | None:
    """Why ``text`` is refused before it is parsed, in a few words: more than
    ``MAX_JSON_VALUES`` values and keys (parsed, each costs some 25 times its bytes:
    4 MiB of ``[{},...]`` is ~100 MiB of objects) or nested more than ``MAX_JSON_DEPTH``
    deep; None: parse it. For an answer read whole, such as an agent's facts."""
    bare = _STRING.sub("", text)
    if _too_many(bare):
        # the depth of its start only: the whole of a wide text is a long Python loop
        return "nested too deeply" if _too_deep(bare[:MAX_JSON_VALUES]) else \
            f"more than {MAX_JSON_VALUES} values and keys"
    return "nested too deeply" if _too_deep(bare) else None


def load_json(body: bytes) -> Any:
    """A request body as JSON: UTF-8, no repeated keys, no NaN or Infinity, no lone
    surrogate, numbers of 64 bits, at most ``MAX_JSON_VALUES`` values and keys,
    ``MAX_JSON_DEPTH`` deep."""

    def constant(name: str) -> Any:
        raise JsonError(f"the body holds {name}, which is not JSON")

    # The engine's Go decoder holds 64-bit numbers; Python would raise a bare ValueError
    # past 4300 digits and read 1e999 as inf, posted on as Infinity.
    def integer(text: str) -> int:
        digits = len(text.lstrip("-"))
        if digits > 20:
            raise JsonError(f"the body holds a number of {digits} digits (the engine reads "
                            "64-bit numbers: 20 digits at most)")
        return int(text)

    def real(text: str) -> float:
        value = float(text)
        if math.isinf(value):
            raise JsonError(f"the body holds {text[:40]!r}, beyond a 64-bit float")
        return value

    try:
        text = body.decode("utf-8")
        bare = _STRING.sub("", text)
        if _too_many(bare):
            raise JsonTooLarge(f"the body holds more than {MAX_JSON_VALUES} JSON values and "
                               "keys (a service spec has some hundreds)")
        if _too_deep(bare):
            raise JsonTooDeep(f"the body holds arrays and objects nested more than "
                              f"{MAX_JSON_DEPTH} deep (a service spec nests some 8)")
        value = json.loads(text, object_pairs_hook=unique_keys, parse_constant=constant,
                           parse_int=integer, parse_float=real)
        if _lone_surrogate(text, value):
            raise JsonError("the body holds a lone UTF-16 surrogate (an escape such as "
                            "\\ud800 without its pair), which the engine reads as U+FFFD")
        return value
    except RepeatedKey as exc:
        raise JsonError(f"the body names {exc.key[:40]!r} twice in one object") from None
    except (UnicodeDecodeError, RecursionError):
        raise JsonError("the body is not UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise JsonError(f"the body is not JSON: {exc}") from None


def load_answer(raw: bytes, what: str) -> Any:
    """The engine's answer to ``what`` (``GET /swarm``), read as a body is: what the
    docker-proxy reads whole is 4 MiB at most, but 4 MiB of ``[{},{},...]`` is ~100 MiB
    parsed, and nested past the recursion limit a RecursionError dropped the connection
    unanswered. ``JsonTooLarge`` names the answer (too deep too)."""
    try:
        return load_json(raw)
    except JsonTooLarge:
        raise JsonTooLarge(f"the engine's answer to {what} holds more than {MAX_JSON_VALUES} "
                           "JSON values and keys; not read (a write's body may hold no more: "
                           "a service spec has some hundreds)") from None
    except JsonTooDeep:
        raise JsonTooLarge(f"the engine's answer to {what} is nested more than "
                           f"{MAX_JSON_DEPTH} deep; not read (a write's body may be no deeper: "
                           "a service spec nests some 8)") from None


def same(a: Any, b: Any) -> bool:
    """JSON equality with types: ``True == 1`` and ``1 == 1.0`` are not the same."""
    return first_difference(a, b) is None


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The dotted path of the first place ``a`` and ``b`` differ (the root: "(the whole
    spec)"), or None when they are the same."""
    if type(a) is not type(b):
        return path or "(the whole spec)"
    if isinstance(a, dict):
        for k in sorted(a.keys() | b.keys()):
            sub = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                return sub
            got = first_difference(a[k], b[k], sub)
            if got is not None:
                return got
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return path or "(the whole spec)"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            got = first_difference(x, y, f"{path}[{i}]")
            if got is not None:
                return got
        return None
    return None if a == b else (path or "(the whole spec)")


def sub_object(d: Any, *keys: str) -> dict[str, Any] | None:
    """``d[k1][k2]...`` when each step is a JSON object, else None (a spec is anyone's
    JSON: a key may be missing or hold another type)."""
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d if isinstance(d, dict) else None
