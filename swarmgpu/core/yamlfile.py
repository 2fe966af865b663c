"""Reading one YAML (or JSON) file with errors that name the file, and the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_yaml(path: Path, what: str, error: type[Exception], *, fmt: str = "YAML") -> Any:
    """The file's parsed content (safe loader); ``error(...)`` naming ``what`` otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{what}: cannot read it ({e.strerror or e})") from e
    return parse_yaml(text, what, error, fmt=fmt)


def parse_yaml(text: str, what: str, error: type[Exception], *, fmt: str = "YAML") -> Any:
    """``text`` parsed (safe loader); ``error(...)`` naming ``what`` and the line otherwise."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise error(f"{what}: not valid {fmt}{at}: {e}") from e
