"""A ``.env`` beside the stack file, which docker compose reads and `docker stack
deploy` does not, for `swarmgpu render`.

docker compose substitutes ``${TAG}`` from the project folder's ``.env`` where the
shell does not set it; docker/cli's stack loader takes only the environment it runs in
(cli/command/stack/loader ``getConfigDetails``: ``os.Environ()``). A stack moved from
compose to Swarm with its ``.env`` is therefore deployed with its defaults, or "",
where compose gave the ``.env``'s values: ``image: vllm/vllm-openai:${TAG:-latest}``
runs ``latest``. So with a name ``environment`` gives no value (``- HF_TOKEN``):
compose passes the ``.env``'s value, docker/cli's loader only its own environment's
(``resolveEnvironment``), and the container goes without. render substitutes as
docker/cli does (it never reads the ``.env`` for values) and says so in a warning naming
the variables and the fix.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import Any

from swarmgpu.core.boundedfile import FileRefused, read_bounded
from swarmgpu.core.peertext import escaped
from swarmgpu.manager.commands.interpolation import TemplateError, substitute

_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_SEP = re.compile(r"[=:]")  # where a .env line's name ends
_LIMIT = 1 << 20  # a .env is a few lines: a larger one is not read for this warning


class _Asked(dict[str, str]):
    """An empty environment that records each variable docker/cli's rules look up."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.names.add(key)
        return default


def dotenv_notes(stack: Mapping[str, Any], base: str, environ: Mapping[str, str]) -> list[str]:
    """A warning where ``base``'s ``.env`` sets variables the stack as written
    (``stack``) uses and ``environ`` (what render and docker substitute from) does not
    set; none where there is no ``.env``, it cannot be read, or the shell sets them."""
    try:
        text = read_bounded(posixpath.join(base, ".env"), _LIMIT).decode("utf-8")
    except (OSError, FileRefused, UnicodeDecodeError):
        return []
    asked = _Asked()
    for value in _texts(stack):
        try:
            substitute(value, asked)
        except TemplateError:
            continue  # said by the substitution itself
    bare = _bare(stack)
    missing = sorted((_names(text) & (asked.names | bare)) - set(environ))
    if not missing:
        return []
    none = ", and an environment entry without a value gets none" if bare & set(missing) else ""
    names = ", ".join(escaped(n[:80]) for n in missing[:10])
    names += f" and {len(missing) - 10} more" if len(missing) > 10 else ""
    they = "it" if len(missing) == 1 else "them"
    return [
        f"WARNING: .env sets {names}, which the stack uses, but docker stack deploy reads "
        "no .env (docker compose does) and this environment does not set "
        f"{they}: docker substitutes the stack's default, or \"\"{none}; export {they} in the "
        "shell that runs render and docker stack deploy (set -a; . ./.env; set +a)"
    ]


def _texts(v: Any, top: bool = True) -> Iterator[str]:
    """Every text value with a ``$`` (never a key, nor ``version``: docker/cli
    substitutes neither)."""
    if isinstance(v, dict):
        for k, x in v.items():
            if not (top and k == "version"):
                yield from _texts(x, False)
    elif isinstance(v, list):
        for x in v:
            yield from _texts(x, False)
    elif isinstance(v, str) and "$" in v:
        yield v


def _bare(stack: Mapping[str, Any]) -> set[str]:
    """The names a service's ``environment`` gives no value (``- NAME``, ``NAME:``): the
    deploying shell's, in docker/cli; compose reads its ``.env`` for them too."""
    services = stack.get("services")
    out: set[str] = set()
    for svc in services.values() if isinstance(services, dict) else ():
        env = svc.get("environment") if isinstance(svc, dict) else None
        if isinstance(env, dict):
            out.update(str(k) for k, v in env.items() if v is None)
        elif isinstance(env, list):
            out.update(str(e) for e in env if isinstance(e, str) and "=" not in e)
    return out


def _names(text: str) -> set[str]:
    """The names a compose ``.env`` sets (``NAME=value``, ``export NAME=value``, and
    ``NAME: value``, which compose-go's dotenv parser takes too: the name ends at the
    first ``=`` or ``:``)."""
    out = set()
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, eq, _ = _SEP.sub("=", line, count=1).partition("=")
        if eq and _NAME.fullmatch(name.strip()):
            out.add(name.strip())
    return out
