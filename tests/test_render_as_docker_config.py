"""render reads a stack file as `docker stack config` (docker's own loader) reads it.

A differential test: each case's files were read by docker 28's ``docker stack config -c
A [-c B]`` (no daemon) and what it read, or its error, recorded in
tests/fixtures/docker-stack-config/cases.json (``support.docker_config``; provenance in
tests/fixtures/SOURCES.md); render's ``check_stack`` reads them here. Where docker read
them, render reads each service's image, environment, labels and placement fields the
same; where docker refused them, render refuses them too. The only cases docker reads
and render refuses are ``DELIBERATE``: what docker's readers disagree on, or where
docker silently drops what the file says, render refuses naming the fix
(docs/deploy.md).

CI's docker (Debian 12's 20.10) has no ``stack config``, so the recording is the oracle
and no CLI is needed. Where a CLI of 28 or later with ``stack config`` is found, every
case is also run through it and must read as recorded (a changed docker, or an edited
recording); where none is, that test says so in one printed line. A case without a
recording (or changed since) fails naming the command that records again:
``pytest tests/test_render_as_docker_config.py --record-docker-config``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.docker_clis import major
from support.docker_config import (
    RECORDED_MAJOR,
    RERECORD,
    case_inputs,
    config_clis,
    load_recording,
    reads,
    record_case,
    recorded,
    recorded_major,
    write_recording,
)

from swarmgpu.manager.commands.render import check_stack

ENVIRON = {"A": "aa", "EMPTY": "", "DOL": "$5", "R": "3", "BARE": "bv"}
DOTENV = "A=from-dotenv\nNOPE=from-dotenv\n"  # in each case's folder: neither reads it


def _svc(body: str, top: str = "") -> str:
    return top + "services:\n  web:\n" + body


V38 = 'version: "3.8"\n'
ONE: dict[str, str] = {
    "braced": _svc("    image: nginx:${A}\n"),
    "unbraced": _svc("    image: nginx:$A\n"),
    "soft default": _svc("    image: nginx:${EMPTY:-d}\n"),
    "default": _svc("    image: nginx:${EMPTY-d}\n"),
    "default unset": _svc("    image: nginx:${NOPE-d}\n"),
    "required set": _svc("    image: nginx:${A:?need}\n"),
    "required empty": _svc("    image: nginx:${EMPTY:?need}\n"),
    "required empty ok": _svc("    image: nginx:${EMPTY?need}\n"),
    "required unset": _svc("    image: nginx:${NOPE?need}\n"),
    "required no message": _svc("    image: nginx\n    environment: ['X=${NOPE:?}']\n"),
    "dollars": _svc('    image: nginx\n    environment: ["P=$$5", "Q=${DOL}", "Z=$$$$", '
                    '"Y=$$$A", "X=$A$A"]\n'),
    "nested default": _svc('    image: nginx\n    environment: ["D=${NOPE:-${A}}", '
                           '"E=${NOPE:-${A:-x}}", "F=${NOPE:-a:b}", "G=${NOPE:-a}b}"]\n'),
    "empty defaults and names": _svc(
        "    image: nginx\n    environment: ['X=${NOPE:-}', 'Y=${NOPE-}', 'Z=$R_X', 'W=${R}_X',"
        " 'V=$A.B', 'U=$A-B', 'T=${NOPE:-$A}', 'S=${NOPE:-a$$b}']\n"),
    "forms docker refuses": _svc(
        "    image: nginx\n    environment: ['X=${A~x}', 'Y=${A:=x}', 'Z=${NOPE::-x}', "
        "'W=${A']\n"),
    "plus": _svc('    image: nginx\n    environment: ["F=${A:+alt}"]\n'),
    "plus unset": _svc('    image: nginx\n    environment: ["F=${A+alt}"]\n'),
    "unbraced dash": _svc('    image: nginx\n    environment: ["F=$NOPE-x}y", "G=$A-x"]\n'),
    "dollar at end": _svc("    image: nginx\n    environment: ['X=a$']\n"),
    "dollar digit": _svc("    image: nginx\n    environment: ['X=$1']\n"),
    "empty braces": _svc("    image: nginx\n    environment: ['X=${}']\n"),
    "spaced name": _svc("    image: nginx\n    environment: ['X=${ A }']\n"),
    "env mapping": _svc("    image: nginx\n    environment: {A: , B: '', C: x, EMPTY: , BARE: , "
                        "UNSET: }\n"),
    "env list": _svc("    image: nginx\n    environment: [A, B=, C=x, 'A2=', EMPTY, BARE=]\n"),
    "env list twice": _svc("    image: nginx\n    environment: [C=x, C=y]\n"),
    "env key substituted": _svc("    image: nginx\n    environment: {'${A}': x}\n"),
    "env value a boolean once substituted": _svc(
        "    image: nginx\n    environment: {X: '${NOPE:-true}'}\n"),
    "labels as lists": _svc("    image: nginx\n    labels: [a=1, b, 'c=x=y']\n    deploy:\n"
                            "      labels: [swarmgpu.gpus=1, 'k=${A}', 'a$$b=1']\n"),
    "labels as mappings": _svc("    image: nginx\n    deploy:\n      labels: {swarmgpu.gpus: 1, "
                               "k: '${A}', f: 1.0, nn: }\n"),
    "numbers as docker gives them to Swarm": _svc(
        "    image: nginx\n    labels: {a: 1.0, b: 1e8, c: 0x1F}\n    environment: {A: 1.0, "
        "B: 123456789.0, C: -0.0, D: 10000000000000000000000, E: 1.10, F: 1e-7, G: 0o17}\n"
        "    deploy:\n      labels: {swarmgpu.gpus: 1.0, f: 0.50, g: 1e21, h: 0.0001}\n"),
    "a plain n": _svc("    image: nginx\n    deploy:\n      labels: {n: x}\n"),
    "label keys keep their dollars": _svc(
        "    image: nginx\n    deploy:\n      labels: {'k$$x': 1, 'k${A}': 2}\n"),
    "deploy fields substituted": _svc(
        "    image: nginx\n    deploy:\n      replicas: ${R}\n      mode: ${M:-replicated}\n"
        "      placement:\n        max_replicas_per_node: ${R}\n"
        "        constraints: ['node.labels.z==${A}']\n"
        "        preferences: [{spread: node.labels.z}]\n"
        "      resources:\n        reservations: {cpus: '0.5', memory: 1g}\n"),
    "whole numbers written as floats": _svc(
        "    image: nginx\n    deploy:\n      replicas: 2.0\n"
        "      placement: {max_replicas_per_node: 1.0}\n    ports:\n"
        "      - {target: 80.0, published: 8080.0, mode: host}\n"),
    "a mode in capitals": _svc("    image: nginx\n    deploy:\n      mode: Global\n"),
    "a second document": _svc("    image: nginx\n") + "---\n" + _svc("    image: redis\n"),
    "global": _svc("    image: nginx\n    deploy:\n      mode: global\n"),
    "ports": _svc("    image: nginx\n    ports:\n"
                  "      - {target: 80, published: 8080, mode: host}\n"
                  "      - '9000:9000'\n"
                  "      - {target: 81, published: '${R}080', mode: host, protocol: UDP}\n"),
    "merge key": "x-c: &c\n  image: nginx:${A}\n  deploy:\n    labels: {swarmgpu.gpus: '1'}\n"
                 + _svc("    <<: *c\n    deploy:\n      replicas: 2\n"),
    "merge key list: the first listed wins": "x-c: &c\n  image: nginx\nx-d: &d\n  image: redis\n"
                                             "  labels: [a=1]\n" + _svc("    <<: [*c, *d]\n"),
    "merge key list nested": "x-c: &c\n  image: nginx\n  environment: {A: 1}\nx-d: &d\n  <<: *c\n"
                             "  image: redis\n" + _svc("    <<: [*d, *c]\n"),
    "merge key under own keys": "x-c: &c\n  image: nginx\n  environment: {A: 1}\n"
                                + _svc("    <<: *c\n    image: redis\n"),
    "merge key below own keys": "x-c: &c\n  image: nginx\n"
                                + _svc("    image: redis\n    <<: *c\n"),
    "alias": "x-l: &l\n  swarmgpu.gpus: '1'\n" + _svc("    image: nginx\n    deploy:\n"
                                                     "      labels: *l\n"),
    "x- in a service": _svc("    image: nginx\n    x-foo: 1\n"),
    "x- in deploy": _svc("    image: nginx\n    deploy:\n      x-foo: 1\n"),
    "no version": _svc("    image: nginx\n"),
    "version 3.8": V38 + _svc("    image: nginx\n"),
    "version 3": 'version: "3"\n' + _svc("    image: nginx\n"),
    "version 3.10": 'version: "3.10"\n' + _svc("    image: nginx\n"),
    "version empty": 'version: ""\n' + _svc("    image: nginx\n"),
    "version 2": 'version: "2"\n' + _svc("    image: nginx\n"),
    "version a number": "version: 3.8\n" + _svc("    image: nginx\n"),
    "version an integer": "version: 3\n" + _svc("    image: nginx\n"),
    "version null": "version:\n" + _svc("    image: nginx\n"),
    "version spaced": 'version: "3.8 "\n' + _svc("    image: nginx\n"),
    "version 3.99": 'version: "3.99"\n' + _svc("    image: nginx\n"),
    "version 3.08": 'version: "3.08"\n' + _svc("    image: nginx\n"),
    "version substituted": 'version: "${V:-3.8}"\n' + _svc("    image: nginx\n"),
}
TWO: dict[str, tuple[str, str]] = {
    "environment list then mapping": (_svc("    image: nginx\n    environment: [A=1, B=2]\n"),
                                      _svc("    environment: {B: 3, C: 4}\n")),
    "environment mapping then list": (_svc("    image: nginx\n    environment: {A: 1, B: 2}\n"),
                                      _svc("    environment: [B=3, C=4]\n")),
    "empty environment value over a set one": (
        _svc("    image: nginx\n    environment: {A: x}\n"), _svc("    environment: {A: ''}\n")),
    "deploy.labels list then mapping": (
        _svc("    image: nginx\n    deploy:\n      labels: [a=1, swarmgpu.gpus=1]\n"),
        _svc("    deploy:\n      labels: {a: 2}\n")),
    "deploy.labels mapping then list": (
        _svc("    image: nginx\n    deploy:\n      labels: {a: 1}\n"),
        _svc("    deploy:\n      labels: [a=2, b=3]\n")),
    "constraints": (
        _svc("    image: nginx\n    deploy:\n      placement:\n"
             "        constraints: [node.role==worker]\n"),
        _svc("    deploy:\n      placement:\n        constraints: ['node.labels.z==${A}']\n")),
    "ports short then long": (
        _svc("    image: nginx\n    ports: ['8080:80']\n"),
        _svc("    ports:\n      - {target: 81, published: 8080, mode: host}\n")),
    "ports long then short": (
        _svc("    image: nginx\n    ports:\n      - {target: 81, published: 8080, mode: host}\n"),
        _svc("    ports: ['8080:80']\n")),
    "a bare name over a set one": (_svc("    image: nginx\n    environment: [Q=1]\n"),
                                   _svc("    environment: [Q]\n")),
    "an x- key of a service in both": (_svc("    image: nginx\n    x-a: 1\n"),
                                       _svc("    x-a: 2\n")),
    "values replaced": (
        _svc("    image: nginx\n    deploy: {mode: global, resources: {reservations: {cpus: '1', "
             "memory: 1g}}, placement: {max_replicas_per_node: 2, preferences: "
             "[{spread: node.labels.a}]}}\n"),
        _svc("    image: redis\n    deploy: {mode: replicated, replicas: 2, resources: "
             "{reservations: {cpus: '2'}}, placement: {max_replicas_per_node: 1, preferences: "
             "[{spread: node.labels.b}]}}\n")),
    "versions differ": (V38 + _svc("    image: nginx\n"), _svc("    image: redis\n")),
    "versions the same": (V38 + _svc("    image: nginx\n"), V38 + _svc("    image: redis\n")),
    "a version a number": (V38 + _svc("    image: nginx\n"), "version: 3.8\n"
                           + _svc("    image: redis\n")),
    "x- keys": ("x-a: 1\n" + _svc("    image: nginx\n"),
                "x-a: 2\nx-b: 3\n" + _svc("    image: redis\n")),
    "a service of the later file": (_svc("    image: nginx\n"), "services:\n  db:\n    image: r\n"),
    "anchors of each file": ("x-c: &c\n  image: nginx\n" + _svc("    <<: *c\n"),
                             "x-c: &c\n  image: redis\n" + _svc("    <<: *c\n")),
}

# Docker reads these, render refuses them, naming the fix: (what render's error says).
DELIBERATE = {
    # docker 28 reads a plain n as text, docker 27 and older as false
    "a plain n": "quote it",
    # docker 27 and older take the merged value, docker 28 the mapping's own
    "merge key below own keys": "put << first in the mapping",
    # docker keeps the earlier value, silently: the later file says otherwise
    "empty environment value over a set one": "leave the name out of the later file",
    "a bare name over a set one": "leave the name out of the later file",
    # docker merges a service's x- keys by no rule render knows
    "an x- key of a service in both": "set it in one file only",
    # docker reads the first document and drops the others unread
    "a second document": "remove the others",
    # stack config passes it; docker stack deploy refuses it ("Unknown mode: Global")
    "a mode in capitals": "is not one of",
}

CASES = [(name, [("a.yml", text)]) for name, text in ONE.items()] + [
    (name, [("a.yml", a), ("b.yml", b)]) for name, (a, b) in TWO.items()]


def _inputs(files: list[tuple[str, str]]) -> dict[str, Any]:
    return case_inputs(files, ENVIRON, DOTENV)


def _newest(clis: list[tuple[str, str]]) -> str:
    return max(clis, key=lambda c: [int(n) for n in re.findall(r"\d+", c[1])[:3]])[0]


@pytest.fixture(scope="module")
def recording(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, Any]:
    """docker's readings as recorded; first recorded again where --record-docker-config
    says so, with the newest CLI of 28 or later found."""
    if request.config.getoption("--record-docker-config"):
        clis = [c for c in config_clis() if major(c[1]) >= RECORDED_MAJOR]
        if not clis:
            pytest.fail(f"--record-docker-config: no docker CLI of {RECORDED_MAJOR} or later "
                        "with `docker stack config` in /usr/bin, /usr/local/bin or on PATH")
        cli = _newest(clis)
        write_recording(cli, {name: record_case(cli, _inputs(files), tmp_path_factory.mktemp(
            "case")) for name, files in CASES})
    return load_recording()


@pytest.mark.parametrize(("name", "files"), CASES, ids=[c[0] for c in CASES])
def test_render_reads_a_stack_as_docker_stack_config_reads_it(
    name: str, files: list[tuple[str, str]], recording: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text(DOTENV)
    docker, refused = recorded(recording, name, _inputs(files))
    (first, text), *more = files
    ours = check_stack(text, where=first, environ=ENVIRON, more=more, env_base=str(tmp_path))
    if docker is None:
        assert ours.errors, f"docker refuses it ({refused}); render read it"
        return
    if name in DELIBERATE:
        assert any(DELIBERATE[name] in e for e in ours.errors), ours.errors
        return
    assert ours.errors == [], f"docker reads it; render refused it: {ours.errors}"
    assert ours.substituted is not None
    assert reads(ours.substituted, ENVIRON, docker=False) == reads(docker, ENVIRON, docker=True)


def test_the_recording_holds_the_cases_of_this_test_only(recording: dict[str, Any]) -> None:
    lost = sorted(set(recording["cases"]) - {name for name, _ in CASES})
    assert not lost, f"recorded cases this test no longer has: {lost}; record again: {RERECORD}"


def test_the_recording_is_what_docker_stack_config_reads_here(
    recording: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every case run through each CLI of 28 or later found with ``stack config`` reads
    exactly as recorded; with none here, the recording is at least of such a CLI, and a
    printed line says it was not compared live."""
    assert recorded_major(recording) >= RECORDED_MAJOR, recording["cli"]
    found = config_clis()
    live = [(path, v) for path, v in found if major(v) >= RECORDED_MAJOR]
    if not live:
        older = f" (older ones: {found})" if found else ""
        with capsys.disabled():
            print(f"\nthe recording of {recording['cli']} was not compared live: no docker CLI "
                  f"of {RECORDED_MAJOR} or later with `docker stack config` on this "
                  f"machine{older}")
        return
    for path, version in live:
        drift = [name for i, (name, files) in enumerate(CASES)
                 if record_case(path, _inputs(files), _folder(tmp_path / f"{version}-{i}"))
                 != recording["cases"].get(name)]
        assert not drift, (
            f"docker {version} ({path}) reads these cases otherwise than the recording of "
            f"{recording['cli']}: {drift}. If docker changed, see what render must do "
            f"(docs/deploy.md), then record again: {RERECORD}")


def _folder(path: Path) -> Path:
    path.mkdir()
    return path
