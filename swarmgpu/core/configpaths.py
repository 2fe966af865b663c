"""The config's paths: each one absolute.

The daemon reads them from its own working directory, which under systemd is ``/``
(in the stack, the image's), while ``config check`` ran in an operator's shell: a
relative ``state_dir: var/state`` was ``./var/state`` to the check and ``/var/state``
to the daemon, and a pinned workload file the check read was not there at start. So a
relative path is refused, naming the absolute one it would be beside the config file;
``~`` is no home directory to either (nothing expands it).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Collection
from typing import Any

from swarmgpu.core.peertext import quoted

# The keys naming a file or directory ("" turns each of these off but state_dir).
PATH_KEYS = ("state_dir", "agents.token_file", "agents.ca_file", "agents.cert_file",
             "agents.key_file", "http.token_file", "placement.workload")


# ``${CREDENTIALS_DIRECTORY}/t``, ``$STATE_DIRECTORY``, ``%d/t``: what systemd expands in
# a unit's Environment= (%d) or a shell would ($X), and nothing does in config.yml or an
# EnvironmentFile=; put beside the config file, the fix named a path no one meant.
_UNEXPANDED = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|%[A-Za-z%]")
_WINDOWS = re.compile(r"[A-Za-z]:[\\/]|\\\\")  # C:\x, C:/x, \\server\share
_CREDENTIALS = "/run/credentials/swarmgpu.service"  # %d of the shipped system unit


def _unexpanded(value: str, token: str) -> str:
    """The fix for a path starting with a variable or a systemd specifier (``token``)."""
    credentials = token in ("%d", "$CREDENTIALS_DIRECTORY", "${CREDENTIALS_DIRECTORY}")
    example = f", e.g. {_CREDENTIALS}{value[len(token):]}" if credentials else ""
    return (f"{quoted(value)} is not an absolute path: nothing expands {token} in the "
            "config or an EnvironmentFile= (systemd expands %d in the unit's Environment= "
            f"only); write the path whole{example}")


def path_problems(cfg: Any, config_path: str | os.PathLike[str] | None,
                  add: Callable[[str], None],
                  from_env: Collection[tuple[str, ...]] = ()) -> None:
    """Each path key of ``cfg`` (a ``core.config.Config``, which imports this) that is
    not absolute, given to ``add`` with the fix; one ``from_env`` names (its key's
    path) is not said beside the config file, which did not set it."""
    for where in PATH_KEYS:
        value: object = cfg
        for part in where.split("."):
            value = getattr(value, part)
        if not isinstance(value, str) or os.path.isabs(value) \
                or (value == "" and where != "state_dir") \
                or (where == "placement.workload" and value == "auto"):
            continue
        if not value:
            fix = ("an empty path is not an absolute path; give the directory's, e.g. "
                   "/var/lib/swarmgpu (the default)")
        elif value.startswith("~"):
            fix = (f"{quoted(value)} is not an absolute path (nothing expands ~ here); "
                   "write the home directory's path whole")
        elif (unexpanded := _UNEXPANDED.match(value)) is not None:
            fix = _unexpanded(value, unexpanded.group())
        elif _WINDOWS.match(value):
            fix = (f"{quoted(value)} is a Windows path; the daemon runs on Linux: write "
                   "the Linux path whole, from /")
        else:
            # (normalised as abspath normalises the file's own: no './' or '//' left)
            beside = posixpath.normpath(posixpath.join(posixpath.dirname(
                posixpath.abspath(os.fspath(config_path))), value)) \
                if config_path is not None and tuple(where.split(".")) not in from_env \
                else None
            fix = (f"{quoted(value)} is not an absolute path: the daemon reads it from its "
                   "working directory (/ under systemd), `config check` from the shell's; "
                   "write it whole" + (f", e.g. {beside}" if beside else ""))
        add(f"{where}: {fix}")
