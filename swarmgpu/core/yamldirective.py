"""YAML directives (``%YAML``, ``%TAG``, any other ``%NAME``): which a file may have.

PyYAML took every one and read the file by swarmgpu's rules (``core.goscalar``) whatever
it said. Docker's reader (go-yaml, v2 and v3) refuses ``%YAML`` other than 1.1 ("found
incompatible YAML document") and a directive it does not know ("found unknown directive
name"); ``%YAML 1.1`` it takes and ignores: docker 28 reads ``yes`` as text and
``12:30`` as text, where the directive announces YAML 1.1's true and 750 (and a reader
that heeds it, an editor's or ruamel.yaml, reads them so). ``%TAG`` renames a tag handle
(``%TAG ! tag:yaml.org,2002:`` makes ``!str`` a type), which no stack or config needs.
So every directive is refused, but in a file only go-yaml v2 reads (CDI's specs, ``v2``):
there ``%YAML 1.1`` (v2 reads YAML 1.1) and ``%TAG`` are read as v2 reads them.
"""

from __future__ import annotations

import re


class Directive(Exception):
    """The directive ``text`` at the 1-based ``line`` is refused: ``why``."""

    def __init__(self, line: int, text: str, why: str) -> None:
        super().__init__(line, text, why)
        self.line, self.text, self.why = line, text, why


def refusal(text: str, v2: bool) -> str | None:
    """Why the directive ``text`` (its line, from the ``%``) is refused, or None."""
    parts = re.split(r"\s#", text, maxsplit=1)[0][1:].split()
    name = parts[0] if parts else ""
    if name == "YAML" and parts[1:] == ["1.1"]:
        return None if v2 else (
            "YAML 1.1 reads yes as true and 12:30 as 750; docker's reader (go-yaml v3) "
            "and swarmgpu read both as text whatever the directive says")
    if name == "YAML":
        return ("docker's reader (go-yaml) refuses every version but 1.1 (\"found "
                "incompatible YAML document\")")
    if name == "TAG":
        return None if v2 else ("it renames a tag handle for the file, which no file "
                                "swarmgpu reads needs")
    return "docker's reader (go-yaml) refuses it (\"found unknown directive name\")"
