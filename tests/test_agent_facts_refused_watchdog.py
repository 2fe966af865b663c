"""An agent whose facts file is refused (a leading-zero number, an unknown key, a file
not found) is up all the same: ``READY=1`` after its first read completes, refused or
not, and ``WATCHDOG=1`` after every read that completes. The pings came after good
reads alone: under its unit (``Type=notify``, ``WatchdogSec=90s``, ``Restart=on-failure``)
such an agent never started, killed and started again every start timeout, and one
whose file was refused mid-run was killed by the watchdog 90 s on, its last good facts
lost, and looped so: the refusal's one line (the file, key, line and fix) repeated
among restarts. A read hung in NVML still stops the pings. Pure: the cache's refresher
called by hand, ``sd_notify`` recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.agent import server
from swarmgpu.agent.facts.file import FileSource
from swarmgpu.agent.factscache import FactsCache


def test_a_refused_facts_file_starts_and_feeds_the_watchdog(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = tmp_path / "facts.yml"
    facts.write_text("node: {hostname: n1}\ngpus:\n  - {index: 0, uuid: GPU-1, "
                     "memory_mib: 081920}\n")
    sent: list[str] = []
    monkeypatch.setattr(server, "sd_notify", lambda msg: sent.append(msg) or True)
    cache = FactsCache(FileSource(facts), refresh_s=30.0)
    server._notify_systemd(cache, 30.0)
    cache.refresh_once()
    cache.refresh_once()
    assert sent == ["READY=1", "WATCHDOG=1", "WATCHDOG=1"], sent
    view = cache.view()
    assert view.facts is None and view.last_error is not None
    assert "memory_mib at line 3: 081920 has a leading 0" in view.last_error
    # fixed: served, the pings go on
    facts.write_text("node: {hostname: n1}\ngpus:\n  - {index: 0, uuid: GPU-1, "
                     "product: NVIDIA A100-SXM4-80GB, memory_mib: 81920}\n")
    cache.refresh_once()
    assert sent[-1] == "WATCHDOG=1" and cache.view().facts is not None


def test_an_agent_with_a_metrics_profile_says_the_refusal_in_one_line(tmp_path: Path) -> None:
    """``--metrics-profile`` reads the facts at start (the profile is per GPU): a refused
    file ended the agent with a traceback (the SourceError uncaught), not the one line
    naming the file, key, line and fix that a refused profile gets (exit 2)."""
    from click.testing import CliRunner

    from swarmgpu.cli import main

    facts = tmp_path / "facts.yml"
    facts.write_text("node: {hostname: n1}\ngpus:\n  - {index: 0, uuid: GPU-1, "
                     "memory_mib: 081920}\n")
    profile = tmp_path / "profile.yml"
    profile.write_text("default: {util: 10}\n")
    res = CliRunner().invoke(main, ["agent", "--source", f"file:{facts}", "--metrics-profile",
                                    str(profile), "--listen", "127.0.0.1:0"])
    assert res.exit_code == 2, (res.output, res.exception)
    assert "memory_mib at line 3: 081920 has a leading 0" in res.output, res.output


def test_a_read_that_raises_otherwise_still_leaves_it_to_the_watchdog(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a refusal (``SourceError``: a file no restart mends) pings; a read that
    raised otherwise (NVML in a bad state) is left to the watchdog's restart."""

    class Broken:
        spec = "nvml"

        def read(self) -> object:
            raise RuntimeError("NVML_ERROR_UNKNOWN")

    sent: list[str] = []
    monkeypatch.setattr(server, "sd_notify", lambda msg: sent.append(msg) or True)
    cache = FactsCache(Broken(), refresh_s=30.0)  # type: ignore[arg-type]
    server._notify_systemd(cache, 30.0)
    cache.refresh_once()
    assert sent == [] and not cache.refused
