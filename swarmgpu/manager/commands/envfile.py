"""The env lines render adds to a service, less the names its ``env_file`` sets; and
the variables it sets, which a model server reads (``model_servers``).

docker/cli reads each env file on the client into the service's environment, and the
service's ``environment`` over it (cli/compose/loader/loader.go ``resolveEnvironment``).
So an env line render adds to ``environment`` (``CUDA_DEVICE_ORDER``, the device
template, a share's lines, a Compose reservation's ``NVIDIA_DRIVER_CAPABILITIES``)
would replace the env file's value of that name: render adds none the env file sets,
as it adds none ``environment`` names. The file's rules
are cli/opts/file.go ``parseKeyValueFile``: lines split at ``\\n`` (a ``\\r`` before it
dropped), a UTF-8 BOM off the first, leading white space trimmed, empty and ``#``
lines skipped, ``NAME=value``, or a bare ``NAME`` set only where docker's environment
sets it; a name with white space in it, or none, and bytes that are not UTF-8 are
refused, as docker refuses the file.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping, Set
from typing import Any

from swarmgpu.core.boundedfile import FileRefused, read_bounded
from swarmgpu.core.peertext import quoted
from swarmgpu.core.yamlfile import MAX_TEXT
from swarmgpu.manager.placement import ORDER_ENV, env_template, env_template_per_node
from swarmgpu.manager.placement.envs import DEVICE_VAR, VOID_LINE
from swarmgpu.manager.services.sharing import env_lines

# Go's unicode.IsSpace (str.isspace takes \x1c-\x1f too)
_SPACE = (
    " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def write_env(
    svc: dict[str, Any], prefix: str, *, fraction: bool, skip: Set[str] = frozenset()
) -> None:
    """The device env template (the older per-node one or a void line upgraded) and
    order, and a fraction's share lines, added to the service's environment as it
    spells it, each unless the service names it there or ``skip`` does (its env files'
    names)."""
    env = svc.get("environment")
    tmpl = env_template(prefix)
    # swarmgpu's own lines become the per-slot template: the older per-node one (it
    # reads the same lists, and packed replicas need the per-slot ones), and the void
    # of placement.ungranted (kept, it left the placed containers with no GPU).
    mine = {env_template_per_node(prefix), VOID_LINE}
    if isinstance(env, dict) and f"{DEVICE_VAR}={env.get(DEVICE_VAR)}" in mine:
        env[DEVICE_VAR] = tmpl.partition("=")[2]
    elif isinstance(env, list):
        svc["environment"] = env = [tmpl if e in mine else e for e in env]
    additions = [tmpl, ORDER_ENV]
    if fraction:
        additions.extend(env_lines(prefix))  # the container is told its share
    additions = [a for a in additions if a.partition("=")[0] not in skip]
    if isinstance(env, dict):
        for a in additions:
            k, _, v = a.partition("=")
            env.setdefault(k, v)
    else:
        lst = [str(e) for e in (env or [])]
        names = {e.partition("=")[0] for e in lst}  # a bare NAME: docker takes the shell's
        lst += [a for a in additions if a.partition("=")[0] not in names]
        svc["environment"] = lst


def device_var_error(where: str, what: str) -> str:
    """The error for a GPU request whose own env (``where``) sets the device variable:
    render writes no template beside it, so its containers would see what it names."""
    return (
        f"{where}: {what}: swarmgpu gives a GPU request its GPUs through {DEVICE_VAR} "
        "(the device template render writes) and never overwrites a value of yours: with "
        "it the containers see the GPUs it names, not the ones placed for them; remove it"
    )


class EnvFiles:
    """The variables each service's env files set (``env_file_variables``), read once
    each."""

    def __init__(
        self, base: str | None, environ: Mapping[str, str] | None, error: type[Exception]
    ) -> None:
        self.base, self.environ, self.error = base, environ, error
        self._vars: dict[str, dict[str, str | None]] = {}

    def variables(self, svc_name: str, svc: Mapping[str, Any]) -> dict[str, str | None]:
        if svc_name not in self._vars:
            where = f"services.{svc_name}"
            got = env_file_variables(svc, where, self.base, self.environ, self.error)
            self._vars[svc_name] = got
        return self._vars[svc_name]

    def names(self, svc_name: str, svc: Mapping[str, Any]) -> set[str]:
        return set(self.variables(svc_name, svc))

    def read(self, svc_name: str, svc: Mapping[str, Any]) -> dict[str, str | None]:
        """``variables``, none where a file cannot be read (``check_env_files`` says
        so): what a model server reads from them (``model_servers``)."""
        try:
            return self.variables(svc_name, svc)
        except self.error:
            return {}

    def request_names(self, svc_name: str, svc: Mapping[str, Any]) -> set[str]:
        """``names`` of a GPU request's service: one that sets the device variable is
        ``device_var_error``."""
        names = self.names(svc_name, svc)
        if DEVICE_VAR in names:
            where = f"services.{svc_name}.env_file"
            raise self.error(device_var_error(where, f"sets {DEVICE_VAR}"))
        return names

    def add_env(self, services: Mapping[Any, Any], env: Mapping[str, Mapping[str, str]]) -> None:
        """``env`` (service -> variables: ``CheckedStack.env``) added to each service's
        environment where neither it nor its env files name the variable."""
        for key, svc in services.items():
            if (add := env.get(str(key))) is not None:
                skip = self.names(str(key), svc)
                _add_env(svc, {k: v for k, v in add.items() if k not in skip})


def check_env_files(
    services: Mapping[Any, Any], requests: Collection[str], files: EnvFiles
) -> list[str]:
    """Each service's env files, as render reads them: one docker refuses, or a GPU
    request's (``requests``) that sets the device variable, is an error here too, so
    that ``render --check`` refuses what render would (it said valid, and render refused
    the stack only once Docker had been asked)."""
    errors = []
    for svc_name, svc in services.items():
        if not isinstance(svc, dict):
            continue  # said by render's check of the service
        try:
            if str(svc_name) in requests:
                files.request_names(str(svc_name), svc)
            else:
                files.names(str(svc_name), svc)
        except files.error as exc:  # one message each (``error(...)`` above)
            errors.append(str(exc))
    return errors


def _add_env(svc: dict[str, Any], add: Mapping[str, str]) -> None:
    """Add variables the service does not set itself (a bad shape is reported later)."""
    env = svc.get("environment")
    if env is None and add:
        svc["environment"] = env = {}
    if isinstance(env, dict):
        for k, v in add.items():
            env.setdefault(k, v)
    elif isinstance(env, list):
        for k, v in add.items():
            if not any(str(e).split("=", 1)[0] == k for e in env):
                env.append(f"{k}={v}")


def env_file_variables(
    svc: Mapping[str, Any],
    at: str,
    base: str | None,
    environ: Mapping[str, str] | None,
    error: type[Exception],
) -> dict[str, str | None]:
    """The variables the service's env files set, a later file's over an earlier one's
    (docker/cli appends them in order), each to its value (None: a bare name, whose
    value is docker's environment's, unknown here), a relative path read against ``base`` (the
    stack file's folder; None: this process's, which docker runs in: ``stackpaths``).
    ``environ``: docker's environment (None: unknown, and a bare name counts as set). A
    path with a ``$`` left for docker (``--skip-interpolation``) is not read: its file
    is not known. A file docker cannot read or refuses is ``error(...)`` naming it."""
    files = svc.get("env_file")
    out: dict[str, str | None] = {}
    # another shape is the schema's error to say
    for i, path in enumerate(
        [files] if isinstance(files, str) else files if isinstance(files, list) else []
    ):
        where = f"{at}.env_file" + ("" if isinstance(files, str) else f"[{i}]")
        if not isinstance(path, str) or (environ is None and "$" in path):
            continue
        try:
            data = read_bounded(posixpath.join(base or ".", path), MAX_TEXT)
            text = data.decode("utf-8")
        except (OSError, FileRefused, UnicodeDecodeError) as exc:
            why = (
                exc.strerror
                if isinstance(exc, OSError) and exc.strerror
                else getattr(exc, "why", None) or "not UTF-8 text, or longer than 8 MiB"
            )
            raise error(
                f"{where}: {quoted(path, 200)}: cannot read it ({why}); docker stack deploy "
                "reads it into the service's environment, and refuses the stack "
                "without it"
            ) from None
        # (a name of its own: ``at`` is every later file's location too)
        named = f"{where}: {quoted(path, 200)}"
        out.update(_variables(text.removeprefix("\ufeff"), environ, named, error))
    return out


def _variables(
    text: str, environ: Mapping[str, str] | None, where: str, error: type[Exception]
) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.removesuffix("\r").lstrip(_SPACE)
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if not name or " " in name or "\t" in name:
            raise error(
                f"{where}: line {n}: {quoted(name)} is no variable name (docker stack "
                "deploy refuses it: none, or white space in it); write NAME=value"
            )
        if eq:
            out[name] = value  # as written: docker trims nothing of it
        elif environ is None or name in environ:
            out[name] = None if environ is None else environ[name]
    return out
