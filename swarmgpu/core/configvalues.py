"""The configuration's values, strictly typed and located (core.config builds with them).

A YAML value must already have its key's type: an integer may stand for a float, nothing
else converts (``port: 9401.7``, ``parallel: "4"``, ``docker_host: 42`` are errors, not
guesses). Text from a ``SWARMGPU_*`` variable is parsed for the type. Every error is
then located: the file and line of its key, or the variable that set it.
"""

from __future__ import annotations

import math
import os
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from swarmgpu.core.commalist import comma_list
from swarmgpu.core.forwarded import is_ip
from swarmgpu.core.goscalar import YAML11_BOOLS, out_of_range
from swarmgpu.core.httpguard import HOST_NAME, host_of
from swarmgpu.core.listenhost import idna_form, url_host_problem
from swarmgpu.core.numerichost import ambiguous_number
from swarmgpu.core.peertext import peer_text, quoted
from swarmgpu.core.strictnum import NumberText, parse_float, parse_int
from swarmgpu.core.yamlfile import Lines, plain_is_text


class FromEnv(str):
    """A value from a SWARMGPU_* variable: text, parsed for the key's type (a YAML value
    already has its type, and must have the right one)."""


# The keys the environment overrides (``SWARMGPU_<SECTION>_<KEY>``), each to its path.
ENV_OVERRIDES: Mapping[str, tuple[str, ...]] = {
    "SWARMGPU_DRY_RUN": ("dry_run",),
    "SWARMGPU_DOCKER_HOST": ("docker_host",),
    "SWARMGPU_STATE_DIR": ("state_dir",),
    "SWARMGPU_AGENTS_PORT": ("agents", "port"),
    "SWARMGPU_AGENTS_TIMEOUT_S": ("agents", "timeout_s"),
    "SWARMGPU_AGENTS_IDENTITY": ("agents", "identity"),
    "SWARMGPU_AGENTS_URL_TEMPLATE": ("agents", "url_template"),
    "SWARMGPU_AGENTS_TOKEN_FILE": ("agents", "token_file"),
    "SWARMGPU_SYNC_INTERVAL_S": ("sync", "interval_s"),
    "SWARMGPU_SYNC_PREFIX": ("sync", "prefix"),
    "SWARMGPU_HTTP_LISTEN": ("http", "listen"),
    "SWARMGPU_HTTP_AUTH": ("http", "auth"),
    "SWARMGPU_HTTP_TOKEN_FILE": ("http", "token_file"),
    "SWARMGPU_HTTP_SECURE_COOKIE": ("http", "secure_cookie"),
    "SWARMGPU_HTTP_TRUSTED_PROXIES": ("http", "trusted_proxies"),
    "SWARMGPU_LOG_LEVEL": ("log", "level"),
    "SWARMGPU_LOG_FORMAT": ("log", "format"),
}


def apply_env(data: dict[str, Any], env: Mapping[str, str],
              overrides: Mapping[str, tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """Each variable of ``overrides`` that ``env`` sets, put into ``data`` (the file's
    keys) at its key's path as ``FromEnv`` text; the paths set, to their variables."""
    from_env: dict[tuple[str, ...], str] = {}
    for var, keys in overrides.items():
        if var not in env:
            continue
        d = data
        for k in keys[:-1]:
            if d.get(k) is None:  # "agents:" with its keys commented out: an empty section
                d[k] = {}
            d = d[k]
            if not isinstance(d, dict):
                break  # "agents: 5": the build says so at its line, with the other errors
        else:
            d[keys[-1]] = FromEnv(env[var])
            from_env[keys] = var
    return from_env


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, int):
        return "a whole number"
    if isinstance(v, float) and not math.isfinite(v):  # YAML's .inf, .nan
        return "not a number" if math.isnan(v) else "infinity"
    if isinstance(v, float):
        # (from 1e16 on a whole float is shown 1e+16: no fraction to be seen there)
        whole = v.is_integer() and "e" in repr(v)
        if whole and abs(v) >= 2**63:  # 99999999999999999999999999, written without an e
            return "a number past a 64-bit integer, read as a float"
        return "a number in exponent form" if whole else "a number with a fraction"
    if isinstance(v, str):
        return "a string"
    return "nothing" if v is None else f"a {'list' if isinstance(v, list) else 'mapping'}" \
        if isinstance(v, list | dict) else type(v).__name__


_SURROGATE = re.compile("[\ud800-\udfff]")


def coerce(value: Any, typ: Any, where: str) -> Any:
    """``value`` as ``typ``, strictly: a YAML value must already be of the type (an
    integer may stand for a float, nothing else converts); text from the environment
    is parsed. ConfigError naming the key, what was expected and what was given."""
    env = isinstance(value, FromEnv)
    if env and not value.strip():
        # `SWARMGPU_HTTP_TOKEN_FILE=`, a placeholder left empty: it turned the file's
        # token off unsaid. Empty is no value of any key; the file says "" itself.
        raise ValueError(f"{where}: the variable is empty; remove it (the config file's "
                         "value, or the default, then stands), or set the key in the file")
    if isinstance(value, str) and "\0" in value:  # no path, URL or name has one
        raise ValueError(f"{where}: {peer_text(repr(value), 60)} has a NUL byte (\\0), "
                         "which no path, URL or name can hold; remove it")
    if isinstance(value, str) and (lone := _SURROGATE.search(value)) is not None:
        # YAML's "\ud800": UTF-8 cannot encode it, so no path, name or label holds it
        # (config check said ok, and `run` raised UnicodeEncodeError making state_dir)
        raise ValueError(f"{where}: has a lone surrogate (\\u{ord(lone.group()):04x}), "
                         "which no path, URL or name can hold; remove it")
    # Cut: 5,000 digits are text to YAML (past a double), not to be echoed back whole.
    got = f"got {peer_text(repr(value), 60)} ({_kind(value)})" if not env \
        else f"got {peer_text(repr(str(value)), 60)}"
    if typ is bool:
        if isinstance(value, bool):
            return value
        if not env and isinstance(value, str) and value in YAML11_BOOLS:
            return YAML11_BOOLS[value]  # dry_run: yes, as go-yaml v3 fills a bool field
        if env and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ValueError(f"{where}: expected true or false, {got}")
    if typ in (int, float):
        if typ is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if typ is float and isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value):
            return float(value)
        kind = "a whole number" if typ is int else "a number"
        if env:  # one form (core.strictnum): int() read ' +1_000 ', '\u0665', float() 'nan'
            try:
                return parse_int(value) if typ is int else parse_float(value)
            except NumberText as e:
                if out_of_range(value.strip()) is None:
                    raise ValueError(f"{where}: expected {kind}, {got}"
                                     f"{': ' if e.why else '; '}{e}") from None
        # 1e400 is a number to its writer, text to YAML (and to Go's reader) only for
        # its size: said as such, not as "a string".
        if isinstance(value, str) and (past := out_of_range(value.strip())) is not None:
            raise ValueError(f"{where}: expected {kind}, got {peer_text(value.strip(), 40)}: "
                             f"a number out of range ({past}); write one in range (defaults: "
                             "swarmgpu config show-defaults)")
        whole = isinstance(value, float) and value.is_integer() and abs(value) < 2**63
        raise ValueError(f"{where}: expected {kind}, {got}"
                         + (_number_fix(value, where) if isinstance(value, str) and not env
                            else f"; write {int(value)}" if whole and not env else ""))
    optional = typ == (str | None)
    if typ is str or optional:
        if value is None and optional:
            return None
        if isinstance(value, str):
            return str(value)
        hint = f"; quote it if it is meant as text: '{value}'" \
            if isinstance(value, int | float | bool) else ""
        raise ValueError(f"{where}: expected a string, {got}{hint}")
    return value


def at_most(where: str, value: int, most: int, what: str, add: Callable[[str], None]) -> None:
    """A whole-number key's upper bound: more than any cluster needs (100000000000000000000
    passed, and a count of threads or moves that large is a typo, not a wish)."""
    if value > most:
        add(f"{where}: {value} is out of range; at most {most} ({what})")


def not_text(value: Any, where: str) -> str:
    """The error for a name YAML did not read as text (``1:``, ``007:``, ``true:``, ``~:``).
    Its fix is the file's own spelling in quotes, not the value read: quoted as read,
    ``007`` would become the name "7", ``0x1F`` "31", ``true`` "True"."""
    return (f"{where}: expected a string, got {quoted(value)} ({_kind(value)}); quote it as the "
            "file writes it if it is meant as text (YAML reads 007 as 7, true as True)")


def template_problem(template: str, names: tuple[str, ...]) -> str | None:
    """Why ``template`` cannot be filled with ``names`` by ``str.format`` into an
    http:// or https:// URL, or None. Each URL is built so, per node and cycle: a stray
    brace or an unknown name raised there, in every cycle, and another scheme failed
    every node's fetch (``boundedhttp`` speaks HTTP(S) alone), instead of once at
    ``config check``."""
    use = ", ".join("{" + n + "}" for n in names)
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return (f"{quoted(template)} is not a template (a brace without its pair); use {use}, "
                "and {{ or }} for a brace itself")
    for _, name, spec, conv in parts:
        if name is not None and (name not in names or spec or conv):
            shown = name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "")
            return (f"{{{shown}}} is not a placeholder; use {use} (and {{{{ or }}}} for a "
                    "brace itself)")
    scheme, sep, _ = template.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return (f"{quoted(template)} is no http:// or https:// URL (agents and exporters "
                "are read over HTTP(S) only); e.g. 'https://{addr}:9401'")
    return url_host_problem(template)


# What Swarm takes as a service's name (swarmkit controlapi: isValidDNSName, 63 at most).
_SERVICE_NAME = re.compile(r"[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*", re.ASCII)


def service_name_problem(where: str, name: str, fix: str) -> str | None:
    """Why ``name`` can be no Swarm service's name (so a key naming one could never
    match), or None; "" is allowed (the key is off). ``fix``: what to write instead."""
    if not name or (len(name) <= 63 and _SERVICE_NAME.fullmatch(name)):
        return None
    return (f"{where}: {quoted(peer_text(name, 80))} is no Swarm service name (letters and "
            f"digits, '-' or '_' between them, at most 63); {fix}")


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*(ms|s|m|h|d)", re.ASCII)
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _number_fix(text: str, where: str) -> str:
    """The fix for a number the file gave as text: its quotes, or a duration's unit on a
    key in seconds (a Kubernetes-style 10m). Text written plain that float() reads (inf,
    1e999: past a double) is no number any key takes: no fix."""
    try:
        num = float(text)
    except ValueError:
        d = _DURATION.fullmatch(text.strip())
        if d is None or not where.endswith("_s"):
            return ""
        secs = float(d[1]) * _UNIT_S[d[2]]
        return f"; the key is in seconds (its name ends in _s): write {secs:g}"
    return "; remove the quotes" if math.isfinite(num) and not plain_is_text(text) else ""


_KEY_PATH = re.compile(r"[A-Za-z0-9_.-]+")


def locate_in(message: str, path: str | os.PathLike[str] | None, lines: Lines,
            from_env: Mapping[tuple[str, ...], str]) -> str:
    """The message prefixed with where its key was set: the file and the line of the
    key (or of the closest enclosing key the file sets), or the environment variable."""
    m = _KEY_PATH.match(message)
    keys = tuple(m.group().rstrip(".").split(".")) if m else ()
    for n in range(len(keys), 0, -1):
        if keys[:n] in from_env:
            return f"{from_env[keys[:n]]}: {message}"
        if keys[:n] in lines:
            return f"{path}:{lines[keys[:n]]}: {message}"
    return message if path is None else f"{path}: {message}"


def _idna_fix(name: str) -> str:
    """``; write xn--...``: the form a browser sends as Host for a Unicode ``name``
    (IDNA), which the name as written never matches; "" for none."""
    ascii_name = idna_form(name)
    return f"; a browser sends a Unicode name in its IDNA form: write {ascii_name}" \
        if ascii_name else ""


def host_names_problem(where: str, text: str) -> str | None:
    """Why an entry of ``text`` (``http.allowed_hosts``, the agent's ``--allowed-hosts``:
    comma-separated, a port allowed) can match no request's Host, or None: a URL pasted
    or a wildcard was taken, and the name meant got 421."""
    for entry in comma_list(text):
        name = host_of(entry)
        # the entry whole too: host_of reads an unbracketed '::1' as ':' and its port 1
        if is_ip(entry) or is_ip(name):
            continue
        if len(name) > 253 or not HOST_NAME.fullmatch(name):
            return (f"{where}: {quoted(peer_text(entry, 80))} is no host name a Host header "
                    "carries (letters, digits, '-' and '_' in dot-separated labels, an IP "
                    "address; a port may follow): no scheme, path or wildcard, e.g. "
                    f"map.example.com{_idna_fix(name)}")
        if ambiguous_number(name):
            return (f"{where}: {quoted(peer_text(entry, 80))} ends in a number but is no "
                    "dotted-decimal IPv4 address: a browser reads 010.0.0.1 as 8.0.0.1 "
                    "and 127.1 as 127.0.0.1, and sends that as Host (which, an IP "
                    "address, is served anyway); write a name, or the address as "
                    "10.0.0.1")
    return None
