"""A service's CPU and memory reservations as `docker stack deploy` gives them to Swarm.

docker/cli's compose convert (cli/compose/convert/service.go ``convertResources``)
reads ``cpus`` with opts.ParseCPUs and ``memory`` as a byte count: ``"0"`` is 0, Swarm's
"no reservation" (swarmkit's validateResources lets 0 through; a value above 0 must be
at least 0.001 CPUs and 4 MiB). Both CLIs on this machine deploy ``reservations: {cpus:
"0", memory: "0"}`` as ``Reservations: {}`` (tests/support/docker_clis.py's engine)."""

from __future__ import annotations

import pytest

from swarmgpu.manager.commands.render import check_stack, load_stack, stack_services

HEAD = 'version: "3.8"\nservices:\n  b:\n    image: busybox\n'


def _res(reservations: str) -> str:
    return f"{HEAD}    deploy:\n      resources:\n        reservations: {{{reservations}}}\n"


def _reserved(text: str) -> object:
    (svc,) = stack_services(load_stack(text), "s", [])
    return (svc.spec["TaskTemplate"].get("Resources") or {}).get("Reservations")


@pytest.mark.parametrize(
    "zero", ['cpus: "0"', 'cpus: "0.0"', 'memory: "0"', 'cpus: "0", memory: "0b"']
)
def test_a_zero_reservation_is_none_as_docker_deploys_it(zero: str) -> None:
    """It was refused ("reserves no CPU; leave the key out instead"): a stack docker
    deploys, and compose's 0 is "none"."""
    checked = check_stack(_res(zero), environ={})
    assert checked.errors == [], checked.errors
    assert _reserved(_res(zero)) is None


def test_a_set_reservation_is_still_read() -> None:
    assert _reserved(_res('cpus: "1.5", memory: 512M')) == {
        "NanoCPUs": 1_500_000_000,
        "MemoryBytes": 512 << 20,
    }


def test_cpus_0_over_a_set_value_in_a_later_file_is_no_reservation() -> None:
    """``-c a.yml -c b.yml``: docker's merge puts a later ``"0"`` (text, not empty to
    mergo) over ``"2"``, and deploys no CPU reservation; render refused the merged 0."""
    a = _res('cpus: "2"')
    b = _res('cpus: "0"')
    checked = check_stack(a, where="a.yml", more=[("b.yml", b)], environ={})
    assert checked.errors == [], checked.errors
    res = checked.stack["services"]["b"]["deploy"]["resources"]["reservations"]
    assert res == {"cpus": "0"}
    (svc,) = stack_services(checked.stack, "s", [])
    assert "Resources" not in svc.spec["TaskTemplate"]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('cpus: "0.0001"', "at least 0.001 CPUs"),
        ("memory: 1M", "at least 4 MiB"),
        ('cpus: "-1"', "at least 0.001 CPUs"),  # docker reads -1; Swarm refuses it
    ],
)
def test_a_reservation_swarm_refuses_is_an_error_naming_the_key(value: str, says: str) -> None:
    errors = check_stack(_res(value), environ={}).errors
    assert len(errors) == 1 and "services.b.deploy.resources.reservations." in errors[0], errors
    assert says in errors[0], errors
