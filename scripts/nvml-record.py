#!/usr/bin/env python3
"""Record every NVML call swarmgpu's adapter makes on this machine, and the driver's answer.

Run on a machine with an NVIDIA GPU, in an environment where swarmgpu is installed:

    python scripts/nvml-record.py --out DIR [--load 'python3 burn.py'] [--load-wait-s 20]

It wraps the real ``pynvml`` in a recorder and reads through swarmgpu's own code paths
(``NvmlSource.read`` for facts, ``read_utilisation`` for the agent's samples), idle and,
with ``--load``, while the given command keeps the GPU busy. It writes ``DIR/nvml-record.json``:
each call (function, arguments with device handles named ``gpu0``, ``gpu0/mig1``...,
result or NVML error code), and what swarmgpu made of it (facts, samples). The tests replay
it against the fake ``pynvml`` (tests/test_nvml_record.py), so the fake answers as this
driver did. Nothing here writes to the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import platform
import shlex
import subprocess
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

MAX_CALLS = 50_000  # the XID watcher's waits would otherwise grow the file without end


def _addr(v: Any) -> int | None:
    try:
        return ctypes.cast(v, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


class Recorder:
    """A pynvml look-alike that forwards to the real module and writes down each call."""

    def __init__(self, mod: Any) -> None:
        self._mod = mod
        self._labels: dict[int, str] = {}
        self._samples = 0
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.phase = "start"

    def plain(self, v: Any, depth: int = 0) -> Any:
        if depth > 8:
            return repr(v)
        if v is None or isinstance(v, bool | int | float | str):
            return v
        if isinstance(v, bytes):
            return v.decode(errors="replace")
        if isinstance(v, list | tuple):
            return [self.plain(x, depth + 1) for x in v]
        if isinstance(v, dict):
            return {str(k): self.plain(x, depth + 1) for k, x in v.items()}
        if isinstance(v, ctypes._Pointer | ctypes.c_void_p):
            a = _addr(v)
            return {"handle": self._labels.get(a, "?") if a else None}
        if isinstance(v, ctypes.Array):
            return [self.plain(x, depth + 1) for x in v]
        if isinstance(v, ctypes.Structure | ctypes.Union):
            return {f[0]: self.plain(getattr(v, f[0]), depth + 1) for f in v._fields_}
        if isinstance(v, ctypes._SimpleCData):
            return self.plain(v.value, depth + 1)
        return repr(v)

    def _name(self, fn: str, args: tuple[Any, ...], result: Any) -> None:
        a = _addr(result)
        if a is None:
            return
        parent = self._labels.get(_addr(args[0]) or 0, "?") if args else "?"
        if fn == "nvmlDeviceGetHandleByIndex":
            self._labels[a] = f"gpu{args[0]}"
        elif fn == "nvmlDeviceGetMigDeviceHandleByIndex":
            self._labels[a] = f"{parent}/mig{args[1]}"
        elif fn == "nvmlDeviceGetGpuInstanceById":
            self._labels[a] = f"{parent}/gi{args[1]}"
        elif fn == "nvmlGpmSampleAlloc":  # a freed sample's address is reused: count them
            self._samples += 1
            self._labels[a] = f"gpm-sample{self._samples}"
        elif fn == "nvmlEventSetCreate":
            self._labels[a] = "event-set"

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._mod, name)
        if not (name.startswith("nvml") and callable(v)) or isinstance(v, type):
            return v

        def recorded(*args: Any) -> Any:
            entry: dict[str, Any] = {"phase": self.phase, "fn": name}
            t = time.perf_counter()
            try:
                r = v(*args)
            except self._mod.NVMLError as e:
                entry["error"] = {"value": getattr(e, "value", None), "text": str(e)}
                raise
            else:
                with self._lock:
                    self._name(name, args, r)
                entry["result"] = self.plain(r)
                return r
            finally:
                entry["args"] = [self.plain(a) for a in args]
                if name == "nvmlGpmMetricsGet":  # the request's unused metric slots
                    for part in (entry.get("result"), *entry["args"]):
                        if isinstance(part, dict) and "metrics" in part:
                            part["metrics"] = part["metrics"][: part.get("numMetrics", 0)]
                entry["ms"] = round((time.perf_counter() - t) * 1000, 3)
                with self._lock:
                    if len(self.calls) < MAX_CALLS:
                        self.calls.append(entry)

        return recorded


def _sample_dicts(samples: list[Any]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in samples]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--load", help="a command that keeps the GPU busy while the second read runs")
    p.add_argument("--load-wait-s", type=float, default=20.0,
                   help="how long to wait for the load to show as utilisation")
    a = p.parse_args()

    import pynvml

    from swarmgpu.agent.facts.nvml import NvmlSource
    from swarmgpu.agent.facts.nvml_sampler import read_utilisation

    rec = Recorder(pynvml)
    out: dict[str, Any] = {"python": sys.version.split()[0], "kernel": platform.release(),
                           "nvidia_ml_py": None}
    with contextlib.suppress(PackageNotFoundError):  # the version is a note, not a need
        out["nvidia_ml_py"] = version("nvidia-ml-py")
    src = NvmlSource(nvml_module=rec, xid_events=True)
    rec.phase = "idle-facts"
    out["facts_idle"] = src.read().to_dict()
    rec.phase = "idle-samples"
    out["samples_idle"] = [_sample_dicts(read_utilisation(rec))]
    time.sleep(1.0)
    out["samples_idle"].append(_sample_dicts(read_utilisation(rec)))
    if a.load:
        proc = subprocess.Popen(shlex.split(a.load))
        try:
            rec.phase = "load-wait"
            deadline = time.monotonic() + a.load_wait_s
            while time.monotonic() < deadline:
                busy = [s for s in read_utilisation(rec) if (s.util_pct or 0) > 0]
                if busy:
                    break
                time.sleep(1.0)
            rec.phase = "load-samples"
            out["samples_load"] = [_sample_dicts(read_utilisation(rec))]
            time.sleep(2.0)
            out["samples_load"].append(_sample_dicts(read_utilisation(rec)))
            rec.phase = "load-facts"
            out["facts_load"] = src.read().to_dict()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    rec.phase = "end"
    with rec._lock:
        out["calls"] = list(rec.calls)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "nvml-record.json").write_text(json.dumps(out, indent=1, default=repr) + "\n")
    failed = sorted({c["fn"] for c in out["calls"] if "error" in c})
    functions = len({c["fn"] for c in out["calls"]})
    print(f"nvml-record: {len(out['calls'])} calls, {functions} functions; "
          f"refused: {', '.join(failed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
