"""render's note for a key `docker stack deploy` does not apply says what docker does
with it (stop 80): docker/cli warns "Ignoring unsupported options" for its
``UnsupportedProperties``, "Ignoring deprecated options" for ``DeprecatedProperties``
(``container_name``, ``expose``), and drops a key in neither list (``depends_on``)
without a word; ``restart`` it warns about and still uses when
``deploy.restart_policy`` is absent (cli/compose/convert/service.go
convertRestartPolicy). Before, every one was "Ignoring unsupported options".
"""

from __future__ import annotations

import pytest
from support.render_engines import VERSIONLESS

from swarmgpu.manager.commands.render import check_stack

WARNED = ["build", "cgroup_parent", "devices", "domainname", "external_links", "ipc",
          "links", "mac_address", "network_mode", "pid", "privileged", "security_opt",
          "shm_size", "userns_mode"]
VALUES = {"build": ".", "depends_on": "[db]", "devices": '["/dev/fuse:/dev/fuse"]',
          "expose": '["80"]', "external_links": "[db]", "links": "[db]",
          "privileged": "true", "security_opt": '["no-new-privileges"]',
          "shm_size": "1gb", "restart": "on-failure"}


def _note(key: str) -> str:
    text = VERSIONLESS.replace("    image: nginx:1.27\n",
                               f"    image: nginx:1.27\n    {key}: {VALUES.get(key, 'host')}\n")
    c = check_stack(text)
    assert c.errors == [], c.errors
    (note,) = [n for n in c.notes if n.startswith(f"services.web.{key}: ")]
    return note


@pytest.mark.parametrize("key", WARNED)
def test_an_unsupported_key_is_said_warned(key: str) -> None:
    note = _note(key)
    assert "docker stack deploy warns \"Ignoring unsupported options\" and deploys " \
           "without it" in note, note


@pytest.mark.parametrize("key", ["container_name", "expose"])
def test_a_deprecated_key_is_said_warned_as_deprecated(key: str) -> None:
    note = _note(key)
    assert "docker stack deploy warns \"Ignoring deprecated options\"" in note, note
    assert "unsupported" not in note, note


def test_depends_on_is_said_dropped_without_a_word() -> None:
    note = _note("depends_on")
    assert "docker stack deploy drops it without a word" in note, note
    assert "Ignoring" not in note, note
    assert "healthcheck" in note, note


def test_restart_is_said_used_when_no_restart_policy() -> None:
    """docker warns it is ignored, yet applies it: on-failure became the service's
    restart condition; the note said "Swarm ignores it"."""
    note = _note("restart")
    assert "\"Ignoring unsupported options\"" in note, note
    assert "but still applies it when deploy.restart_policy is absent" in note, note
    assert "Swarm ignores it" not in note, note


@pytest.mark.parametrize("key", ["cap_add", "cap_drop", "ulimits"])
def test_a_key_older_clis_ignored_says_what_they_did(key: str) -> None:
    """docker/cli's UnsupportedProperties held them until 20.10 (0db61ff6da, 940907951b):
    a 19.03 CLI warned "Ignoring unsupported options" and deployed without them."""
    value = {"ulimits": "{nofile: 1024}"}.get(key, "[SYS_NICE]")
    text = VERSIONLESS.replace("    image: nginx:1.27\n",
                               f"    image: nginx:1.27\n    {key}: {value}\n")
    c = check_stack(text)
    assert c.errors == [], c.errors
    assert (f"services.web.{key}: a docker CLI before 20.10 warns \"Ignoring unsupported "
            "options\" and deploys without it") in c.notes, c.notes
