"""A lone UTF-16 surrogate in JSON the docker-proxy checks (``jsonstrict.load_json``)."""

from __future__ import annotations

import pytest

from swarmgpu.swarm.jsonstrict import JsonError, load_json


@pytest.mark.parametrize("body", [
    b'{"Labels": {"swarmgpu.x": "\\ud800"}}',
    b'{"Labels": {"swarmgpu.\\udfff": "1"}}',
    b'["\\uDBFF"]',
    b'["\\udc00\\ud800"]',  # a low before a high: no pair either
    b'["a\\\\\\ud800"]',  # an escaped backslash, then the escape
])
def test_a_lone_surrogate_is_refused(body: bytes) -> None:
    # Python reads '\ud800' as a lone surrogate and writes it back so; Go's decoder, the
    # engine's, reads U+FFFD: the proxy would pass on text other than what it checked.
    with pytest.raises(JsonError, match="surrogate"):
        load_json(body)


def test_a_pair_and_text_that_only_looks_like_one_are_read() -> None:
    assert load_json(b'["\\ud83d\\ude00"]') == ["\U0001f600"]
    assert load_json(b'["\\\\ud800"]') == ["\\ud800"]  # a backslash, then text
    assert load_json('["\u00e9\U0001f600"]'.encode()) == ["\u00e9\U0001f600"]
