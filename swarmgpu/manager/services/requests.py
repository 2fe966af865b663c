"""The GPU request language: what a service asks for, in its ``deploy.labels``.

Pure parsing and validation; docs/requests.md is the user-facing description. Every bad
value raises RequestError naming the key, the value and what is accepted, so a planner
can report it on the service and carry on with the others (``parse_all``).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from math import ceil
from typing import TypeVar

from swarmgpu.allocator.fragmentation import product_matches
from swarmgpu.core.commalist import invisible, non_ascii
from swarmgpu.core.config import DEFAULT_PRIORITY_CLASSES, parse_priority_classes
from swarmgpu.core.migprofile import MigProfileError, normalize_profile
from swarmgpu.core.peertext import quoted, tenant_text
from swarmgpu.core.tenants import NAME_RE

DEFAULT_PREFIX = "swarmgpu."
DEFAULT_ZONE_LABEL = "topology.zone"

# Keys swarmgpu writes onto services itself; never user errors.
OUTPUT_LABEL_PREFIXES: tuple[str, ...] = (
    "swarmgpu.devices.",
    "swarmgpu.share.",  # what a shared GPU holding tells its container (manager.services.sharing)
    "swarmgpu.placement",
    "swarmgpu.state",
    "swarmgpu.assigned",
    "swarmgpu.managed",
)

KEYS: tuple[str, ...] = (
    "gpus",
    "gpu-memory",
    "gpu-fraction",
    "gpu-product",
    "topology",
    "mig",
    "rebalance",
    "zone-prefer",
    "zone-avoid",
    "pack",
    "priority",
    "preemptible",
    "queue",
)
DEFAULT_CLASSES: Mapping[str, int] = parse_priority_classes(DEFAULT_PRIORITY_CLASSES)


class Topology(StrEnum):
    ANY = "any"
    NVLINK = "nvlink"  # every pair of the set NVLink-connected
    NUMA = "numa"  # every GPU of the set on one NUMA node


class Rebalance(StrEnum):
    AUTO = "auto"
    NEVER = "never"


class Pack(StrEnum):
    """Whether the replicas of a service may share one node (``swarmgpu.placement``)."""

    AUTO = "auto"  # one per node; all on one node when they cannot be spread
    ALWAYS = "always"  # all on one node
    NEVER = "never"  # one per node, always


class RequestError(ValueError):
    """A request label with a value swarmgpu cannot use."""

    def __init__(self, key: str, value: str, accepted: str) -> None:
        self.key = key
        self.value = value
        self.accepted = accepted
        # A tenant's label key or value may be a megabyte (Swarm takes it): the reason is
        # logged every cycle and kept in the plan and the map, so either is cut there.
        # Hidden characters shown as escapes, cut or not (a value cut by peer_text lost
        # an emoji family's joiners and read as the value without them).
        super().__init__(f"{tenant_text(key, SHOWN_MAX)}={quoted(value, SHOWN_MAX)}: "
                         f"expected {accepted}")


SHOWN_MAX = 200  # characters of a label's key or value a reason quotes


@dataclass(frozen=True)
class GpuRequest:
    """What one replica of a service needs. Amount is one of: ``gpus`` whole GPUs,
    ``gpu_milli`` thousandths of one GPU (< 1000, by memory), or one MIG device."""

    gpus: int = 1
    gpu_milli: int = 1000  # per GPU; < 1000 only for a fraction of one GPU
    min_memory_mib: int | None = None
    products: tuple[str, ...] = ()  # globs, case-insensitive; empty = any
    topology: Topology = Topology.ANY
    mig_profile: str | None = None
    rebalance: Rebalance = Rebalance.AUTO
    zone_prefer: tuple[str, ...] = ()
    zone_avoid: tuple[str, ...] = ()
    zone_label: str = DEFAULT_ZONE_LABEL  # node label holding the zone name
    pack: Pack = Pack.AUTO
    priority: int = 0  # higher is served first and may preempt (docs/requests.md)
    priority_class: str = ""  # the class name the label gave, if any
    preemptible: bool | None = None  # None: by the config's preemptible_below
    queue: str = ""  # the quota queue it counts against (config ``queues``); "" none
    # Set from the operator's config (``manager.services.tenants``), never from labels: the tenant
    # the service belongs to, what its labels asked for beyond the tenant's limits (each
    # said as why it was not given), and whether it may not opt out of preemption.
    tenant: str = ""
    limits: tuple[str, ...] = ()
    always_preemptible: bool = False

    @property
    def can_pack(self) -> bool:
        """Replicas may share a node: whole GPUs only (a share, a MIG device or no GPU
        keeps one replica per node, see docs/requests.md)."""
        return (self.pack is not Pack.NEVER and not self.is_fraction and not self.mig_profile
                and not self.cpu_only)

    @property
    def is_fraction(self) -> bool:
        return self.gpu_milli < 1000

    @property
    def cpu_only(self) -> bool:
        """``gpus: "0"``: no GPU; swarmgpu places it by its CPU and memory reservations
        (a gate, as for a GPU service), it preempts nothing, counts no GPU quota and is
        never moved by the rebalancer."""
        return self.gpus == 0 and not self.is_fraction and not self.mig_profile

    def matches_product(self, product: str) -> bool:
        """Does a GPU product (nvidia-smi ``NVIDIA A100-SXM4-80GB`` or GFD
        ``NVIDIA-A100-SXM4-80GB`` spelling) match the request?"""
        return matches_products(product, self.products)

    def describe(self) -> str:
        """Human text: ``2 NVLink GPUs >= 40 GiB``, ``MIG 1g.10gb``, ``0.25 GPU``."""
        # Kept on the instance (frozen: it never changes), as every plan of it says it.
        got: str | None = self.__dict__.get("_text")
        if got is None:
            got = self.__dict__["_text"] = self._describe()
        return got

    def _describe(self) -> str:
        if self.cpu_only:
            text = "no GPU, placed by swarmgpu by its CPU and memory"
        elif self.mig_profile:
            text = f"MIG {self.mig_profile}"
        elif self.is_fraction:
            text = f"{self.gpu_milli / 1000:g} GPU"
        else:
            kind = {Topology.NVLINK: "NVLink ", Topology.NUMA: "same-NUMA "}.get(self.topology, "")
            text = f"{self.gpus} {kind}GPU{'s' if self.gpus != 1 else ''}"
        if self.min_memory_mib is not None:
            text += f" >= {_mib_text(self.min_memory_mib)}"
        if self.products:
            text += f" ({' | '.join(self.products)})"
        if self.zone_prefer:
            text += f", prefer zone {'|'.join(self.zone_prefer)}"
        if self.zone_avoid:
            text += f", avoid zone {'|'.join(self.zone_avoid)}"
        if self.rebalance is Rebalance.NEVER:
            text += ", never moved"
        if self.pack is not Pack.AUTO:
            text += f", pack {self.pack}"
        if self.priority or self.priority_class:
            text += f", priority {self.priority_class or self.priority}"
        if self.preemptible is not None:
            text += ", preemptible" if self.preemptible else ", not preemptible"
        if self.queue:
            text += f", queue {self.queue}"
        return text

    def is_preemptible(self, below: int) -> bool:
        """Always, for a tenant that may not opt out; else ``swarmgpu.preemptible`` when
        set, else whether the priority is below ``below``."""
        if self.always_preemptible:
            return True
        return self.preemptible if self.preemptible is not None else self.priority < below


def parse_request(
    labels: Mapping[str, str],
    *,
    prefix: str = DEFAULT_PREFIX,
    zone_label: str = DEFAULT_ZONE_LABEL,
    classes: Mapping[str, int] | None = None,
) -> GpuRequest | None:
    """The request in a service's labels; None when it has no request key.

    Any request key makes the service a GPU request; the amount defaults to one whole
    GPU. Raise RequestError on the first bad key or value.
    """
    mine = _request_keys(labels, prefix)
    if not mine:
        return None
    p = prefix
    gpus = _whole(mine, "gpus", p) if "gpus" in mine else None
    fraction = _fraction(mine, p) if "gpu-fraction" in mine else None
    mig = _mig(mine, p) if "mig" in mine else None
    memory = _memory(mine, p) if "gpu-memory" in mine else None
    products = _products(mine, p) if "gpu-product" in mine else ()
    topology = _choice(mine, "topology", Topology, p)
    rebalance = _choice(mine, "rebalance", Rebalance, p)
    pack = _choice(mine, "pack", Pack, p)
    prefer = _zones(mine, "zone-prefer", p)
    avoid = _zones(mine, "zone-avoid", p)
    priority, pclass = _priority(mine, p, DEFAULT_CLASSES if classes is None else classes)
    preemptible = _bool(mine, "preemptible", p)
    queue = mine.get("queue", "")
    if "queue" in mine and not NAME_RE.fullmatch(queue):  # the config's queue names
        raise RequestError(
            p + "queue",
            queue,
            f"a queue name of the config's queues: letters, digits, . _ - (e.g. {p}queue=research)",
        )

    whole = gpus if gpus is not None else 1
    _check_together(mine, p, gpus, fraction, mig, topology, pack, prefer, avoid)
    return GpuRequest(
        gpus=whole,
        gpu_milli=round(fraction * 1000) if fraction is not None else 1000,
        min_memory_mib=memory,
        products=products,
        topology=topology,
        mig_profile=mig,
        rebalance=rebalance,
        zone_prefer=prefer,
        zone_avoid=avoid,
        zone_label=zone_label,
        pack=pack,
        priority=priority,
        priority_class=pclass,
        preemptible=preemptible,
        queue=queue,
    )


def _request_keys(labels: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The request's keys (prefix stripped) and values; RequestError on an unknown key
    or an overlong value. swarmgpu's own output labels are not request keys."""
    output = tuple(prefix + p[len(DEFAULT_PREFIX) :] for p in OUTPUT_LABEL_PREFIXES)
    mine: dict[str, str] = {}
    for key in sorted(labels):
        if not key.startswith(prefix):
            why = _misprefix_error(key, prefix)
            if why is not None:
                raise RequestError(key, labels[key], why)
            continue
        if key.startswith(output):
            continue
        name = key[len(prefix) :]
        if name not in KEYS:
            # (a megabyte name is like no key: not compared, which takes a while; the
            # keys are lower case, and GPUS, compared with its case, was like none)
            near = difflib.get_close_matches(name.lower(), KEYS, n=1) if len(name) < 64 else []
            hint = f" (did you mean {prefix}{near[0]}?)" if near else ""
            # Shown, the key reads as the one meant: what differs is named.
            if hidden := invisible(name[:64]):
                hint += f"; it has invisible characters ({hidden} after {prefix})"
            elif odd := non_ascii(name[:64]):
                hint += (f"; it has characters that only look like ASCII ones ({odd} after "
                         f"{prefix}): retype it")
            elif name != name.strip(_BLANKS):
                hint += "; it has a blank around it, which docker keeps: remove it"
            raise RequestError(
                key, labels[key], f"a known key: {', '.join(prefix + k for k in KEYS)}{hint}"
            )
        if len(labels[key]) > MAX_VALUE_LEN:
            raise RequestError(
                key, labels[key][:32] + "...", f"a value of at most {MAX_VALUE_LEN} characters"
            )
        # ASCII blanks only: str.strip() also takes \x1c-\x1f, NBSP and U+3000, which
        # no one sees around a value (gpus=2 read from "\x1c2").
        mine[name] = labels[key].strip(_BLANKS)
    return mine


_BLANKS = " \t\n\r\f\v"


def _folded(value: str) -> str:
    """``value`` in lower case, ASCII only: str.lower() makes the Kelvin sign a k
    (NVLIN\u212a read as nvlink); every word a value is compared with is ASCII."""
    return value.lower() if value.isascii() else value


_SEPARATORS = "-_:/"  # what a prefix's last '.' is mistyped as


def _misprefix_error(key: str, prefix: str) -> str | None:
    """What ``key``, a request key under a misspelt prefix (``_misprefixed``), should
    be, and why; None for a key that is no such one."""
    meant = _misprefixed(key, prefix)
    if meant is None:
        return None
    if hidden := invisible(key.strip(_BLANKS)):
        return (f"a key with no invisible character ({hidden}): the label is no request "
                f"key; retype it (did you mean {meant}?)")
    if key != key.strip(_BLANKS):
        return (f"a key with no blank around it: docker keeps the blank, so the label is "
                f"no request key (did you mean {meant}?)")
    if _lookalike(key[: len(prefix)], prefix):
        return (f"a key that starts {prefix} exactly, in ASCII: it has characters that "
                f"only look like it ({non_ascii(key[: len(prefix)])}); retype it (did "
                f"you mean {meant}?)")
    return (f"a key that starts {prefix} exactly, case included, as labels are "
            f"case-sensitive (did you mean {meant}?)")


def _lookalike(head: str, prefix: str) -> bool:
    """``head`` is ``prefix`` but for non-ASCII characters in its places (U+0430,
    Cyrillic a; a fullwidth s): one that only looks like the prefix. Read by places, with no
    table of confusables: every lookalike of an ASCII letter is non-ASCII."""
    return (len(head) == len(prefix) and prefix.isascii() and not head.isascii()
            and all(h == c or not h.isascii() for h, c in zip(head, prefix, strict=True)))


def _misprefixed(key: str, prefix: str) -> str | None:
    """The request key ``key`` likely meant, where it is one under ``prefix`` spelt in
    another case or with another separator (``SwarmGPU.gpus``, ``swarmgpu-gpus``), in
    lookalike characters (``_lookalike``), after a blank or with an invisible one: it was
    no request at all, the service placed by Swarm with no GPU and nothing said. Only a
    near match of a known key counts: another label that merely starts so
    (``SwarmGPU.team``) is not swarmgpu's to judge."""
    n = len(prefix)
    if len(key) > n + 128:  # (bounded before the walk below: every label comes here)
        return None
    # docker keeps a blank (" swarmgpu.gpus") and a zero-width character as written
    if (bare := "".join(c for c in key.strip(_BLANKS) if c.isprintable())) != key:
        if bare.startswith(prefix) and bare[n:] in KEYS:
            return bare
        return _misprefixed(bare, prefix) if bare else None
    if not n < len(key) <= n + 64:
        return None
    if _lookalike(key[:n], prefix):
        name = key[n:].lower().replace("_", "-")
        near = difflib.get_close_matches(name, KEYS, n=1)
        return prefix + near[0] if near else None
    if key[: n - 1].lower() != prefix[: n - 1].lower():
        return None
    if key[n - 1 : n].lower() != prefix[-1].lower() and not (
        prefix.endswith(".") and key[n - 1 : n] in _SEPARATORS
    ):
        return None
    name = key[n:].lower().replace("_", "-")
    near = difflib.get_close_matches(name, KEYS, n=1)
    return prefix + near[0] if near else None


def _check_together(
    mine: Mapping[str, str],
    p: str,
    gpus: int | None,
    fraction: float | None,
    mig: str | None,
    topology: Topology,
    pack: Pack,
    prefer: tuple[str, ...],
    avoid: tuple[str, ...],
) -> None:
    """RequestError on keys that each parse but cannot go together."""
    if gpus == 0:
        _check_cpu_only(mine, p)
    if fraction is not None and gpus is not None and gpus > 1:
        raise RequestError(
            p + "gpu-fraction",
            mine["gpu-fraction"],
            f"no {p}gpus above 1 with it: a fraction is a share of one GPU "
            f"(drop {p}gpus={gpus} or the fraction)",
        )
    if mig is not None:
        if gpus is not None and gpus > 1:
            raise RequestError(
                p + "mig",
                mine["mig"],
                f"no {p}gpus above 1 with it: one replica gets one MIG device "
                f"(drop {p}gpus={gpus})",
            )
        for other in ("gpu-fraction", "gpu-memory"):
            if other in mine:
                raise RequestError(
                    p + "mig",
                    mine["mig"],
                    f"no {p}{other} with it: the MIG profile fixes the share and memory "
                    f"(drop {p}{other})",
                )
    whole = gpus if gpus is not None else 1
    if topology is not Topology.ANY and (whole < 2 or fraction is not None or mig):
        raise RequestError(
            p + "topology",
            mine["topology"],
            f"{p}gpus of 2 or more with it: topology is about how GPUs of one replica "
            f"connect (set {p}gpus=2 or more, or drop {p}topology)",
        )
    if pack is Pack.ALWAYS and (fraction is not None or mig):
        raise RequestError(
            p + "pack",
            mine["pack"],
            f"auto or never with {p}{'mig' if mig else 'gpu-fraction'}: replicas of a "
            "share or a MIG device stay one per node (drop the key)",
        )
    overlap = sorted(set(prefer) & set(avoid))
    if overlap:
        raise RequestError(
            p + "zone-avoid",
            mine["zone-avoid"],
            f"zones not also in {p}zone-prefer (both name {', '.join(overlap)})",
        )


# Keys that say something of the GPUs: none has a meaning without one (``gpus: "0"``).
_GPU_KEYS = ("gpu-fraction", "mig", "gpu-memory", "gpu-product", "topology")


def _check_cpu_only(mine: Mapping[str, str], p: str) -> None:
    """``gpus: "0"`` (a service without a GPU that swarmgpu places) with a key that asks
    something of a GPU: which of the two was meant is the user's to say."""
    if mine.get("pack", "").lower() == "always":
        raise RequestError(
            p + "pack",
            mine["pack"],
            f"auto or never with {p}gpus=0: replicas without a GPU stay one per node "
            "(drop the key)",
        )
    for other in _GPU_KEYS:
        if other in mine:
            raise RequestError(
                p + "gpus",
                mine["gpus"],
                f"no {p}{other} with {p}gpus=0: 0 asks for no GPU, placed by its CPU and "
                f"memory reservations (drop {p}{other}, or ask for GPUs with {p}gpus=1 or more)",
            )


def request_labels(
    labels: Mapping[str, str],
    prefix: str = DEFAULT_PREFIX,
) -> tuple[tuple[str, str], ...]:
    """The labels ``parse_request`` reads, in its order: equal ones give an equal
    request (swarmgpu's own output labels, such as a device map, are not among them)."""
    output = _output_prefixes(prefix)
    return tuple(
        sorted(
            (k, v)
            for k, v in labels.items()
            if (k.startswith(prefix) and not k.startswith(output))
            or (not k.startswith(prefix) and _misprefixed(k, prefix) is not None)
        )
    )


def container_request_errors(
    container_labels: Mapping[str, str], prefix: str = DEFAULT_PREFIX
) -> list[RequestError]:
    """A request key among a service's container labels (``ContainerSpec.Labels``: a
    stack file's service-level ``labels:``, ``--container-label``), one error each:
    swarmgpu reads a request from the service's own labels only, and one there was
    ignored without a word, the service run with no GPU."""
    return [
        RequestError(
            k,
            v,
            "a service label: this is a container label (the service's labels:, "
            "--container-label), which swarmgpu does not read; move it under "
            "deploy.labels (--label)",
        )
        for k, v in request_labels(container_labels, prefix)
    ]


@functools.cache
def _output_prefixes(prefix: str) -> tuple[str, ...]:
    return tuple(prefix + p[len(DEFAULT_PREFIX) :] for p in OUTPUT_LABEL_PREFIXES)


def parse_all(
    labels: Mapping[str, str],
    *,
    prefix: str = DEFAULT_PREFIX,
    zone_label: str = DEFAULT_ZONE_LABEL,
    classes: Mapping[str, int] | None = None,
) -> GpuRequest | RequestError | None:
    """``parse_request`` that returns the error instead of raising it (for planners).

    Any failure is this service's error, never the cycle's: a value that slips past a
    key's parser (a 5,000-digit number, an overflow) still makes only this service
    ``invalid``, and every other service is placed.
    """
    try:
        return parse_request(labels, prefix=prefix, zone_label=zone_label, classes=classes)
    except RequestError as e:
        return e
    except Exception as e:
        bad = sorted(k for k in labels if k.startswith(prefix))
        key = bad[0] if bad else prefix + "*"
        return RequestError(
            key,
            labels.get(key, "")[:64],
            f"labels swarmgpu can read ({e.__class__.__name__} reading them)",
        )


def request_errors(
    labels: Mapping[str, str],
    *,
    prefix: str = DEFAULT_PREFIX,
    zone_label: str = DEFAULT_ZONE_LABEL,
    classes: Mapping[str, int] | None = None,
) -> list[RequestError]:
    """Every bad key of a request, not only the first (``render --check`` prints them
    all): parse, set the key of the error aside, parse the rest again. ``classes``: the
    config's ``preemption.priority_classes`` (None: the defaults)."""
    rest = dict(labels)
    errors: list[RequestError] = []
    while True:
        e = parse_all(rest, prefix=prefix, zone_label=zone_label, classes=classes)
        if not isinstance(e, RequestError):
            return errors
        errors.append(e)
        if rest.pop(e.key, None) is None:  # an error not tied to one key: no more to learn
            return errors


E = TypeVar("E", bound=StrEnum)

# --- one parser per key -------------------------------------------------------------

# ASCII only (\d would take '٣'), whole string (\Z: '$' also matches before a newline),
# and short: a 5,000-digit value is refused by the parser, not by int()'s digit limit.
_INT_RE = re.compile(r"[0-9]{1,6}", re.ASCII)
# A B or iB only after a unit letter: 24B is 24 bytes to Docker's --memory, and was
# read here as 24 MiB (a bare number is MiB); a lone iB is no unit at all.
_MEM_RE = re.compile(
    r"(?P<num>[0-9]{1,9}(?:\.[0-9]{1,6})?)\s*(?:(?P<unit>[kmgt])(?:i?b)?)?",
    re.IGNORECASE | re.ASCII,
)
MAX_VALUE_LEN = 1024  # any request label value longer than this is refused as is
_FRACTION_RE = re.compile(r"(?:[0-9]{1,3}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})%?", re.ASCII)
_UNIT_MIB = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}
_ZONE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}", re.ASCII)


def _whole(mine: Mapping[str, str], name: str, p: str) -> int:
    value = mine[name]
    if not _INT_RE.fullmatch(value) or int(value) < 0:
        raise RequestError(
            p + name, value, f"a whole number >= 1 (e.g. {p}{name}=2), or 0 (no GPU)"
        )
    return int(value)


def _fraction(mine: Mapping[str, str], p: str) -> float:
    value = mine["gpu-fraction"]
    accepted = (
        f"a share of one GPU strictly between 0 and 1, at most 3 decimals "
        f"(e.g. {p}gpu-fraction=0.25); for whole GPUs use {p}gpus"
    )
    # ASCII digits and one '%' only: float() also reads fullwidth and Arabic-Indic
    # digits and '0.2_5', and rstrip('%') took '50%%'. At most 3 decimals as
    # documented, not 0.2504 rounded.
    if not _FRACTION_RE.fullmatch(value):
        raise RequestError(p + "gpu-fraction", value, accepted)
    f = float(value.rstrip("%")) / (100 if value.endswith("%") else 1)
    if not 0 < f < 1 or not 1 <= round(f * 1000) <= 999 or abs(f * 1000 - round(f * 1000)) > 1e-6:
        raise RequestError(p + "gpu-fraction", value, accepted)
    return f


def _memory(mine: Mapping[str, str], p: str) -> int:
    value = mine["gpu-memory"]
    m = _MEM_RE.fullmatch(value)
    mib = ceil(float(m["num"]) * _UNIT_MIB[(m["unit"] or "").lower()]) if m else 0
    if mib < 1:
        raise RequestError(
            p + "gpu-memory",
            value,
            f"a memory size per GPU in binary units: 40GiB (= 40G = 40GB), 24576MiB, "
            f"or a bare number of MiB, K, M, G or T before any B (e.g. {p}gpu-memory=40GiB)",
        )
    return mib


def _products(mine: Mapping[str, str], p: str) -> tuple[str, ...]:
    value = mine["gpu-product"]
    parts = tuple(x.strip() for x in value.split("|"))
    # No product name has a ',': one there is a list the zone keys' way, which as one
    # pattern matched no GPU and left the service waiting with no word of the label.
    if not parts or any(not x for x in parts) or "," in value:
        raise RequestError(
            p + "gpu-product",
            value,
            "product names or globs separated by | (not ,: no product name has one) "
            "with none empty "
            f"(e.g. {p}gpu-product=NVIDIA A100*|NVIDIA H100*)",
        )
    return parts


def _mig(mine: Mapping[str, str], p: str) -> str:
    value = mine["mig"]
    try:
        return normalize_profile(value)
    except MigProfileError as e:
        raise RequestError(
            p + "mig",
            value,
            f"{e.hint} (e.g. {p}mig=1g.10gb)",
        ) from e


def _choice(mine: Mapping[str, str], name: str, enum: type[E], p: str) -> E:
    default = next(iter(enum))
    value = mine.get(name)
    if value is None:
        return default
    try:
        return enum(_folded(value))
    except ValueError:
        allowed = " | ".join(e.value for e in enum)
        raise RequestError(p + name, value, f"one of {allowed} (default {default.value})") from None


_PRIO_RE = re.compile(r"-?[0-9]{1,6}", re.ASCII)


def _priority(mine: Mapping[str, str], p: str, classes: Mapping[str, int]) -> tuple[int, str]:
    """(priority, class name or ""): an integer, or a class the config names."""
    value = mine.get("priority")
    if value is None:
        return 0, ""
    if _PRIO_RE.fullmatch(value):
        return int(value), ""
    name = _folded(value)
    if name in classes:
        return classes[name], name
    known = ", ".join(f"{k} ({v})" for k, v in sorted(classes.items(), key=lambda kv: -kv[1]))
    raise RequestError(
        p + "priority",
        value,
        f"a whole number, higher first (e.g. {p}priority=100), or a class "
        f"of preemption.priority_classes: {known or 'none configured'}",
    )


def _bool(mine: Mapping[str, str], name: str, p: str) -> bool | None:
    value = mine.get(name)
    if value is None:
        return None
    if _folded(value) in ("true", "false"):
        return _folded(value) == "true"
    raise RequestError(
        p + name, value, "true or false (unset: by priority, see preemption.preemptible_below)"
    )


def _zones(mine: Mapping[str, str], name: str, p: str) -> tuple[str, ...]:
    value = mine.get(name)
    if value is None:
        return ()
    parts = tuple(x.strip() for x in re.split(r"[,|]", value))
    if not all(_ZONE_RE.fullmatch(x) for x in parts):
        raise RequestError(
            p + name,
            value,
            f"zone names (letters, digits, . _ -) separated by , or | "
            f"(e.g. {p}{name}=eu-west-1a,eu-west-1b)",
        )
    return tuple(dict.fromkeys(parts))


def matches_products(product: str, patterns: tuple[str, ...]) -> bool:
    """``GpuRequest.matches_product`` for ``gpu-product`` globs held elsewhere (a MIG
    demand's): the allocator's own match (spaces, ``_`` and ``-`` alike,
    case-insensitive; none is any product), so a node the request's filter passes is
    one whose GPUs the allocator takes."""
    return product_matches(product, patterns)


def _mib_text(mib: int) -> str:
    if mib % 1024 == 0:
        return f"{mib // 1024} GiB"
    return f"{mib} MiB"
