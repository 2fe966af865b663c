"""Health in the agent, through the fake pynvml: an XID event, an ECC DBE and a pending row
remap each reach /facts and the dcgm-named /metrics series and assess to the right state;
a hung event wait never blocks /facts. The A100 capture's GPU 1 really has a row remap
pending and 353 correctable ECC errors (tests/fixtures/SOURCES.md)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fake_pynvml.builder import Built, build_layout

from swarmgpu.agent.facts import nvml_xid
from swarmgpu.agent.facts.nvml import NvmlSource
from swarmgpu.agent.server import AgentServer, build_server
from swarmgpu.core import health
from swarmgpu.core.health import Effect, Level, Observation, assess, step_one
from swarmgpu.core.metrics_in import parse_metrics
from swarmgpu.core.model import NodeFacts


def _source(b: Built) -> NvmlSource:
    return NvmlSource(hostname="node-a", nvml_module=b.nvml, sysfs_root=b.sysfs)


@pytest.fixture
def agent() -> Iterator[Callable[[NvmlSource], str]]:
    servers: list[tuple[AgentServer, threading.Thread]] = []

    def start(src: NvmlSource) -> str:
        srv = build_server(src, "127.0.0.1:0", refresh_s=0.2, sampler=lambda: [])
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True)
        t.start()
        servers.append((srv, t))
        host, port = srv.server_address[:2]
        return f"http://{host}:{port}"

    yield start
    for srv, t in servers:
        srv.shutdown()
        t.join(5)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        body: bytes = r.read()
        return body


def _ready(base: str) -> bool:
    try:
        return bool(json.loads(_get(base + "/facts"))["gpus"])
    except urllib.error.HTTPError:  # 503 until the first read is in
        return False


def _wait(cond: Callable[[], Any], timeout: float = 8) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _level(facts: NodeFacts, index: int) -> Level:
    g = facts.gpus[index]
    obs = Observation(g.uuid, assess(g.health, lost=None if g.healthy else g.error))
    return step_one(None, obs, now=1000.0).level


def test_counters_from_the_a100_capture(tmp_path: Path) -> None:
    facts = _source(build_layout("dgx_a100_nv12", tmp_path)).read()
    h0, h1 = facts.gpus[0].health, facts.gpus[1].health
    assert h0 is not None and h1 is not None
    # As nvidia-smi -q printed them: GPU 1 has 353 correctable DRAM errors and a row remap
    # pending; retired pages are N/A on A100 (row remapping replaces them).
    assert (h1.ecc_sbe_volatile, h1.ecc_sbe_aggregate, h1.ecc_dbe_volatile) == (353, 353, 0)
    assert (h1.row_remap_correctable, h1.row_remap_pending, h1.row_remap_failed) == (
        1, True, False)
    assert h1.retired_pages_sbe is None and h1.retired_pages_pending is None
    assert h0.row_remap_pending is False and h0.throttle_reasons == 0x1  # idle only
    assert h0.nvlink_crc_errors == 0 and h0.nvlink_recovery_errors == 0  # 12 links, clean
    assert _level(facts, 0) is Level.HEALTHY
    assert _level(facts, 1) is Level.DEGRADED  # pending remap: reset to apply, still used
    assert NodeFacts.from_dict(facts.to_dict()).gpus == facts.gpus
    # GPUs without a -q capture report none of it (NOT_SUPPORTED stays unknown).
    rtx = _source(build_layout("rtx4090_pix_sys", tmp_path / "rtx")).read()
    assert rtx.gpus[0].health is not None and rtx.gpus[0].health.ecc_dbe_volatile is None


def test_xid_ecc_dbe_and_row_remap_reach_facts_and_metrics(
    tmp_path: Path, agent: Callable[[NvmlSource], str]
) -> None:
    b = build_layout("hgx_h100_nv18", tmp_path)
    g = b.machine.gpus
    assert g[2].ecc is not None
    g[2].ecc[(1, 0)] = 2  # plausible: two DBEs since the last reset (no capture has one)
    g[3].remapped_rows = (0, 1, True, False)  # plausible: an uncorrectable row, pending
    base = agent(_source(b))
    _wait(lambda: _ready(base))
    b.nvml.inject_xid(1, 79)
    b.nvml.inject_xid(4, 13)

    def xids() -> dict[int, list[int]]:
        d = json.loads(_get(base + "/facts"))
        return {x["index"]: [e["xid"] for e in x["health"]["xid_events"]] for x in d["gpus"]
                if x["health"]["xid_events"]}
    assert _wait(lambda: xids() if len(xids()) == 2 else None) == {1: [79], 4: [13]}

    facts = NodeFacts.from_dict(json.loads(_get(base + "/facts")))
    assert facts.errors == ()
    assert _level(facts, 0) is Level.HEALTHY
    assert _level(facts, 1) is Level.FAILED  # Xid 79: fallen off the bus
    assert _level(facts, 2) is Level.FAILED  # DBE
    assert _level(facts, 3) is Level.DEGRADED  # row remap pending
    assert _level(facts, 4) is Level.HEALTHY  # Xid 13 is the application's
    f1 = assess(facts.gpus[1].health)[0]
    assert (f1.effect, f1.action) == (Effect.FAIL, health.Action.REBOOT)

    page = parse_metrics(_get(base + "/metrics").decode())
    assert page.errors == []
    by = {m.index: m for m in page.samples_by_uuid.values()}
    assert by[1].values["DCGM_FI_DEV_XID_ERRORS"] == 79
    assert by[4].values["DCGM_FI_DEV_XID_ERRORS"] == 13
    assert by[0].values["DCGM_FI_DEV_XID_ERRORS"] == 0
    assert by[2].values["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 2
    assert by[0].values["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == 0
    assert by[3].values["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 1
    assert by[3].values["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 0
    assert by[0].values["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 1
    # The manager reads the same fields back from a dcgm page as the agent serves them.
    back = by[2].health()
    assert back is not None and back.ecc_dbe_volatile == 2
    assert assess(back)[0].effect is Effect.FAIL
    xid79 = by[1].health()
    assert xid79 is not None and assess(xid79)[0].reason.startswith("Xid 79")


# A hang guard, not a speed check: the fake's event wait never returns, so a read that
# waited on it would never return either; that the reads return is the assertion.
@pytest.mark.timeout(60)
def test_hung_event_wait_never_blocks_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.machine.event_wait_hangs = True
    monkeypatch.setattr(nvml_xid, "STALLED_S", 0.0)  # report the stall at once
    src = _source(b)
    facts = src.read()
    assert len(facts.gpus) == 8 and all(g.healthy for g in facts.gpus)
    time.sleep(1.2)  # past one wait period
    facts = src.read()
    assert any("XID event wait has not returned" in e for e in facts.errors)


def test_events_not_supported_is_said(tmp_path: Path) -> None:
    b = build_layout("hgx_h100_nv18", tmp_path)
    b.machine.events_supported = False
    src = _source(b)
    src.read()
    facts = _wait(lambda: (f := src.read()).errors and f)
    assert any("XID events not available" in e for e in facts.errors)
    assert all(g.healthy for g in facts.gpus)  # no events is not a failure


def test_real_dcgm_pages_read_as_healthy() -> None:
    """The real dcgm-exporter captures carry XID_ERRORS 0 and the remap fields: read
    through the same path, every GPU there is healthy."""
    from support.paths import CAPTURES
    seen = 0
    for f in sorted(CAPTURES.glob("dcgm_*.txt")):
        for g in parse_metrics(f.read_text()).samples_by_uuid.values():
            h = g.health()
            if h is not None:
                seen += 1
                assert assess(h) == [], (f.name, g.uuid)
    assert seen >= 9  # whole GPUs; a MIG GPU's fields are per GPU instance
