"""A ``deploy.labels`` list item that is not swarmgpu's is written back as the stack wrote
it, variables and all, as the same label in a mapping is: render pins (writes
substituted) only what it places the service by."""

from __future__ import annotations

import yaml
from support.render_compose import FACTS, NODES

from swarmgpu.manager.commands.render import render_stack

ENV = {"DOMAIN": "example.org", "TOKEN": "secret"}


def _labels(labels: str) -> object:
    text = ("services:\n  llm:\n    image: vllm/vllm-openai\n    deploy:\n"
            f"      labels: {labels}\n")
    out, _ = render_stack(text, "ai", NODES, [], [], FACTS, environ=ENV)
    return yaml.safe_load(out)["services"]["llm"]["deploy"]["labels"]


def test_a_tenants_list_label_keeps_its_variables_as_in_a_mapping() -> None:
    # As a list, traefik.rule was written Host(`example.org`) and the token in clear in
    # the rendered file, while the mapping kept both as the stack wrote them.
    got = _labels('["traefik.rule=Host(`${DOMAIN}`)", "token=${TOKEN}", '
                  '"swarmgpu.gpus=1", "a=$$b"]')
    assert isinstance(got, list)
    assert got[:4] == ["traefik.rule=Host(`${DOMAIN}`)", "token=${TOKEN}",
                       "swarmgpu.gpus=1", "a=$$b"], got
    mapped = _labels('{traefik.rule: "Host(`${DOMAIN}`)", token: "${TOKEN}", '
                     'swarmgpu.gpus: "1"}')
    assert isinstance(mapped, dict)
    assert (mapped["traefik.rule"], mapped["token"]) == ("Host(`${DOMAIN}`)", "${TOKEN}")


def test_a_swarmgpu_list_label_is_still_written_as_render_placed_it() -> None:
    got = _labels('["swarmgpu.gpus=${N:-1}", "swarmgpu.priority=${P:-5}"]')
    assert isinstance(got, list)
    assert got[:2] == ["swarmgpu.gpus=1", "swarmgpu.priority=5"], got
