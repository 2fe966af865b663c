"""A service's own ``CUDA_VISIBLE_DEVICES`` against the GPUs swarmgpu grants it, for
`swarmgpu render` (and `swarmgpu audit`, of a running service: ``auditservers``).

A stack moved from one host often keeps the line that picked that host's GPUs
(``CUDA_VISIBLE_DEVICES=2,3``). Under swarmgpu the container sees only the GPUs it is
granted, numbered from 0 (``CUDA_DEVICE_ORDER=PCI_BUS_ID``), and CUDA reads the
variable as a list of indices or UUIDs that stops at the first one it cannot find
("only the devices whose index precedes the invalid index are visible", CUDA
Programming Guide, "CUDA Environment Variables"). So ``2,3`` on a grant of two GPUs
leaves the server with no GPU, ``0`` on a grant of two leaves one idle, and a UUID
names one GPU of one node, which swarmgpu may grant to another service. An entry that
is neither (``all``, ``$GPUS``: docker passes it as written, no shell expands it) is one
CUDA stops at too. render says so in a warning, never an error; a value it cannot read
(an empty entry or one with a space, an index given twice) it leaves unsaid. Pure
(docs/requests.md, "Model servers").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from swarmgpu.core.peertext import quoted
from swarmgpu.manager.services.requests import GpuRequest

VAR = "CUDA_VISIBLE_DEVICES"
_UUID_HEADS = ("GPU-", "MIG-")
# An entry after the first that starts (stripped) as a UUID: searched, not split into
# every entry (the daemon reads each GPU service's spec every cycle: 8 MiB took 1 s).
_LATER_UUID = re.compile(r",\s*(?:GPU-|MIG-)")


def visible_notes(
    svc: Mapping[str, Any], where: str, req: GpuRequest, files: Mapping[str, str | None],
    prefix: str = "swarmgpu.", interpolated: bool = True,
) -> list[str]:
    """``visible_warnings`` as render says them, each after ``where``."""
    return [f"{where}: WARNING: {w}"
            for w in visible_warnings(svc, req, files, prefix, interpolated)]


def visible_warnings(
    svc: Mapping[str, Any], req: GpuRequest, files: Mapping[str, str | None],
    prefix: str = "swarmgpu.", interpolated: bool = True,
) -> list[str]:
    """A warning where the service's ``CUDA_VISIBLE_DEVICES`` (``environment`` over its
    env files' ``files``, as docker reads them) lets CUDA use another number of GPUs
    than ``req`` grants each replica; none where it matches or cannot be read (not
    ``interpolated``: an ``environment`` value with a ``$``, which docker substitutes;
    an env file's it passes as written). Render's and audit's (which passes a Swarm
    spec's ``Env`` as ``environment``, substituted already)."""
    found = visible_value(svc.get("environment"), files)
    if found is not None and not interpolated and "$" in found[0] and \
            not found[1].endswith(" from env_file"):
        return []
    if found is None or req.cpu_only:
        return []
    value, said = found
    granted = 1 if req.is_fraction or req.mig_profile else req.gpus
    gpus = "GPU" if granted == 1 else "GPUs"
    head = f"{said}: in the container CUDA numbers the {granted} {gpus} " \
        "swarmgpu grants from 0"
    fix = f"remove {VAR} (the grant already limits the container to its GPUs)"
    if _has_uuid(value):
        return [f"{head}, and a UUID names one GPU of one node, which swarmgpu may grant to "
                f"another service: where it is not granted CUDA would find no GPU; {fix}"]
    seen = _visible(_entries(value) if value.strip() else iter(()), granted)
    if seen is None or seen[0] == granted:
        return []
    used, stop = seen
    why = f", and stops at {quoted(stop)}, which is none of them" if stop else ""
    if used == 0:
        return [f"{head}{why}: it would find no GPU; {fix}"]
    key = f"{prefix}gpus"
    return [f"{head}{why}: it would use {used} and {granted - used} would sit idle; "
            f'{fix}, or ask for {used} ({key}: "{used}")']


def visible_named(env: object, files: Mapping[str, str | None]) -> bool:
    """Whether ``environment`` or an env file names the variable, a value given or not."""
    if isinstance(env, dict):
        return VAR in env or VAR in files
    listed = isinstance(env, list) and any(str(e).partition("=")[0] == VAR for e in env)
    return listed or VAR in files


def visible_value(env: object, files: Mapping[str, str | None]) -> tuple[str, str] | None:
    """(the variable's value, how to name where it is set), ``environment`` over the
    env files; None where it is unset or given no value here (a bare name: the
    deploying shell's)."""
    own: object = None
    named = False
    if isinstance(env, dict) and VAR in env:
        own, named = env[VAR], True
    elif isinstance(env, list):
        for e in env:
            k, eq, text = str(e).partition("=")
            if k == VAR:
                own, named = (text if eq else None), True
    if named:
        if isinstance(own, bool) or not isinstance(own, str | int):
            return None
        return str(own), f"{VAR}={_shown(str(own))}"
    got = files.get(VAR)
    return None if got is None else (got, f"{VAR}={_shown(got)} from env_file")


def _shown(value: str) -> str:
    """The value as written, or its start where it is long (a stack may hold 8 MiB)."""
    return value if len(value) <= 80 else quoted(value, 80)


def _has_uuid(value: str) -> bool:
    """Whether an entry of ``value`` (stripped) starts with ``GPU-`` or ``MIG-``."""
    if not any(head in value for head in _UUID_HEADS):  # (the common case, at C speed)
        return False
    return value.lstrip().startswith(_UUID_HEADS) or _LATER_UUID.search(value) is not None


def _entries(value: str) -> Iterator[str]:
    """The value's comma-separated entries, stripped, one at a time: ``_visible`` stops
    within ``granted`` + 1 of them, however long the value."""
    start = 0
    while (end := value.find(",", start)) >= 0:
        yield value[start:end].strip()
        start = end + 1
    yield value[start:].strip()


def _visible(entries: Iterator[str], granted: int) -> tuple[int, str] | None:
    """(how many of the granted GPUs CUDA uses, the entry it stopped at or ""): at an
    index past the grant, or an entry that is no index (nor a UUID, told apart before),
    as ``all`` or a ``$GPUS`` no shell expands: CUDA takes no other identifier. None
    where an entry is empty (a trailing comma), holds a space (``0 1``) or repeats an
    index: what CUDA does then is not render's to say."""
    used: set[int] = set()
    for e in entries:
        if not e or any(c.isspace() for c in e):
            return None
        digits = e[1:] if e[:1] in "+-" else e
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 6:
            return len(used), e
        i = int(e)
        if i in used:
            return None
        if not 0 <= i < granted:
            return len(used), e
        used.add(i)
    return len(used), ""
