"""Scripted GPU metrics from a YAML file, for demos and rebalancing tests.

The agent serves these values on ``/metrics`` instead of reading NVML, so a test can
make GPU 0 "busy" from t=30 s and "idle" again at t=400 s on any machine::

    # Times are seconds since the sampler was created (the agent's start).
    # Editing the file does NOT restart the clock: a new profile applies at the
    # current time, so a running test can change the script mid-run.
    default: {util_pct: 5, fb_used_mib: 1000}   # applies to every GPU, at any time
    repeat_s: 600          # optional: the script loops with this period
    gpus:
      "0": [{at: 0, util_pct: 10}, {at: 30, util_pct: 95}, {at: 400, util_pct: 20}]
      "GPU-3f1c...": [{at: 0, util_pct: null}]   # null: unknown, omitted from /metrics
      "MIG-9a0b...": [{at: 0, fb_used_mib: 4000}]  # a MIG device of a listed GPU

* A GPU key is its index (``"0"`` or ``0``), its UUID, or a MIG device UUID; every
  key must name a GPU of the node's facts.
* Values are a step function: an entry applies from its ``at`` until the next one.
  A field missing from the entry in force comes from ``default``; before the first
  entry, ``default`` alone applies. Fields: util_pct, fb_used_mib, fb_free_mib,
  mem_copy_util_pct, temp_c, power_w, and the rest of dcgm-exporter's default counters
  by their ``GpuSample`` names (sm_clock_mhz, mem_clock_mhz, memory_temp_c, energy_mj,
  pcie_replays, enc_util_pct, dec_util_pct, fb_reserved_mib, nvlink_mb_s, vgpu_licensed,
  gr_engine_active, tensor_active, dram_active, pcie_tx_bytes_s, pcie_rx_bytes_s). A
  field set nowhere is unknown (``None``), except ``fb_free_mib``, which is the memory
  size minus ``fb_used_mib`` when that is known. A MIG device's sample is served with
  only what NVML measures per instance (memory, the GPM ratios: agent.metrics): a
  ``util_pct`` it inherits from ``default`` is never a per-slice ``GPU_UTIL``.
* GPUs not listed get ``default``. MIG-enabled GPUs with MIG devices get one sample
  per MIG device (as dcgm-exporter reports FB per GPU instance) unless the GPU itself
  is listed.

The file is re-read when its mtime or size changes. A broken file at start raises
:class:`ProfileError`; a broken file later keeps the last good profile and the error
is kept in :attr:`ProfileSampler.error` (the agent shows it on ``/healthz``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loguru import logger

from swarmgpu.core.metrics_in import MAX_VALUE
from swarmgpu.core.model import FactsError, NodeFacts
from swarmgpu.core.samples import GpuSample
from swarmgpu.core.yamlfile import read_yaml

FIELDS = ("util_pct", "fb_used_mib", "fb_free_mib", "mem_copy_util_pct", "temp_c", "power_w",
          "sm_clock_mhz", "mem_clock_mhz", "memory_temp_c", "energy_mj", "pcie_replays",
          "enc_util_pct", "dec_util_pct", "fb_reserved_mib", "nvlink_mb_s", "vgpu_licensed",
          "gr_engine_active", "tensor_active", "dram_active", "pcie_tx_bytes_s",
          "pcie_rx_bytes_s")
_RATIOS = ("gr_engine_active", "tensor_active", "dram_active", "vgpu_licensed")
_INT_FIELDS = {"fb_used_mib", "fb_free_mib"}
_log = logger.bind(component="profile")


class ProfileError(FactsError):
    """A metrics profile that cannot be used; the message names the file and field."""


Values = dict[str, float | None]


@dataclass(frozen=True)
class Step:
    at: float
    values: Values


@dataclass(frozen=True)
class Profile:
    default: Values
    steps: dict[str, tuple[Step, ...]]  # key: GPU or MIG UUID (resolved from indices)
    repeat_s: float | None = None

    def values_at(self, uuid: str, t: float) -> Values:
        if self.repeat_s:
            t = t % self.repeat_s
        out = dict(self.default)
        current: Step | None = None
        for s in self.steps.get(uuid, ()):
            if s.at <= t:
                current = s
        if current is not None:
            out.update(current.values)
        return out


def _finite(v: float) -> bool:
    """A number the daemon's scrape reads as a reading (core.metrics_in): .inf was served
    as +Inf, 1e300 as such, both unknown there; .nan (no number compares with it) passed
    every bound, and as a time or period stopped the script, silently."""
    return 0 <= v <= MAX_VALUE  # False for NaN too


def _values(raw: Any, where: str, *, allow_at: bool) -> tuple[float | None, Values]:
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: expected a mapping like {{util_pct: 50}}, got {raw!r}")
    allowed = set(FIELDS) | ({"at"} if allow_at else set())
    unknown = set(raw) - allowed
    if unknown:  # sorted as text: YAML gives number keys too (1: beside x:)
        raise ProfileError(f"{where}: unknown field(s) {sorted(unknown, key=str)}; allowed: "
                           f"{sorted(allowed)}")
    at: float | None = None
    if allow_at:
        a = raw.get("at")
        if isinstance(a, bool) or not isinstance(a, int | float) or not _finite(a):
            raise ProfileError(f"{where}.at: expected seconds >= 0, finite, got {a!r}")
        at = float(a)
    vals: Values = {}
    for k in FIELDS:
        if k not in raw:
            continue
        v = raw[k]
        if v is None:
            vals[k] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise ProfileError(f"{where}.{k}: expected a number >= 0 or null, got {v!r}")
        if not _finite(v):
            raise ProfileError(f"{where}.{k}: {v!r} is not finite or is above "
                               f"{MAX_VALUE:.0f}, which no reading is")
        if k.endswith("_pct") and v > 100:
            raise ProfileError(f"{where}.{k}: {v} is above 100 %")
        if k in _RATIOS and v > 1:
            raise ProfileError(f"{where}.{k}: {v} is above 1 (a ratio 0-1)")
        vals[k] = float(v)
    return at, vals


def parse_profile(data: Any, facts: NodeFacts, where: str) -> Profile:
    """Validate a loaded YAML document against the node's GPUs."""
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}: expected a mapping with 'default' and/or 'gpus'")
    unknown = set(data) - {"default", "gpus", "repeat_s"}
    if unknown:  # sorted as text, as _values's
        raise ProfileError(f"{where}: unknown key(s) {sorted(unknown, key=str)}; allowed: "
                           "default, gpus, repeat_s")
    _, default = _values(data.get("default") or {}, f"{where}.default", allow_at=False)
    repeat = data.get("repeat_s")
    if repeat is not None and (
        isinstance(repeat, bool) or not isinstance(repeat, int | float) or repeat <= 0
        or not _finite(repeat)
    ):
        raise ProfileError(f"{where}.repeat_s: expected seconds > 0, finite, got {repeat!r}")
    by_index = {str(g.index): g.uuid for g in facts.gpus}
    known = {g.uuid for g in facts.gpus} | {m.uuid for g in facts.gpus for m in g.mig_devices}
    gpus = data.get("gpus") or {}
    if not isinstance(gpus, Mapping):
        raise ProfileError(f"{where}.gpus: expected a mapping of GPU index/UUID to a list")
    steps: dict[str, tuple[Step, ...]] = {}
    for key, entries in gpus.items():
        w = f"{where}.gpus[{key!r}]"
        uuid = by_index.get(str(key), str(key))
        if uuid not in known:
            raise ProfileError(
                f"{w}: no GPU with that index or UUID on {facts.hostname or 'this node'}; "
                f"known indices {sorted(by_index, key=int)}"
            )
        if not isinstance(entries, list) or not entries:
            raise ProfileError(f"{w}: expected a non-empty list of {{at: SECONDS, ...}}")
        parsed: list[Step] = []
        for n, e in enumerate(entries):
            at, vals = _values(e, f"{w}[{n}]", allow_at=True)
            assert at is not None
            if parsed and at <= parsed[-1].at:
                raise ProfileError(f"{w}[{n}].at: {at} is not after the previous entry's "
                                   f"{parsed[-1].at}; list entries in time order")
            parsed.append(Step(at, vals))
        if uuid in steps:
            raise ProfileError(f"{w}: the same GPU is listed twice (by index and by UUID)")
        steps[uuid] = tuple(parsed)
    return Profile(default, steps, float(repeat) if repeat is not None else None)


def load_profile(path: str | Path, facts: NodeFacts) -> Profile:
    p = Path(path)
    raw = read_yaml(p, f"metrics profile {p}", ProfileError, sole=True)
    return parse_profile(raw, facts, str(p))


def _sample(uuid: str, index: int, memory_mib: int, v: Values) -> GpuSample:
    used = v.get("fb_used_mib")
    free = v.get("fb_free_mib")
    if free is None and used is not None and "fb_free_mib" not in v:
        free = max(0.0, memory_mib - used)
    sample = GpuSample(
        uuid=uuid,
        index=index,
        util_pct=v.get("util_pct"),
        fb_used_mib=None if used is None else round(used),
        fb_free_mib=None if free is None else round(free),
        mem_copy_util_pct=v.get("mem_copy_util_pct"),
        temp_c=v.get("temp_c"),
        power_w=v.get("power_w"),
    )
    rest: dict[str, Any] = {k: v.get(k) for k in FIELDS[6:]}
    return replace(sample, **rest)


class ProfileSampler:
    """Callable sampler for the agent: ``sample()`` gives the scripted values now."""

    def __init__(
        self,
        path: str | Path,
        facts: NodeFacts,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._facts = facts
        self._clock = clock
        self._t0 = clock()
        self._stamp = self._file_stamp()
        self.profile = load_profile(self.path, facts)  # raises ProfileError at start
        self.error: str | None = None

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def update_facts(self, facts: NodeFacts) -> None:
        self._facts = facts

    def reload_if_changed(self) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self.profile = load_profile(self.path, self._facts)
        except ProfileError as e:
            self.error = f"{e}; still using the last good profile"
            _log.error("metrics profile reload failed: {}", self.error)
            return
        self.error = None
        _log.info("metrics profile {} reloaded", self.path)

    def sample(self) -> list[GpuSample]:
        self.reload_if_changed()
        t = self._clock() - self._t0
        out: list[GpuSample] = []
        for g in self._facts.gpus:
            if g.mig_enabled and g.mig_devices and g.uuid not in self.profile.steps:
                out.extend(
                    _sample(m.uuid, g.index, m.memory_mib, self.profile.values_at(m.uuid, t))
                    for m in g.mig_devices
                )
            else:
                out.append(_sample(g.uuid, g.index, g.memory_mib,
                                   self.profile.values_at(g.uuid, t)))
        return out

    __call__ = sample
