"""``file:PATH`` — facts written by hand or saved from an agent's ``/facts``.

The file is the JSON form of ``NodeFacts`` (schema ``swarmgpu.facts/v1``, see
docs/facts-schema.md), in JSON or YAML. It is parsed strictly: an unknown key or a
wrong type is an error naming the file and the field, never silently dropped.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from swarmgpu.facts import SourceError
from swarmgpu.model import FactsError, NodeFacts


def load_facts(path: str | Path, *, hostname: str | None = None) -> NodeFacts:
    """Parse a facts file; ``hostname`` fills in a file that names none."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SourceError(f"file:{p}: cannot read: {e.strerror}") from e
    try:
        data = yaml.safe_load(text)  # JSON is valid YAML here
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise SourceError(f"file:{p}:{at} not valid JSON/YAML: {e}") from e
    try:
        facts = NodeFacts.from_dict(data, where=f"file:{p}")
    except FactsError as e:
        raise SourceError(f"{e} (schema: docs/facts-schema.md)") from e
    if not facts.hostname and hostname:
        facts = replace(facts, hostname=hostname)
    return facts


class FileSource:
    """``file:PATH``: re-read on every ``read()`` so edits take effect without a restart."""

    def __init__(self, path: str | Path, *, hostname: str | None = None) -> None:
        self.path = Path(path)
        self.spec = f"file:{path}"
        self.hostname = hostname

    def read(self) -> NodeFacts:
        facts = load_facts(self.path, hostname=self.hostname)
        return replace(facts, source=facts.source or self.spec)
