"""A directory the doctor may not list, as a user's run meets one: its reads patched."""

from __future__ import annotations

import pytest

from swarmgpu.agent.doctor import read


def deny_listing(monkeypatch: pytest.MonkeyPatch, rel: str, euid: int) -> None:
    """Listing ``<root>/<rel>`` fails with EACCES for the rest of the test, the doctor
    running as the user ``euid`` (0: root, whom the runtime runs as)."""
    listdir = read.listdir_in_root

    def denied(root: str, at: str) -> list[str]:
        if at == rel:
            raise PermissionError(13, "Permission denied")
        return listdir(root, at)

    monkeypatch.setattr(read, "listdir_in_root", denied)
    monkeypatch.setattr(read.os, "geteuid", lambda: euid)
