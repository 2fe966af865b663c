"""``file:PATH`` — facts written by hand or saved from an agent's ``/facts``.

The file is the JSON form of ``NodeFacts`` (schema ``swarmgpu.facts/v1``, see
docs/facts-schema.md), in JSON or YAML. It is parsed strictly: an unknown key or a
wrong type is an error naming the file and the field, never silently dropped.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from swarmgpu.agent.facts import SourceError
from swarmgpu.core.model import FactsError, NodeFacts
from swarmgpu.core.yamlfile import read_yaml


def load_facts(path: str | Path, *, hostname: str | None = None) -> NodeFacts:
    """Parse a facts file; ``hostname`` fills in a file that names none."""
    p = Path(path)
    data = read_yaml(p, f"file:{p}", SourceError, fmt="JSON/YAML", sole=True)  # JSON is YAML
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
