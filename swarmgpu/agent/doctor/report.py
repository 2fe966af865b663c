"""Running the checks in order, the exit code, and the text or JSON report."""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from swarmgpu.agent.doctor.agentanswers import check_agent_answers
from swarmgpu.agent.doctor.agentsvc import (
    check_agents_service,
    check_unkeyed,
    check_unread_nodes,
)
from swarmgpu.agent.doctor.cdi import check_cdi_spec
from swarmgpu.agent.doctor.devices import (
    check_cgroup,
    check_dev_char_links,
    check_device_nodes,
    check_device_order,
    check_gpu_facts,
    check_numa,
)
from swarmgpu.agent.doctor.engine import (
    check_daemon_json,
    check_daemon_keys,
    check_default_runtime,
    check_engine,
    check_generic_resources,
    check_grants,
    check_swarm_resource,
    check_toolkit_mode,
)
from swarmgpu.agent.doctor.identity import check_agent_identity
from swarmgpu.agent.doctor.procview import check_proc_root
from swarmgpu.agent.doctor.read import read_view
from swarmgpu.agent.doctor.sharing import check_sharing, sharing_mode
from swarmgpu.agent.doctor.view import Check, DoctorError, NodeView, Status, SwarmRead
from swarmgpu.agent.procroot import ProcRootView
from swarmgpu.core.model import NodeFacts
from swarmgpu.core.peertext import cell, escaped

CHECKS: tuple[Callable[[NodeView], Check], ...] = (
    check_daemon_json,
    check_daemon_keys,
    check_default_runtime,
    check_generic_resources,
    check_swarm_resource,
    check_toolkit_mode,
    check_cdi_spec,
    check_grants,
    check_gpu_facts,
    check_device_nodes,
    check_cgroup,
    check_dev_char_links,
    check_device_order,
    check_numa,
    check_sharing,
)


def run_checks(view: NodeView) -> list[Check]:
    """Each of CHECKS (one that reads a part of docker info not read fails, naming it)."""
    return [check(view) for check in CHECKS]


def exit_code(checks: Sequence[Check]) -> int:
    """0 when nothing failed (warnings are advice), 1 when a check failed."""
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def _summary(checks: Sequence[Check]) -> dict[str, int]:
    return {s.value: sum(1 for c in checks if c.status is s) for s in Status}


def render_text(view: NodeView, checks: Sequence[Check]) -> str:
    """The report: what the node's files, its engine and its driver say is quoted, so
    each line shows their control characters escaped; hostnames cut (``Check.text_found``,
    ``text_details``), whole in ``render_json``."""
    counts = _summary(checks)
    # a hostname cut (``cell``) as `plan` and `status` cut it; the JSON has it whole
    host = cell(view.facts.hostname) if view.facts is not None else \
        _no_facts_host(view.root)
    lines = [f"swarmgpu doctor: root {view.root}  host {host}  "
             + ", ".join(f"{n} {s}" for s, n in counts.items())]
    for c in checks:
        found = c.found if c.text_found is None else c.text_found
        lines.append(f"{c.status.value.upper():<5} {c.id}: {found}")
        if c.status in (Status.WARN, Status.FAIL):
            lines.append(f"      why: {c.why}")
            lines.append(f"      fix: {c.fix}")
        lines.extend(f"      {d}" for d in (c.details if c.text_details is None
                                             else c.text_details))
    return "\n".join(escaped(line) for line in lines)


def _no_facts_host(root: str) -> str:
    """The header's host when no facts were read (NVML cannot start): on the live node
    the machine's own name, marked as not the facts' word; under another root (a
    fixture, a mounted node) this machine's name would be another's: ``?``."""
    if root != "/":
        return "?"
    name = socket.gethostname()
    return f"{cell(name)} (this machine's name: no GPU facts)" if name else "?"


def render_json(view: NodeView, checks: Sequence[Check]) -> str:
    return json.dumps({
        "root": view.root,
        "hostname": view.facts.hostname if view.facts is not None else None,
        "summary": _summary(checks),
        "sharing_mode": sharing_mode(view),
        "checks": [c.to_dict() for c in checks],
    }, indent=2)


def run_doctor(root: str = "/", *, facts: NodeFacts | None = None,
               docker_info: Mapping[str, Any] | None = None,
               as_json: bool = False, agent_probed: bool = False,
               agent_scheme: str | None = None, grants: str = "env",
               facts_error: str | None = None, engine_probed: bool = False,
               docker_error: str | None = None, facts_hung: bool = False,
               proc_root: ProcRootView | None = None,
               agents_service: str | None = None, swarm: SwarmRead | None = None,
               ) -> tuple[str, int]:
    """Text (or JSON) to print and the exit code: 0 ok, 1 a check failed, 2 cannot run.

    ``facts`` (NVML's view) and ``docker_info`` (the running dockerd's ``docker info``)
    enable the checks that compare files with reality; without them those checks are
    skipped, unless the root is a fixture tree that carries them (see docs/doctor.md).
    ``grants``: the daemon's ``placement.grants`` (``toolkit.grants`` checks the toolkit
    reads grants that way). ``facts_error``: why the facts source could not be read;
    ``facts_hung``: because it did not answer in time (a hung driver: ``gpu.facts``' fix).
    ``engine_probed``: dockerd was asked (the live node), ``docker_error`` why it did not
    answer; ``docker.engine`` then reports that and its Swarm state. ``proc_root``: what
    the agent's ``--proc-root`` shows (``agent.proc-root``; the live node's ``/proc``, or
    the one ``doctor --proc-root`` names). ``agents_service``: the daemon's
    ``agents.service`` (``doctor --agents-service``), checked against ``swarm`` (a
    manager's lists, or why they could not be read; with its agents' answers, each
    node's is said: ``agents.answers``); None: not checked.
    """
    try:
        view = read_view(root, facts=facts, docker_info=docker_info, facts_error=facts_error)
    except DoctorError as exc:
        if as_json:
            return json.dumps({"root": root, "error": str(exc)}, indent=2), 2
        return f"swarmgpu doctor: {escaped(exc)}", 2
    view = dataclasses.replace(view, agent_scheme=agent_scheme, grants=grants,
                               docker_error=docker_error, facts_hung=facts_hung,
                               proc_root=proc_root, agents_service=agents_service,
                               swarm=swarm)
    checks = run_checks(view)
    if agents_service is not None:  # the live node: a fixture tree has no swarm to ask
        checks.insert(0, check_agents_service(view))
        if (answers := check_agent_answers(view)) is not None:
            checks.insert(1, answers)  # after agents.service: whether its tasks answer
        if (unread := check_unread_nodes(view)) is not None:
            checks.insert(0, unread)
        if (unkeyed := check_unkeyed(view)) is not None:
            checks.insert(0, unkeyed)
    if proc_root is not None:  # the live node, or a --proc-root named
        checks.insert(0, check_proc_root(view))
    if engine_probed:  # the live node only: a fixture tree has no engine to ask
        checks.insert(0, check_engine(view))
    if agent_probed:  # the live node only: a fixture tree has no agent to ask
        checks.insert(0, check_agent_identity(view))
    text = render_json(view, checks) if as_json else render_text(view, checks)
    return text, exit_code(checks)
