"""A listen address or URL whose host ends in a number but is no dotted-decimal IPv4
address (``0:9402``, ``127.1``): Python's bind and the C resolver read ``0`` as 0.0.0.0
(``inet_aton``), Go's resolver and ``ipaddress`` send it to DNS as a name. Refused with
the dotted form to write, by one helper for every listen and URL option
(``core.listenhost``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmgpu.agent.server import parse_listen
from swarmgpu.core.config import load_config_report


def _errors(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "c.yml"
    path.write_text(body)
    return load_config_report(path, env={})[1]


@pytest.mark.parametrize(("listen", "fix"), [
    ("0:9402", "0.0.0.0:9402"), ("127.1:9402", "127.0.0.1:9402"),
    ("0x7f.1:9402", "127.0.0.1:9402"), ("010.0.0.1:9402", "8.0.0.1:9402"),
])
def test_a_numeric_listen_host_two_readers_read_apart_is_refused_with_the_fix(
        tmp_path: Path, listen: str, fix: str) -> None:
    errors = _errors(tmp_path, f"http:\n  listen: '{listen}'\n")
    assert any("http.listen" in e and f"write {fix}" in e for e in errors), errors


@pytest.mark.parametrize("listen", ["0.0.0.0:9402", "127.0.0.1:0", "[::]:9402",
                                    "localhost:9402"])
def test_plain_listen_addresses_stay_fine(tmp_path: Path, listen: str) -> None:
    assert _errors(tmp_path, f"http:\n  listen: '{listen}'\n") == []


def test_the_agents_listen_is_checked_by_the_same_helper() -> None:
    with pytest.raises(ValueError, match=r"write 0\.0\.0\.0:9401"):
        parse_listen("0:9401")
    assert parse_listen("0.0.0.0:9401") == ("0.0.0.0", 9401)


@pytest.mark.parametrize("key", ["agents.url_template", "rebalance.metrics_url_template"])
def test_a_url_templates_literal_host_is_checked_too(tmp_path: Path, key: str) -> None:
    section, name = key.split(".")
    url = "http://127.1:{port}/x" if section == "agents" else "http://127.1:9400/metrics"
    errors = _errors(tmp_path, f"{section}:\n  {name}: '{url}'\n")
    assert any(f": {key}: the host " in e and "write 127.0.0.1" in e for e in errors), errors


@pytest.mark.parametrize(("listen", "said"), [
    ("\ud800:9402", "\\ud800"),  # (the config refuses it as any value: core.configvalues)
    ("\u0660:9402", "is no IP address or host name"),  # an Arabic-Indic 0: a name to DNS
    ("bücher.example:9402", "write xn--bcher-kva.example:9402"),
    ("map_.example/x:9402", "is no IP address or host name"),
])
def test_a_listen_host_no_resolver_reads_as_written_is_refused(
        tmp_path: Path, listen: str, said: str) -> None:
    # Passed the check, and the bind raised at start: a traceback (UnicodeError, or
    # getaddrinfo's "Name or service not known" after the engine was waited for).
    errors = _errors(tmp_path, f"http:\n  listen: {listen!r}\n".replace("'", '"'))
    assert any("http.listen" in e and said in e for e in errors), errors
    with pytest.raises(ValueError, match="no IP address or host name"):
        parse_listen(listen.replace("9402", "9401"))


@pytest.mark.parametrize("listen", ["::1", "::", "fe80::1"])
def test_an_ipv6_listen_without_a_port_is_told_to_bracket_it(tmp_path: Path,
                                                            listen: str) -> None:
    """``::1`` split at its last ':' read as the host ':' and the port 1: the message named
    the host ':' as no IP address, where the address lacks its port (and its brackets)."""
    errors = _errors(tmp_path, f"http:\n  listen: '{listen}'\n")
    assert any("http.listen" in e and f"[{listen}]:9402" in e for e in errors), errors
    assert not any("the host ':'" in e for e in errors), errors


def test_the_agents_ipv6_listen_without_a_port_is_told_to_bracket_it() -> None:
    with pytest.raises(ValueError, match=r"IPv6 address with no port.*\[::1\]:9401"):
        parse_listen("::1")
