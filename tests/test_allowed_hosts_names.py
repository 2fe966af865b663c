"""``http.allowed_hosts`` and the agent's ``--allowed-hosts``: each entry is a name a Host
header can carry; anything else could never match one, and was taken silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.core.config import load_config_report
from swarmgpu.core.httpguard import allowed_hosts, host_allowed


def _errors(tmp_path: Path, hosts: str) -> list[str]:
    path = tmp_path / "c.yml"
    path.write_text(f"http:\n  allowed_hosts: '{hosts}'\n")
    return load_config_report(path, env={})[1]


@pytest.mark.parametrize("entry", ["https://map.example.com", "*.example.com",
                                   "map.example.com/", "map example.com", "@map"])
def test_an_allowed_host_no_host_header_names_is_refused(tmp_path: Path, entry: str) -> None:
    # A URL pasted, a wildcard: the operator's browser then got 421 ("DNS rebinding?")
    # for the name meant, and config check had said ok.
    errors = _errors(tmp_path, f"ok.example.com, {entry}")
    assert any("http.allowed_hosts" in e and repr(entry) in e for e in errors), errors


def test_names_addresses_and_ports_are_fine(tmp_path: Path) -> None:
    assert _errors(tmp_path, "map.example.com, MAP.example.com., 10.0.0.5, [::1]:9402, "
                             "map.example.com:443, gpu_map") == []


def test_the_agent_refuses_such_an_entry_with_the_fix() -> None:
    # (--trusted-proxies is refused too, later: an agent that took the entry stops there)
    got = CliRunner().invoke(main, ["agent", "--source", "file:/nonexistent",
                                    "--allowed-hosts", "*.example.com",
                                    "--trusted-proxies", "not-an-address"])
    assert got.exit_code == 78, got.output
    assert "--allowed-hosts" in got.output and "'*.example.com'" in got.output, got.output


@pytest.mark.parametrize("entry", ["::1", "2001:db8::7", "FE80::1", "::ffff:10.0.0.5"])
def test_an_ipv6_address_without_brackets_is_still_taken(tmp_path: Path, entry: str) -> None:
    # An IP address is how an operator writes one in a list; it was taken before names
    # were checked. Its last group read as a port ('::1' as ':' and 1) refused it: the
    # daemon and the agent stopped at start on a config they had run with.
    assert _errors(tmp_path, f"map.example.com, {entry}") == []
    got = CliRunner().invoke(main, ["agent", "--source", "file:/nonexistent",
                                    "--allowed-hosts", entry,
                                    "--trusted-proxies", "not-an-address"])
    assert got.exit_code == 78 and "--allowed-hosts" not in got.output, got.output


def test_a_listen_name_with_a_trailing_dot_serves_its_host() -> None:
    # The listen host was kept with its dot, and a Host is read without it: a server
    # told to listen on 'gpu-a.:9402' answered its own name 421 (DNS rebinding?).
    allowed = allowed_hosts("GPU-a.:9402")
    for host in ("gpu-a.", "gpu-a.:9402", "gpu-a"):
        assert host_allowed(host, allowed), host
    assert not host_allowed("gpu-b", allowed)


def test_a_unicode_name_is_told_its_idna_form(tmp_path: Path) -> None:
    # A browser sends the xn-- (IDNA) form as Host: the name as written never matched,
    # and the message named no form that would.
    errors = _errors(tmp_path, "map.bücher.example")
    want = "map.bücher.example".encode("idna").decode("ascii")
    assert want == "map.xn--bcher-kva.example"
    assert any(f"write {want}" in e for e in errors), errors
