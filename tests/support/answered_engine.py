"""A ``SwarmClient`` built as the daemon builds it, through docker-py's own ``APIClient``,
only its HTTP answered here (tests/test_engine_skew_writes.py,
tests/test_wrong_object_answers.py, tests/test_engine_repeated_keys.py)."""

from __future__ import annotations

import json
from typing import Any

import docker
import pytest
import requests

from swarmgpu.swarm.client import SwarmClient

URL = "tcp://127.0.0.1:9"
API = "1.43"


def answered_engine(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any]
                    ) -> tuple[SwarmClient, list[tuple[str, Any]], list[str]]:
    """A client whose engine answers each GET by its path (no ``/v1.43``, no query) from
    ``answers``, as JSON, or as given where the answer is a str (JSON a dict cannot hold:
    a repeated key), and each POST 200 ``{}``; ``/version`` answers API 1.43 unless
    ``answers`` says otherwise (the client asks it as it is made). With the client: the
    writes posted (path, body) and the paths read, in order."""
    answers = {"/version": {"ApiVersion": API}, **answers}
    posted: list[tuple[str, Any]] = []
    read: list[str] = []

    def answer(url: str, body: Any) -> requests.Response:
        resp = requests.Response()
        text = body if isinstance(body, str) else json.dumps(body)
        resp.status_code, resp._content = 200, text.encode()
        resp.headers["Content-Type"], resp.encoding = "application/json", "utf-8"
        resp.url = url
        return resp

    def path(url: str) -> str:
        return url.split(URL.removeprefix("tcp://"), 1)[1].removeprefix(f"/v{API}").split("?")[0]

    def get(_self: object, url: str, **_: Any) -> requests.Response:
        read.append(path(url))
        return answer(url, answers[path(url)])

    def post(_self: object, url: str, data: Any = None, **_: Any) -> requests.Response:
        posted.append((path(url), data))
        return answer(url, {})

    monkeypatch.setattr(docker.APIClient, "_get", get)
    monkeypatch.setattr(docker.APIClient, "_post_json", post)
    return SwarmClient(URL), posted, read
