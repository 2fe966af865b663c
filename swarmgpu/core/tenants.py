"""The operator's tenants (config ``tenants:``): who a service belongs to, and the most it
may ask for. Parsed and checked here (pure); applied to requests in
``swarmgpu.manager.services.tenants``.

A service's labels are its stack's request; a tenant's limits are the operator's word.
Each tenant matches services by stack (``com.docker.stack.namespace``, globs) and/or by
service name (globs); with both, a service must match both. The first tenant in file
order that matches takes the service; ``default`` takes every service no other tenant
matches (docs/requests.md, "Tenants"). A tenant an earlier one takes every service of is
refused (``_shadowed``): its limits would apply to none.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from swarmgpu.core.configvalues import not_text
from swarmgpu.core.peertext import quoted

DEFAULT_TENANT = "default"
STACK_LABEL = "com.docker.stack.namespace"  # set by `docker stack deploy` from the stack name
KEYS = ("stacks", "services", "max_priority", "may_opt_out", "queues", "guaranteed", "max",
        "preemptions_per_hour")
MAX_PRIORITY = 999_999  # the largest priority a label can give (requests._PRIO_RE)
MAX_QUOTA_GPUS = 1_000_000  # a queue's guarantee or max (config.MAX_GPUS), a tenant's own too
# A tenant or queue name; requests.py checks a swarmgpu.queue label with it.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}", re.ASCII)
# Names Swarm allows for stacks and services, with fnmatch's * ? [...] and [!...].
_GLOB_RE = re.compile(r"(?:[A-Za-z0-9_.\-*?]|\[!?[A-Za-z0-9_.\-]+\])+", re.ASCII)
MAX_GLOB = 128


@dataclass(frozen=True)
class TenantSpec:
    """One tenant as the config gives it (``tenants.<name>``)."""

    name: str
    stacks: tuple[str, ...] = ()  # globs over the stack name; () any stack (or none)
    services: tuple[str, ...] = ()  # globs over the service name; () any service
    max_priority: int = 0  # the highest swarmgpu.priority its services get
    may_opt_out: bool = False  # swarmgpu.preemptible: false is honoured
    queues: tuple[str, ...] = ()  # the queues it owns; the first is its services' default
    preemptions_per_hour: int = 0  # victims its services may have stopped per hour

    @property
    def default_queue(self) -> str:
        return self.queues[0] if self.queues else ""


def default_budget(max_per_hour: int) -> int:
    """A tenant's preemption budget when the config gives none: half the cluster's
    (rounded up), so that no one tenant spends the whole of it."""
    return -(-max_per_hour // 2)


def _globs(value: Any, where: str, add: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not value:
        add(f"{where}: expected a non-empty list of names or globs, e.g. [\"team-a*\"], "
            f"got {quoted(value)}")
        return ()
    out = []
    for g in value:
        if not isinstance(g, str) or len(g) > MAX_GLOB or not _GLOB_RE.fullmatch(g):
            add(f"{where}: {quoted(g)} is not a name or glob (letters, digits, . _ - and the "
                "glob characters * ? [...]; at most 128 characters)")
            continue
        # A set no name character is in (a range written backwards, [z-a]) matches no
        # name: the tenant took no service, silently.
        if empty := next((t for t in _tokens(g) if t[0] == "[" and not _chars(t)), None):
            add(f"{where}: {quoted(g)} has a set, {empty}, that no character of a name is "
                "in (a range is low-high, e.g. [a-z]): it matches no name")
            continue
        out.append(g)
    return tuple(out)


def _number(value: Any, where: str, add: Any, *, whole: bool) -> float | None:
    """A number >= 0 (``whole``: an integer up to ``MAX_PRIORITY``; else GPUs, up to
    ``MAX_QUOTA_GPUS`` as a queue's), else None with the error given to ``add``."""
    ok = isinstance(value, int) if whole else isinstance(value, int | float)
    most = MAX_PRIORITY if whole else MAX_QUOTA_GPUS
    # ``not 0 <= value <= most``: NaN compares false both ways and was taken, then
    # round(NaN) raised out of `config check` and the daemon's start, located nowhere.
    if isinstance(value, bool) or not ok or not 0 <= value <= most:
        kind = "a whole number" if whole else "a number of GPUs"
        add(f"{where}: expected {kind} from 0 to {most}, got {quoted(value)}")
        return None
    return float(value)


def _priority(value: Any, where: str, classes: Mapping[str, int], add: Any) -> int:
    # ASCII only: str.lower() makes the Kelvin sign a k, a class no one wrote.
    if isinstance(value, str) and value.isascii() and value.lower() in classes:
        value = classes[value.lower()]
    got = _number(value, where, add, whole=True)
    if got is None and isinstance(value, str):
        add(f"{where}: a priority class names one of {', '.join(sorted(classes)) or 'none'} "
            "(preemption.priority_classes)")
    return int(got) if got is not None else 0


def parse_tenants(raw: Any, queues: Any, classes: Mapping[str, int],
                  max_per_hour: int) -> tuple[list[TenantSpec], dict[str, tuple[int, int | None]],
                                              list[str]]:
    """``tenants:`` -> (the tenants in matching order, ``default`` last; the queues the
    tenants define themselves, name -> (guaranteed, max) in thousandths of a GPU; every
    problem found, each naming its key). No section (or an empty one): no tenants."""
    errors: list[str] = []
    add = errors.append
    if raw is None or raw == {}:
        return [], {}, []
    if not isinstance(raw, Mapping):
        return [], {}, [f"tenants: expected a mapping of tenant -> {{stacks, max_priority, "
                        f"may_opt_out, ...}}, got {quoted(raw)}"]
    # A queue name that is not text is the queues check's error, and no queue here.
    known_queues = ({q for q in queues if isinstance(q, str)} if isinstance(queues, Mapping)
                    else set())
    specs: list[TenantSpec] = []
    own: dict[str, tuple[int, int | None]] = {}
    owner: dict[str, str] = {}
    folded: dict[str, str] = {}  # each name in lower case -> as written
    default: TenantSpec | None = None
    for name, body in raw.items():
        w = f"tenants.{name}"
        if not isinstance(name, str):
            add(not_text(name, f"{w} (a tenant name)"))
            continue
        if not NAME_RE.fullmatch(name):
            add(f"{w}: a tenant name is letters, digits, . _ - (at most 63), e.g. team-a")
            continue
        if name.lower() == DEFAULT_TENANT and name != DEFAULT_TENANT:
            add(f"{w}: the same name as {DEFAULT_TENANT}, which takes every service no "
                f"other tenant matches, but for case; write {DEFAULT_TENANT}")
            continue
        # Status, metrics and logs name tenants: never two alike but for case.
        if (other := folded.setdefault(name.lower(), name)) != name:
            add(f"{w}: the same name as tenants.{other} but for case; rename one")
            continue
        body = {} if body is None else body
        if not isinstance(body, Mapping):
            add(f"{w}: expected a mapping such as {{stacks: [\"{name}*\"], max_priority: 0}}, "
                f"got {quoted(body)}")
            continue
        for key in body:
            if key not in KEYS:
                close = difflib.get_close_matches(str(key), KEYS, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                add(f"{w}.{key}: unknown key{hint} (known: {', '.join(KEYS)})")
        stacks = _globs(body["stacks"], f"{w}.stacks", add) if "stacks" in body else ()
        services = _globs(body["services"], f"{w}.services", add) if "services" in body else ()
        if name == DEFAULT_TENANT and ("stacks" in body or "services" in body):
            add(f"{w}: default takes every service no other tenant matches; it has no "
                "stacks or services (name another tenant for them)")
        elif name != DEFAULT_TENANT and "stacks" not in body and "services" not in body:
            add(f"{w}: matches no service; give stacks (globs over stack names) and/or "
                "services (globs over service names)")
        prio = _priority(body.get("max_priority", 0), f"{w}.max_priority", classes, add)
        opt = body.get("may_opt_out", False)
        if not isinstance(opt, bool):
            add(f"{w}.may_opt_out: expected true or false, got {quoted(opt)}")
            opt = False
        owned: list[str] = []
        if "guaranteed" in body or "max" in body:
            g = _number(body.get("guaranteed", 0), f"{w}.guaranteed", add, whole=False)
            m = (None if body.get("max") is None
                 else _number(body["max"], f"{w}.max", add, whole=False))
            if g is not None and m is not None and m < g:
                add(f"{w}: need guaranteed <= max (GPUs)")
            if name in known_queues:
                add(f"{w}: guaranteed/max make a queue named {name}, but queues.{name} "
                    "exists too; list it under this tenant's queues instead")
            for q in sorted(q for q in known_queues if q.lower() == name.lower() != q):
                add(f"{w}: guaranteed/max make a queue named {name}, but queues.{q} differs "
                    "from it only in case; rename one")
            own[name] = (round((g or 0) * 1000), None if m is None else round(m * 1000))
            owned.append(name)
        q_raw = body.get("queues", [])
        if isinstance(q_raw, str) or not isinstance(q_raw, list):
            add(f"{w}.queues: expected a list of queue names of the config's queues, "
                f"got {quoted(q_raw)}")
            q_raw = []
        for q in q_raw:
            if not isinstance(q, str) or q not in known_queues:
                add(f"{w}.queues: {quoted(q)} is not a queue of the config's queues: "
                    f"({', '.join(sorted(known_queues)) or 'none defined'})")
            elif owner.get(q) == name:  # (its own list, not another tenant)
                add(f"{w}.queues: {q} is listed twice; name each queue once")
            elif q in owner:
                add(f"{w}.queues: {q} is already tenant {owner[q]}'s; a queue belongs to "
                    "one tenant")
            elif q not in owned:
                owned.append(q)
                owner[q] = name
        budget = body.get("preemptions_per_hour")
        per_hour = default_budget(max_per_hour)
        if budget is not None:
            got = _number(budget, f"{w}.preemptions_per_hour", add, whole=True)
            per_hour = int(got) if got is not None else per_hour
        spec = TenantSpec(name, stacks, services, prio, opt, tuple(owned), per_hour)
        if name == DEFAULT_TENANT:
            default = spec
        else:
            specs.append(spec)
    if not errors:  # (a glob refused above reads as "any": no cover to judge)
        errors += _shadowed(specs)
    for q in sorted(known_queues - owner.keys()):
        add(f"queues.{q}: owned by no tenant; with tenants, a queue serves only the tenant "
            "that lists it under its queues (add it to one, or remove it)")
    specs.append(default or TenantSpec(DEFAULT_TENANT,
                                       preemptions_per_hour=default_budget(max_per_hour)))
    return specs, own, errors


def case_twin(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that ``name`` equals but for case (``Research`` and
    ``research``); None when ``name`` is one of them or none is so."""
    if not name.isascii():  # (str.lower() makes the Kelvin sign a k: no twin of one)
        return None
    folded = name.lower()
    twins = sorted(n for n in names if n != name and n.lower() == folded)
    return None if not twins or name in names else twins[0]


def matches(t: TenantSpec, name: str, stack: str | None) -> bool:
    """Every key the tenant gives matches (stacks: the stack name; services: the
    service name); a tenant with stacks never matches a service of no stack (an empty
    stack label too: `docker stack deploy` names no stack '', a hand-made service did)."""
    if t.stacks and (not stack or not any(fnmatchcase(stack, g) for g in t.stacks)):
        return False
    return not t.services or any(fnmatchcase(name, g) for g in t.services)


def claimed_by(specs: Sequence[TenantSpec], name: str, stack: str | None) -> TenantSpec | None:
    """The first tenant other than ``default`` that matches service ``name`` of stack
    ``stack``: a service the operator's tenancy gives a tenant (``default`` takes what
    no tenant is given, the operator's own stacks among them). None: none does."""
    return next((t for t in specs if t.name != DEFAULT_TENANT and matches(t, name, stack)),
                None)


# --- a tenant that may take the agents' service --------------------------------------


def agents_service_takers(specs: Sequence[TenantSpec], name: str) -> list[str]:
    """A warning for each tenant other than ``default`` whose globs match the agents'
    service (``name``: ``agents.service``; "": none) as a stack deploys it: its services
    globs the name, its stacks globs a stack it may be deployed from (``<stack>_<service>``:
    each part before an underscore; a service of no stack no stacks glob matches). The
    daemon takes such a service for the first such tenant's (``claimed_by``): its tasks
    would mark no node as a GPU node (``swarm.agentservice.tenant_agent``), which only
    Swarm could show before. A later one is said too, as the one that takes it next."""
    stacks = [name[:i] for i, c in enumerate(name) if c == "_" and 0 < i < len(name) - 1]
    out: list[str] = []
    first = ""  # the first that matches: the daemon's taker
    for t in specs:
        if t.name == DEFAULT_TENANT or not name:
            continue
        by_name = next((g for g in t.services if fnmatchcase(name, g)), None)
        by_stack = next(((g, st) for st in stacks for g in t.stacks if fnmatchcase(st, g)),
                        None)
        if (t.services and by_name is None) or (t.stacks and by_stack is None):
            continue
        why = [f"its services glob {quoted(by_name)} matches the name"] if by_name else []
        if by_stack is not None:
            g, st = by_stack
            why.append(f"its stacks glob {quoted(g)} matches {quoted(st)}, the stack that "
                       f"name is deployed from (service {quoted(name[len(st) + 1:])})")
        # (file order decides: a later tenant takes it only once the earlier ones do not)
        takes = (f"the daemon would take the agents' service for tenant {t.name}'s, and "
                 "its tasks would mark no node as a GPU node") if not first else (
            f"tenant {first}, before it in the file, takes it first (this one would once "
            f"{first}'s globs no longer match)")
        first = first or t.name
        out.append(f"tenants.{t.name}: matches agents.service {quoted(name)} "
                   f"({'; '.join(why)}): {takes}; fix: narrow tenants.{t.name}'s globs so "
                   'that they do not match it, or set agents.service: "" where no stack runs '
                   "the agents (docs/systemd.md)")
    return out


# --- a tenant no service can reach ---------------------------------------------------

_NAME_CHARS = "-._0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _shadowed(specs: list[TenantSpec]) -> list[str]:
    """Each tenant an earlier one takes every service of (the first in file order that
    matches takes it): its limits, the operator's word, would apply to no service."""
    out = []
    for i, b in enumerate(specs):
        a = next((a for a in specs[:i] if _covers(a, b)), None)
        if a is not None:
            out.append(f"tenants.{b.name}: tenants.{a.name}, listed before it, matches every "
                       f"service it matches, and the first in the file's order takes a "
                       f"service: {b.name} would get none; list {b.name} before {a.name}, "
                       f"or narrow {a.name}'s globs")
    return out


def _covers(a: TenantSpec, b: TenantSpec) -> bool:
    """Every (stack, service name) ``b`` matches, ``a`` matches (a tenant with stacks
    never matches a service of no stack; no globs: any name)."""
    stacks = not a.stacks or (bool(b.stacks) and _included(b.stacks, a.stacks))
    return stacks and (not a.services or (bool(b.services)
                                          and _included(b.services, a.services)))


def _included(inner: tuple[str, ...], outer: tuple[str, ...]) -> bool:
    """Each glob of ``inner`` is covered by one of ``outer`` (``_glob_covers``): every name
    it matches, that one matches. Sufficient, not necessary (``a*`` and ``b*`` together
    cover ``[ab]x``, unsaid): a cover said is always one."""
    return all(any(_glob_covers(_tokens(g), _tokens(o)) for o in outer) for g in inner)


def _tokens(glob: str) -> list[str]:
    """A glob in fnmatch's units: ``*``, ``?``, a ``[...]`` set, or one character."""
    out, i = [], 0
    while i < len(glob):
        end = glob.index("]", i) + 1 if glob[i] == "[" else i + 1
        out.append(glob[i:end])
        i = end
    return out


@lru_cache(maxsize=1024)
def _chars(token: str) -> frozenset[str]:
    """The name characters a one-character token (``?``, a set, a character) matches."""
    return frozenset(c for c in _NAME_CHARS if fnmatchcase(c, token))


def _glob_covers(inner: list[str], outer: list[str]) -> bool:
    """``outer`` matches every name ``inner`` does, read token by token: a ``*`` of
    ``outer`` takes any run of ``inner``'s tokens, a one-character token one token of
    ``inner`` that matches no character it does not (``inner``'s ``*`` only a ``*``)."""
    n, m = len(inner), len(outer)
    # ok[i][j]: inner[i:] is covered by outer[j:] (filled from the ends)
    ok = [[False] * (m + 1) for _ in range(n + 1)]
    ok[n][m] = True
    for j in range(m - 1, -1, -1):
        for i in range(n, -1, -1):
            if outer[j] == "*":
                ok[i][j] = ok[i][j + 1] or (i < n and ok[i + 1][j])
            elif i < n and inner[i] != "*":
                ok[i][j] = ok[i + 1][j + 1] and _chars(inner[i]) <= _chars(outer[j])
    return ok[0][0]
