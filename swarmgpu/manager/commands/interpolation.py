"""Variables in a stack file, substituted as `docker stack deploy` substitutes them.

docker/cli reads the file, substitutes ``$`` in every text value of it (never in a key)
from the environment it runs in, casts some values to numbers and booleans, and only then
checks the schema and builds the services (cli/compose/loader/loader.go ``Load``). In
``swarmgpu render stack.yml | docker stack deploy -c - NAME`` both run in one shell, so
render substitutes from its own environment by the same rules and plans with what Swarm
will get. The rules, read from docker/cli (unchanged from 19.03 to 28.x):

- cli/compose/template/template.go ``Substitute``: ``$$`` is a ``$``; ``$NAME`` and
  ``${NAME}`` the variable, "" when unset; after the name, ``:-``/``-`` a default (unset
  or empty / unset), ``:?``/``?`` an error (unset or empty / unset). There is no
  ``${NAME:+alt}`` (docker compose has it): like any other ``$`` it is an invalid template.
  The separators are tried in that order, each where it first occurs, and an unbraced
  ``$NAME-x`` takes everything after the ``-`` up to a ``}`` as its default.
- cli/compose/interpolation/interpolation.go ``recursiveInterpolate``: a value that
  substitution changed is cast where loader/interpolate.go's
  ``interpolateTypeCastMapping`` names its path (``deploy.replicas`` an integer).

Where docker/cli's result is not certain, render refuses instead of guessing: an invalid
``$`` or a ``:?`` error docker drops when a later variable in the same value is
substituted (its ``err`` is overwritten), and a float docker would parse otherwise than
Python (``inf``, hex).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from swarmgpu.core.peertext import quoted
from swarmgpu.core.yamlfile import MAX_TEXT, Lines
from swarmgpu.manager.commands.composefile import PLACED_BY

# Go's (?i) folds a-z with the Kelvin sign and the long s too (unicode.SimpleFold), so a
# name may hold them; Python's IGNORECASE would also take U+0130 and U+0131, Go does not.
_NAME = "[_a-zA-Z\u017f\u212a][_a-zA-Z0-9\u017f\u212a]*"
_SUBST = _NAME + "(?::?[-?][^}]*)?"
_PATTERN = re.compile(
    rf"\$(?:(?P<escaped>\$)|(?P<named>{_SUBST})|{{(?P<braced>{_SUBST})}}|(?P<invalid>))"
)
_PLAIN_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_PLUS = re.compile(rf"\$\{{{_NAME}:?\+")

# loader/interpolate.go interpolateTypeCastMapping ("*": any key, "[]": a list item).
_INT, _FLOAT, _BOOL = "integer", "number", "boolean"
_CASTS: tuple[tuple[str, str], ...] = tuple(
    (f"services.*.{p}", t)
    for p, t in (
        ("configs.[].mode", _INT),
        ("secrets.[].mode", _INT),
        ("healthcheck.retries", _INT),
        ("healthcheck.disable", _BOOL),
        ("deploy.replicas", _INT),
        ("deploy.update_config.parallelism", _INT),
        ("deploy.update_config.max_failure_ratio", _FLOAT),
        ("deploy.rollback_config.parallelism", _INT),
        ("deploy.rollback_config.max_failure_ratio", _FLOAT),
        ("deploy.restart_policy.max_attempts", _INT),
        ("deploy.placement.max_replicas_per_node", _INT),  # 20.10 and later
        ("ports.[].target", _INT),
        ("ports.[].published", _INT),
        ("ulimits.*", _INT),
        ("ulimits.*.hard", _INT),
        ("ulimits.*.soft", _INT),
        ("privileged", _BOOL),
        ("oom_score_adj", _INT),
        ("read_only", _BOOL),
        ("stdin_open", _BOOL),
        ("tty", _BOOL),
        ("volumes.[].read_only", _BOOL),
        ("volumes.[].volume.nocopy", _BOOL),
    )
) + tuple(
    (f"{top}.*.{k}", _BOOL)
    for top, k in (
        ("networks", "external"),
        ("networks", "internal"),
        ("networks", "attachable"),
        ("volumes", "external"),
        ("secrets", "external"),
        ("configs", "external"),
    )
)

Path = tuple[str | int, ...]


class TemplateError(ValueError):
    """A value docker stack deploy refuses, or that render cannot read as docker would."""


class TooLong(TemplateError):
    """The file's values, substituted, past what render holds."""


def substitute(text: str, env: Mapping[str, str], limit: int = MAX_TEXT) -> tuple[str, list[str]]:
    """``text`` as docker/cli substitutes it from ``env``, and a warning for each
    variable it read as "" (unset) or by a name no shell sets. Longer than ``limit``
    characters is an error: a hostile file's 4 million ``$P`` is 4 GB with a 1 KB P."""
    warnings: list[str] = []
    out: list[str] = []
    pos = size = 0
    for m in _PATTERN.finditer(text):
        if size > limit:
            break
        out.append(text[pos : m.start()])
        size += m.start() - pos
        pos = m.end()
        if m["escaped"]:
            out.append("$")
            continue
        sub = m["named"] or m["braced"]
        if not sub:
            plus = _PLUS.match(text, m.start())
            raise TemplateError(
                'docker stack deploy refuses it ("invalid interpolation format"; with a '
                'variable after it in the value docker drops the error and writes "" '
                "here, so render refuses it either way); "
                + (
                    "docker stack deploy has no ${VAR:+alt} (docker compose has): write the value"
                    if plus
                    else f"write $$ for a $ of its own (at {m.start()})"
                )
            )
        out.append(_variable(sub, env, warnings))
        size += len(out[-1])
    if size + len(text) - pos > limit:
        raise TooLong(
            f"the file's values are longer than {MAX_TEXT:,} characters once substituted "
            "(render holds them in memory, as docker would): substitute fewer or shorter "
            "variables"
        )
    out.append(text[pos:])
    return "".join(out), warnings


def _variable(sub: str, env: Mapping[str, str], warnings: list[str]) -> str:
    """One ``${...}`` (braces off), as template.go's DefaultSubstituteFuncs read it:
    softDefault, hardDefault, requiredNonEmpty, required, each where its separator
    first occurs anywhere in ``sub`` (``${A:?must-be-set}`` is A:?must with default
    be-set), then the bare name."""
    for sep in (":-", "-", ":?", "?"):
        name, found, rest = sub.partition(sep)
        if not found:
            continue
        if not _PLAIN_NAME.fullmatch(name):
            warnings.append(
                f"${{{sub}}} is the variable {quoted(name)} to docker (its {quoted(sep)} is "
                "taken first), which no shell sets"
            )
        value = env.get(name)
        if sep == ":-":
            return value or rest
        if sep == "-":
            return rest if value is None else value
        if value is None or (sep == ":?" and value == ""):
            raise TemplateError(
                f"{name} is {'not set' if value is None else 'empty'}, and docker stack "
                f'deploy refuses the file then ("required variable {name} is missing a '
                f'value: {rest}"); set {name} in the environment render and docker run in'
            )
        return value
    value = env.get(sub)
    if value is None:
        warnings.append(f'{sub} is not set: docker stack deploy substitutes "" (so did render)')
        return ""
    return value


def interpolate(
    stack: Mapping[str, Any], env: Mapping[str, str], lines: Lines | None = None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The parsed stack as docker/cli has it once substituted: (stack, errors, warnings),
    each error and warning naming its path (and line, from ``lines``). ``version`` is
    left as written: docker reads it before substituting."""
    errors: list[str] = []
    warnings: list[str] = []
    left = [MAX_TEXT]  # the whole file's text once substituted (substitute's limit)

    def walk(v: Any, path: Path) -> Any:
        if isinstance(v, dict):
            return {k: walk(x, (*path, k)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, (*path, i)) for i, x in enumerate(v)]
        if not isinstance(v, str) or "$" not in v or path == ("version",) or left[0] < 0:
            return v
        at = where(path, lines)
        try:
            new, said = substitute(v, env, left[0])
        except TemplateError as exc:
            errors.append(f"{at}: {v[:200]!r}: {exc}")
            left[0] = -1 if isinstance(exc, TooLong) else left[0]  # said once
            return v
        left[0] -= len(new)
        warnings.extend(f"{at}: {quoted(v)}: {w}" for w in said)
        if new == v:  # docker casts only what substitution changed
            return v
        kind = _cast_kind(path)
        if kind is None:
            return new
        try:
            return _cast(new, kind)
        except ValueError as exc:
            errors.append(f"{at}: {quoted(v)} is {quoted(new)} once substituted: {exc}")
            return v

    return {k: walk(x, (k,)) for k, x in stack.items()}, errors, warnings


def where(path: Path, lines: Lines | None = None) -> str:
    """``services.llm.deploy.placement.constraints[0]``, with the line of the closest key
    the file wrote (``(line 7)``)."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    keys: list[str] = []
    for p in path:
        if isinstance(p, int):
            break
        keys.append(p)
    for n in range(len(keys), 0, -1):
        if lines and tuple(keys[:n]) in lines:
            return f"{text} (line {lines[tuple(keys[:n])]})"
    return text


def _cast_kind(path: Path) -> str | None:
    """The cast interpolation.go applies at ``path``: its path is the keys joined by "."
    and split again (a key with a "." in it matches no pattern, as in docker/cli)."""
    parts = ".".join("[]" if isinstance(p, int) else p for p in path).split(".")
    for pattern, kind in _CASTS:
        pat = pattern.split(".")
        if len(pat) == len(parts) and all(q in ("*", p) for q, p in zip(pat, parts, strict=True)):
            return kind
    return None


_GO_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _cast(text: str, kind: str) -> Any:
    """loader/interpolate.go's toInt (strconv.Atoi), toFloat (ParseFloat: only the decimal
    forms Go and Python read alike) and toBoolean (YAML 1.1's words, any case)."""
    if kind == _INT:
        if not _GO_INT.fullmatch(text) or not -(1 << 63) <= int(text) < 1 << 63:
            raise ValueError(
                'docker stack deploy refuses it ("failed to cast to expected '
                'type": not a whole number)'
            )
        return int(text)
    if kind == _FLOAT:
        if not _DECIMAL.fullmatch(text) or math.isinf(float(text)):
            raise ValueError(
                "not a decimal number render reads as docker does (like 0.25); write one"
            )
        return float(text)
    word = text.lower() if text.isascii() else ""
    if word in ("y", "yes", "true", "on"):
        return True
    if word in ("n", "no", "false", "off"):
        return False
    raise ValueError('docker stack deploy refuses it ("invalid boolean"); write true or false')


def pinned(path: Path, prefix: str, value: Any = None) -> bool:
    """A value render places the service by (composefile.PLACED_BY, a swarmgpu label,
    in a mapping or a list: ``value``, the item, names its key): written as render
    substituted it, so Swarm gets what render planned with even where docker runs with
    another environment. Another label is the tenant's, kept as written in either form
    (a list's ``token=${TOKEN}`` was written in clear)."""
    if len(path) < 3 or path[0] != "services":
        return False
    rest = path[2:]
    if any(rest[: len(p)] == p for p in PLACED_BY):
        return True
    if rest[:2] != ("deploy", "labels") or len(rest) < 3:
        return False
    key = str(value).partition("=")[0] if isinstance(rest[2], int) else str(rest[2])
    return key.startswith(prefix)


_ABSENT = object()


def as_written(
    out: Any, raw: Any, docker: Any, keep: Callable[[Path, Any], bool], path: Path = ()
) -> Any:
    """Render's file ``out`` (its values substituted) as text docker's substitution
    turns back into ``out``: a value render did not change and need not pin (``keep``
    false; given the path and the value) as the input wrote it (``raw``; ``docker``: what
    docker makes of it), so an ``${HF_TOKEN}`` stays a variable; any other with each
    ``$`` written ``$$``."""
    if isinstance(out, dict):
        return {
            k: as_written(v, _at(raw, k), _at(docker, k), keep, (*path, k)) for k, v in out.items()
        }
    if isinstance(out, list):
        return [
            as_written(v, _at(raw, i), _at(docker, i), keep, (*path, i)) for i, v in enumerate(out)
        ]
    if raw is not _ABSENT and type(out) is type(docker) and out == docker and not keep(path, out):
        return raw
    return out.replace("$", "$$") if isinstance(out, str) else out


def _at(v: Any, k: str | int) -> Any:
    if isinstance(v, dict) and isinstance(k, str):
        return v.get(k, _ABSENT)
    if isinstance(v, list) and isinstance(k, int) and k < len(v):
        return v[k]
    return _ABSENT
