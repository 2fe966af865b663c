"""An agent without token or TLS, serving one hostname's facts in a thread: it checks
the Host names it is called by (DNS rebinding), the subject of the Host tests
(test_host_empty_port, test_host_header_form, test_node_url_names, test_node_url_addr)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from support.serving import served
from swarmgpu.agent.server import build_server
from swarmgpu.core.model import NodeFacts


class _Source:
    def __init__(self, hostname: str, spec: str) -> None:
        self.spec = spec
        self.hostname = hostname

    def read(self) -> NodeFacts:
        return NodeFacts(hostname=self.hostname, source=self.spec)


@contextmanager
def plain_agent(hostname: str = "gpu-a", listen: str = "127.0.0.1:0",
                spec: str = "fake:host") -> Iterator[int]:
    """The agent of ``hostname`` (its facts from ``spec``) on ``listen``, for the block's
    length: its port."""
    agent = build_server(_Source(hostname, spec), listen, refresh_s=60)
    with served(agent, poll_s=0.05):  # a short poll: its shutdown waits for one
        yield agent.server_address[1]
