"""Several stack files made one, as `docker stack deploy -c a.yml -c b.yml` makes them.

docker/cli (cli/compose/loader/loader.go ``Load``) checks that every file has the same
``version`` (schema.Version: none, "" and "3" are 3.13), substitutes each file on its
own, then merges them in order (loader/merge.go ``merge``): a later file over the
earlier ones. The rules, read from merge.go and the mergo it uses (WithOverride,
WithAppendSlice, merge.go's transformers):

- top level: ``services`` by name; ``networks``, ``volumes``, ``secrets``, ``configs`` by
  name, a later entry replacing an earlier one whole; ``x-`` keys: the first file's.
- a service in both: a value (``image``, ``command``, ``deploy.mode``...) is replaced;
  ``environment``, ``labels``, ``deploy.labels``, ``sysctls``, ``ulimits``,
  ``logging.options`` merged by key; ``ports`` by published port, ``volumes`` by target,
  ``secrets`` and ``configs`` by source (sorted by it, also when only the first file
  lists them); other lists (``cap_add``, ``dns``, ``extra_hosts``,
  ``deploy.placement.constraints``...) appended; ``deploy`` and its parts merged key
  by key.

Where docker's result is not what the files say, or render has no rule, render refuses,
naming the field and the files: an empty or false value that mergo skips (the earlier
one stays), two list entries docker folds into one, later logging options docker
drops (the earlier logging has none), a field render knows no rule for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmgpu.core.peertext import quoted


class MergeError(ValueError):
    """The files cannot be merged as docker would; ``errors``: each names field and files."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass
class StackFile:
    """One file, parsed: as written, and as docker substitutes it (None: the same)."""

    name: str
    written: dict[str, Any]
    substituted: dict[str, Any] | None = None


@dataclass
class Merged:
    written: dict[str, Any]  # what render writes back where it changed nothing
    substituted: dict[str, Any]  # what docker deploys


@dataclass(frozen=True)
class _Leaf:
    """A scalar as docker substitutes it (what the rules read) and as written."""

    sub: Any
    raw: Any


def _zip(raw: Any, sub: Any) -> Any:
    if isinstance(sub, dict) and isinstance(raw, dict):
        return {k: _zip(raw.get(k), v) for k, v in sub.items()}
    if isinstance(sub, list) and isinstance(raw, list) and len(raw) == len(sub):
        return [_zip(r, s) for r, s in zip(raw, sub, strict=True)]
    return _Leaf(sub, raw)


def _unzip(v: Any, raw: bool) -> Any:
    if isinstance(v, dict):
        return {k: _unzip(x, raw) for k, x in v.items()}
    if isinstance(v, list):
        return [_unzip(x, raw) for x in v]
    if isinstance(v, _Leaf):
        return v.raw if raw else v.sub
    return v


def _sub(v: Any) -> Any:
    return _unzip(v, False)


def _new(sub: Any) -> _Leaf:
    """A value the merge makes (a list item made a mapping's) from a substituted one:
    written with each ``$`` as ``$$``, so docker reads back what was merged."""
    return _Leaf(sub, sub.replace("$", "$$") if isinstance(sub, str) else sub)


@dataclass
class _Ctx:
    before: str  # the files merged so far
    name: str  # the file merged over them
    errors: list[str] = field(default_factory=list)
    environ: Mapping[str, str] | None = None

    def refuse(self, at: str, why: str, fix: str) -> None:
        self.errors.append(f"{at}: in {self.before} and {self.name}: {why}; {fix}")


def merge_stacks(files: Sequence[StackFile], environ: Mapping[str, str] | None = None) -> Merged:
    """The files merged in order. ``environ``: where docker reads a bare ``environment``
    name from (None: unknown, and such a name over an earlier value is refused)."""
    errors = _version_errors(files)
    first = files[0]
    tree = _zip(
        first.written, first.substituted if first.substituted is not None else first.written
    )
    for i, f in enumerate(files[1:], 1):
        ctx = _Ctx(" + ".join(x.name for x in files[:i]), f.name, errors, environ)
        tree = _merge_top(
            tree, _zip(f.written, f.substituted if f.substituted is not None else f.written), ctx
        )
    if errors:
        raise MergeError(errors)
    return Merged(_unzip(tree, True), _unzip(tree, False))


def _version(stack: Mapping[str, Any]) -> str:
    """docker/cli's schema.Version: its text (Go's %v), none, "" and "3" being 3.13."""
    v = stack.get("version")
    text = "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
    return "3.13" if text in ("", "3") else text


def _version_errors(files: Sequence[StackFile]) -> list[str]:
    want = _version(files[0].written)
    return [
        f"version: {files[0].name} is {quoted(want)} to docker stack deploy, {f.name} "
        f"{quoted(_version(f.written))} (a file with no version is 3.13): it refuses the "
        'two ("version mismatched between two composefiles"); write one version in '
        "every file"
        for f in files[1:]
        if _version(f.written) != want
    ]


_TOP_BY_NAME = ("networks", "volumes", "secrets", "configs")


def _merge_top(base: dict[str, Any], over: dict[str, Any], ctx: _Ctx) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if k == "version" or k.startswith("x-"):
            continue  # the version is checked; merge.go merges no top-level extension
        if k == "services" and isinstance(v, dict) and isinstance(base.get(k), dict):
            out[k] = _merge_services(base[k], v, ctx)
        elif (
            k in _TOP_BY_NAME
            and isinstance(v, dict | _Leaf)
            and isinstance(base.get(k), dict | _Leaf)
        ):
            # by name, an entry replacing the earlier one whole (mergo.Map, WithOverride)
            out[k] = {**_dict_or_empty(base[k]), **_dict_or_empty(v)}
        elif k not in base or _sub(base[k]) is None:
            out[k] = v
        else:
            ctx.refuse(
                k,
                "render has no rule for how docker stack deploy merges this top-level key",
                "write it in one file only",
            )
    return out


def _dict_or_empty(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _merge_services(base: dict[str, Any], over: dict[str, Any], ctx: _Ctx) -> dict[str, Any]:
    out = dict(base)
    for name, svc in over.items():
        at = f"services.{name}"
        if name not in base:
            out[name] = svc  # a new service, as it is
        elif isinstance(svc, dict) and isinstance(base[name], dict):
            out[name] = _merge_service(base[name], svc, at, ctx)
        else:
            ctx.refuse(at, "a service is a mapping", "write it as one in both files")
    return out


# --- a service ---------------------------------------------------------------------

Rule = Callable[[Any, Any, str, "_Ctx"], Any]


def _zero(v: Any, at: str) -> bool:
    """mergo's isEmptyValue (pointers dereferenced): "", false, 0, an empty list or
    mapping, none; a duration or byte count that reads as 0 ("0s", "0")."""
    s = _sub(v)
    if s is None or s is False or (isinstance(s, int | float) and s == 0) or s in ("", [], {}):
        return True
    last = at.rsplit(".", 1)[-1]
    return isinstance(s, str) and last in _ZERO_TEXT and bool(_ZERO_RE.fullmatch(s.strip()))


_ZERO_TEXT = {
    "delay",
    "monitor",
    "window",
    "timeout",
    "interval",
    "start_period",
    "start_interval",
    "stop_grace_period",
    "memory",
    "pids",
}
_ZERO_RE = re.compile(r"[+-]?(?:0+\.?0*[a-zµ]*)+", re.IGNORECASE)


def _replace(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    """A value: the later one, unless it is empty (mergo keeps the earlier then)."""
    if not _zero(over, at):
        return over
    if not _zero(base, at) and _sub(base) != _sub(over):
        ctx.refuse(
            at,
            f"docker stack deploy keeps the earlier {quoted(_sub(base))} where the "
            f"later file gives an empty {quoted(_sub(over))} (mergo skips empty values)",
            "leave the key out of the later file, or give the value you want",
        )
    return base


def _always(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    """A *uint64 (replicas, parallelism...): merge.go's mergeUint64 takes a 0 too."""
    return base if _sub(over) is None else over


def _as_list(v: Any) -> list[Any]:
    """A StringList: one string is a list of it."""
    if isinstance(v, list):
        return v
    return [] if _sub(v) is None else [v]


def _append(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    """A list: the later one's items after the earlier one's (WithAppendSlice)."""
    if isinstance(base, dict) or isinstance(over, dict):
        ctx.refuse(at, "render merges this key's list form only", "write it as a list")
        return base
    return [*_as_list(base), *_as_list(over)]


def _no_rule(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    ctx.refuse(
        at, "render has no rule for how docker stack deploy merges it", "set it in one file only"
    )
    return base


def _kv(v: Any, env: bool) -> tuple[dict[str, tuple[Any, Any]], bool] | None:
    """A mapping or a list of ``k[=v]``: each key's (entry, value), and whether it was a
    list; None: neither. A list's ``k`` with no ``=`` is unset (environment) or ""."""
    if isinstance(v, dict):
        return {k: (x, x) for k, x in v.items()}, False
    if isinstance(v, list):
        out: dict[str, tuple[Any, Any]] = {}
        for item in v:
            k, eq, val = str(_sub(item)).partition("=")
            value = val if eq else None if env else ""
            # an item docker read as written (nothing substituted): its value as written
            kept = isinstance(item, _Leaf) and item.raw == item.sub
            out[k] = (item, _Leaf(value, value) if kept else _new(value))
        return out, True
    return ({}, False) if _sub(v) is None else None


def _by_key(env: bool) -> Rule:
    """A mapping merged by key: ``labels`` and the like (the later value, whatever it
    is), ``environment`` (a MappingWithEquals: mergo keeps an earlier value where the
    later is empty or unset). Two lists stay a list; a list and a mapping become one."""

    def rule(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
        b, o = _kv(base, env), _kv(over, env)
        if b is None or o is None:
            ctx.refuse(at, "expected a mapping or a list of KEY=VALUE", "write one")
            return base
        (bm, blist), (om, olist) = b, o
        lists = blist and olist
        out = {k: iv[0] if lists else iv[1] for k, iv in bm.items()}
        for k, (item, value) in om.items():
            if env and k in bm and _keeps_earlier(bm[k][1], value, f"{at}.{k}", ctx):
                continue
            out[k] = item if lists else value
        return list(out.values()) if lists else out

    return rule


def _keeps_earlier(base: Any, over: Any, at: str, ctx: _Ctx) -> bool:
    """An environment value mergo does not put over an earlier one: "" or a bare name
    docker's environment does not set (it reads one in at load). Refused: no reader
    of the later file expects the earlier value."""
    key = at.rsplit(".", 1)[-1]
    blank = [_env_blank(v, key, ctx.environ) for v in (base, over)]
    if blank[1] is False or blank[0] is True:
        return False
    ctx.refuse(
        at,
        "docker stack deploy keeps the earlier value where the later file's is empty or "
        "a bare name its environment does not set (with --skip-interpolation render "
        "cannot know which)",
        "leave the name out of the later file, or give the value you want",
    )
    return True


def _env_blank(value: Any, key: str, environ: Mapping[str, str] | None) -> bool | None:
    """Whether docker reads the value as empty; None: it reads it from an environment
    render does not know."""
    v = _sub(value)
    if v is None:
        if environ is None:
            return None
        v = environ.get(key)
    return v is None or v == ""


def _port_key(item: Any, at: str) -> int | None:
    """The published port (0: none), as merge.go's toServicePortConfigsMap keys ports."""
    v = _sub(item)
    if isinstance(v, dict):
        p = v.get("published")
        p = int(p) if isinstance(p, str) and p.isascii() and p.isdigit() else p
        return (
            int(p) if isinstance(p, int) and not isinstance(p, bool) else 0 if p is None else None
        )
    text = str(v).rsplit("/", 1)[0]
    parts = text.split(":")
    if "-" in text or not all(p.isdigit() for p in parts[-2:]):
        return None  # a range or not a port: render refuses it below
    return int(parts[-2]) if len(parts) >= 2 else 0


def _target_key(item: Any, at: str) -> str | None:
    v = _sub(item)
    if isinstance(v, dict):
        return str(v.get("target", ""))
    parts = str(v).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _source_key(item: Any, at: str) -> str | None:
    v = _sub(item)
    return str(v.get("source", "")) if isinstance(v, dict) else str(v)


_KEYED: dict[str, tuple[Callable[[Any, str], Any], str]] = {
    "ports": (_port_key, "published port"),
    "volumes": (_target_key, "target"),
    "secrets": (_source_key, "source"),
    "configs": (_source_key, "source"),
}


def _keyed(key: str, base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    """merge.go's mergeSlice: both lists keyed, the later entry replacing the earlier
    whole, sorted by the key; it runs whenever the earlier file lists any."""
    fn, what = _KEYED[key]
    out: dict[Any, Any] = {}
    for items, name in ((base, ctx.before), (over, ctx.name)):
        if not isinstance(items, list):
            ctx.refuse(at, "expected a list", "write one")
            return base
        seen: set[Any] = set()
        for item in items:
            k = fn(item, at)
            if k is None:
                ctx.refuse(
                    at,
                    f"{quoted(_sub(item))}: render cannot read its {what} as docker does "
                    "(a range?)",
                    "write each port in the long syntax",
                )
                return base
            if k in seen:
                ctx.refuse(
                    at,
                    f"{name} lists two entries of {what} {quoted(k)}: docker stack "
                    "deploy keys them by it when it merges and keeps only the last",
                    f"give each its own {what}, or list them in one file only",
                )
                return base
            seen.add(k)
            out[k] = item
    return [out[k] for k in sorted(out)]


def _struct(rules: Mapping[str, Rule]) -> Rule:
    """A mapping docker reads as a struct: merged key by key, by each key's rule."""

    def rule(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
        if _sub(over) is None:
            return base
        if _sub(base) is None:
            return over
        if not isinstance(base, dict) or not isinstance(over, dict):
            ctx.refuse(at, "expected a mapping", "write one")
            return base
        out = dict(base)
        for k, v in over.items():
            if k not in base or _sub(base[k]) is None:
                out[k] = v
            else:
                out[k] = rules.get(k, _no_rule)(base[k], v, f"{at}.{k}", ctx)
        return out

    return rule


def _logging(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    """merge.go's mergeLoggingConfig: another driver replaces it whole; the same (or
    none) merges the options by key."""
    b, o = _sub(base), _sub(over)
    if (
        isinstance(b, dict)
        and isinstance(o, dict)
        and b.get("driver")
        and o.get("driver")
        and b["driver"] != o["driver"]
    ):
        return over
    if (
        isinstance(b, dict)
        and isinstance(o, dict)
        and b.get("options") is None
        and isinstance(o.get("options"), dict)
        and o["options"]
    ):
        # It merges into a copy of the earlier map: with none (nil) the copy is a new
        # map, and the service keeps no options.
        ctx.refuse(
            f"{at}.options",
            "docker stack deploy drops the later file's logging options where the "
            "earlier file's logging gives none",
            "write options: {} (or the options) under the earlier file's logging, or "
            "set logging in one file only",
        )
        return base
    return _struct({"driver": _replace, "options": _by_key(False)})(base, over, at, ctx)


def _per_key(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    """``ulimits``: the later entry of a name replaces the earlier (mergeUlimitsConfig)."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return _no_rule(base, over, at, ctx)
    return {**base, **{k: v for k, v in over.items() if _sub(v) is not None}}


def _networks(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    """A service's networks by name (mergeServiceNetworkConfig): a later entry's aliases
    replace the earlier's, its addresses too where it gives them."""
    if isinstance(base, list) and isinstance(over, list):
        names = {_sub(n) for n in base}
        return [*base, *(n for n in over if _sub(n) not in names)]
    b = {str(_sub(n)): None for n in base} if isinstance(base, list) else base
    o = {str(_sub(n)): None for n in over} if isinstance(over, list) else over
    if not isinstance(b, dict) or not isinstance(o, dict):
        return _no_rule(base, over, at, ctx)
    out = dict(b)
    for k, v in o.items():
        cur = out.get(k)
        if not isinstance(cur, dict) or not isinstance(v, dict):
            out[k] = v if _sub(cur) is None else cur
            continue
        if "driver_opts" in v and _sub(v["driver_opts"]) != _sub(cur.get("driver_opts")):
            ctx.refuse(
                f"{at}.{k}.driver_opts",
                "docker stack deploy keeps the earlier file's driver_opts",
                "set them in one file only",
            )
        new = {x: y for x, y in cur.items() if x != "aliases"}
        if "aliases" in v:
            new["aliases"] = v["aliases"]
        new.update({x: v[x] for x in ("ipv4_address", "ipv6_address") if _sub(v.get(x))})
        out[k] = new
    return out


_UPDATE = _struct(
    {
        "parallelism": _always,
        "delay": _replace,
        "failure_action": _replace,
        "monitor": _replace,
        "max_failure_ratio": _replace,
        "order": _replace,
    }
)
_DEPLOY = _struct(
    {
        "mode": _replace,
        "replicas": _always,
        "labels": _by_key(False),
        "endpoint_mode": _replace,
        "update_config": _UPDATE,
        "rollback_config": _UPDATE,
        "restart_policy": _struct(
            {"condition": _replace, "delay": _replace, "max_attempts": _always, "window": _replace}
        ),
        "resources": _struct(
            {
                "limits": _struct({"cpus": _replace, "memory": _replace, "pids": _replace}),
                "reservations": _struct(
                    {"cpus": _replace, "memory": _replace, "generic_resources": _append}
                ),
            }
        ),
        "placement": _struct(
            {"constraints": _append, "preferences": _append, "max_replicas_per_node": _replace}
        ),
    }
)


def _healthcheck_test(base: Any, over: Any, at: str, ctx: _Ctx) -> Any:
    ctx.refuse(
        at,
        "docker stack deploy appends the two tests into one command",
        "give the test in one file only",
    )
    return base


_HEALTHCHECK = _struct(
    {
        "test": _healthcheck_test,
        "timeout": _replace,
        "interval": _replace,
        "retries": _always,
        "start_period": _replace,
        "start_interval": _replace,
        "disable": _replace,
    }
)

_SERVICE: dict[str, Rule] = {
    **dict.fromkeys(
        (
            "image",
            "command",
            "entrypoint",
            "hostname",
            "user",
            "working_dir",
            "stop_signal",
            "stop_grace_period",
            "isolation",
            "init",
            "read_only",
            "tty",
            "stdin_open",
            "oom_score_adj",
            "container_name",
            "domainname",
        ),
        _replace,
    ),
    **dict.fromkeys(
        (
            "cap_add",
            "cap_drop",
            "dns",
            "dns_search",
            "extra_hosts",
            "tmpfs",
            "security_opt",
            "depends_on",
            "expose",
        ),
        _append,
    ),
    "environment": _by_key(True),
    "labels": _by_key(False),
    "sysctls": _by_key(False),
    "ulimits": _per_key,
    "logging": _logging,
    "networks": _networks,
    "deploy": _DEPLOY,
    "healthcheck": _HEALTHCHECK,
}


def _merge_service(
    base: dict[str, Any], over: dict[str, Any], at: str, ctx: _Ctx
) -> dict[str, Any]:
    out = dict(base)
    for k in _KEYED:  # the transformer runs on the earlier list, the later one or none
        # ``[]`` too: a list to docker's loader (not nil), so the later list is keyed
        if isinstance(base.get(k), list):
            out[k] = _keyed(k, base[k], over.get(k) or [], f"{at}.{k}", ctx)
    for k, v in over.items():
        if k in _KEYED:
            if not isinstance(base.get(k), list):
                out[k] = v
        elif (k == "env_file" and ("env_file" in base or "environment" in base)) or (
            k == "environment" and "env_file" in base
        ):
            ctx.refuse(
                f"{at}.{k}",
                "docker reads each file's env_file into its "
                "environment before it merges, which one rendered file cannot say",
                "write the variables under environment",
            )
        elif k not in base or _sub(base[k]) is None:
            out[k] = v
        else:
            out[k] = _SERVICE.get(k, _no_rule)(base[k], v, f"{at}.{k}", ctx)
    return out
