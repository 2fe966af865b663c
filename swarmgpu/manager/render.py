"""`swarmgpu render`: a stack file with GPU placement resolved, for
``swarmgpu render stack.yml | docker stack deploy -c - NAME``.

Each annotated service gets, in the file itself, everything a task needs at the moment
it is created: its device lists (service labels), the env template that reads them, and
the gate constraint. The daemon then only opens the gates, so nothing races: a task
can never start before its devices are known, and a re-deploy of the rendered file
keeps every piece (what already runs stays where it runs: its holding is reused).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from swarmgpu.core.model import NodeFacts
from swarmgpu.manager.placement import (
    DEVICES,
    ORDER_ENV,
    PlacementPlan,
    devices_key,
    env_template,
    env_template_per_node,
    gate_constraint,
    plan_placement,
)
from swarmgpu.manager.requests import RequestError, parse_all
from swarmgpu.manager.sharing import env_lines, is_share_key, want_labels
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask


class StackError(ValueError):
    pass


def load_stack(text: str, where: str = "stack") -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StackError(f"{where}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise StackError(f"{where}: a stack file needs a top-level 'services:' mapping")
    return data


def _labels(deploy: Mapping[str, Any], where: str) -> dict[str, str]:
    raw = deploy.get("labels") or {}
    if isinstance(raw, list):  # compose allows ["k=v", ...]
        out = {}
        for item in raw:
            k, _, v = str(item).partition("=")
            out[k] = v
        return out
    if not isinstance(raw, dict):
        raise StackError(f"{where}.deploy.labels: expected a mapping or a list of k=v")
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def _env_list(svc: Mapping[str, Any], where: str) -> list[str]:
    env = svc.get("environment") or []
    if isinstance(env, dict):
        return [f"{k}={'' if v is None else v}" for k, v in env.items()]
    if not isinstance(env, list):
        raise StackError(f"{where}.environment: expected a mapping or a list of K=V")
    return [str(e) for e in env]


def _mapping(parent: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    v = parent.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise StackError(f"{where}.{key}: expected a mapping, got {type(v).__name__}")
    return v


def _replicas(deploy: Mapping[str, Any], where: str) -> int:
    v = deploy.get("replicas", 1)
    text = str(v) if isinstance(v, int | str) and not isinstance(v, bool) else ""
    # ASCII digits only ('¹' passes isdigit(), not int()), and a sane length.
    if not text.isascii() or not text.isdigit() or len(text) > 6:
        raise StackError(f"{where}.deploy.replicas: {v!r} is not a whole number >= 0")
    return int(v)


def _constraints(placement: Mapping[str, Any], where: str) -> list[str]:
    v = placement.get("constraints") or []
    if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
        raise StackError(f"{where}.deploy.placement.constraints: expected a list of strings "
                         "like node.role==worker")
    return list(v)


def stack_services(stack: Mapping[str, Any], name: str,
                   existing: Sequence[SwarmService], prefix: str = "swarmgpu."
                   ) -> list[SwarmService]:
    """The stack's annotated services as Swarm would hold them (existing ids reused)."""
    by_name = {s.name: s for s in existing}
    out = []
    for svc_name, svc in stack["services"].items():
        where = f"services.{svc_name}"
        if not isinstance(svc, dict):
            raise StackError(f"{where}: expected a mapping")
        deploy = _mapping(svc, "deploy", where)
        full = f"{name}_{svc_name}"
        cur = by_name.get(full)
        labels = _labels(deploy, where)
        if cur is not None:  # keep the device labels of what already runs
            labels.update({k: v for k, v in cur.labels.items()
                           if DEVICES in k or is_share_key(k, prefix)})
        placement = _mapping(deploy, "placement", f"{where}.deploy")
        mode = str(deploy.get("mode", "replicated"))
        mrpn = placement.get("max_replicas_per_node")
        out.append(SwarmService(
            id=cur.id if cur else f"render:{full}", name=full, labels=labels,
            constraints=tuple(_constraints(placement, where)),
            env=tuple(_env_list(svc, where)), mode=mode,
            replicas=_replicas(deploy, where) if mode == "replicated" else None,
            max_replicas_per_node=mrpn if isinstance(mrpn, int) else None, version=0,
        ))
    return out


def render_stack(
    text: str, name: str, nodes: Sequence[SwarmNode], services: Sequence[SwarmService],
    tasks: Sequence[SwarmTask], facts: Mapping[str, NodeFacts], *, prefix: str = "swarmgpu.",
    zone_label: str = "topology.zone",
) -> tuple[str, PlacementPlan]:
    stack = load_stack(text)
    mine = stack_services(stack, name, services, prefix)
    mine_names = {s.name for s in mine}
    others = [s for s in services if s.name not in mine_names]
    # Gate and env are written into the file, so plan as if they were already there.
    gated = [
        SwarmService(s.id, s.name, s.labels, (*s.constraints, gate_constraint(prefix, s.name)),
                     (*s.env, env_template(prefix), *env_lines(prefix)), s.mode, s.replicas,
                     s.max_replicas_per_node, s.version)
        for s in mine
    ]
    plan = plan_placement(nodes, [*others, *gated], tasks, facts, prefix=prefix,
                          zone_label=zone_label, adopt_ungated=False)
    out = copy.deepcopy(stack)
    by_name = {sp.name: sp for sp in plan.services}
    for svc_name, svc in out["services"].items():
        full = f"{name}_{svc_name}"
        where = f"services.{svc_name}"
        deploy = _mapping(svc, "deploy", where)
        req = parse_all(_labels(deploy, where), prefix=prefix, zone_label=zone_label)
        if req is None:
            continue
        sp = by_name.get(full)
        svc["deploy"] = deploy
        labels = _labels(deploy, f"services.{svc_name}")
        if sp is not None:
            for p in sp.placements:
                labels[devices_key(prefix, p.node_id, p.slot)] = ",".join(p.uuids)
            labels.update(want_labels(prefix, ((p.node_id, p.uuids, p.milli)
                                               for p in sp.placements if p.slot is None),
                                      facts, labels))
        deploy["labels"] = labels
        placement = _mapping(deploy, "placement", f"{where}.deploy")
        deploy["placement"] = placement
        cons = _constraints(placement, where)
        gate = gate_constraint(prefix, full)
        if gate not in cons:
            cons.append(gate)
        placement["constraints"] = cons
        if sp is not None and sp.packed is not None:
            # Replicas packed on one node (swarmgpu.manager.placement): as many tasks on it as
            # there are slot lists, with swarmgpu's record that the value is its own.
            if sp.set_max_replicas is not None:
                placement["max_replicas_per_node"] = sp.set_max_replicas
            labels.update(sp.state_labels)
        elif _replicas(deploy, where) > 1:
            placement["max_replicas_per_node"] = 1
        env = svc.get("environment")
        old_tmpl, tmpl = env_template_per_node(prefix), env_template(prefix)
        # The older per-node template is upgraded to the per-slot one (it reads the
        # same lists, and packed replicas need the per-slot ones).
        if isinstance(env, dict) and env.get("NVIDIA_VISIBLE_DEVICES") == \
                old_tmpl.partition("=")[2]:
            env["NVIDIA_VISIBLE_DEVICES"] = tmpl.partition("=")[2]
        elif isinstance(env, list):
            svc["environment"] = env = [tmpl if e == old_tmpl else e for e in env]
        additions = [tmpl, ORDER_ENV]
        if not isinstance(req, RequestError) and req.is_fraction:
            additions.extend(env_lines(prefix))  # the container is told its share
        if isinstance(env, dict):
            for a in additions:
                k, _, v = a.partition("=")
                env.setdefault(k, v)
        else:
            lst = [str(e) for e in (env or [])]
            for a in additions:
                if not any(e.startswith(a.split("=", 1)[0] + "=") for e in lst):
                    lst.append(a)
            svc["environment"] = lst
    header = "# rendered by swarmgpu: GPU placement resolved; deploy with\n" \
             f"#   docker stack deploy -c - {name}\n"
    return header + yaml.safe_dump(out, sort_keys=False, width=1000), plan
