"""The checks of one YAML node that ``core.yamlfile`` makes as it walks a composed file
(``_check_tree``), each refusing with the file's name and the node's line: a key given
twice in one mapping or read as an earlier one (``01`` and ``1``), a second ``<<`` or one
below the keys it merges, a tag no reader shares (``!`` alone, the file's own,
``!!set``), a value its tag cannot build, a timestamp in a stack, and a plain scalar
docker 28 and docker 27 read apart. Split from ``yamlfile`` (at its 700-line limit) as
they were; ``yamlfile``'s docstring says why each is refused.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Mapping
from typing import Any, NoReturn

import yaml

from swarmgpu.core import goscalar


def scalar(loader: yaml.SafeLoader, node: yaml.ScalarNode, what: str,
           error: type[Exception]) -> Any:
    """The node's value, built once (``construct_document`` reuses it). PyYAML's
    constructors raise what they meet (ValueError for ``!!int abc`` or 5,000 digits,
    KeyError for ``!!bool maybe``, AttributeError for ``!!timestamp x``): the line here."""
    if node.tag == "tag:yaml.org,2002:merge":
        return None  # ``<<``: no value of its own; SafeLoader merges what it names
    try:
        return loader.construct_object(node)
    except yaml.YAMLError:
        raise
    except (ArithmeticError, LookupError, ValueError, TypeError, AttributeError):
        tag = "!!" + node.tag.rsplit(":", 1)[-1] if node.tag.startswith("tag:yaml.org,") \
            else node.tag
        text = node.value if len(node.value) <= 40 else node.value[:40] + "..."
        limit = sys.get_int_max_str_digits()
        why = f", more than {limit} digits" if limit and len(node.value) > limit else ""
        raise error(f"{what}: the value at line {node.start_mark.line + 1} ({text!r}) cannot "
                    f"be read as {tag}{why}; quote it (with no !! tag) if it is text") from None


def key_once_read(k: yaml.ScalarNode, value: Any, read: dict[Any, tuple[yaml.ScalarNode, Any]],
                  what: str, error: type[Exception], v2: bool = False) -> None:
    """Refuse a key that is an earlier one of its mapping once read: ``01``, ``0x1``,
    ``1.0`` and ``true`` are the number 1 (one dict key: PyYAML kept the last value
    silently), and ``1`` is ``"1"`` to every reader that names keys by their text.
    ``read``: each earlier key (node, value) by its value and by ``("text", str(value))``.
    ``v2``: as go-yaml v2's strict decoding compares them (CDI's), of one Go type and
    value: the int 1, the float 1.0, ``true`` and the text "1" are four keys."""
    if not isinstance(value, Hashable):
        return  # PyYAML refuses an unhashable key itself
    if v2:
        hit = read.get((type(value), value))
        if hit is None:
            read[type(value), value] = (k, value)
            return
        _said_twice(k, value, hit, what, error)
    text = ("text", str(value))
    hit = read.get(value, read.get(text))
    if hit is None:
        read.setdefault(value, (k, value))
        read.setdefault(text, (k, value))
        return
    _said_twice(k, value, hit, what, error)


def _said_twice(k: yaml.ScalarNode, value: Any, hit: tuple[yaml.ScalarNode, Any],
                what: str, error: type[Exception]) -> NoReturn:
    """Refuse the key ``k``, read as the earlier key of ``hit`` (its node, its value)."""
    other, was = hit
    same = repr(was) if value == was else f"{str(value)!r}, as text"
    fix = "write it once" if other.value == k.value else \
        "write it once, or quote both if they are two names"
    raise error(f"{what}: keys {_as_written(other)} (line {other.start_mark.line + 1}) and "
                f"{_as_written(k)} (line {k.start_mark.line + 1}) are one key once read "
                f"({same}); {fix}")


def merge_after_keys(merge: yaml.ScalarNode, value: yaml.Node,
                     seen: dict[tuple[str, str], int], what: str,
                     error: type[Exception]) -> None:
    """Refuse a ``<<`` that merges a key its mapping gave above it: go-yaml v2 (docker 27
    and older) merges where ``<<`` stands and overwrites that key, go-yaml v3 (docker
    28), PyYAML and the YAML spec keep it, so the file means two things."""
    maps = value.value if isinstance(value, yaml.SequenceNode) else [value]
    above = {name: line for (_, name), line in seen.items()}
    for m in maps:
        for k, _ in m.value if isinstance(m, yaml.MappingNode) else []:
            if isinstance(k, yaml.ScalarNode) and k.value in above:
                raise error(
                    f"{what}: key {k.value!r} (line {above[k.value]}) is also merged by the "
                    f"<< at line {merge.start_mark.line + 1}, below it: docker 27 and older "
                    "take the merged value, docker 28 this one; put << first in the mapping")


def merge_once(merge: yaml.ScalarNode, before: int | None, what: str,
               error: type[Exception]) -> int:
    """The line of a mapping's ``<<``; a second one is refused, as any key given twice:
    docker 28 (go-yaml v3) refuses the file, docker 27 and older and PyYAML merge both,
    the later's keys over the earlier's."""
    line = merge.start_mark.line + 1
    if before is not None:
        raise error(f"{what}: key '<<' given twice in one mapping (lines {before} and "
                    f"{line}): docker 28 refuses it, docker 27 and older merge both; merge "
                    "them in one, <<: [*a, *b] (where the first listed wins)")
    return line


def refuse_timestamp(node: yaml.ScalarNode, what: str, error: type[Exception]) -> None:
    """Refuse a timestamp in a stack: docker 28 and later (go-yaml v3) give the service
    Go's text of the time, in the zone docker runs in (2001-12-14 00:00:00 +0000 UTC),
    docker 27 and older the text as written: render cannot write back one meaning."""
    text = node.value if len(node.value) <= 40 else node.value[:40] + "..."
    raise error(f"{what}: the value at line {node.start_mark.line + 1} ({text!r}) is a "
                "timestamp to docker's YAML reader, which docker 28 and later give the "
                "service as Go's text of the time in docker's own zone ('2001-12-14 "
                "00:00:00 +0000 UTC'); quote it to keep it as written")


YAML_TAGS = "tag:yaml.org,2002:"  # the tags a plain, quoted or !! node resolves to
_COMPOSE_TAGS = ("!reset", "!override")


def _foreign_tag(node: yaml.Node, what: str, error: type[Exception], docker: bool) -> None:
    """Refuse a tag of the file's own (``!reset``, ``!foo``): go-yaml, docker's reader,
    decodes the value under it as if it had none (a scalar as text), PyYAML knows no
    constructor. Compose's ``!reset`` and ``!override`` (compose-spec, docker compose)
    mean nothing to docker stack deploy's loader: ``ports: !reset []`` resets nothing.
    A file only swarmgpu reads (``docker`` false) has no reader that knows one either."""
    line = node.start_mark.line + 1
    tag = node.tag if len(node.tag) <= 40 else node.tag[:40] + "..."
    if not docker:
        raise error(f"{what}: the tag {tag} at line {line} is not one swarmgpu reads; remove "
                    "the tag (or write !!str, !!int ... if a type is meant)")
    if node.tag in _COMPOSE_TAGS:
        raise error(
            f"{what}: the tag {tag} at line {line} is docker compose's (compose-spec "
            "merge tags); docker stack deploy's loader does not know it and reads the "
            "value as if untagged, so nothing is reset or overridden: an earlier file's "
            "value stays, or is merged with this one; remove the tag, and write the value "
            "wanted in one file only (leave the key out of the others)")
    raise error(f"{what}: the tag {tag} at line {line}: docker stack deploy reads the value "
                "as if untagged (a scalar as text); remove the tag, or write !!str, !!int "
                "... if a type is meant")


def _bare_tag(line: int, what: str, error: type[Exception]) -> None:
    """Refuse YAML's non-specific tag, ``!`` alone (``cpus: ! 2``): PyYAML resolves the
    value under it as if plain (the number 2; ``! "2"`` too), docker 28 (go-yaml v3)
    deploys it as text ("2"), docker 27 and older refuse the file. On a list or mapping
    it means nothing: refused too, one rule."""
    raise error(f"{what}: the non-specific tag ! at line {line}: YAML readers read the "
                "value under it apart (PyYAML as if plain, a number here; docker 28 as "
                "text; docker 27 and older refuse it); remove the !, and quote the value "
                "if it is text")


def two_readings(root: yaml.Node, plain: set[int], what: str,
                 error: type[Exception]) -> None:
    """Refuse a plain scalar that docker 28 and later (go-yaml v3) and docker 27 and
    older (v2) read apart (``goscalar.v2_reads_otherwise``: ``yes``, ``0o-17``), key or
    value: the one CLI deploys ``yes`` where the other deploys ``true`` or refuses the
    file, and users deploy with either. Not under a top-level ``x-`` key, which docker
    ignores (both deploy one spec), unless an alias brings it into the stack. The tree
    is bounded (``yamlfile._check_tree``) and each node is looked at once."""
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]  # (node, is a mapping key)
    seen: set[int] = set()
    while todo:
        node, key = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if node is root and isinstance(k, yaml.ScalarNode) \
                        and k.value.startswith("x-"):
                    continue
                todo += [(v, False), (k, True)]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(item, False) for item in node.value]
        elif id(node) in plain and (both := goscalar.v2_reads_otherwise(node.value)):
            v3, v2 = both
            fix = "quote it" if key else \
                f"quote it, or write {v2 if v3 == 'text' else v3.rsplit(' ', 1)[-1]}"
            raise error(f"{what}: the {'key' if key else 'value'} at line "
                        f"{node.start_mark.line + 1}: plain `{node.value}` is {v3} to docker "
                        f"28+ and {v2} to docker 27 and older: {fix}")


def _as_written(k: yaml.ScalarNode) -> str:
    """A key as the file has it: plain, or in its quotes (control characters escaped)."""
    text = repr(k.value)[1:-1]
    return text if k.style in (None, "") else f"{k.style}{text}{k.style}"


# YAML's tags whose value PyYAML builds as no plain kind (a set, bytes, pairs), which
# docker reads otherwise again (!!set as a mapping of nulls, !!binary as its text).
_UNREAD_TAGS = tuple(YAML_TAGS + t for t in ("set", "omap", "pairs", "binary"))

# The kinds every YAML reader shares (a ``!!python/...`` tag is under the prefix too).
_PLAIN_TAGS = frozenset(YAML_TAGS + t for t in (
    "str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge"))


def check_tag(node: yaml.Node, bare: Mapping[int, int], what: str, error: type[Exception],
              docker: bool) -> None:
    """Refuse ``!`` alone (``bare``: the loader's, node id -> line), a tag of the file's
    own, and YAML's that build no plain value; YAML's others (``!!str``, ``!!int``) are
    read."""
    if (line := bare.get(id(node))) is not None:
        _bare_tag(line, what, error)
    if not node.tag.startswith(YAML_TAGS):
        _foreign_tag(node, what, error, docker)
    if node.tag in _UNREAD_TAGS:
        raise error(f"{what}: the tag !!{node.tag.rsplit(':', 1)[-1]} at line "
                    f"{node.start_mark.line + 1}: swarmgpu reads YAML's plain kinds only "
                    "(mappings, lists, text, numbers, booleans, null) and this one builds "
                    "none (docker reads !!set as a mapping, !!binary as its decoded text); "
                    "write the value without the tag, as what it means")
    if node.tag not in _PLAIN_TAGS:  # (PyYAML's "could not determine a constructor")
        raise error(f"{what}: the tag !!{node.tag[len(YAML_TAGS):][:40]} at line "
                    f"{node.start_mark.line + 1} is no kind YAML's readers share; remove "
                    "the tag (or write !!str, !!int ... if a type is meant)")
