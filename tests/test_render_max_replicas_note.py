"""`swarmgpu render` says so where it changes the file's own ``max_replicas_per_node``:
replicas spread one per node get 1 (the daemon sets it back to 1 if raised). Before, a
``max_replicas_per_node: 2`` became 1 in the rendered file without a word."""

from __future__ import annotations

from support.render_compose import FACTS, NODES

from swarmgpu.manager.commands.render import render_stack


def stack(max_line: str) -> str:
    return (
        'version: "3.8"\nservices:\n  llm:\n    image: vllm/vllm-openai:v0.8.5\n'
        "    deploy:\n      replicas: 2\n      labels: [swarmgpu.gpus=1]\n"
        f"      placement:\n{max_line}        constraints: [node.role==worker]\n"
    )


def test_a_raised_max_replicas_set_to_one_is_said_in_the_header() -> None:
    out, _ = render_stack(stack("        max_replicas_per_node: 2\n"), "ai", NODES, [], [], FACTS)
    header, _, body = out.partition("version:")
    assert (
        "# services.llm.deploy.placement.max_replicas_per_node: 2 became 1: swarmgpu spreads "
        "these replicas one per node" in header
    ), header
    assert 'swarmgpu.pack: "always" holds them on one node' in header
    assert "max_replicas_per_node: 1" in body


def test_none_or_one_is_not_said() -> None:
    for line in ("", "        max_replicas_per_node: 1\n"):
        out, _ = render_stack(stack(line), "ai", NODES, [], [], FACTS)
        assert "max_replicas_per_node" not in out.partition("version:")[0]
        assert "max_replicas_per_node: 1" in out
