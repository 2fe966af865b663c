"""The map's labels badge of a node whose agent answers with stale facts (stop 80 read):
``agent.status`` ``stale`` (``factsage``), its labels ``in-sync`` with those old facts.
The daemon places nothing new on such a node (``agentbook.stale_nodes``), yet the badge
kept its labels state's colour and icon: a green "✓ Labels in sync", the stale facts a
word at its end. It is drawn as a silent agent's (``agent-stale``): red, ✕. In Debian's
headless Chromium, as tests/test_webmap.py runs the page.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from support.browser import Doc, MapServer, dump_dom, sample


def _labels_badge(dom: str, hostname: str) -> str:
    card = re.search(rf'<article class="node[^"]*"[^>]*data-node="{hostname}".*?</article>',
                     dom, re.S)
    assert card is not None, f"no card of {hostname}"
    badge = re.search(r'<span class="badge ([a-z]+)"[^>]*>(?:(?!</span>).)*?</span>'
                      r"[^<]*Labels in sync[^<]*", card.group(0), re.S)
    assert badge is not None, card.group(0)
    return badge.group(0)


def test_a_stale_agents_labels_badge_is_not_drawn_ok(
    chromium: str, serve: Callable[[Callable[[], Doc]], MapServer]
) -> None:
    doc = sample()
    (node,) = [n for n in doc["nodes"] if n["hostname"] == "gpu-node-3"]
    node["agent"] = {**node["agent"], "status": "stale", "last_ok": 1764429000.0,
                     "facts_age_s": 1000.0, "fix": "restart the agent",
                     "cause": "facts read 1000s ago"}
    dom = dump_dom(chromium, serve(lambda: doc).url)
    badge = _labels_badge(dom, "gpu-node-3")
    assert 'class="badge bad"' in badge and "✕" in badge, badge
    assert "agent facts stale, read" in badge, badge
    # a fresh agent's stays as it was
    fresh = _labels_badge(dom, "gpu-node-1")
    assert 'class="badge ok"' in fresh and "✓" in fresh, fresh
