"""SWARMGPU_* variables that no override reads, said by ``config check`` with the nearest
one that is read: a typo (``SWARMGPU_SYNC_INTERVAL``), or a key the environment does not
override (``SWARMGPU_AGENTS_PARALLEL``), was ignored unsaid, and ``SWARMGPU_DRYRUN=true``
left the daemon writing. Warnings, not errors: other programs read SWARMGPU_* too (the
agent unit shares ``/etc/swarmgpu/env``; the stack file interpolates its own)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

from swarmgpu.core.configvalues import ENV_OVERRIDES

# Read by swarmgpu's other programs: the agent (its unit and options), the docker
# proxy, the stack file's interpolation, a shared GPU's containers.
OTHER_READERS = frozenset({
    "SWARMGPU_AGENT_SOURCE", "SWARMGPU_AGENT_LISTEN", "SWARMGPU_AGENT_ARGS",
    "SWARMGPU_AGENT_IDENTITY", "SWARMGPU_AGENT_DATA_ROOT", "SWARMGPU_AGENT_ALLOWED_HOSTS",
    "SWARMGPU_AGENT_TRUSTED_PROXIES", "SWARMGPU_PROXY_LISTEN", "SWARMGPU_PROXY_UPSTREAM",
    "SWARMGPU_PROXY_SERVICE", "SWARMGPU_IMAGE", "SWARMGPU_DOCKER_DATA_ROOT",
    "SWARMGPU_DOCKER_SOCKET", "SWARMGPU_GPU_FRACTION", "SWARMGPU_GPU_MEMORY_MIB",
})
# Read by the daemon, but no config override: a test hook (``rebalance.record.CRASH_ENV``)
# that exits the daemon (137, as a kill) right after the move step it names. Said
# wherever it is set: "no key reads it" read as harmless, and left in a unit it kills
# the daemon mid-move.
TEST_HOOKS = frozenset({"SWARMGPU_TEST_CRASH_AFTER"})


def _key_names(cls: Any, path: tuple[str, ...] = ()) -> dict[str, str]:
    """``SWARMGPU_AGENTS_PARALLEL`` -> ``agents.parallel``, for every key of ``cls``."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        sub = (*path, f.name)
        if isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory):
            out |= _key_names(f.default_factory, sub)
        else:
            out["SWARMGPU_" + "_".join(sub).upper()] = ".".join(sub)
    return out


def unread_variables(env: Mapping[str, str], config_cls: Any, *, all_of: bool) -> list[str]:
    """``VAR: why`` for each SWARMGPU_* variable of ``env`` no override reads: one near
    an override's name (its name given) or a key's; ``all_of``: any other too (the
    unit's env file is swarmgpu's own, a shell's environment is not)."""
    keys = _key_names(config_cls)
    out = []
    for var in sorted(env):
        # Names are case-sensitive (systemd, the shell, os.environ): `swarmgpu_dry_run`
        # set nothing, and is said as its upper-case name would be.
        name = var.upper()
        if not name.startswith("SWARMGPU_") or var in ENV_OVERRIDES or var in OTHER_READERS:
            continue
        if var in TEST_HOOKS:
            out.append(f"{var}: a test hook the daemon reads, not a config override: it "
                       "exits the daemon at the step it names, as a kill would; remove it "
                       "outside tests")
            continue
        close = difflib.get_close_matches(name, ENV_OVERRIDES, n=1, cutoff=0.85)
        if name != var and (name in ENV_OVERRIDES or name in OTHER_READERS):
            out.append(f"{var}: not read (names are case-sensitive); did you mean {name}?")
        elif name in keys:
            out.append(f"{var}: not read: the environment overrides some keys only, and "
                       f"{keys[name]} is read from the config file only; set it there")
        elif close:
            out.append(f"{var}: no key reads it; did you mean {close[0]}?")
        elif all_of:
            out.append(f"{var}: no key reads it (the overrides: "
                       f"{', '.join(sorted(ENV_OVERRIDES))})")
    return out
