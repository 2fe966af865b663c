"""Relative paths in a stack made absolute, as `docker stack deploy` makes them.

docker/cli reads a relative path against the folder of the first stack file (``-c
stacks/ai.yml``: stacks/), but against the folder it runs in when the file comes on
stdin (``-c -``; cli/command/stack/loader ``getConfigDetails``), as render's output
does: ``./web.env`` was another file there, or none. So render writes each path docker
resolves absolute, against the stack file's folder (cli/compose/loader/loader.go):

- ``services.*.env_file`` (``resolveEnvironment``: absPath);
- a bind mount's source in ``services.*.volumes`` (``resolveVolumePaths``): the short
  syntax's when it starts with ``.`` (``isFilePath``: ``/`` is absolute, ``~`` the
  home, which docker expands alike from any folder, anything else a named volume), the
  long syntax's of ``type: bind`` unless absolute or ``~``;
- ``configs.*.file`` and ``secrets.*.file`` (``loadFileObjectConfig``: absPath, no
  ``~``), unless ``external``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Any

from swarmgpu.core.peertext import quoted

# docker/cli's isAbs: a Unix path, or a Windows one (drive letter, or \\server)
_ABSOLUTE = re.compile(r"/|\\\\|[A-Za-z]:[\\/]")


def absolute_paths(
    stack: dict[str, Any], base: str | None, error: type[Exception], *, escape: bool = False
) -> list[str]:
    """Each relative path docker resolves, in place, joined to ``base`` (the first file's
    folder, absolute; None: the folder docker runs in, and nothing is changed); a note
    naming the paths changed, if any. ``escape``: the values are as written, docker
    substitutes them after render (``--skip-interpolation``): ``base`` goes in with each
    ``$`` as ``$$``, and a path that starts with a variable, which may be absolute once
    substituted, is ``error(...)`` naming it."""
    done: list[str] = []

    if base is None:
        return []
    folder = base

    def join(path: str, at: str) -> str:
        if escape and re.match(r"\$(?!\$)", path):
            raise error(
                f"{at}: {quoted(path, 200)}: docker reads a relative path against the stack file's "
                "folder, which render writes in (docker stack deploy -c - reads it against "
                "the folder it runs in), but whether this one is relative is known only once "
                "docker substitutes it (--skip-interpolation); start it with the folder "
                "itself, or let render substitute it"
            )
        done.append(at)
        if escape and "$" in path:  # its value known only to docker: joined as it is
            return f"{folder.replace('$', '$$').rstrip('/')}/{path}"
        joined = posixpath.normpath(posixpath.join(folder, path))  # as filepath.Join cleans
        return joined.replace("$", "$$") if escape else joined

    services = stack.get("services")
    for name, svc in services.items() if isinstance(services, dict) else ():
        if isinstance(svc, dict):
            _service(svc, f"services.{name}", join)
    for top in ("configs", "secrets"):
        objs = stack.get(top)
        for name, obj in objs.items() if isinstance(objs, dict) else ():
            if (
                isinstance(obj, dict)
                and isinstance(f := obj.get("file"), str)
                and not obj.get("external")
                and not _ABSOLUTE.match(f)
            ):
                obj["file"] = join(f, f"{top}.{name}.file")
    if not done:
        return []
    return [
        f"{', '.join(done)}: written absolute, against {base} (docker stack deploy -c - reads "
        "a relative path against the folder it runs in, not the stack file's)"
    ]


def _service(svc: dict[str, Any], at: str, join: Callable[[str, str], str]) -> None:
    env_file = svc.get("env_file")
    if isinstance(env_file, str) and not _ABSOLUTE.match(env_file):
        svc["env_file"] = join(env_file, f"{at}.env_file")
    elif isinstance(env_file, list):
        svc["env_file"] = [
            join(f, f"{at}.env_file[{i}]") if isinstance(f, str) and not _ABSOLUTE.match(f) else f
            for i, f in enumerate(env_file)
        ]
    volumes = svc.get("volumes")
    if not isinstance(volumes, list):
        return  # not Compose's shape: docker stack deploy says so
    for i, v in enumerate(volumes):
        where = f"{at}.volumes[{i}]"
        if isinstance(v, str) and v.startswith(".") and ":" in v:
            source, _, rest = v.partition(":")  # a source with a '.' first has no ':'
            volumes[i] = f"{join(source, where)}:{rest}"
        elif (
            isinstance(v, dict)
            and v.get("type") == "bind"
            and isinstance(src := v.get("source"), str)
            and src
            and not src.startswith("~")
            and not _ABSOLUTE.match(src)
        ):
            v["source"] = join(src, f"{where}.source")
