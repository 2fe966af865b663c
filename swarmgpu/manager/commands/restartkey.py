"""A service's ``restart`` as `docker stack deploy` reads it. With no
``deploy.restart_policy``, docker/cli's ``convertRestartPolicy`` (cli/compose/convert/
service.go, 19.03 to now) parses it with ``opts.ParseRestartPolicy`` and fails the whole
deploy on a value it does not take; with one, it never reads ``restart``. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from swarmgpu.core.peertext import quoted

# (Go's names, compared case for case: ``container.RestartPolicy`` Is* / its constants)
POLICIES = ("no", "always", "unless-stopped", "on-failure")
# A count Go's strconv.Atoi takes (a sign, any zeros before the digits, an int64), not
# negative: a CLI from 29.5 refuses one below 0 (older ones wrap it to 2^64-1; "-0" is
# 0). An empty one ("on-failure:") a CLI before 23.0 refuses, and a colon with no policy
# before it (":3") one from 25.0.
_COUNT = re.compile(r"[+-]?0*([0-9]{1,19})")
INT64_MAX = 2**63 - 1


def _count_taken(count: str) -> bool:
    """Whether every CLI takes ``count`` (the text after the colon) as a retry count."""
    m = _COUNT.fullmatch(count)
    return m is not None and int(m.group(1)) <= INT64_MAX and (
        not count.startswith("-") or int(m.group(1)) == 0)


def restart_errors(svc: Mapping[str, Any], where: str) -> list[str]:
    """``restart`` of ``svc`` where `docker stack deploy` fails on it, else none (also
    none for a value not text, which the schema check names, or one holding a ``$``,
    which docker substitutes after render read it)."""
    value = svc.get("restart")
    deploy = svc.get("deploy")
    if (not isinstance(value, str) or "$" in value or (
            isinstance(deploy, Mapping) and deploy.get("restart_policy") is not None)):
        return []
    name, colon, count = value.partition(":")
    if (name in POLICIES or value == "") and (not colon or _count_taken(count)):
        return []
    return [f"{where}.restart: docker stack deploy refuses {quoted(value)} (with no "
            "deploy.restart_policy it applies restart, and fails on a policy other than "
            "no, always, unless-stopped or on-failure, or a count that is no whole number "
            "0 or more); write one of them (on-failure:N), or deploy.restart_policy "
            "(condition: none, on-failure or any)"]
