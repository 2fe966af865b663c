"""Reading the openb CSV files (Alibaba cluster-trace-gpu-v2023, CC BY 4.0).

Node files: ``sn,cpu_milli,memory_mib,gpu,model``. Pod files: the 11-column form
(``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time``) or the 5-column form (``name,...,gpu_milli``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from swarmgpu.allocator.values import Demand, GpuSpec, NodeSpec

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file that cannot be read, with the file, line and fix."""


@dataclass(frozen=True)
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
            raise TraceError(f"pod {self.name}: a share of {self.gpu_milli} milli on "
                             f"{self.num_gpu} GPUs; shares must be on one GPU")
        return Demand(
            num_gpu=0 if share or self.gpu_milli == 0 else self.num_gpu,
            gpu_milli=self.gpu_milli if share else 0,
            products=self.gpu_spec,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
        )


def _rows(path: str | Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    p = Path(path)
    try:
        with p.open(newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceError(f"{p}: missing column(s) {missing}; expected header "
                                 f"starting {','.join(required)}")
            return list(reader)
    except OSError as e:
        raise TraceError(f"{p}: cannot read ({e.strerror}); check the path") from e


def _int(row: dict[str, str], col: str, where: str, default: int | None = None) -> int:
    raw = (row.get(col) or "").strip()
    if raw == "" and default is not None:
        return default
    try:
        return int(float(raw))
    except ValueError:
        raise TraceError(f"{where}: column {col} = {raw!r} is not a number") from None


def load_nodes(path: str | Path) -> list[NodeSpec]:
    out: list[NodeSpec] = []
    for n, row in enumerate(_rows(path, NODE_COLUMNS), start=2):
        where = f"{path}:{n}"
        model = (row.get("model") or "").strip()
        gpus = tuple(GpuSpec(index=i, product=model, memory_mib=0)
                     for i in range(_int(row, "gpu", where)))
        out.append(NodeSpec(name=row["sn"], gpus=gpus, cpu_milli=_int(row, "cpu_milli", where),
                            memory_mib=_int(row, "memory_mib", where)))
    return out


def load_pods(path: str | Path) -> list[TracePod]:
    out: list[TracePod] = []
    for n, row in enumerate(_rows(path, POD_COLUMNS), start=2):
        where = f"{path}:{n}"
        spec = tuple(s for s in (row.get("gpu_spec") or "").split("|") if s)
        ct = row.get("creation_time")
        dt = row.get("deletion_time")
        out.append(TracePod(
            name=row["name"], cpu_milli=_int(row, "cpu_milli", where),
            memory_mib=_int(row, "memory_mib", where), num_gpu=_int(row, "num_gpu", where),
            gpu_milli=_int(row, "gpu_milli", where), gpu_spec=spec,
            creation_time=_int(row, "creation_time", where) if ct else None,
            deletion_time=_int(row, "deletion_time", where) if dt else None,
        ))
    return out
