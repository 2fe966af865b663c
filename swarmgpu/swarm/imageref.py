"""The image list's filter for a service's image reference (``SwarmClient.image_env``)."""

from __future__ import annotations


def image_filter(ref: str) -> str:
    """The image list's ``reference`` filter for a service's image: the familiar name (the
    filter matches that form), with its digest when it has one (a tag and a digest never
    match together), else its tag (``latest`` when none: an untagged name would match
    every tag)."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = name[colon + 1:] if colon > slash else ""
    if tag:
        name = name[:colon]
    for hub in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if name.startswith(hub):
            name = name[len(hub):].removeprefix("library/")
    if digest:
        return f"{name}@{digest}"
    return f"{name}:{tag or 'latest'}"
