"""Where dockerd finds daemon.json's ``runtimes.nvidia.path``, looked at without running it.

dockerd hands a runtime's path to containerd's shim, which runs it, and checks a runtime
with ``runtimeArgs`` with ``exec.LookPath`` (moby daemon/runtime_unix.go, setupRuntimes):
a name with a slash is that file, a bare name the first file of that name on PATH with
an execute bit (one without is passed over). dockerd runs as root: any execute bit does.
"""

from __future__ import annotations

import os
import posixpath
import stat

from swarmgpu.agent.doctor.rootpath import is_host, refusal, stat_in_root
from swarmgpu.agent.doctor.view import RuntimeLookup

# What a root's dockerd has on PATH: systemd's default for services (split /usr: /sbin, /bin)
ROOT_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def find_runtime(root: str, name: str, env_path: str | None = None) -> RuntimeLookup:
    """``name`` as dockerd on the node under ``root`` would find it. On the live node (root
    /) a bare name is looked up on ``env_path`` (default: this process's PATH), whose
    relative entries Go's LookPath refuses; under another root on :data:`ROOT_PATH`. A
    name the kernel refuses (a NUL, too long) is not looked up: ``refused`` says why."""
    refused = refusal(name)
    if refused is not None:
        return RuntimeLookup(None, refused=refused)
    if "/" in name:  # relative: from dockerd's working directory, / under systemd
        # one leading slash: normpath keeps two ("//usr/bin/x"), as POSIX lets it
        return _first(root, [posixpath.normpath("/" + name.lstrip("/"))])
    if is_host(root):
        raw = os.environ.get("PATH", "") if env_path is None else env_path
        dirs = tuple(d for d in raw.split(":") if d.startswith("/"))
        return _first(
            root, [posixpath.join(d, name) for d in dirs], dirs, "this environment's PATH"
        )
    return _first(
        root, [posixpath.join(d, name) for d in ROOT_PATH], ROOT_PATH, "the root's standard PATH"
    )


def _first(
    root: str, candidates: list[str], search: tuple[str, ...] = (), search_from: str = ""
) -> RuntimeLookup:
    not_executable: list[str] = []
    for path in candidates:
        try:
            st = stat_in_root(root, path.lstrip("/"))
        except OSError:  # absent, a loop, not a directory on the way: not there
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if not st.st_mode & 0o111:
            not_executable.append(path)
            continue
        return RuntimeLookup(path, tuple(not_executable), search, search_from)
    return RuntimeLookup(None, tuple(not_executable), search, search_from)
