"""A stack's ``cpus`` reservation is read as `docker stack deploy` reads it.

docker/cli's compose loader keeps ``cpus`` as text (its schema refuses a number: "must
be a string"), and convert reads the text with opts.ParseCPUs: Go's big.Rat.SetString,
times 1e9, which must come out whole ("value is too precise"). So ``"1/2"`` is half a
CPU, as are ``0x1p-1`` and ``.5``; ``"1.5000000000"`` is 1.5; ``" 1"`` is refused; ``""``
is no reservation. Render read ``cpus`` with a regular expression of decimals, refused
``"1/2"`` that docker deploys and took ``" 1"`` that docker refuses. The oracle is each
docker CLI on this machine (``support.docker_clis``) deploying the stack to a stand-in
engine; a value Swarm refuses at deploy (below 0.001 CPUs, negative: swarmkit's
validateResources) is refused by render, which the stand-in engine does not check; so is
one past int64 nano-CPUs, of which docker sends Swarm the low 64 bits.
CI installs docker: with no docker CLI these tests fail, they do not skip.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.docker_clis import deployed, docker_clis, engine

from swarmgpu.manager.commands.nanocpus import go_rat
from swarmgpu.manager.commands.render import check_stack, stack_services

HEAD = 'version: "3.8"\nservices:\n  b:\n    image: busybox\n'

ROWS = [
    '"1/2"', "1/2", '"+1/2"', '"01/2"', '"0x10/0b100"', '"1/2/3"', '"1/-2"', '"08/2"',
    '"3/0"', '"1.5/2"', '"/2"', '"1/"',
    '"0x1p-1"', '"0b1.1"', '"0o7.4"', '"1.5p1"', '"0x1e1"', '"0x1.8"', '".5"', '"5."',
    '"1.5000000000"', '"1e-1"', '"1E+2"', '"2_000"', '"0x_1"', '"1__0"', '"_1"',
    '"1_"', '"1e1_0"',
    '" 1"', '"1 "', '""', '"."', '"-"', '"+2"', '"-0"', '"0e99999999999999"',
    '"1e99999999999999999999"', '"1e-1000001"', '"0.0000000001"', '"1.5e"', '"inf"',
    '"1.5"', '"2"', '"0"', '"0.001"', '"-1"', '"0.0001"', "1.5",
]


def _ours(value: str) -> tuple[int | None, str]:
    """The NanoCPUs render gives the service (0: none), or None and its errors."""
    text = f"{HEAD}    deploy:\n      resources:\n        reservations:\n          cpus: {value}\n"
    checked = check_stack(text, environ={})
    if checked.errors:
        return None, "\n".join(checked.errors)
    (svc,) = stack_services(checked.stack, "s", [])
    res = (svc.spec["TaskTemplate"].get("Resources") or {}).get("Reservations") or {}
    return res.get("NanoCPUs", 0), ""


@pytest.fixture(scope="module")
def clis() -> list[tuple[str, str]]:
    found = docker_clis()
    if not found:
        pytest.fail("no docker CLI in /usr/bin, /usr/local/bin or on PATH: it is the oracle "
                    "of this test")
    return found


@pytest.mark.parametrize("value", ROWS)
def test_cpus_is_read_as_each_docker_cli_deploys_it(
    value: str, clis: list[tuple[str, str]], tmp_path: Path
) -> None:
    ours, why = _ours(value)
    text = f"{HEAD}    deploy:\n      resources:\n        reservations:\n          cpus: {value}\n"
    with engine() as server:
        for path, version in clis:
            spec, err = deployed(path, server, text, tmp_path)
            if spec is None:
                assert ours is None, (version, value, ours, err)
                continue
            theirs = ((spec["TaskTemplate"].get("Resources") or {}).get("Reservations")
                      or {}).get("NanoCPUs", 0)
            if theirs < 0 or 0 < theirs < 1_000_000:  # Swarm refuses it at deploy
                # (past int64 docker sends the low 64 bits: 1e10 CPUs goes negative)
                assert ours is None and ("at least 0.001 CPUs" in why or "64-bit count" in why), \
                    (version, value, why)
            else:
                assert ours == theirs, (version, value, ours, theirs, why)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('" 1"', "' 1' is not a number of CPUs: docker fails to parse it as a rational"),
        ('"1/0"', "'1/0' is not a number of CPUs"),
        ('"0.0000000001"', '(docker: "value is too precise"); round it to 9 decimals'),
        ('"-1"', "Swarm refuses a reservation below 0.001 CPUs"),
        ("lots", "'lots' is not a number of CPUs"),
        ('"1e10"', "more billionths of a CPU than a 64-bit count holds"),
        ('"0.5' + "0" * 1000 + '"', "longer than 1000 characters"),
    ],
)
def test_a_cpus_docker_or_swarm_refuses_says_why_and_the_fix(value: str, says: str) -> None:
    ours, why = _ours(value)
    assert ours is None and says in why, why
    assert "services.b.deploy.resources.reservations.cpus" in why, why


def test_a_huge_exponent_is_refused_without_building_the_number() -> None:
    """Go refuses a power of 5 above 1e6 or of 2 above 1e7 before building it; 0 with any
    exponent int64 holds is 0."""
    assert go_rat("1e1000001") is None and go_rat("1p10000001") is None
    assert go_rat("1e1000000") == 10**1000000
    assert go_rat("0e9223372036854775807") == 0 and go_rat("0e9223372036854775808") is None
    assert go_rat("1e-" + "0" * 900 + "1") == Fraction(1, 10) and go_rat("1e" + "9" * 900) is None


@given(st.fractions(max_denominator=10**6))
def test_a_fraction_reads_as_itself(f: Fraction) -> None:
    assert go_rat(f"{f.numerator}/{f.denominator}") == f


@given(st.decimals(allow_nan=False, allow_infinity=False, places=12))
def test_a_decimal_reads_as_itself(d: object) -> None:
    text = str(d)
    assert go_rat(text) == Fraction(text), text
