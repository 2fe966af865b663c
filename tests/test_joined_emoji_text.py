"""A zero-width joiner (U+200D) makes 👨, 👩 and 👧 one family emoji; alone it shows as
nothing. A tenant's label value with one is a different value from the one without, so
every reason shows the joiner as its escape (``\\u200d``), the emoji around it kept:
the sequence is not kept whole (it would read as the same family whatever the joiners),
and never dropped (it read as the value without them)."""

from __future__ import annotations

import json

import pytest

from swarmgpu.core.peertext import escaped, json_escaped, quoted, tenant_text
from swarmgpu.manager.services.requests import RequestError, parse_request

FAMILY = "\U0001F468\u200d\U0001F469\u200d\U0001F467"
SHOWN = "\U0001F468\\u200d\U0001F469\\u200d\U0001F467"  # as every text shows it


def test_every_rendering_shows_the_joiner_as_the_same_escape() -> None:
    value = f"team-{FAMILY}"
    assert quoted(value) == f"'team-{SHOWN}'"
    assert escaped(value) == f"team-{SHOWN}"
    assert tenant_text(value) == f"team-{SHOWN}"
    assert json_escaped(json.dumps(value, ensure_ascii=False)) == f'"team-{SHOWN}"'
    assert json.loads(json_escaped(json.dumps(value, ensure_ascii=False))) == value


def test_a_cut_tenant_text_keeps_the_joiners_it_keeps() -> None:
    said = tenant_text(FAMILY * 100, 40)
    assert said.startswith(SHOWN) and said.endswith("... [500 characters]"), said
    assert "\u200d" not in said


@pytest.mark.parametrize("times", [1, 100])
def test_a_request_reason_shows_the_joiners_of_a_short_or_long_value(times: int) -> None:
    """Before, a value over 200 characters was cut by peer_text, which drops hidden
    characters: the family read as three emoji side by side."""
    with pytest.raises(RequestError) as e:
        parse_request({"swarmgpu.gpuz": FAMILY * times})
    assert SHOWN in str(e.value) and "\u200d" not in str(e.value), str(e.value)


def test_a_request_reason_shows_a_hidden_character_of_the_key() -> None:
    """Before, a key under 200 characters went into the reason raw."""
    with pytest.raises(RequestError) as e:
        parse_request({f"swarmgpu.gpus{FAMILY}": "1"})
    assert f"swarmgpu.gpus{SHOWN}=" in str(e.value), str(e.value)


@pytest.mark.parametrize("hidden", ["\u200d", "\U000e0041", "\x1b"])
def test_a_tenant_text_of_hidden_characters_is_held_to_its_limit(hidden: str) -> None:
    """Cut before escaping, each hidden character then took up to ten: 100 joiners cut
    to 60 characters made 240 (a reason's three labels, 300 each: some 9,000, logged each
    cycle). Now the escaped text is held to the limit, the cut said as ever."""
    for times in (10, 59, 100, 10_000):
        said = tenant_text(hidden * times, 60)
        assert len(said) <= 60, (times, len(said))
        assert said.endswith(f"... [{times} characters]") or said == escaped(hidden * times)
        assert said.startswith(escaped(hidden)) and "\u200d" not in said
    assert tenant_text("plain" * 100, 60) == "plain" * 8 + "... [500 characters]"
