"""The wrong-token limit both HTTP servers use (swarmgpu/core/guesslimit.py), pure:
a token bucket per client address, bounded, with a clock of the test's."""

from __future__ import annotations

import ipaddress

from swarmgpu.core.guesslimit import GuessLimit


def test_the_wrong_token_buckets_refill_and_stay_bounded() -> None:
    """A bucket fills again with time; one host's IPv6 /64 is one client; and a guesser
    with 100,000 addresses keeps at most max_clients buckets, sharing one past them,
    which are forgotten once full again."""
    now = [0.0]
    g = GuessLimit(burst=3, refill_s=10.0, max_clients=64, clock=lambda: now[0])
    assert [g.take("10.0.0.1").wait_s for _ in range(4)] == [0, 0, 0, 10]
    now[0] += 10
    assert g.take("10.0.0.1").wait_s == 0 and g.take("10.0.0.1").wait_s == 10
    for _ in range(20):
        g.give_back(g.take("10.0.0.2"))  # right tokens
    assert g.take("10.0.0.2").wait_s == 0
    for i in range(3):
        assert g.take(f"2001:db8::{i + 1}").wait_s == 0
    assert g.take("2001:db8::ffff:1").wait_s > 0  # the same /64
    assert g.take("2001:db8:0:1::1").wait_s == 0  # the next /64
    assert g.take("::ffff:10.0.0.1").wait_s > 0  # IPv4-mapped: the IPv4 client
    for i in range(100_000):
        g.take(str(ipaddress.IPv4Address(0x0B000000 + i)))
    assert len(g) <= 64 + 1
    assert g.take("12.0.0.1").wait_s > 0  # a new address meanwhile: the shared bucket
    now[0] += 3 * 10 + 1  # they stopped: every bucket is full again
    assert g.take("12.0.0.1").wait_s == 0 and len(g) <= 3


def test_a_client_that_proved_its_token_keeps_a_bucket_of_its_own() -> None:
    """The daemon scraping an agent (or Prometheus the daemon) sends the right token:
    its bucket is full, so it was the first forgotten once guessers filled the table,
    and its next try went to the bucket they share and keep empty (429). A proved
    client keeps a bucket of its own; the proved are bounded too."""
    now = [0.0]
    g = GuessLimit(burst=3, refill_s=10.0, max_clients=64, clock=lambda: now[0],
                   max_proved=8)
    g.give_back(g.take("10.0.0.9"), proved=True)  # the daemon's first scrape
    for i in range(20_000):  # a guesser's addresses, one wrong token each
        g.take(str(ipaddress.IPv4Address(0x0B000000 + i)))
        if i % 1000 == 0:
            now[0] += 1.5  # sweeps come due: the daemon's full bucket is forgotten
    for _ in range(20):
        t = g.take("10.0.0.9")
        assert t.wait_s == 0 and t.key == "10.0.0.9"
        g.give_back(t, proved=True)
    assert g.take("12.0.0.1").wait_s > 0  # a stranger still shares the empty bucket
    for i in range(20):  # right tokens from many addresses: at most max_proved kept
        g.give_back(g.take(f"10.1.0.{i}"), proved=True)
    assert len(g) <= 64 + 8 + 1
    for _ in range(3):  # its own wrong tokens count against it, as anyone's
        g.take("10.1.0.19")
    assert g.take("10.1.0.19").wait_s > 0
