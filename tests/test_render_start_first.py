"""`swarmgpu render` refuses a service it places on a GPU whose stack sets
``deploy.update_config.order: start-first``: the daemon writes the device map with a
ForceUpdate (a new task carrying it), Swarm's start-first updater keeps the first task
(made before the map, waiting behind its closed gate) until the new one runs, and the
gate opens only once every waiting task is newer than the map: both wait for ever. The
error names the service, why, and the fix (stop-first; replicas >= 2, parallelism 1)."""

from __future__ import annotations

import pytest

from swarmgpu.manager.commands.render import check_stack


def stack(order: str | None, gpus: str = "1") -> str:
    update = f"      update_config:\n        order: {order}\n" if order is not None else ""
    return (
        'version: "3.8"\nservices:\n  llm:\n    image: my/llm\n    deploy:\n'
        f'      labels:\n        swarmgpu.gpus: "{gpus}"\n{update}'
    )


def test_a_gpu_service_deployed_start_first_is_refused_naming_why_and_the_fix() -> None:
    (e,) = check_stack(stack("start-first"), stack_name="ai").errors
    assert e.startswith("services.llm.deploy.update_config.order: start-first is refused")
    assert "keeps a task made before" in e and "never placed" in e
    assert "order: stop-first" in e and "replicas >= 2" in e and "parallelism: 1" in e


@pytest.mark.parametrize(
    ("order", "gpus"), [("stop-first", "1"), (None, "1"), ("start-first", "0")]
)
def test_stop_first_the_default_or_no_gpu_is_not_refused(order: str | None, gpus: str) -> None:
    assert check_stack(stack(order, gpus), stack_name="ai").errors == []


def test_a_service_swarmgpu_does_not_place_may_start_first() -> None:
    text = (
        'version: "3.8"\nservices:\n  web:\n    image: nginx\n    deploy:\n'
        "      update_config:\n        order: start-first\n"
    )
    assert check_stack(text, stack_name="ai").errors == []
