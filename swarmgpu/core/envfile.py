"""A systemd ``EnvironmentFile=`` (``/etc/swarmgpu/env``) read as systemd reads it, for
``swarmgpu config check --env-file``: the daemon the unit starts applies its
``SWARMGPU_*`` overrides, which a shell's check never saw.

Strict: what this reader could read otherwise than systemd (a backslash, which systemd
reads as an escape, a line continued with one, a quote without its pair) is refused
naming its line, not guessed. Read: ``KEY=value`` lines, blanks around the key and the
value dropped; a value wholly in single or double quotes is their content; lines
starting with ``#`` or ``;`` and blank lines are skipped (systemd.exec(5),
"EnvironmentFile="). A line ends at a carriage return as at a newline (systemd's
env-file.c: NEWLINE is both), so a file saved with CRLF reads as systemd reads it. A
comment ending in a backslash is refused: systemd before 254 reads the next line as
comment too, 254 and later as a line of its own. So is a NUL byte, where systemd stops.

These are not docker's ``--env-file`` rules (cli/opts/file.go ``parseKeyValueFile``):
docker keeps quotes and trailing blanks as written, reads a ``;`` line as a name and a
bare ``NAME`` from its own environment. The file is the unit's: systemd reads it."""

from __future__ import annotations

import re

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_BLANKS = " \t"


def parse_env_file(text: str) -> dict[str, str]:
    """``text``'s variables; ValueError naming the first line not read as systemd reads it."""
    if "\0" in text:
        n = text[:text.index("\0")].count("\n") + 1
        raise ValueError(f"line {n}: a NUL byte, where systemd stops reading the file; "
                         "remove it")
    out: dict[str, str] = {}
    for n, physical in enumerate(text.split("\n"), 1):
        for raw in physical.split("\r"):  # systemd ends a line at \r too (CRLF files)
            _read_line(raw, n, out)
    return out


def _read_line(raw: str, n: int, out: dict[str, str]) -> None:
    line = raw.strip(_BLANKS)
    if line[:1] in ("#", ";"):
        if line.endswith("\\"):  # systemd < 254 goes on into the next line, 254+ not
            raise ValueError(f"line {n}: a comment line ending in a backslash, which "
                             "systemd before 254 reads as going on into the next line, "
                             "254 and later not; remove the backslash")
        return
    if not line:
        return
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
