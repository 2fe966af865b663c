"""Reading the openb CSV files (Alibaba cluster-trace-gpu-v2023, CC BY 4.0).

Node files: ``sn,cpu_milli,memory_mib,gpu,model``. Pod files: the 11-column form
(``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time``) or the 5-column form (``name,...,gpu_milli``).
"""

from __future__ import annotations

import csv
import io
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from swarmgpu.allocator.fragmentation import product_matches
from swarmgpu.allocator.values import Demand, GpuSpec, NodeSpec
from swarmgpu.core.boundedfile import NotRegularFile, open_regular
from swarmgpu.core.model import MAX_GPUS
from swarmgpu.core.peertext import escaped

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")

# A list is read whole (the replay and the derivation need every row), so it is bounded
# while it is read, before a huge file takes the memory (docs/simulate.md, "Input files").
MAX_ROWS = 1_000_000  # openb's lists: ~8,000 pods, 1,213 nodes; load500 derives 36,396
MAX_TEXT = 256 * 1024 * 1024  # characters; 1,000,000 openb rows are ~70 MB
MAX_LINE = 64 * 1024  # characters in a line; openb's longest has 119
MAX_COLUMNS = 64  # each row is a dict of every column; openb's have 11
# Any number: openb's largest is 12,902,960 (a time, seconds); up to here a float is exact.
MAX_NUMBER = 10**15
WHOLE = f"a whole number from 0 to {MAX_NUMBER:,}"


T = TypeVar("T")


class TraceError(ValueError):
    """A trace file that cannot be read, with the file, line and fix."""


# slots: a long list holds a million of them (a __dict__ each was 300 bytes more).
@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU; 1000 = whole
    gpu_spec: tuple[str, ...] = ()
    creation_time: int | None = None
    deletion_time: int | None = None

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def demand(self) -> Demand:
        share = 0 < self.gpu_milli < 1000
        if share and self.num_gpu != 1:
            raise TraceError(
                f"pod {self.name}: a share of {self.gpu_milli} milli on "
                f"{self.num_gpu} GPUs; shares must be on one GPU"
            )
        return Demand(
            num_gpu=0 if share or self.gpu_milli == 0 else self.num_gpu,
            gpu_milli=self.gpu_milli if share else 0,
            products=self.gpu_spec,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
        )


class _Hashed(io.RawIOBase):
    """The opened file, each byte read also handed to ``seen`` (a hash's update): a
    digest of the very bytes the rows came from, with no second open of the path."""

    def __init__(self, fd: int, seen: Callable[[memoryview], object]) -> None:
        self.raw, self.seen = io.FileIO(fd, "r"), seen

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.raw.readinto(b) or 0
        self.seen(memoryview(b)[:n])
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def _text(fd: int, seen: Callable[[memoryview], object] | None) -> TextIO:
    # utf-8-sig: a CSV saved by Excel starts with a BOM, which would otherwise hide the
    # first column's name. surrogateescape: a byte that is not UTF-8 reaches _Lines as
    # a lone surrogate, refused there at its line (the decoder's own error gave an
    # offset into the chunk it was decoding, not into the file).
    if seen is None:
        return open(fd, newline="", encoding="utf-8-sig", errors="surrogateescape")
    return io.TextIOWrapper(io.BufferedReader(_Hashed(fd, seen)), encoding="utf-8-sig",
                            errors="surrogateescape", newline="")


def read_csv(
    path: str | Path, required: tuple[str, ...], expected: str = ""
) -> tuple[list[str], list[dict[str, str]]]:
    """An openb CSV as (header, rows), the header holding ``required`` once each;
    ``TraceError`` naming the file and the fix otherwise (``expected``: what the file
    should be, for the missing-column error). ``simulate-derive`` and the benchmarks
    read with it, ``simulate`` with ``read_each``; ``MAX_ROWS``, ``MAX_TEXT``,
    ``MAX_LINE`` and ``MAX_COLUMNS`` bound it while it reads."""
    return read_each(path, required, lambda row, _n: row, expected)


def read_each(
    path: str | Path,
    required: tuple[str, ...],
    make: Callable[[dict[str, str], int], T],
    expected: str = "",
    seen: Callable[[memoryview], object] | None = None,
) -> tuple[list[str], list[T]]:
    """``read_csv`` with each row handed to ``make`` (the row, the file's line it starts
    on: 2 for the first, unless blank lines or a quoted line break come before) as it is
    read, and only what ``make`` returns kept: a row as a dict of strings is about 1 KB,
    ten times what the typed pod made of it holds (docs/simulate.md). ``seen``: handed
    every byte of the file as it is read (``hashlib.sha256().update``)."""
    p = Path(path)
    try:
        with _text(open_regular(p), seen) as fh:
            lines = _Lines(fh, p)
            reader = csv.DictReader(lines)
            header = list(reader.fieldnames or [])
            if len(header) > MAX_COLUMNS:
                raise TraceError(
                    f"{p}: {len(header)} columns; at most {MAX_COLUMNS} (openb's "
                    "have 11): is it a pod list?"
                )
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError(f"{p}: {_header_problem(header, required, missing, expected)}")
            # DictReader keeps the last of two same-named columns: which one was meant?
            twice = sorted({c for c in header if header.count(c) > 1})
            if twice:
                raise TraceError(
                    f"{p}: column(s) {twice} more than once in the header; keep one of each"
                )
            rows: list[T] = []
            while True:
                lines.start = 0
                if (row := next(reader, None)) is None:
                    break
                if len(rows) == MAX_ROWS:
                    raise TraceError(
                        f"{p}: more than {MAX_ROWS:,} rows; not read (simulate "
                        f"takes at most {MAX_ROWS:,} pods or nodes; openb's lists "
                        "have about 8,000): give a shorter list, e.g. a sample "
                        "of this one"
                    )
                # DictReader files extra fields under None and fills missing ones with
                # None: which column a value was meant for is a guess.
                if None in row or None in row.values():
                    extra = row.get(None) or ()
                    got = len(header) - sum(row.get(c) is None for c in header) + len(extra)
                    raise TraceError(
                        f"{p}:{lines.start}: {got} fields where the header "
                        f"has {len(header)}; give each row one field per column"
                    )
                rows.append(make(row, lines.start))
            return header, rows
    except NotRegularFile as e:  # a FIFO hung the open; a pipe was empty when read again
        raise TraceError(f"{p}: {e.why}; save the list as a file and give its path") from e
    except OSError as e:
        raise TraceError(f"{p}: cannot read ({e.strerror}); check the path") from e
    except csv.Error as e:
        raise TraceError(f"{p}: not a CSV file ({e})") from e


def _header_problem(
    header: list[str], required: tuple[str, ...], missing: list[str], expected: str
) -> str:
    """What is wrong with a header that lacks ``missing``, and the fix: a header that
    only looks right (a space after each comma, capitals, another separator) was
    "missing column(s)" listing the very names it seemed to have."""
    start = f"header starting {','.join(required)}"
    if not any(h.strip() for h in header):
        return f"empty; expected a header line starting {','.join(required)}"
    if len(header) == 1 and (sep := next((c for c in ";\t|" if c in header[0]), None)):
        return (
            f"its columns are separated by {'tabs' if sep == chr(9) else repr(sep)}; "
            f"simulate reads comma-separated lists: save it as CSV with commas ({start})"
        )
    near = [f"{h!r} for {c!r}" for c in missing for h in header if h.strip().lower() == c]
    if near:
        more = f" and {len(near) - 2} more" if len(near) > 2 else ""
        return (
            f"the header has {', '.join(near[:2])}{more} (spaces or capitals); write each "
            f"name exactly as openb's ({start})"
        )
    return f"missing column(s) {missing}; expected {expected}{' with ' if expected else ''}{start}"


# A byte that is not UTF-8, as surrogateescape decodes it.
_UNDECODED = re.compile("[\udc80-\udcff]")
# What a file that is no UTF-8 text starts with, decoded so (yamlfile names the same BOMs).
_NOT_TEXT = (
    ("\udcff\udcfe\x00\x00", "UTF-32 text (its byte order mark)"),
    ("\x00\x00\udcfe\udcff", "UTF-32 text (its byte order mark)"),
    ("\udcff\udcfe", "UTF-16 text (its byte order mark)"),
    ("\udcfe\udcff", "UTF-16 text (its byte order mark)"),
)


def _not_utf8(p: Path, n: int, line: str, bad: re.Match[str]) -> TraceError:
    if n == 1 and line.startswith("\x1f\udc8b"):
        return TraceError(
            f"{p}: not a UTF-8 CSV: gzip-compressed; decompress it (gunzip) and give the .csv"
        )
    kind = next((k for head, k in _NOT_TEXT if n == 1 and line.startswith(head)), None)
    if kind is not None:
        return TraceError(f"{p}: not a UTF-8 CSV: {kind}; save it as UTF-8")
    byte = ord(bad.group()) - 0xDC00
    return TraceError(f"{p}:{n}: not a UTF-8 CSV (byte {byte:#04x} on this line); save it as UTF-8")


class _Lines:
    """The file's lines for the CSV reader, refused past ``MAX_LINE`` or ``MAX_TEXT``
    as they are read: a line is never read whole before it is measured. ``start``: the
    first line that is not blank since it was set to 0, the line a row starts on (the
    reader skips blank lines and reads on past a quoted line break: rows are not lines)."""

    def __init__(self, fh: TextIO, p: Path) -> None:
        self.fh, self.p = fh, p
        self.n = self.total = self.start = 0

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = self.fh.readline(MAX_LINE + 1)
        if not line:
            raise StopIteration
        self.n += 1
        # Checked first: a compressed or UTF-16 file's first "line" may be any length.
        if not line.isascii() and (bad := _UNDECODED.search(line)):
            raise _not_utf8(self.p, self.n, line, bad)
        if len(line) > MAX_LINE:
            raise TraceError(
                f"{self.p}:{self.n}: a line longer than {MAX_LINE:,} characters; not read "
                "(openb's lines have about 100): is it a pod list?"
            )
        self.total += len(line)
        if self.total > MAX_TEXT:
            raise TraceError(
                f"{self.p}: more than {MAX_TEXT:,} characters "
                f"({MAX_TEXT / 2**20:g} MiB); not read (1,000,000 openb rows are "
                "about 70 MB): give a shorter list, e.g. a sample of this one"
            )
        if not self.start and line.strip("\r\n"):
            self.start = self.n
        return line


def whole(raw: str) -> int | None:
    """The whole number 0..``MAX_NUMBER`` that ``raw`` writes (``1000.0`` too), or None:
    a negative, fractional, NaN or infinite value is a broken trace, not something to
    truncate or to crash on, and one past ``MAX_NUMBER`` is no resource or time a trace
    has (read through a float it was no longer the number written)."""
    if raw.isascii() and raw.isdigit():  # exact, and int() never sees 4,300 digits
        return int(raw) if len(raw) <= 16 and int(raw) <= MAX_NUMBER else None
    try:
        x = float(raw)
    except ValueError:
        return None
    return int(x) if math.isfinite(x) and 0 <= x <= MAX_NUMBER and x == int(x) else None


def _int(row: dict[str, str], col: str, where: str, default: int | None = None) -> int:
    raw = (row.get(col) or "").strip()
    if raw == "" and default is not None:
        return default
    if (x := whole(raw)) is None:
        raise TraceError(f"{where}: column {col} = {raw!r} is not {WHOLE}")
    return x


def _name(row: dict[str, str], col: str, what: str, where: str, seen: dict[str, str]) -> str:
    """The row's name: printed in errors and keying the replay, so no control characters
    (an escape sequence would reach the terminal) and no name twice (they would collide)."""
    name = row.get(col) or ""
    if not name.strip():  # two blank names collided as "also on line"; one printed as nothing
        raise TraceError(f"{where}: {what} name is empty; give each row a name")
    if escaped(name) != name:
        raise TraceError(
            f"{where}: {what} name '{escaped(name)}' has control characters; remove them"
        )
    if name in seen:
        raise TraceError(
            f"{where}: {what} name {name!r} also on line {seen[name]}; names must be unique"
        )
    seen[name] = where.rsplit(":", 1)[1]
    return name


def _models(row: dict[str, str], col: str, where: str) -> str:
    """A GPU model cell (node model, pod gpu_spec): keys the matching and is printed
    (the note on pods no node can take), so no control characters, as names."""
    raw = row.get(col) or ""
    if escaped(raw) != raw:
        raise TraceError(f"{where}: {col} '{escaped(raw)}' has control characters; remove them")
    return raw


def gpu_ask_problem(num_gpu: int, gpu_milli: int) -> str | None:
    """Why a pod row's GPU ask is none a placement can give, and the fix; or None.
    gpu_milli is per GPU: above 1000 (once read as a whole GPU) or on no GPU (once
    refused only mid-replay). ``simulate-derive`` reads its rows by the same rules."""
    if gpu_milli > 1000:
        return (f"gpu_milli {gpu_milli} is per GPU, at most 1000; for several GPUs set "
                "num_gpu and gpu_milli 1000")
    if num_gpu == 0 and gpu_milli > 0:
        return (f"num_gpu 0 with gpu_milli {gpu_milli}; give num_gpu 1 for a share, or "
                "gpu_milli 0 for a CPU-only pod")
    if 0 < gpu_milli < 1000 and num_gpu > 1:  # as Demand and the daemon read a share
        return (f"num_gpu {num_gpu} with gpu_milli {gpu_milli}; a share (gpu_milli below "
                f"1000) is of one GPU: give num_gpu 1, or gpu_milli 1000 for {num_gpu} "
                "whole GPUs")
    return None


def load_nodes(path: str | Path) -> list[NodeSpec]:
    seen: dict[str, str] = {}
    # One tuple of GPUs per (model, count), shared by the nodes that have it: the GPUs
    # are frozen values, and 8 of them a node were most of a long list's memory.
    gpus: dict[tuple[str, int], tuple[GpuSpec, ...]] = {}

    def node(row: dict[str, str], n: int) -> NodeSpec:
        where = f"{path}:{n}"
        name = _name(row, "sn", "node", where, seen)
        model = _models(row, "model", where).strip()
        count = _int(row, "gpu", where)
        if count > MAX_GPUS:  # each GPU is an object: a billion of them took all the memory
            raise TraceError(
                f"{where}: column gpu = {count}; at most {MAX_GPUS} GPUs a node (as the "
                "swarmgpu agent reports; openb's nodes have 8 at most)"
            )
        if (model, count) not in gpus:
            gpus[model, count] = tuple(
                GpuSpec(index=i, product=model, memory_mib=0) for i in range(count)
            )
        return NodeSpec(
            name=name,
            gpus=gpus[model, count],
            cpu_milli=_int(row, "cpu_milli", where),
            memory_mib=_int(row, "memory_mib", where),
        )

    return read_each(path, NODE_COLUMNS, node)[1]


def load_pods(path: str | Path) -> list[TracePod]:
    seen: dict[str, str] = {}

    def pod(row: dict[str, str], n: int) -> TracePod:
        where = f"{path}:{n}"
        name = _name(row, "name", "pod", where, seen)
        num_gpu, gpu_milli = _int(row, "num_gpu", where), _int(row, "gpu_milli", where)
        if (why := gpu_ask_problem(num_gpu, gpu_milli)) is not None:
            raise TraceError(f"{where}: {why}")
        # Each model stripped, as the daemon reads swarmgpu.gpu-product: a blank cell pinned
        # the pod to a model named " ", which no node has.
        spec = tuple(m for s in _models(row, "gpu_spec", where).split("|") if (m := s.strip()))
        ct, dt = row.get("creation_time"), row.get("deletion_time")
        created = _int(row, "creation_time", where) if ct else None
        deleted = _int(row, "deletion_time", where) if dt else None
        if created is not None and deleted is not None and deleted < created:
            raise TraceError(  # --departures took it for a pod living 0 s
                f"{where}: deletion_time {deleted} is before creation_time {created}; a pod "
                "leaves after it arrives (seconds, as openb's)"
            )
        return TracePod(
            name=name,
            cpu_milli=_int(row, "cpu_milli", where),
            memory_mib=_int(row, "memory_mib", where),
            num_gpu=num_gpu,
            gpu_milli=gpu_milli,
            gpu_spec=spec,
            creation_time=created,
            deletion_time=deleted,
        )

    # Each row becomes its pod as it is read: the rows are not all held as dicts first.
    return read_each(path, POD_COLUMNS, pod)[1]


def load_trace(
    nodes_path: str | Path, pods_path: str | Path
) -> tuple[list[NodeSpec], list[TracePod]]:
    """Both lists, refused where no replay can be made of them, before one starts: no
    GPU on any node (every share of the cluster's GPU divides by it: a ZeroDivisionError)
    and no pod asking for one (the replay adds pods until their GPU asks reach 130% of
    the cluster's: it drew pods for ever)."""
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    if not nodes:
        raise TraceError(f"{nodes_path}: no nodes; give an openb node list")
    if not any(n.gpus for n in nodes):
        raise TraceError(
            f"{nodes_path}: no node has a GPU (column gpu is 0 in every row); simulate "
            "replays GPU pods: give a node list with some"
        )
    if not pods:
        raise TraceError(f"{pods_path}: no pods; give an openb pod list")
    if not any(p.total_gpu_milli for p in pods):
        raise TraceError(
            f"{pods_path}: no pod asks for a GPU (num_gpu and gpu_milli are 0 in every row); "
            "simulate replays GPU pods: give a pod list with some"
        )
    return nodes, pods


def say_unplaceable(
    nodes: list[NodeSpec],
    pods: list[TracePod],
    nodes_path: str | Path,
    pods_path: str | Path,
    stream: TextIO | None = None,
) -> None:
    """A line on stderr for each kind of GPU pod no policy can place, said once: pinned
    (gpu_spec) to models no node with a GPU has, matched as the allocator matches them;
    asking more whole GPUs than any node of its models has (a pod's GPUs are on one
    node); asking more CPU or memory than any node with such GPUs has (a node list
    with cpu_milli in cores failed every pod). The table counted them failed with
    nothing said why (a typo, or the wrong node list); nothing here changes a figure."""
    most: dict[str, int] = {}  # model -> the most GPUs one node of it has
    for n in nodes:
        if n.gpus:
            most[n.gpus[0].product] = max(most.get(n.gpus[0].product, 0), len(n.gpus))
    fits: dict[tuple[str, ...], int] = {}  # per gpu_spec (a list has a few): the most
    count, asked, big, shown = 0, set[str](), 0, list[str]()  # shown: the first 10 named
    small = _TooSmall(nodes)
    for p in pods:
        if not p.total_gpu_milli:
            continue
        if p.gpu_spec not in fits:
            fits[p.gpu_spec] = max(
                (k for m, k in most.items() if not p.gpu_spec or product_matches(m, p.gpu_spec)),
                default=0,
            )
        if not fits[p.gpu_spec]:
            count += 1
            asked.update(p.gpu_spec)
        elif p.gpu_milli == 1000 and p.num_gpu > fits[p.gpu_spec]:  # whole GPUs (Demand)
            big += 1
            if len(shown) < 10:
                of = "|".join(p.gpu_spec) or "any model"
                shown.append(
                    f"{p.name} asks {p.num_gpu} of {of} (at most {fits[p.gpu_spec]} a node)"
                )
        else:
            small.check(p)
    out = stream if stream is not None else sys.stderr
    if count:
        print(
            f"simulate: {count} GPU pod{'s' if count > 1 else ''} of {pods_path} "
            f"ask{'' if count > 1 else 's'} for GPU models no node of {nodes_path} has "
            f"({_listed(asked)}): no policy can place them (the nodes' models: "
            f"{_listed(set(most))})",
            file=out,
        )
    if big:
        more = f" and {big - len(shown)} more" if big > len(shown) else ""
        print(
            f"simulate: {big} GPU pod{'s' if big > 1 else ''} of {pods_path} "
            f"ask{'' if big > 1 else 's'} more GPUs than any node of {nodes_path} "
            "with their GPU model has: no policy can place them (a pod's GPUs are on one "
            f"node): {', '.join(shown)}{more}",
            file=out,
        )
    if small.count:
        left = small.count - len(small.shown)
        more = f" and {left} more" if left else ""
        print(
            f"simulate: {small.count} GPU pod{'s' if small.count > 1 else ''} of {pods_path} "
            f"ask{'' if small.count > 1 else 's'} more CPU or memory than any node of "
            f"{nodes_path} with their GPUs has: no policy can place them (cpu_milli is "
            f"thousandths of a CPU, memory_mib MiB): {', '.join(small.shown)}{more}",
            file=out,
        )


class _TooSmall:
    """GPU pods that some node's GPUs fit but no such node's CPU and memory: counted,
    the first ten named. The nodes' (CPU, memory) per GPU model and count are kept as
    the few pairs no other beats, per (gpu_spec, GPUs needed) asked."""

    def __init__(self, nodes: list[NodeSpec]) -> None:
        unset = sys.maxsize  # a NodeSpec without a CPU or memory figure has no limit
        self.nodes = {
            (n.gpus[0].product, len(n.gpus), unset if n.cpu_milli is None else n.cpu_milli,
             unset if n.memory_mib is None else n.memory_mib)
            for n in nodes if n.gpus
        }
        self.room: dict[tuple[tuple[str, ...], int], list[tuple[int, int]]] = {}
        self.count = 0
        self.shown: list[str] = []

    def check(self, p: TracePod) -> None:
        need = p.num_gpu if p.gpu_milli == 1000 else 1  # whole GPUs on one node, or a share
        key = (p.gpu_spec, need)
        if key not in self.room:
            pairs = {(c, m) for model, k, c, m in self.nodes
                     if k >= need and (not p.gpu_spec or product_matches(model, p.gpu_spec))}
            self.room[key] = [
                a for a in pairs if not any(b != a and b[0] >= a[0] and b[1] >= a[1] for b in pairs)
            ]
        room = self.room[key]
        if not room or any(c >= p.cpu_milli and m >= p.memory_mib for c, m in room):
            return  # no node of its GPUs at all is the other notes' to say
        self.count += 1
        if len(self.shown) < 10:
            of = "|".join(p.gpu_spec) or "any model"
            self.shown.append(
                f"{p.name} asks {p.cpu_milli} milli-CPU and {p.memory_mib} MiB of {of} (at "
                f"most {max(c for c, _ in room)} milli-CPU and {max(m for _, m in room)} MiB "
                "a node)"
            )


def _listed(names: set[str], most: int = 10) -> str:
    shown = sorted(names)[:most]
    return ", ".join(shown) + (f" and {len(names) - most} more" if len(names) > most else "")
