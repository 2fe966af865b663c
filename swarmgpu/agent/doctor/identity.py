"""Does the local agent prove which node answers (HTTPS with the Swarm node certificate)?"""

from __future__ import annotations

import posixpath
import stat
from pathlib import Path

from swarmgpu.agent.doctor.infoparts import SHOWN, info_part, unread_check
from swarmgpu.agent.doctor.rootpath import refusal, stat_in_root
from swarmgpu.agent.doctor.view import Check, NodeView, Status
from swarmgpu.core.peertext import escaped


def check_agent_identity(view: NodeView) -> Check:
    """Plain HTTP lets whatever binds :9401 (any local user, while the agent restarts)
    answer for this node; the Swarm node certificate proves which node answers."""
    cid = "agent.identity"
    data_root = info_part(view.docker_info, "DockerRootDir") or "/var/lib/docker"
    rel = posixpath.join(data_root.lstrip("/"), "swarm/certificates/swarm-node.crt")
    cert = Path(view.root) / rel
    # (the engine's text, cut: a proxy's may be megabytes)
    fix = (f"run the agent with --identity swarm-pki (it reads {_cut(data_root)}/swarm/"
           "certificates, or --data-root DIR; systemd: LoadCredential=, see "
           "systemd/swarmgpu-agent.service), and leave agents.identity at its default "
           "swarm-pki in the daemon's config (docs/security.md)")
    if view.agent_scheme == "https":
        return Check(cid, Status.OK, "the local agent serves HTTPS")
    if view.agent_scheme == "http":
        unread = unread_check(cid, view.docker_info, ("DockerRootDir",))
        if unread is not None:  # (where the certificate would be is not known)
            return unread
        return Check(cid, Status.WARN,
                     "the local agent serves plain HTTP"
                     + (f" though this node has its Swarm certificate ({_cut(str(cert), 300)})"
                        if _is_file(view.root, rel) else ""),
                     "anything that binds port 9401 (any local user, while the agent "
                     "restarts) can answer for this node and steer GPU placement", fix)
    return Check(cid, Status.SKIP, "no local agent answered on 127.0.0.1:9401")


def _cut(text: str, limit: int = SHOWN) -> str:
    """The engine's text as a finding shows it: escaped (a NUL as ``\\x00``), at most
    ``limit`` characters of it and its length when cut."""
    return escaped(text[:limit]) + (f"... [{len(text)} characters]" if len(text) > limit
                                    else "")


def _is_file(root: str, rel: str) -> bool:
    """A regular file there as the node sees it; a path the kernel refuses (dockerd's
    data-root is the engine's text: a NUL, too long) is none."""
    if refusal(rel) is not None:
        return False
    try:
        return stat.S_ISREG(stat_in_root(root, rel).st_mode)
    except OSError:
        return False
