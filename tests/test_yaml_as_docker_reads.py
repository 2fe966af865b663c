"""A plain scalar in a stack is read as every docker CLI on this machine reads it.

Users deploy with the docker CLI they have: docker 27 and older read stacks with go-yaml
v2 (Debian 12 ships 20.10), docker 28 and later with v3, and the two read ``yes``,
``0o-17`` and timestamps apart. The oracle is each CLI found (/usr/bin/docker,
/usr/local/bin/docker, PATH: ``support.docker_clis``) deploying the stack to a stand-in
engine, which records the service spec Swarm would be given: each row is written plain
as a label value, an environment value, a mapping key (a service's name and a label's)
and in fields docker types (``deploy.replicas``, an integer; ``read_only``, a boolean).
Render either refuses the row, as one the CLIs read apart (its message says how each
reads it, which is checked against the CLI at hand), or reads what the CLI deploys.
CI installs docker: with no docker CLI these tests fail, they do not skip.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from support.docker_clis import Engine, deployed, docker_clis, engine, major

from swarmgpu.manager.commands.render import StackError, check_stack, load_stack

CLIS: list[tuple[str, str] | None] = [*docker_clis()]

ROWS = [
    # YAML 1.1 booleans: text to yaml v3 (docker 28+), booleans to v2 (27 and older)
    "y",
    "Y",
    "n",
    "N",
    "yes",
    "No",
    "on",
    "OFF",
    "yES",
    "Yes",
    "NO",
    "On",
    "off",
    "true",
    "False",
    "TRUE",
    # numbers as Go's strconv reads them once every '_' is dropped
    "1e3",
    ".5e3",
    "+.5",
    "1.5",
    "1.5e6",
    "08",
    "017",
    "0o17",
    "0O17",
    "0o-17",
    "0o+17",
    "0o-1_7",
    "-0o17",
    "-0b101",
    "0X1F",
    "0b101",
    "0b-101",
    "1_000",
    "-0",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "1e999",
    "0x1FFFFFFFFFFFFFFFFF",
    "0x",
    "0b2",
    "inf",
    ".inf",
    "-.Inf",
    ".nan",
    # no base 60, no '='; null
    "12:30",
    "=",
    "~",
    "null",
    # timestamps: docker 28 gives the service Go's text of the time, in its own zone
    "2001-12-14",
    "2001-1-2",
    "2001-12-14T21:59:43.10Z",
    "2001-12-14 21:59:43.10",
    "2001-12-14t21:59:43,5+01:00",
    "2001-02-30",
    "2001-12-14T25:00:00Z",
]

# docker 27 and older need a version; docker 28 takes it.
SERVICE = 'version: "3.8"\nservices:\n  {name}:\n    image: busybox\n'
# What render's refusal says each reader makes of a plain scalar (yamlfile).
TWO_READINGS = re.compile(r"plain `.*` is (.*) to docker 28\+ and (.*) to docker 27 and older")


@pytest.fixture(scope="module", params=CLIS or [None], ids=lambda c: c and f"{c[0]}-{c[1]}")
def cli(request: pytest.FixtureRequest) -> Iterator[tuple[str, int, Engine]]:
    """Each docker CLI found, with a stand-in engine to deploy to."""
    if request.param is None:
        pytest.fail(
            "no docker CLI in /usr/bin, /usr/local/bin or on PATH: it is the oracle of this test"
        )
    path, version = request.param
    with engine() as server:
        yield path, major(version), server


def _reading(why: str, version: int) -> str | None:
    """What render's refusal says the CLI of ``version`` reads (text, true, false, the
    number N); None where the refusal is not that one."""
    m = TWO_READINGS.search(why)
    return None if m is None else m.group(1 if version >= 28 else 2)


def _label(spec: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in spec["Labels"].items() if not k.startswith("com.docker.stack")}


def _go_text(v: Any) -> str:
    """A number as docker writes it into a label (Go's %v: the shortest digits, with an
    exponent from 1e6 up and below 1e-4)."""
    if not isinstance(v, float):
        return str(v)
    sign, digits, exp = Decimal(repr(v)).normalize().as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + exp  # digits before the decimal point
    x = point - 1
    if x < -4 or x >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{'-' if sign else ''}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"
    return format(Decimal(repr(v)), "f").rstrip("0").rstrip(".") if "." in repr(v) else str(int(v))


def _read(text: str) -> tuple[Any, str]:
    """The stack as render reads it, or None and render's error."""
    try:
        return load_stack(text, "s.yml"), ""
    except StackError as e:
        return None, str(e)


@pytest.mark.parametrize("plain", ROWS)
def test_a_plain_value_reads_as_docker_reads_it(
    plain: str, cli: tuple[str, int, Engine], tmp_path: Path
) -> None:
    path, version, server = cli
    text = (
        SERVICE.format(name="s") + f"    deploy:\n      labels:\n        a: {plain}\n"
        f"    environment:\n      E: {plain}\n"
    )
    ours, why = _read(text)
    theirs, err = deployed(path, server, text, tmp_path)
    if ours is None:
        reading = _reading(why, version)
        if reading is None:
            # a timestamp: docker 28 deploys Go's text of the time in its own zone,
            # docker 27 and older the text
            assert "timestamp" in why and theirs is not None, (plain, why, err)
            env = theirs["TaskTemplate"]["ContainerSpec"]["Env"]
            assert (env == [f"E={plain}"]) == (version < 28), (plain, env)
            return
        if reading in ("true", "false"):  # a boolean: docker refuses it in env and labels
            assert theirs is None and "must be a string, number or null" in err, (plain, err)
            return
        want = plain if reading == "text" else reading.removeprefix("the number ")
        assert theirs is not None, (plain, why, err)
        assert _label(theirs) == {"a": want}, (plain, why, theirs)
        assert theirs["TaskTemplate"]["ContainerSpec"]["Env"] == [f"E={want}"], (plain, theirs)
        return
    value = ours["services"]["s"]["deploy"]["labels"]["a"]
    if theirs is None:  # docker refuses a boolean label, and +Inf or NaN
        assert isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)), (
            plain,
            value,
            err,
        )
        return
    assert not isinstance(value, bool), (plain, value, theirs)
    assert _label(theirs) == {"a": "" if value is None else _go_text(value)}, (plain, value, theirs)
    env = "E" if value is None else f"E={_go_text(value)}"
    assert theirs["TaskTemplate"]["ContainerSpec"]["Env"] == [env], (plain, value, theirs)


@pytest.mark.parametrize("plain", ROWS)
def test_a_plain_key_is_text_where_docker_reads_text(
    plain: str, cli: tuple[str, int, Engine], tmp_path: Path
) -> None:
    # A service named y was refused as the boolean key true; docker 28 takes it, docker
    # 27 and older refuse it (a non-string key): render refuses it, naming both.
    path, version, server = cli
    text = SERVICE.format(name=plain) + f"    deploy:\n      labels:\n        {plain}: x\n"
    theirs, err = deployed(path, server, text, tmp_path)
    errors = check_stack(text, where="s.yml").errors
    reading = _reading(" ".join(errors), version)
    if any("timestamp" in e for e in errors):
        reading = "text" if version < 28 else "a time"  # to docker 28, a non-string key
    if reading is not None:
        # a boolean or a number: a non-string key; text: the name, where its schema
        # takes it (docker 20.10's has no '+' in a service's name)
        assert (
            (theirs is None)
            if reading != "text"
            else (
                theirs is None
                or (theirs["Name"] == f"t_{plain}" and _label(theirs) == {plain: "x"})
            )
        ), (plain, err)
        return
    assert (theirs is not None) == (not errors), (plain, err, errors)
    if theirs is not None:
        ours = load_stack(text)
        assert list(ours["services"]) == [plain] and theirs["Name"] == f"t_{plain}"
        assert ours["services"][plain]["deploy"]["labels"] == {plain: "x"} == _label(theirs)


@pytest.mark.parametrize("plain", ROWS)
@pytest.mark.parametrize("field", ["deploy:\n      replicas", "read_only"])
def test_a_plain_typed_field_is_taken_where_docker_takes_it(
    field: str, plain: str, cli: tuple[str, int, Engine], tmp_path: Path
) -> None:
    path, version, server = cli
    text = SERVICE.format(name="s") + f"    {field}: {plain}\n"
    theirs, err = deployed(path, server, text, tmp_path)
    errors = check_stack(text, where="s.yml").errors
    if _reading(" ".join(errors), version) is not None:
        return  # refused as read apart: read_only: yes is true to one CLI, refused by the other
    if theirs is not None and errors and field.endswith("replicas"):
        # render is stricter, not another reading: a count written as a float (1e3)
        # or past 999999 is refused, naming the key
        count = load_stack(text)["services"]["s"]["deploy"]["replicas"]
        assert errors == [f"services.s.deploy.replicas: {count!r} is not a whole number >= 0"]
        return
    assert (theirs is not None) == (not errors), (plain, err, errors)


ANCHORS = [
    # an anchor defined again: YAML and both go-yaml versions take it, and each alias
    # names the node its anchor last named above it; PyYAML refused the file
    'x-one: &a "first"\n{svc}    deploy:\n      labels:\n        one: *a\n'
    '        two: &a "second"\n        three: *a\n',
    # again inside its first node: the alias there names the later one
    '{svc}    deploy:\n      labels: &a\n        one: &a "inner"\n        two: *a\n'
    "    environment:\n      E: *a\n",
]


@pytest.mark.parametrize("body", ANCHORS)
def test_an_anchor_defined_again_is_read_as_docker_reads_it(
    body: str, cli: tuple[str, int, Engine], tmp_path: Path
) -> None:
    path, _, server = cli
    text = 'version: "3.8"\n' + body.format(svc="services:\n  s:\n    image: busybox\n")
    theirs, err = deployed(path, server, text, tmp_path)
    assert theirs is not None, err
    ours = load_stack(text, "s.yml")["services"]["s"]
    assert ours["deploy"]["labels"] == _label(theirs)
    env = theirs["TaskTemplate"]["ContainerSpec"].get("Env")
    assert [f"{k}={v}" for k, v in ours.get("environment", {}).items()] == (env or [])
    assert check_stack(text, where="s.yml").errors == []
