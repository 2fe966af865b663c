"""A plain scalar in a stack is read as the docker CLI on this machine reads it.

The oracle is the real ``docker stack config -c`` (no daemon, no swarm): each row is
written plain as a label value, an environment value, a mapping key (a service's name
and a label's) and in fields docker types (``deploy.replicas``, an integer;
``read_only``, a boolean), and what docker gives the service, or refuses, is compared
with what render reads (``core.goscalar``). Docker 28 and later read stacks with yaml
v3. CI installs docker: without it these tests fail, they do not skip.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarmgpu.manager.commands.render import StackError, check_stack, load_stack

ROWS = [
    # YAML 1.1 booleans, text to yaml v3 (docker 27 and older, yaml v2: booleans)
    "y",
    "Y",
    "n",
    "N",
    "yes",
    "No",
    "on",
    "OFF",
    "yES",
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

SERVICE = "services:\n  {name}:\n    image: busybox\n"


def _docker(text: str, tmp_path: Path) -> tuple[Any, str]:
    """What `docker stack config -c` makes of ``text`` (every scalar as its text), or
    None and docker's error."""
    docker = shutil.which("docker")
    assert docker is not None, "docker CLI not installed: it is the oracle of this test"
    path = tmp_path / "s.yml"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["DOCKER_CONFIG"] = str(tmp_path)  # never the user's contexts
    res = subprocess.run(
        [docker, "stack", "config", "-c", str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if res.returncode != 0:
        return None, res.stderr.strip()
    return yaml.load(res.stdout, Loader=yaml.BaseLoader), ""


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
def test_a_plain_value_reads_as_docker_reads_it(plain: str, tmp_path: Path) -> None:
    text = (
        SERVICE.format(name="s") + f"    deploy:\n      labels:\n        a: {plain}\n"
        f"    environment:\n      E: {plain}\n"
    )
    ours, why = _read(text)
    theirs, err = _docker(text, tmp_path)
    if ours is None:
        # render refuses only a timestamp: docker 28 rewrites it (its zone's text),
        # docker 27 and older keep the text
        assert "quote it" in why and theirs is not None, (plain, why, err)
        assert theirs["services"]["s"]["environment"]["E"] != plain, theirs
        return
    value = ours["services"]["s"]["deploy"]["labels"]["a"]
    if theirs is None:  # docker refuses a boolean label, and +Inf or NaN
        assert isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)), (
            plain,
            value,
            err,
        )
        return
    svc = theirs["services"]["s"]
    assert not isinstance(value, bool), (plain, value, svc)
    assert svc["deploy"]["labels"]["a"] == ("" if value is None else _go_text(value)), (
        plain,
        value,
        svc,
    )
    assert svc["environment"]["E"] == ("null" if value is None else _go_text(value)), (
        plain,
        value,
        svc,
    )


@pytest.mark.parametrize("plain", ROWS)
def test_a_plain_key_is_text_where_docker_reads_text(plain: str, tmp_path: Path) -> None:
    # A service named y was refused as the boolean key true; docker 28 takes it.
    text = SERVICE.format(name=plain) + f"    deploy:\n      labels:\n        {plain}: x\n"
    theirs, err = _docker(text, tmp_path)
    errors = check_stack(text, where="s.yml").errors
    assert (theirs is not None) == (not errors), (plain, err, errors)
    if theirs is not None:
        ours = load_stack(text)
        assert list(ours["services"]) == [plain] == list(theirs["services"])
        assert ours["services"][plain]["deploy"]["labels"] == {plain: "x"}


@pytest.mark.parametrize("plain", ROWS)
@pytest.mark.parametrize("field", ["deploy:\n      replicas", "read_only"])
def test_a_plain_typed_field_is_taken_where_docker_takes_it(
    field: str, plain: str, tmp_path: Path
) -> None:
    text = SERVICE.format(name="s") + f"    {field}: {plain}\n"
    theirs, err = _docker(text, tmp_path)
    errors = check_stack(text, where="s.yml").errors
    if theirs is not None and errors and field.endswith("replicas"):
        # render is stricter, not another reading: a count written as a float (1e3)
        # or past 999999 is refused, naming the key
        count = load_stack(text)["services"]["s"]["deploy"]["replicas"]
        assert errors == [f"services.s.deploy.replicas: {count!r} is not a whole number >= 0"]
        return
    assert (theirs is not None) == (not errors), (plain, err, errors)
