"""Read Prometheus text from dcgm-exporter or a swarmgpu agent into per-GPU values.

``parse_metrics(text)`` never raises on bad input: real exporters print broken lines
(the A800 capture has a sample whose value is ``ERROR - FAILED TO CONVERT TO STRING``).
Each line is read strictly on its own (``core.promtext``, in time linear in its length);
every good sample is kept and each broken line reported in ``ScrapeResult.errors``.
A page with text after ``# EOF`` is two pages, or one read two ways: none of it is kept.
TYPE and HELP lines are held to Prometheus' rules (``_Types``): a name that breaks them is
unknown.

Only samples with a ``UUID`` label are kept (that is what ties a value to a GPU); a line
without one is checked as strictly, its labels and value not read (``unread_sample``).
Samples with ``GPU_I_ID`` belong to a MIG GPU instance and are kept apart, under
their parent GPU's UUID. NaN values mean "unknown" and are dropped, as is anything
else that is not a finite number or is beyond any reading (``MAX_VALUE``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from swarmgpu.core.health import HealthSignals, signals_from_dcgm
from swarmgpu.core.peertext import peer_text
from swarmgpu.core.promtext import (
    TYPES,
    LineError,
    Sample,
    parse_help,
    parse_sample,
    parse_type,
    unread_sample,
)
from swarmgpu.core.samples import GpuSample

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
_MAX_ERRORS = 50  # a garbage page must not produce a garbage-sized error list
MAX_GPUS = 64  # per page (node); a page naming more is cut here and says so
MAX_MIG_PER_GPU = 16  # MIG instances kept per GPU (real GPUs have at most 7)
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
MAX_ID_LEN = 96  # UUID / hostname label values longer than this are not real
_HOST_LABELS = ("hostname", "Hostname")
PROCESS_MEMORY = "swarmgpu_gpu_process_memory_used_mib"  # swarmgpu.agent.metrics writes it
# Processes kept a GPU of another writer's page (an older agent's): past it, left out
# and said; the page is read. Not the agent's own cap (MAX_PROCESSES).
MAX_PROCESSES_READ = 512
_MAX_HOSTS = 4  # distinct hostname labels remembered: one is right, two already conflict
# What one page may cost before it is refused whole. The largest real page (tests/fixtures/
# captures: an A800 x8, MIG on one) has 276 lines, 226 samples, 10 of one metric and lines
# of at most 332 characters; MAX_GPUS GPUs, each with every DCGM field and its HELP and
# TYPE, stay below these. 4 MiB of short sample lines took ~2 s and ~100 MiB, past the
# fetch deadline, in the daemon's cycle.
MAX_PAGE_LINES = 16384  # every line, blank and comment too
MAX_METRIC_SAMPLES = 4096  # samples of one metric name: MAX_GPUS GPUs x MIG instances
# What the agent serves of a GPU's processes (the largest users of memory; the rest
# counted): its page then stays within MAX_METRIC_SAMPLES, which a manager before this
# one refused a page for, and within MAX_PAGE_LINES (64 x 512 would not).
MAX_PROCESSES = MAX_METRIC_SAMPLES // MAX_GPUS
MAX_LINE_LEN = 65536  # characters; a longer line is skipped unread
# The labels _collect reads: a sample keeps these alone, and only with a UUID (the rest
# were dropped there, after a page of them was held whole: ~100 MiB of label dicts).
_USED_LABELS = frozenset({"UUID", *_HOST_LABELS, "gpu", "GPU_I_ID", "GPU_I_PROFILE",
                          "modelName", "pci_bus_id", "pid", "service", "task", "container"})
# No GPU reading comes near this (DCGM's energy counter, in mJ, would take centuries at
# a kilowatt); 1e308 is finite, but two of them sum to inf and round(inf) raises, in the
# daemon's sums over MIG slices and processes. Beyond it a value is unknown, and said so.
MAX_VALUE = float(2**53)
# What a reading the daemon acts on can be: -5 % util looked idle (consolidation), 150 %
# hot; negative memory shrank a GPU's use. Others are bounded by MAX_VALUE alone.
_PERCENT = (0.0, 100.0)
_BOUNDS: dict[str, tuple[float, float]] = {
    UTIL: _PERCENT, MEM_COPY_UTIL: _PERCENT, "DCGM_FI_DEV_ENC_UTIL": _PERCENT,
    "DCGM_FI_DEV_DEC_UTIL": _PERCENT, FB_USED: (0.0, MAX_VALUE), FB_FREE: (0.0, MAX_VALUE),
    PROCESS_MEMORY: (0.0, MAX_VALUE),
}
# The types whose sample is one number, as every reading here is (DCGM_FI_DEV_* are gauges
# and counters); a histogram's or summary's own name carries no such number.
_READABLE = frozenset({"gauge", "counter", "untyped", "unknown"})
# The sample names a family has besides its own: a summary's and a histogram's, as expfmt
# reads them, and OpenMetrics' (a counter x's x_total, x_created; an info's x_info...).
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "summary": ("_count", "_sum", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "counter": ("_total", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "info": ("_info",),
}


@dataclass
class MigMetrics:
    """Values of one MIG GPU instance (``GPU_I_ID``) of a parent GPU."""

    gi_id: int
    profile: str | None
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessMetric:
    """One compute process on a GPU, as the agent names it (swarmgpu.agent.procattr)."""

    pid: int
    used_mib: float
    service: str = ""
    task: str = ""
    container: str = ""


@dataclass
class GpuMetrics:
    """Values of one whole GPU, keyed by metric name (``DCGM_FI_DEV_FB_USED`` ...)."""

    uuid: str
    index: int | None = None  # the page's gpu= label; None: none, or given two ways
    model_name: str | None = None
    pci_bus_id: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    mig: dict[int, MigMetrics] = field(default_factory=dict)
    processes: list[ProcessMetric] = field(default_factory=list)
    processes_left: int = 0  # listed past MAX_PROCESSES_READ: left out

    def get(self, metric: str) -> float | None:
        return self.values.get(metric)

    def health(self) -> HealthSignals | None:
        """XID, ECC, remapping... as the agent serves them (core.health); None: not given."""
        return signals_from_dcgm(self.values)

    @property
    def util_pct(self) -> float | None:
        return self.values.get(UTIL)

    @property
    def fb_used_mib(self) -> int | None:
        """Whole-GPU value, or the sum over its MIG instances when only those are given."""
        return _fb(self, FB_USED)

    @property
    def fb_free_mib(self) -> int | None:
        return _fb(self, FB_FREE)

    def to_sample(self) -> GpuSample:
        """The whole-GPU values as a GpuSample (unknown stays None)."""
        return GpuSample(
            uuid=self.uuid,
            index=self.index if self.index is not None else -1,
            util_pct=self.util_pct,
            fb_used_mib=self.fb_used_mib,
            fb_free_mib=self.fb_free_mib,
            mem_copy_util_pct=self.values.get(MEM_COPY_UTIL),
            temp_c=self.values.get(GPU_TEMP),
            power_w=self.values.get(POWER),
        )


def _fb(g: GpuMetrics, metric: str) -> int | None:
    if metric in g.values:
        return round(g.values[metric])
    parts = [m.values.get(metric) for m in g.mig.values()]
    if parts and all(p is not None for p in parts):
        return round(sum(p for p in parts if p is not None))
    return None


@dataclass
class ScrapeResult:
    samples_by_uuid: dict[str, GpuMetrics] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # Why the whole page was refused unread past a cap (MAX_PAGE_LINES...); None: read.
    refused: str | None = None
    # The host the page names, None when it names none or several: several hosts in one
    # node's page is ambiguous, and ``hostnames`` (at most _MAX_HOSTS, sorted) says which.
    hostname: str | None = None
    hostnames: tuple[str, ...] = ()

    def to_samples(self) -> list[GpuSample]:
        return sorted(
            (g.to_sample() for g in self.samples_by_uuid.values()),
            key=lambda s: (s.index, s.uuid),
        )


def small_int(text: str | None, most: int = 9999) -> int | None:
    """A small non-negative ASCII integer, or None ('²' and '٣' pass isdigit(), not this)."""
    if not text or len(text) > 7 or not text.isascii() or not text.isdigit():
        return None
    v = int(text)
    return v if v <= most else None


def _sane_id(text: str) -> bool:
    return 0 < len(text) <= MAX_ID_LEN and text.isascii() and text.isprintable()


class _Types:
    """A page's TYPE and HELP lines, held to what Prometheus refuses: one TYPE per name,
    before the name's first sample, of a type the format has; one HELP per name (two are
    two families run together). A name that breaks one, or whose type is no single
    number, is unknown for the page, said once."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.declared: dict[str, tuple[str, int]] = {}  # name -> (type, its line)
        self.helped: dict[str, int] = {}  # name -> the line of its HELP
        self.first: dict[str, int] = {}  # name -> the line of its first sample
        self.unknown: set[str] = set()

    def family(self, name: str) -> str:
        """The family declared before whose samples ``name`` names (a summary x's
        x_count), or ``name`` itself: a TYPE or HELP for it is that family's."""
        base, _, suffix = name.rpartition("_")
        kind = self.declared.get(base, ("", 0))[0]
        return base if "_" + suffix in _SUFFIXES.get(kind, ()) else name

    def help(self, n: int, name: str) -> None:
        key = self.family(name)
        if key in self.helped:
            self._refuse(n, name, f"a second HELP (line {self.helped[key]} gave one"
                                  f"{_part(name, key)})")
        self.helped.setdefault(key, n)

    def declare(self, n: int, name: str, kind: str) -> None:
        key = self.family(name)
        if key in self.declared:
            why = f"a second TYPE (line {self.declared[key][1]} gave one{_part(name, key)})"
        elif name in self.first:
            why = f"its TYPE after its samples (line {self.first[name]})"
        elif kind not in TYPES:
            why = f"TYPE {peer_text(kind, 32)!r}, no type of the format"
        else:
            why = ""
        self.declared.setdefault(key, (kind, n))
        if why:
            self._refuse(n, name, why)

    def _refuse(self, n: int, name: str, why: str) -> None:
        if name not in self.unknown:
            self.unknown.add(name)
            _note(self.errors, f"line {n}: {peer_text(name, 64)} has {why}; its samples "
                               "are unknown")

    def readable(self, n: int, s: Sample) -> bool:
        self.first.setdefault(s.name, n)
        if s.name in self.unknown:
            return False
        kind, at = self.declared.get(s.name, ("untyped", 0))
        if kind in _READABLE:
            return True
        if "UUID" in s.labels:  # a GPU's reading, not read as a gauge
            self.unknown.add(s.name)
            _note(self.errors, f"line {n}: {peer_text(s.name, 64)} is declared {kind} "
                               f"(line {at}), not a gauge or counter: no one reading; "
                               "unknown")
        return False


def _part(name: str, key: str) -> str:
    return "" if name == key else f" to its family {peer_text(key, 64)}"


def _samples(text: str, errors: list[str]) -> list[tuple[int, Sample]]:
    out: list[tuple[int, Sample]] = []
    types = _Types(errors)
    eof = 0  # the line of '# EOF', 0: none yet
    crlf = False  # a line ending in CR was said
    per_name: dict[str, int] = {}  # samples of each metric name so far
    for n, line in _lines(text, errors):
        if line.endswith("\r"):
            # Prometheus reads '5\r' as no number and refuses the page; said once.
            if not crlf:
                crlf = True
                _note(errors, f"line {n}: ends in CR (a CRLF line end), which Prometheus "
                              "refuses; skipped, as is every such line of the page (serve LF "
                              "line ends)")
            continue
        if eof:
            # OpenMetrics ends the page at '# EOF' and refuses what follows; 0.0.4 reads a
            # comment and goes on. Which one this page is (the scraper keeps no
            # Content-Type) decides what it says: two pages run together are neither.
            errors.insert(
                0,
                f"line {n}: text after '# EOF' (line {eof}), which ends an OpenMetrics "
                "page: two pages run together (a proxy?); the page is not read",
            )
            return []
        if line == "# EOF":
            eof = n
            continue
        if line.startswith("#"):
            _comment(n, line, types)
            continue
        m = _METRIC_NAME.match(line)
        if m is not None and m.group(0) != PROCESS_MEMORY:
            # (process series are capped a GPU in _collect, not refused for: one page
            # of a node with many is every GPU's readings; MAX_PAGE_LINES bounds them)
            _count(per_name, m.group(0), n)
        # A line without UUID is no GPU's reading (a UUID label reads UUID, quoted or
        # not): checked, not read, unless its form asks for the whole parse
        s = unread_sample(line) if "UUID" not in line else None
        try:
            s = s or parse_sample(line)
        except LineError as exc:
            # Only the metric name, never the line: what a page says is not echoed.
            what = f"{peer_text(m.group(0), 64)} " if m else ""
            _note(errors, f"line {n}: {what}sample cannot be parsed ({exc}); skipped")
            continue
        if not types.readable(n, s):
            continue
        if s.timestamp is not None:
            # A reading of another moment, in ms (0.0.4) or s (OpenMetrics): not this
            # scrape's. dcgm-exporter and the agent write none.
            _note(errors, f"line {n}: {peer_text(s.name, 64)} carries a timestamp, so it is "
                          "not a reading of now; skipped (serve samples without one)")
            continue
        if "UUID" in s.labels:
            used = {k: v for k, v in s.labels.items() if k in _USED_LABELS}
            out.append((n, Sample(s.name, used, s.value, None)))
    # A TYPE after a name's samples makes those before it unknown too.
    return [(n, s) for n, s in out if s.name not in types.unknown]


class _Refused(Exception):
    """A page past a cap: read no further; the message names the cap and the fix."""


def _lines(text: str, errors: list[str]) -> Iterator[tuple[int, str]]:
    """(number, line stripped of blanks) of each line that is not blank, one at a time: a
    list of every line of a page of short lines cost ~60 MiB before any was read. Lines end
    at LF alone: splitlines() would also break a label value at U+2028 or a form feed, which
    the format allows inside it. Past MAX_PAGE_LINES, ``_Refused``; a line longer than
    MAX_LINE_LEN is skipped unread."""
    start, n = 0, 0
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        n += 1
        if n > MAX_PAGE_LINES:
            raise _Refused(f"more than {MAX_PAGE_LINES} lines (metrics_in.MAX_PAGE_LINES; "
                           "a real dcgm-exporter page has a few hundred)")
        if end - start > MAX_LINE_LEN:
            _note(errors, f"line {n}: longer than {MAX_LINE_LEN} characters, which no "
                          "exporter writes; skipped unread")
        else:
            line = text[start:end].strip(" \t")
            if line:
                yield n, line
        start = end + 1


def _count(per_name: dict[str, int], name: str, n: int) -> None:
    """One more sample line of ``name``; past MAX_METRIC_SAMPLES, ``_Refused``."""
    got = per_name[name] = per_name.get(name, 0) + 1
    if got > MAX_METRIC_SAMPLES:
        raise _Refused(f"more than {MAX_METRIC_SAMPLES} samples of {peer_text(name, 64)} "
                       f"(line {n}; metrics_in.MAX_METRIC_SAMPLES: one per GPU or MIG "
                       "instance)")


def _comment(n: int, line: str, types: _Types) -> None:
    """A TYPE or HELP line to ``types``; one that cannot be parsed is counted, ignored
    (the HELP text itself is not read: a broken one changes no reading)."""
    try:
        declared = parse_type(line)
    except LineError as exc:
        _note(types.errors, f"line {n}: a TYPE line cannot be parsed ({exc}); ignored")
        return
    if declared is not None:
        types.declare(n, *declared)
        return
    try:
        helped = parse_help(line)
    except LineError as exc:
        _note(types.errors, f"line {n}: a HELP line cannot be parsed ({exc}); ignored")
        return
    if helped is not None and helped[1]:
        types.help(n, helped[0])


def _note(errors: list[str], msg: str) -> None:
    if len(errors) < _MAX_ERRORS:
        errors.append(peer_text(msg))
    elif len(errors) == _MAX_ERRORS:
        errors.append("further errors left out")


def parse_metrics(text: str) -> ScrapeResult:
    """Per-GPU values from Prometheus text; broken lines are skipped and reported."""
    result = ScrapeResult()
    try:
        samples = _samples(text, result.errors)
    except _Refused as exc:
        # Bounded work, and no partial page: the cut would fall among one GPU's readings.
        result.refused = (f"page refused unread: {exc}; serve fewer series (dcgm-exporter's "
                          "-f counters file) or check rebalance.metrics_url_template")
        result.errors.insert(0, result.refused)
        return result
    _collect(samples, result)
    return result


def _label(labels: Mapping[str, str], key: str) -> str:
    """A free-text label (model, PCI id, MIG profile, process owner), cut and cleaned."""
    return peer_text(labels.get(key) or "", MAX_ID_LEN)


def _collect(samples: Iterable[tuple[int, Sample]], res: ScrapeResult) -> None:
    hosts: set[str] = set()
    more_hosts = False
    # (UUID, GPU_I_ID, metric) the page gave two values for: unknown, whatever follows.
    ambiguous: set[tuple[str, int | None, str]] = set()
    indexes: dict[str, dict[int, int]] = {}  # UUID -> gpu= label -> its first line
    for n, sample in samples:
        name, labels, value = sample.name, sample.labels, sample.value
        name = peer_text(name, 64) if len(name) > 64 or not name.isprintable() else name
        uuid = labels.get("UUID")
        if not uuid:
            continue
        if not _sane_id(uuid):
            _note(res.errors, f"{name}: a UUID label that is not a GPU UUID; skipped")
            continue
        for key in _HOST_LABELS:
            if labels.get(key):
                if _sane_id(labels[key]):
                    # A page may name a host per sample: remember a few, count the rest.
                    if len(hosts) < _MAX_HOSTS:
                        hosts.add(labels[key])
                    elif labels[key] not in hosts:
                        more_hosts = True
                else:
                    _note(res.errors, f"{name}: a {key} label that is not a host name")
        # Both spellings in one sample are both read: two names are two hosts (judge).
        if math.isnan(value):
            continue  # NaN: the exporter could not say; unknown, not 0
        lo, hi = _BOUNDS.get(name, (-MAX_VALUE, MAX_VALUE))
        if not lo <= value <= hi:  # +-Inf too: a value no GPU reads is not "unknown" silently
            _note(res.errors, f"line {n}: {name} of {uuid}: {value:.3g} is not a reading "
                              f"(it is {lo:g} to {hi:.3g}); unknown")
            # A good-looking value beside it in the page is no answer either.
            ambiguous.add((uuid, small_int(labels.get("GPU_I_ID")), name))
            continue
        gpu = res.samples_by_uuid.get(uuid)
        if gpu is None:
            if len(res.samples_by_uuid) >= MAX_GPUS:
                _note(res.errors, f"more than {MAX_GPUS} GPUs in one page; the rest ignored")
                continue
            gpu = res.samples_by_uuid[uuid] = GpuMetrics(uuid=uuid)
        index = small_int(labels.get("gpu"))
        if index is not None:
            indexes.setdefault(uuid, {}).setdefault(index, n)
        gpu.model_name = gpu.model_name or _label(labels, "modelName") or None
        gpu.pci_bus_id = gpu.pci_bus_id or _label(labels, "pci_bus_id") or None
        if name == PROCESS_MEMORY:
            pid = small_int(labels.get("pid"), most=2**22)  # the kernel's pid_max limit
            if pid is not None and len(gpu.processes) < MAX_PROCESSES_READ:
                gpu.processes.append(ProcessMetric(
                    pid, value, _label(labels, "service"), _label(labels, "task"),
                    _label(labels, "container")))
            elif pid is not None:
                gpu.processes_left += 1
                if gpu.processes_left == 1:  # (said once a GPU)
                    _note(res.errors, f"{uuid}: more than {MAX_PROCESSES_READ} processes; "
                                      "the rest left out (metrics_in.MAX_PROCESSES_READ)")
            continue
        gi = labels.get("GPU_I_ID")
        gi_id = None
        if gi is not None:
            gi_id = small_int(gi)
            if gi_id is None:
                _note(res.errors, f"{name}: GPU_I_ID of {uuid} is not a small number")
                continue
            mig = gpu.mig.get(gi_id)
            if mig is None:
                if len(gpu.mig) >= MAX_MIG_PER_GPU:
                    _note(res.errors, f"{uuid}: more than {MAX_MIG_PER_GPU} MIG instances")
                    continue
                prof = _label(labels, "GPU_I_PROFILE") or None
                mig = gpu.mig[gi_id] = MigMetrics(gi_id, prof)
            target = mig.values
        else:
            target = gpu.values
        # k8s pod labels repeat a GPU's sample with the same value; two values for one
        # reading are two answers: neither is taken (which one came first is no reason).
        what = (uuid, gi_id, name)
        if what in ambiguous:
            continue
        if name in target and target[name] != value:
            _note(res.errors, f"line {n}: {name} of {uuid} has two values in one page "
                              f"({target.pop(name):.6g} and {value:.6g}); unknown")
            ambiguous.add(what)
            continue
        target[name] = value
    _set_indexes(res, indexes)
    if hosts:
        res.hostnames = tuple(sorted(hosts))
        res.hostname = res.hostnames[0] if len(hosts) == 1 and not more_hosts else None
        if len(hosts) > 1 or more_hosts:
            more = ", and more" if more_hosts else ""
            _note(res.errors, f"several hostnames in one scrape: {sorted(hosts)}{more}")


def _set_indexes(res: ScrapeResult, indexes: Mapping[str, Mapping[int, int]]) -> None:
    """Each GPU's ``gpu=`` label where it gives one, and no other GPU gives the same: of
    two, the first is no answer. (The manager names a GPU by its facts' index, by UUID.)"""
    holders: dict[int, list[tuple[int, str]]] = {}  # index -> (line, UUID), each GPU's
    for uuid, given in indexes.items():
        for index, n in given.items():
            holders.setdefault(index, []).append((n, uuid))
    for uuid, given in indexes.items():
        if len(given) > 1:
            (i, at), (j, jt) = sorted(given.items(), key=lambda kv: kv[1])[:2]
            _note(
                res.errors,
                f"line {jt}: {uuid} is gpu {j}, and gpu {i} on line {at}: one GPU with two "
                "indexes; its index unknown",
            )
        elif len(holders[index := next(iter(given))]) == 1:
            res.samples_by_uuid[uuid].index = index
    for index, who in sorted(holders.items()):
        if len(who) > 1:
            (at, a), (bt, b) = sorted(who)[:2]
            _note(
                res.errors,
                f'line {bt}: gpu="{index}" is {b}, and {a} on line {at}: two GPUs with one '
                "index; their indexes unknown",
            )
