"""Did each node's agent answer a read as the daemon's, and for which node? Swarm's
lists alone (``agents.service``) say a task runs, not that the daemon can read it: an
agent that answers with another node's certificate or facts (a wrong
``agents.url_template``, a cloned machine) is refused, and that node's labels go stale.
Read from a manager, each node's agent asked once (``SwarmRead.agents``). Hostnames are
whole in the JSON report, cut (``peertext.cell``) and escaped in the text report, each
beside its node's ID."""

from __future__ import annotations

from collections.abc import Callable

from swarmgpu.agent.doctor.view import AgentAnswer, Check, NodeView, Status
from swarmgpu.core.peertext import cell
from swarmgpu.swarm.agentservice import gpu_advertised, gpu_labelled
from swarmgpu.swarm.client import SwarmNode

CID = "agents.answers"


def check_agent_answers(view: NodeView) -> Check | None:
    """Each node of ``view.swarm`` and what its agent answered, one detail line each:
    FAIL where one answered for another node, WARN where a GPU node's did not answer or
    one's answer cannot be told for its node (``AgentAnswer.untold``: whatever its labels,
    as the daemon never labels such a node); None when the agents were not asked (no
    manager's lists, or none to read)."""
    read = view.swarm
    if read is None or read.agents is None or not read.nodes:
        return None
    wrong: list[SwarmNode] = []
    silent: list[SwarmNode] = []
    untold: list[SwarmNode] = []
    said: list[tuple[SwarmNode, AgentAnswer, bool]] = []
    for n in sorted(read.nodes, key=lambda n: (n.hostname, n.id)):
        a = read.agents.get(n.id) or AgentAnswer(cause="not asked")
        gpu = gpu_labelled(n, read.prefix) or gpu_advertised(n, read.kind)
        said.append((n, a, gpu))
        if a.wrong:
            wrong.append(n)
        elif a.untold:
            untold.append(n)
        elif a.host is None and gpu:
            silent.append(n)
    answered = sum(1 for a in read.agents.values() if a.host is not None)
    found = f"{answered} of {len(read.nodes)} node(s)' agents answered for their own node"
    # the JSON's lines name each host whole, the text's cut (``cell``) as `status` does
    details = tuple(f"{_name(n)}: {_said(a, gpu)}" for n, a, gpu in said)
    shown = tuple(f"{_name(n, cell)}: {_said(a, gpu, cell)}" for n, a, gpu in said)
    if wrong:
        return Check(CID, Status.FAIL, f"{found}; answered for another node: "
                     f"{_names(wrong)}",
                     "the daemon refuses an answer of another node: that node's labels "
                     "go stale and none of its GPUs is given out",
                     "see each node's line below: agents.url_template must reach the "
                     "node's own agent (docker node inspect shows the address Swarm "
                     "reports), and the agent must run with that node's --hostname and "
                     "certificate", details,
                     f"{found}; answered for another node: {_names(wrong, cell)}", shown)
    if silent or untold:
        def summary(show: Callable[[str], str]) -> str:
            parts = [f"no answer from GPU node(s): {_names(silent, show)}"] if silent else []
            if untold:
                parts.append("answered but refused, no host name to tell the node by: "
                             f"{_names(untold, show)}")
            return f"{found}; {'; '.join(parts)}"

        return Check(CID, Status.WARN, summary(_whole),
                     "the daemon cannot read those nodes' GPUs: their labels are kept as "
                     "they are and no new GPU of them is given out",
                     "see each node's line below for what answered and its fix; "
                     "swarmgpu audit says the same from the daemon's config",
                     details, summary(cell), shown)
    return Check(CID, Status.OK, found, details=details, text_details=shown)


def _whole(text: str) -> str:
    return text


def _name(n: SwarmNode, show: Callable[[str], str] = _whole) -> str:
    if not n.hostname:  # (Swarm reports none: the ID alone names it)
        return f"{show(n.id)} (no hostname)"
    return f"{show(n.hostname)} ({show(n.id)})"  # (the whole ID, as `docker node ls`)


def _names(nodes: list[SwarmNode], show: Callable[[str], str] = _whole) -> str:
    return ", ".join(_name(n, show) for n in nodes)


def _said(a: AgentAnswer, gpu: bool, show: Callable[[str], str] = _whole) -> str:
    if a.host is not None:
        return f"answered for {show(a.host)}, {a.gpus} GPU(s)"
    head = "answered for another node" if a.wrong else "answered, refused" if a.untold \
        else "no answer" if gpu else "no answer (no sign of a GPU node: none expected)"
    return f"{head}: {a.cause or 'no cause given'}" + (f"; fix: {a.fix}" if a.fix else "")
