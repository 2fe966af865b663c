"""A name that ends in a number is an IPv4 address to a URL parser (WHATWG URL, curl) and
to the C resolver (``inet_aton``), and no host name (RFC 1123 2.1: the top label is
alphabetic): ``010.0.0.1`` is 8.0.0.1 there (octal) and 10.0.0.1 to a reader, ``127.1``
is 127.0.0.1, ``0x7f.1`` too. Only the dotted-decimal form (``ipaddress``) is one
address to everyone."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.core.config import load_config_report
from swarmgpu.manager.nodes.nodeurl import UnusableHostname, node_url
from swarmgpu.swarm.client import SwarmNode

AMBIGUOUS = ["010.0.0.1", "10.0.0.01", "127.1", "0x7f.0.0.1", "0X7F.1", "2130706433",
             "1.2.3.4.5", "gpu.0x10", "gpu.123", "123", "10.0.0.7."]


def _node(hostname: str) -> SwarmNode:
    return SwarmNode("n0", hostname, "10.0.0.9", "worker", "ready", "active", {}, {}, 1,
                     {}, {})


@pytest.mark.parametrize("name", AMBIGUOUS)
def test_a_hostname_ending_in_a_number_is_not_filled_in(name: str) -> None:
    # Python's resolver sent 'http://010.0.0.1:9401' to 8.0.0.1 and 'http://127.1:9401'
    # to the manager's own loopback, where the operator reads 10.0.0.1 and a name.
    with pytest.raises(UnusableHostname, match=r"agents\.url_template"):
        node_url("http://{hostname}:9401", _node(name), "agents.url_template")


@pytest.mark.parametrize("name", ["10.0.0.7", "gpu-7", "gpu7.example.com", "7gpu.example",
                                  "gpu-a.example.com.", "0x7f.example", "1a.2b"])
def test_dotted_decimal_addresses_and_names_are_still_filled_in(name: str) -> None:
    assert node_url("http://{hostname}:9401", _node(name), "k") == f"http://{name}:9401"


@pytest.mark.parametrize("entry", ["010.0.0.1", "127.1", "0x7f.0.0.1", "10.0.0.01:9402"])
def test_an_allowed_host_ending_in_a_number_is_refused(tmp_path: Path, entry: str) -> None:
    # A browser sends 'http://010.0.0.1/' as Host 8.0.0.1: the entry matched no request
    # and config check said ok.
    path = tmp_path / "c.yml"
    path.write_text(f"http:\n  allowed_hosts: 'map.example.com, {entry}'\n")
    errors = load_config_report(path, env={})[1]
    assert any("http.allowed_hosts" in e and repr(entry) in e and "number" in e
               for e in errors), errors
