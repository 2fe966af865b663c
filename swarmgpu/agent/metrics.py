"""Prometheus text the agent serves on ``/metrics``: dcgm-exporter's names and labels.

Anything that already scrapes dcgm-exporter (dashboards, alerts, our own
``metrics_in`` parser) reads the agent unchanged. Names, HELP texts, TYPEs and label
names (``gpu, UUID, pci_bus_id, device, modelName[, GPU_I_PROFILE, GPU_I_ID],
hostname, DCGM_FI_DRIVER_VERSION``) are copied from real captures
(``fixtures/captures/dcgm_*.txt``); the host label is the lower-case ``hostname`` that
dcgm-exporter uses since 2026-05 (the dashboard and ``metrics_in`` read both spellings).
prometheus-client writes labels sorted by name, not in dcgm-exporter's order; label
order carries no meaning in the exposition format. ``pci_bus_id`` is left out when
the facts do not know it, as older dcgm-exporters do; so is ``DCGM_FI_DRIVER_VERSION``
when no driver version is known. ``promtool check metrics``
exits 3 on the camelCase label names, exactly as it does on dcgm-exporter's output.

Rules:

* Which fields: dcgm-exporter's default counters (``DCGM_FIELDS``, in its csv's order,
  with its types and HELP texts), as far as NVML gives them (docs/metrics.md).
* A value that is unknown (``None`` in a :class:`GpuSample`) is omitted, never
  written as 0: a 0 would read as "idle" to a rebalancer.
* A sample whose UUID is a MIG device UUID known to the facts is written with the
  parent GPU's ``gpu``/``UUID`` labels plus ``GPU_I_PROFILE`` and ``GPU_I_ID``, as
  dcgm-exporter does for GPU instances. ``GPU_I_ID`` is what tells the slices of one
  GPU apart, so every slice gets one: a slice whose GI id the facts do not know (a
  facts file with ``gi_id: null``) gets the lowest number no other slice of that GPU
  uses; without it two slices of one profile would be one series written twice.
  A sample for a UUID the facts do not know is still written (labels from the
  sample alone) so nothing measured is lost.
* Label values are escaped by prometheus-client (``\\``, ``"``, newline); a lone UTF-16
  surrogate, which UTF-8 cannot hold, is written as U+FFFD (``utf8``).

Rendering goes through prometheus-client with a custom collector on a fresh
``CollectorRegistry`` per call, so nothing lives in the global registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from swarmgpu.core.health import DCGM_HEALTH_FIELDS, DCGM_XID, HealthSignals
from swarmgpu.core.metrics_in import MAX_PROCESSES, PROCESS_MEMORY
from swarmgpu.core.model import Gpu, MigDevice, NodeFacts
from swarmgpu.core.samples import GpuProcess, GpuSample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class DcgmField:
    """One dcgm-exporter metric family and the GpuSample attribute that feeds it.
    ``mig``: also written for a MIG device's sample (what NVML measures per instance:
    its memory, GPM's ratios); every other field is the whole GPU's only."""

    name: str
    help: str
    attr: str
    kind: str = "gauge"
    mig: bool = False


# dcgm-exporter's etc/default-counters.csv, in its order, with its types and HELP texts
# (tests/fixtures/dcgm-exporter/default-counters.csv); the XID and row-remapping lines
# are the health block's (HEALTH_HELP), the driver version is a label. Which NVML call
# reads each: swarmgpu.agent.facts.nvml_sampler, and the table in docs/metrics.md.
DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "memory_temp_c"),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp_c"),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w"),
    DcgmField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
              "Total energy consumption since boot (in mJ).", "energy_mj", "counter"),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.",
              "pcie_replays", "counter"),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util_pct"),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "mem_copy_util_pct"),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", "enc_util_pct"),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", "dec_util_pct"),
    DcgmField("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free_mib",
              mig=True),
    DcgmField("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used_mib",
              mig=True),
    DcgmField("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).",
              "fb_reserved_mib", mig=True),
    DcgmField("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
              "Total number of NVLink bandwidth counters for all lanes.", "nvlink_mb_s",
              "counter"),
    DcgmField("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status", "vgpu_licensed"),
    DcgmField("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.",
              "gr_engine_active", mig=True),
    DcgmField("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
              "Ratio of cycles the tensor (HMMA) pipe is active.", "tensor_active", mig=True),
    DcgmField("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is "
              "active sending or receiving data.", "dram_active", mig=True),
    DcgmField("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus "
              "- including both protocol headers and data payloads - in bytes per second.",
              "pcie_tx_bytes_s"),
    DcgmField("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - "
              "including both protocol headers and data payloads - in bytes per second.",
              "pcie_rx_bytes_s"),
)


@dataclass(frozen=True)
class AgentStats:
    """The agent's view of itself, written as ``swarmgpu_agent_*`` metrics."""

    facts_errors: int = 0  # problems in the facts now served (facts.errors + refresh failure)
    facts_age_s: float | None = None
    refresh_failures_total: int = 0
    scrape_duration_s: float | None = None  # time spent gathering samples for this scrape
    sampler_ok: bool = True


def _mig_index(facts: NodeFacts) -> dict[str, tuple[Gpu, MigDevice]]:
    """MIG UUID -> (parent, slice), each slice with a GI id unique on its parent."""
    out: dict[str, tuple[Gpu, MigDevice]] = {}
    for g in facts.gpus:
        taken = {m.gi_id for m in g.mig_devices if m.gi_id is not None}
        free = (n for n in range(1 << 16) if n not in taken)
        for m in g.mig_devices:
            out[m.uuid] = (g, m if m.gi_id is not None else replace(m, gi_id=next(free)))
    return out


def sample_labels(
    sample: GpuSample, facts: NodeFacts, migs: dict[str, tuple[Gpu, MigDevice]] | None = None
) -> dict[str, str]:
    """dcgm-exporter's labels for one sample, in dcgm-exporter's order."""
    migs = _mig_index(facts) if migs is None else migs
    gpus = {g.uuid: g for g in facts.gpus}
    mig: MigDevice | None = None
    if sample.uuid in migs:
        gpu: Gpu | None = migs[sample.uuid][0]
        mig = migs[sample.uuid][1]
    else:
        gpu = gpus.get(sample.uuid)
    index = gpu.index if gpu is not None else sample.index
    labels = {
        "gpu": str(index),
        "UUID": gpu.uuid if gpu is not None else sample.uuid,
        "pci_bus_id": gpu.pci_bus_id if gpu is not None else "",
        "device": f"nvidia{index}",
        "modelName": gpu.product if gpu is not None else "",
    }
    if not labels["pci_bus_id"]:
        del labels["pci_bus_id"]  # as older dcgm-exporters: absent, not empty
    if mig is not None:
        labels["GPU_I_PROFILE"] = mig.profile
        labels["GPU_I_ID"] = str(mig.gi_id)
    labels["hostname"] = facts.hostname
    if facts.driver_version:
        labels["DCGM_FI_DRIVER_VERSION"] = facts.driver_version
    return labels


def utf8(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate (a process name decoded with
    surrogateescape; facts read from JSON refuse one) as U+FFFD: the page is UTF-8, and
    one such label value failed all of it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _known(value: float | int | None) -> float | None:
    if value is None:
        return None
    v = float(value)
    return None if math.isnan(v) else v


PROCESSES_LEFT_OUT = "swarmgpu_gpu_processes_left_out"  # (AgentCollector._processes)


def _once_each(listed: Sequence[GpuProcess]) -> list[GpuProcess]:
    """Each process once, NVML's first entry of it: NVML can list one twice, and both
    copies were one series twice (a page a reader refuses), and past the cap kept
    together and counted as one left out. Only compute processes are listed (the type),
    so the PID names one."""
    seen: set[int] = set()
    out = []
    for p in listed:
        if p.pid not in seen:
            seen.add(p.pid)
            out.append(p)
    return out


class AgentCollector(Collector):
    """Collector over one consistent snapshot: facts, samples and agent stats."""

    def __init__(
        self, facts: NodeFacts, samples: Sequence[GpuSample], stats: AgentStats | None = None
    ) -> None:
        self._facts = facts
        self._samples = tuple(samples)
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        for fam in (*self._dcgm(), *self._health(), *self._processes(),
                    *self._self_metrics()):
            fam.samples = [s._replace(labels={k: utf8(v) for k, v in s.labels.items()})
                           for s in fam.samples]
            yield fam

    # --- health series (core.health); one block, dcgm-exporter's names and HELP texts ---
    def _health(self) -> Iterator[Metric]:
        """XID, ECC, retired pages, row remapping, throttle reasons and NVLink errors of
        each whole GPU, from the facts; a value the GPU does not report is left out."""
        gpus = [(g, g.health) for g in self._facts.gpus if g.health is not None]
        if not gpus:
            return
        labels = {g.uuid: sample_labels(GpuSample(g.uuid, g.index, None, None, None, None,
                                                  None, None), self._facts) for g, _ in gpus}
        xid = Metric(DCGM_XID, "Value of the last XID error encountered.", "gauge")
        for g, h in gpus:
            xid.add_sample(DCGM_XID, labels[g.uuid], float(h.last_xid or 0))
        yield xid
        for name, attr in DCGM_HEALTH_FIELDS.items():
            kind, help_ = HEALTH_HELP[name]
            fam = Metric(name, help_, kind)
            for g, h in gpus:
                v = _health_value(h, attr)
                if v is not None:
                    fam.add_sample(name, labels[g.uuid], v)  # no _total: as dcgm-exporter
            if fam.samples:
                yield fam

    def _processes(self) -> Iterator[Metric]:
        """GPU memory per compute process and who runs it (swarmgpu.agent.procattr);
        dcgm-exporter has no per-process metric, so the name is swarmgpu's own. At most
        ``MAX_PROCESSES`` a GPU, the largest users of memory: more, on a full node, made
        a page the manager refuses whole; the rest are counted (``PROCESSES_LEFT_OUT``)."""
        fam = Metric(PROCESS_MEMORY, "GPU memory used by one compute process (MiB), with "
                     "its container and Swarm task/service when known.", "gauge")
        left = Metric(PROCESSES_LEFT_OUT, "Compute processes of a GPU not served in "
                      f"{PROCESS_MEMORY}: past {MAX_PROCESSES} a GPU, the smallest users "
                      "of memory.", "gauge")
        gpus = {g.uuid: g for g in self._facts.gpus}
        for s in self._samples:
            g = gpus.get(s.uuid)
            gpu = str(g.index if g is not None else s.index)
            listed = _once_each([p for p in s.processes if p.used_mib is not None])
            if len(listed) > MAX_PROCESSES:
                left.add_sample(PROCESSES_LEFT_OUT, {
                    "gpu": gpu, "UUID": s.uuid, "hostname": self._facts.hostname},
                    float(len(listed) - MAX_PROCESSES))
                kept = set(sorted(listed, key=lambda p: (-(p.used_mib or 0), p.pid))
                           [:MAX_PROCESSES])
                listed = [p for p in listed if p in kept]  # (in NVML's order still)
            for p in listed:
                fam.add_sample(PROCESS_MEMORY, {
                    "gpu": gpu, "UUID": s.uuid, "pid": str(p.pid), "container": p.container[:12],
                    "task": p.task, "service": p.service,
                    "hostname": self._facts.hostname}, float(p.used_mib or 0))
        yield from (f for f in (fam, left) if f.samples)

    def _dcgm(self) -> Iterator[Metric]:
        migs = _mig_index(self._facts)
        labelled = [(s, sample_labels(s, self._facts, migs), s.uuid in migs)
                    for s in self._samples]
        for f in DCGM_FIELDS:
            fam = Metric(f.name, f.help, f.kind)
            seen: set[tuple[tuple[str, str], ...]] = set()
            for s, labels, is_mig in labelled:
                v = _known(getattr(s, f.attr))
                # A MIG device gets only what NVML measures per instance: never a
                # per-slice GPU_UTIL, clock or power made of its parent's (dcgm-exporter#216).
                if v is None or (is_mig and not f.mig):
                    continue
                key = tuple(sorted(labels.items()))
                if key in seen:
                    continue  # one series per label set: a second sample for it is dropped
                seen.add(key)
                fam.add_sample(f.name, labels, v)  # no _total: as dcgm-exporter
            if fam.samples:
                yield fam

    def _self_metrics(self) -> Iterable[Metric]:
        healthy = GaugeMetricFamily(
            "swarmgpu_agent_gpu_healthy",
            "1 when the facts say the GPU is healthy, 0 otherwise.",
            labels=["gpu", "UUID"],
        )
        for g in self._facts.gpus:
            healthy.add_metric([str(g.index), g.uuid], 1.0 if g.healthy else 0.0)
        out: list[Metric] = [healthy] if self._facts.gpus else []
        st = self._stats
        if st is None:
            return out
        # (family, name, help, value); a value not measured yet (None) is left out.
        rows: list[tuple[Callable[..., Metric], str, str, float | None]] = [
            (GaugeMetricFamily, "swarmgpu_agent_facts_errors",
             "Problems in the facts now served (read errors, failed or stale refresh).",
             float(st.facts_errors)),
            (CounterMetricFamily, "swarmgpu_agent_facts_refresh_failures",
             "Facts refreshes that failed since the agent started.",
             float(st.refresh_failures_total)),
            (GaugeMetricFamily, "swarmgpu_agent_facts_age_seconds",
             "Seconds since the facts now served were read.", st.facts_age_s),
            (GaugeMetricFamily, "swarmgpu_agent_scrape_duration_seconds",
             "Seconds spent gathering the GPU samples of this scrape.", st.scrape_duration_s),
            (GaugeMetricFamily, "swarmgpu_agent_sampler_ok",
             "1 when this scrape's GPU samples are fresh, 0 when they are old or missing.",
             1.0 if st.sampler_ok else 0.0),
        ]
        out.extend(family(name, help_, value=value)
                   for family, name, help_, value in rows if value is not None)
        return out


# (type, HELP) as dcgm-exporter's counters csv gives them; the csv has no line for
# ROW_REMAP_PENDING or CLOCK_THROTTLE_REASONS, whose texts follow DCGM's field comments.
HEALTH_HELP: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Total number of single-bit volatile ECC "
                                      "errors."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC "
                                      "errors."),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("counter", "Total number of single-bit persistent ECC "
                                      "errors."),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("counter", "Total number of double-bit persistent ECC "
                                      "errors."),
    "DCGM_FI_DEV_RETIRED_SBE": ("counter", "Total number of retired pages due to single-bit "
                                "errors."),
    "DCGM_FI_DEV_RETIRED_DBE": ("counter", "Total number of retired pages due to double-bit "
                                "errors."),
    "DCGM_FI_DEV_RETIRED_PENDING": ("counter", "Total number of pages pending retirement."),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for "
                                              "correctable errors"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for "
                                                "uncorrectable errors"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("gauge", "Whether remapping of rows is pending"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("gauge", "Current clock throttle reasons "
                                           "(bitmask of DCGM_CLOCKS_THROTTLE_REASON_*)."),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("counter", "Total number of NVLink "
                                                      "flow-control CRC errors."),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("counter", "Total number of NVLink "
                                                    "retries."),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("counter", "Total number of NVLink "
                                                      "recovery errors."),
}


def _health_value(h: HealthSignals, attr: str) -> float | None:
    v = getattr(h, attr)
    return None if v is None else float(v)


def render_metrics(
    facts: NodeFacts, samples: Sequence[GpuSample], stats: AgentStats | None = None
) -> bytes:
    """Prometheus text exposition (format 0.0.4) for one snapshot."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(facts, samples, stats))
    text = generate_latest(registry)
    # prometheus-client names a counter's HELP and TYPE lines NAME_total; dcgm-exporter's
    # counters have no _total, so the lines are put back on the samples' own name.
    for name in _DCGM_COUNTERS:
        for kind in (b"HELP", b"TYPE"):
            text = text.replace(b"# %s %s_total " % (kind, name), b"# %s %s " % (kind, name))
    return text


_DCGM_COUNTERS = tuple(
    name.encode() for name in sorted(
        {f.name for f in DCGM_FIELDS if f.kind == "counter"}
        | {n for n, (kind, _) in HEALTH_HELP.items() if kind == "counter"}))
