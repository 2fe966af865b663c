"""A systemd ``EnvironmentFile=`` (``/etc/swarmgpu/env``) read as systemd reads it, for
``swarmgpu config check --env-file``: the daemon the unit starts applies its
``SWARMGPU_*`` overrides, which a shell's check never saw.

Strict: what this reader could read otherwise than systemd (a backslash, which systemd
reads as an escape, a line continued with one, a quote without its pair) is refused
naming its line, not guessed. Read: ``KEY=value`` lines, blanks around the key and the
value dropped; a value wholly in single or double quotes is their content; lines
starting with ``#`` or ``;`` and blank lines are skipped (systemd.exec(5),
"EnvironmentFile=")."""

from __future__ import annotations

import re

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_BLANKS = " \t"


def parse_env_file(text: str) -> dict[str, str]:
    """``text``'s variables; ValueError naming the first line not read as systemd reads it."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.strip(_BLANKS)
        if not line or line[0] in "#;":
            continue
        if "\\" in line:
            why = ("a line continued with a backslash" if line.endswith("\\") else
                   "a backslash, which systemd reads as an escape")
            raise ValueError(f"line {n}: {why}; write the value plainly")
        key, eq, value = line.partition("=")
        key, value = key.strip(_BLANKS), value.strip(_BLANKS)
        if not eq or not _KEY.fullmatch(key):
            raise ValueError(f"line {n}: not KEY=value")
        if value[:1] in ("'", '"'):
            q = value[0]
            if len(value) < 2 or not value.endswith(q) or q in value[1:-1]:
                raise ValueError(f"line {n}: a quote without its pair, or text after it; "
                                 "quote the whole value once")
            value = value[1:-1]
        out[key] = value
    return out
