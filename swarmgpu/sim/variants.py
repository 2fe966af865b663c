"""Heavier openb workloads derived from the default pod list.

Alibaba publishes the openb variants (``gpushare40``, ``multigpu20``, ...) but not the
script that made them (neither alibaba/clusterdata ``cluster-trace-gpu-v2023/`` nor
hkust-adsl/kubernetes-scheduler-simulator ``data/`` has one; their READMEs only say the
variants are "sampled from the default one"). The rules below are read off the published
files themselves, one per family, and ``tests/test_variants.py`` checks that they
reproduce the published files' statistics:

- ``gpushareNN``: CPU-only pods kept; the GPU pods, as many as the input has, are drawn
  with replacement from its sharing pods (one GPU, < 1000 milli) and its other GPU pods,
  in the mix that makes sharing pods NN% of the GPU request (milli).
- ``multigpuNN``: every input pod kept; multi-GPU pods drawn with replacement from the
  input's are added until they hold NN% of the GPU request.
- ``gpuspecNN``: every pod kept; about NN% of the GPU pods get a ``gpu_spec`` (model
  constraint). Sharing pods are picked 0.77 times as often as whole-GPU pods and
  multi-GPU pods 0.92 times, and the spec is drawn per kind of pod from what the
  published gpuspec files give that kind (``SPEC_TABLE``), as they do.
- ``cpuNNN``: GPU pods kept; CPU-only pods are NN.N% of all pods (per mille in the name:
  ``cpu050`` = 5.0%, ``cpu250`` = 25.0%), sampled from the input's CPU-only pods
  without replacement when fewer are needed, with replacement when more.
- ``loadNNN`` (not an openb family; for ``simulate --priorities`` under contention):
  every input pod kept; GPU pods drawn with replacement (times and all) are added until
  the GPU request is NNN% of the input's (``load150``: half as much again). The copies
  arrive and leave with their originals, so the cluster is asked for more than it holds
  at the trace's busiest time.

Every output row is a verbatim copy of an input row (all columns), renamed
``openb-pod-NNNN`` in output order (by ``creation_time`` when the column is there).
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import json
import random
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from swarmgpu.core.boundedfile import file_kind
from swarmgpu.core.statefile import replace_whole
from swarmgpu.sim.trace import (
    POD_COLUMNS,
    WHOLE,
    TraceError,
    gpu_ask_problem,
    read_each,
    whole,
)

Row = dict[str, str]

KINDS = ("gpushare", "multigpu", "gpuspec", "cpu", "load")
# What the lead asked for (heavier than the published gpushare40/multigpu20/gpuspec10/cpu050).
DEFAULT_VARIANTS = (
    "gpuspec20",
    "gpuspec30",
    "gpuspec40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    "multigpu30",
    "multigpu40",
    "multigpu50",
    "cpu100",
    "cpu150",
    "cpu250",
)
DEFAULT_SEED = 42

# gpu_spec strings per kind of GPU pod, counted over the five published gpuspec files
# (hkust-adsl/kubernetes-scheduler-simulator data/csv/openb_pod_list_gpuspec{05,10,20,25,33}.csv,
# commit 8f3d641; Alibaba cluster-trace-gpu-v2023, CC BY 4.0). Kept verbatim, repeated
# models included: they are what the production pods asked for.
SPEC_TABLE: dict[str, dict[str, int]] = {
    "share": {"T4": 1609, "P100": 839, "G2|P100|T4|V100M16|V100M32": 45},
    "whole": {
        "T4": 1865,
        "G2": 933,
        "V100M16|V100M32": 435,
        "P100|V100M16|V100M32": 268,
        "G3": 209,
        "P100|T4|V100M16|V100M32": 76,
        "G2|P100|T4|V100M16|V100M32": 74,
        "A10|G2|T4|V100M16|V100M32": 64,
        "V100M16|V100M32|V100M32": 63,
        "V100M32": 48,
        "P100|V100M16": 31,
        "A10|T4": 21,
        "V100M16": 17,
        "P100": 10,
        "A10|G2|P100|T4|V100M16|V100M32|V100M32": 10,
        "P100|T4": 1,
        "T4|V100M16|V100M32": 1,
    },
    "multi": {
        "G2": 33,
        "G3": 16,
        "V100M16|V100M32|V100M32": 7,
        "P100|V100M16|V100M32": 6,
        "V100M16|V100M32": 5,
        "T4|V100M16|V100M32": 3,
        "V100M32": 3,
    },
}
# How often each kind gets a spec relative to whole-GPU pods, in the same five files.
SPEC_WEIGHT = {"share": 0.77, "whole": 1.0, "multi": 0.92}


class VariantError(ValueError):
    """A variant that cannot be derived, with what to change."""


@dataclass(frozen=True)
class Variant:
    kind: str
    fraction: float  # 0..1

    @property
    def name(self) -> str:
        if self.kind == "cpu":
            return f"cpu{round(self.fraction * 1000):03d}"
        if self.kind == "load":
            return f"load{round(self.fraction * 100):03d}"
        return f"{self.kind}{round(self.fraction * 100):02d}"


def parse_variant(name: str) -> Variant:
    """``gpushare60`` -> (gpushare, 0.60); ``cpu250`` -> (cpu, 0.25): per mille, as in openb;
    ``load150`` -> (load, 1.5): percent of the input's GPU request."""
    m = re.fullmatch(r"(gpushare|multigpu|gpuspec|cpu|load)(\d+)", name.strip())
    if not m:
        raise VariantError(
            f"variant {name!r}: expected gpushareNN, multigpuNN, gpuspecNN "
            "(NN = percent), cpuNNN (per mille of pods) or loadNNN (percent "
            "of the GPU request), e.g. gpushare60, cpu250, load150"
        )
    kind, digits = m.group(1), m.group(2)
    if kind == "load":
        if len(digits) != 3 or not 100 < int(digits) <= 500:
            raise VariantError(
                f"variant {name!r}: load variants name the GPU request in "
                "percent of the input's with three digits, above 100 and at "
                "most 500 (load150 = half as much again)"
            )
        return Variant(kind, int(digits) / 100)
    if kind == "cpu":
        if len(digits) != 3:
            raise VariantError(
                f"variant {name!r}: cpu variants name CPU-only pods per mille "
                "with three digits as openb does (cpu050 = 5.0%, cpu250 = 25.0%)"
            )
        frac = int(digits) / 1000
    else:
        frac = int(digits) / 100
    if kind in ("multigpu", "cpu") and not frac < 1:
        raise VariantError(f"variant {name!r}: {kind} needs a share below 100%")
    if frac > 1:
        raise VariantError(f"variant {name!r}: {frac:.0%} is more than 100%")
    return Variant(kind, frac)


def read_rows(
    path: str | Path, seen: Callable[[memoryview], object] | None = None
) -> tuple[list[str], list[Row]]:
    """The pod CSV as (header, rows), checked enough that derivation cannot crash;
    ``seen``: handed the file's bytes as they are read (``trace.read_each``)."""
    p = Path(path)

    def checked(row: Row, n: int) -> Row:  # n: the line the row is on
        for col in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"):
            raw = (row.get(col) or "").strip()
            # ASCII digits: the rows are copied as written, and read again with int()
            if not (raw.isascii() and raw.isdigit()) or whole(raw) is None:
                raise TraceError(f"{p}:{n}: column {col} = {raw!r} is not {WHOLE}")
        # The times as load_pods reads them (a blank one is none): derive sorted one it
        # could not read as 0 and wrote it out for simulate to refuse in the derived file.
        times = {}
        for col in ("creation_time", "deletion_time"):
            raw = (row.get(col) or "").strip()
            if raw and (not (raw.isascii() and raw.isdigit()) or whole(raw) is None):
                raise TraceError(f"{p}:{n}: column {col} = {raw!r} is not {WHOLE}")
            times[col] = int(raw) if raw else None
        created, deleted = times["creation_time"], times["deletion_time"]
        if created is not None and deleted is not None and deleted < created:
            raise TraceError(
                f"{p}:{n}: deletion_time {deleted} is before creation_time {created}; a pod "
                "leaves after it arrives (seconds, as openb's)"
            )
        # As simulate reads the ask: a row it refuses was counted as another kind here
        # (2000 milli a whole GPU, num_gpu 0 a CPU pod) and copied into every variant.
        if (why := gpu_ask_problem(int(row["num_gpu"]), int(row["gpu_milli"]))) is not None:
            raise TraceError(f"{p}:{n}: {why}")
        return row

    header, rows = read_each(p, POD_COLUMNS, checked, "an openb pod list", seen)  # as simulate
    if not rows:
        raise TraceError(f"{p}: no pods; give the openb default pod list")
    return header, rows


def kind_of(row: Row) -> str:
    """cpu (no GPU), share (part of one GPU), whole (one GPU) or multi (2+ GPUs)."""
    num, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    if num == 0 or milli == 0:
        return "cpu"
    if milli < 1000:
        return "share"
    return "whole" if num == 1 else "multi"


def gpu_milli(row: Row) -> int:
    return 0 if kind_of(row) == "cpu" else int(row["num_gpu"]) * int(row["gpu_milli"])


def _pool(rows: list[Row], *kinds: str) -> list[Row]:
    return [r for r in rows if kind_of(r) in kinds]


def _need(pool: list[Row], what: str, variant: Variant) -> None:
    if not pool:
        raise VariantError(
            f"{variant.name}: the input has no {what} pods to sample; "
            "derive from the openb default pod list"
        )


def derive_gpushare(rows: list[Row], variant: Variant, rng: random.Random) -> list[Row]:
    cpu = _pool(rows, "cpu")
    shares, others = _pool(rows, "share"), _pool(rows, "whole", "multi")
    n = len(rows) - len(cpu)
    f = variant.fraction
    if f > 0:
        _need(shares, "GPU-sharing", variant)
    if f < 1:
        _need(others, "whole- or multi-GPU", variant)
    s_draw = [rng.choice(shares) for _ in range(n)] if shares else []
    o_draw = [rng.choice(others) for _ in range(n)] if others else []
    s_sum = [0]
    for r in s_draw:
        s_sum.append(s_sum[-1] + gpu_milli(r))
    o_sum = [0]
    for r in o_draw:
        o_sum.append(o_sum[-1] + gpu_milli(r))

    # k sharing pods + (n - k) others; the share of the request grows with k: take the k
    # whose share is nearest the target (the published files are within 0.1% of theirs).
    def frac(k: int) -> float:
        s = s_sum[k] if shares else 0
        o = o_sum[n - k] if others else 0
        return s / (s + o) if s + o else 0.0

    lo = 0 if others else n
    hi = n if shares else 0
    k = min(range(lo, hi + 1), key=lambda k: (abs(frac(k) - f), k))
    return cpu + s_draw[:k] + o_draw[: n - k]


def derive_multigpu(rows: list[Row], variant: Variant, rng: random.Random) -> list[Row]:
    multi = _pool(rows, "multi")
    _need(multi, "multi-GPU", variant)
    total = sum(gpu_milli(r) for r in rows)
    have = sum(gpu_milli(r) for r in multi)
    f = variant.fraction
    if have >= f * total:
        raise VariantError(
            f"{variant.name}: multi-GPU pods already hold {have / total:.1%} of "
            "the GPU request; this family only adds multi-GPU pods, so ask for more"
        )
    added: list[Row] = []
    while have < f * total:  # terminates: f < 1 and every multi pod adds >= 2000 milli
        r = rng.choice(multi)
        added.append(r)
        have += gpu_milli(r)
        total += gpu_milli(r)
    return rows + added


def derive_load(rows: list[Row], variant: Variant, rng: random.Random) -> list[Row]:
    gpu_rows = [r for r in rows if kind_of(r) != "cpu"]
    _need(gpu_rows, "GPU", variant)
    want = variant.fraction * sum(gpu_milli(r) for r in gpu_rows)
    have = sum(gpu_milli(r) for r in gpu_rows)
    added: list[Row] = []
    while have < want:  # terminates: every GPU pod adds > 0 milli
        r = rng.choice(gpu_rows)
        added.append(r)
        have += gpu_milli(r)
    return rows + added


def derive_gpuspec(rows: list[Row], variant: Variant, rng: random.Random) -> list[Row]:
    gpu_rows = [r for r in rows if kind_of(r) != "cpu"]
    if not gpu_rows:
        raise VariantError(f"{variant.name}: the input has no GPU pods to constrain")
    mean_w = sum(SPEC_WEIGHT[kind_of(r)] for r in gpu_rows) / len(gpu_rows)
    tables = {k: (list(t), _cumulative(list(t.values()))) for k, t in SPEC_TABLE.items()}
    out: list[Row] = []
    for r in rows:
        kind = kind_of(r)
        # A spec the input already has is kept: only unconstrained GPU pods are candidates.
        if kind != "cpu" and not (r.get("gpu_spec") or "").strip():
            p = min(1.0, variant.fraction * SPEC_WEIGHT[kind] / mean_w)
            if rng.random() < p:
                specs, cum = tables[kind]
                pick = specs[bisect.bisect_right(cum, rng.random() * cum[-1])]
                r = {**r, "gpu_spec": pick}
        out.append(r)
    return out


def _cumulative(weights: list[int]) -> list[int]:
    out, acc = [], 0
    for w in weights:
        acc += w
        out.append(acc)
    return out


def derive_cpu(rows: list[Row], variant: Variant, rng: random.Random) -> list[Row]:
    cpu = _pool(rows, "cpu")
    gpu_rows = [r for r in rows if kind_of(r) != "cpu"]
    f = variant.fraction
    want = round(f * len(gpu_rows) / (1 - f))
    if want:
        _need(cpu, "CPU-only", variant)
    picked = rng.sample(cpu, want) if want <= len(cpu) else [rng.choice(cpu) for _ in range(want)]
    return picked + gpu_rows


_DERIVE = {
    "gpushare": derive_gpushare,
    "multigpu": derive_multigpu,
    "gpuspec": derive_gpuspec,
    "cpu": derive_cpu,
    "load": derive_load,
}


def derive(rows: list[Row], variant: Variant | str, seed: int = DEFAULT_SEED) -> list[Row]:
    """The variant's pod rows, renamed ``openb-pod-NNNN``; the same seed gives the same rows."""
    v = parse_variant(variant) if isinstance(variant, str) else variant
    # One generator per (variant, seed): a variant does not change when others are added.
    rng = random.Random(f"{v.name}:{seed}")  # noqa: S311 - sampling, not secrets
    out = _DERIVE[v.kind](rows, v, rng)

    def when(r: Row) -> int:
        raw = (r.get("creation_time") or "").strip()
        return int(raw) if raw.lstrip("-").isdigit() else 0

    if all("creation_time" in r for r in out):
        out = sorted(out, key=when)  # stable: copies follow their original
    return [{**r, "name": f"openb-pod-{i:04d}"} for i, r in enumerate(out)]


def stats(rows: list[Row]) -> dict[str, float]:
    """The shape the tests compare: shares of GPU request, of GPU pods and of pods."""
    kinds = [kind_of(r) for r in rows]
    gpu = [r for r, k in zip(rows, kinds, strict=True) if k != "cpu"]
    total = sum(gpu_milli(r) for r in gpu) or 1
    n_gpu = len(gpu) or 1
    return {
        "pods": len(rows),
        "gpu_pods": len(gpu),
        "gpu_milli": sum(gpu_milli(r) for r in gpu),
        "share_request": sum(gpu_milli(r) for r in gpu if kind_of(r) == "share") / total,
        "multi_request": sum(gpu_milli(r) for r in gpu if kind_of(r) == "multi") / total,
        "share_pods": sum(1 for k in kinds if k == "share") / n_gpu,
        "multi_pods": sum(1 for k in kinds if k == "multi") / n_gpu,
        "spec_pods": sum(1 for r in gpu if (r.get("gpu_spec") or "").strip()) / n_gpu,
        "cpu_pods": sum(1 for k in kinds if k == "cpu") / (len(rows) or 1),
        "cpu_milli_cpu_only": sum(int(r["cpu_milli"]) for r in rows if kind_of(r) == "cpu"),
    }


def write_rows(path: Path, header: list[str], rows: list[Row]) -> None:
    # A gpuspec variant of a 5-column file gains the gpu_spec column rather than losing it.
    header = header + [k for k in dict.fromkeys(k for r in rows for k in r) if k not in header]

    def write(fh: TextIO) -> None:
        w = csv.DictWriter(fh, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)

    replace_whole(path, write, newline="", mode=0o644)


def _refuse_odd_targets(paths: list[Path]) -> None:
    """Each target that is there must be a regular file (replaced whole, never opened):
    a directory, FIFO or device there is named before anything is written."""
    for p in paths:
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            raise VariantError(f"{p}: cannot be checked ({e.strerror})") from e
        if not stat.S_ISREG(mode):
            raise VariantError(
                f"{p}: {file_kind(mode)}, not a regular file; remove it or give --out "
                "another folder"
            )


def write_variants(
    pods: str | Path,
    out_dir: str | Path,
    names: list[str] | tuple[str, ...],
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """Derive each variant from ``pods`` into ``out_dir/openb_pod_list_<name>.csv``.

    Returns (and writes as ``manifest.json`` beside them) what was made from what. Each
    file is replaced whole (a temp file and a rename); a target that is there and is not
    a regular file is refused before anything is written.
    """
    variants = [parse_variant(n) for n in names]  # all names checked before any work
    # The digest of the bytes the rows came from: a second open of the path read whole
    # hung on a FIFO put there meanwhile, and hashed whatever file was there then.
    digest = hashlib.sha256()
    header, rows = read_rows(pods, digest.update)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():  # mkdir said only "File exists"
        raise VariantError(
            f"{out}: a file, not a folder; give --out a folder (made if missing) for the "
            "derived lists"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VariantError(f"{out}: cannot create the output folder ({e.strerror})") from e
    targets = [out / f"openb_pod_list_{v.name}.csv" for v in variants]
    _refuse_odd_targets([*targets, out / "manifest.json"])
    made: dict[str, Any] = {
        "source": str(pods),
        "source_sha256": digest.hexdigest(),
        "seed": seed,
        "variants": {},
    }
    for v, target in zip(variants, targets, strict=True):
        derived = derive(rows, v, seed)
        try:
            write_rows(target, header, derived)
        except OSError as e:
            raise VariantError(f"{target}: cannot be written ({e.strerror})") from e
        made["variants"][v.name] = {
            "file": target.name,
            "kind": v.kind,
            "fraction": v.fraction,
            **stats(derived),
        }
    text = json.dumps(made, indent=2, sort_keys=True) + "\n"
    try:
        replace_whole(out / "manifest.json", lambda fh: fh.write(text), mode=0o644)
    except OSError as e:
        raise VariantError(f"{out / 'manifest.json'}: cannot be written ({e.strerror})") from e
    return made
