"""Does the local agent prove which node answers (HTTPS with the Swarm node certificate)?"""

from __future__ import annotations

from pathlib import Path

from swarmgpu.agent.doctor.view import Check, NodeView, Status


def check_agent_identity(view: NodeView) -> Check:
    """Plain HTTP lets whatever binds :9401 (any local user, while the agent restarts)
    answer for this node; the Swarm node certificate proves which node answers."""
    cid = "agent.identity"
    data_root = str((view.docker_info or {}).get("DockerRootDir") or "/var/lib/docker")
    cert = Path(view.root) / data_root.lstrip("/") / "swarm/certificates/swarm-node.crt"
    fix = (f"run the agent with --identity swarm-pki (it reads {data_root}/swarm/"
           "certificates, or --data-root DIR; systemd: LoadCredential=, see "
           "systemd/swarmgpu-agent.service), and leave agents.identity at its default "
           "swarm-pki in the daemon's config (docs/security.md)")
    if view.agent_scheme == "https":
        return Check(cid, Status.OK, "the local agent serves HTTPS")
    if view.agent_scheme == "http":
        return Check(cid, Status.WARN,
                     "the local agent serves plain HTTP"
                     + (f" though this node has its Swarm certificate ({cert})"
                        if cert.exists() else ""),
                     "anything that binds port 9401 (any local user, while the agent "
                     "restarts) can answer for this node and steer GPU placement", fix)
    return Check(cid, Status.SKIP, "no local agent answered on 127.0.0.1:9401")
