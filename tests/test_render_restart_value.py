"""render refuses a ``restart`` value `docker stack deploy` fails on (stop 80 read): with
no ``deploy.restart_policy``, docker/cli's convertRestartPolicy (cli/compose/convert/
service.go, 19.03 to now) parses ``restart`` with opts.ParseRestartPolicy and fails the
deploy on a policy other than no, always, unless-stopped or on-failure ("unknown
restart policy"), on a count that is no integer, and (29.5 on) on a negative one.
Before, render passed such a file with a note that docker "still applies it".
"""

from __future__ import annotations

import pytest
from support.render_engines import VERSIONLESS

from swarmgpu.manager.commands.render import check_stack


def _checked(value: str, policy: str = "") -> tuple[list[str], list[str]]:
    text = VERSIONLESS.replace("    image: nginx:1.27\n",
                               f"    image: nginx:1.27\n    restart: {value}\n")
    if policy:
        text = text.replace("      replicas: 2\n", f"      replicas: 2\n{policy}")
    c = check_stack(text)
    return c.errors, c.notes


@pytest.mark.parametrize("value", ["bogus", '"on-failure:x"', '"always:1:2"',
                                   '"on-failure:-1"', '"On-Failure"', '"on-failure:"',
                                   '":3"', '"on-failure:9223372036854775808"',
                                   '"on-failure:+-3"', '"on-failure:3 "'])
def test_a_restart_docker_refuses_is_an_error(value: str) -> None:
    errors, _ = _checked(value)
    assert len(errors) == 1, errors
    assert errors[0].startswith("services.web.restart: docker stack deploy refuses "), errors
    assert "deploy.restart_policy" in errors[0], errors


@pytest.mark.parametrize("value", ['"no"', "always", "unless-stopped", "on-failure",
                                   '"on-failure:3"', '"always:2"', '""',
                                   # (strconv.Atoi's: a sign, zeros, any int64)
                                   '"on-failure:-0"', '"on-failure:+3"',
                                   '"on-failure:0000000000000000000000003"',
                                   '"on-failure:9223372036854775807"'])
def test_a_restart_docker_takes_is_a_note(value: str) -> None:
    errors, notes = _checked(value)
    assert errors == [], errors
    assert [n for n in notes if n.startswith("services.web.restart: ")], notes


def test_a_restart_policy_makes_docker_ignore_restart_whatever_it_says() -> None:
    # (convertRestartPolicy reads deploy.restart_policy first, never parsing restart)
    errors, _ = _checked("bogus", "      restart_policy:\n        condition: any\n")
    assert errors == [], errors


def test_a_restart_docker_substitutes_later_is_left_to_it() -> None:
    # (environ None: render --skip-interpolation, docker substitutes it after render)
    text = VERSIONLESS.replace("    image: nginx:1.27\n",
                               "    image: nginx:1.27\n    restart: ${POLICY}\n")
    c = check_stack(text)
    assert not [e for e in c.errors if "restart" in e], c.errors
