"""The GPU map in a headless Chromium: the sample cluster, a map server, the DOM,
screenshots (``chromium`` fixture: find_chromium).

First written in tests/test_webmap.py."""

from __future__ import annotations

import base64
import copy
import json
import os
import random
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from swarmgpu.manager.web import webmap
from swarmgpu.manager.web.history import History
from swarmgpu.manager.web.webguard import SECURITY_HEADERS

REPO = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).resolve().parents[1] / "web_sample_cluster.json"
ARTIFACTS = REPO / "artifacts" / "webmap"

Doc = dict[str, Any]


def sample() -> Doc:
    doc: Doc = json.loads(SAMPLE.read_text())
    return doc


def seed_history(history: History, doc: Doc, samples: int = 60, step_s: float = 30.0) -> None:
    """Past samples for every GPU of ``doc``, wobbling around its current values, as
    the daemon would have recorded them cycle by cycle."""
    rng = random.Random(3)
    now = float(doc.get("generated_at") or time.time())
    for k in range(samples, 0, -1):
        past = copy.deepcopy(doc)
        for n in past["nodes"]:
            for g in n["gpus"]:
                for f, span in (("util_pct", 12.0), ("temp_c", 3.0), ("power_w", 25.0)):
                    if g.get(f) is not None:
                        g[f] = max(0.0, min(100.0 if f == "util_pct" else 1e4,
                                            g[f] + rng.uniform(-span, span)))
                if g.get("memory_used_mib") is not None:
                    g["memory_used_mib"] = max(0, g["memory_used_mib"] - k * 40)
        history.record(past, at=now - k * step_s)


class MapServer:
    """Serve `register()`'s routes on 127.0.0.1:0 as the daemon does (query routes
    too, and its security headers: the page runs under the daemon's CSP); counts the
    API hits and records each document in a history ring."""

    def __init__(self, cluster_json: Callable[[], Doc], *, seed: bool = True,
                 record: bool = True) -> None:
        self.routes: dict[str, Callable[[], tuple[str, bytes]]] = {}
        self.query_routes: dict[str, Callable[[str], tuple[str, bytes]]] = {}
        self.history = History()
        self.api_hits = 0
        if seed:
            seed_history(self.history, sample())

        def counted() -> Doc:
            self.api_hits += 1
            doc = cluster_json()
            if record:  # the daemon records once per cycle, not per request
                self.history.record(doc)
            return doc

        webmap.register(self.routes, counted, query_routes=self.query_routes,
                        history=self.history)
        routes = self.routes
        query_routes = self.query_routes

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def end_headers(self) -> None:
                for k, v in SECURITY_HEADERS.items():
                    self.send_header(k, v)
                super().end_headers()

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                route = routes.get(path)
                if path in query_routes:
                    ctype, body = query_routes[path](query)
                elif route is None:
                    self.send_error(404)
                    return
                else:
                    ctype, body = route()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def find_chromium() -> str:
    path = os.environ.get("SWARMGPU_CHROMIUM") or shutil.which("chromium")
    if path:
        return path
    if os.environ.get("SWARMGPU_SKIP_BROWSER") == "1":
        pytest.skip("no chromium and SWARMGPU_SKIP_BROWSER=1")
    pytest.fail(
        "the GPU map tests need Debian's headless Chromium: `apt-get install -y chromium` "
        "(or set SWARMGPU_CHROMIUM=/path/to/chromium); SWARMGPU_SKIP_BROWSER=1 skips them"
    )


# headless, offline and quiet: no sandbox (CI runs as root), no GPU, no phoning home
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
    "--hide-scrollbars",
]


def run_chromium(browser: str, url: str, *args: str, budget_ms: int = 3000) -> str:
    with tempfile.TemporaryDirectory(prefix="swarmgpu-chromium-") as profile:
        cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
        cmd += [f"--virtual-time-budget={budget_ms}", *args, url]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, f"chromium failed ({res.returncode}): {res.stderr[-2000:]}"
    return res.stdout


def dump_dom(browser: str, url: str, budget_ms: int = 3000) -> str:
    return run_chromium(browser, url, "--dump-dom", budget_ms=budget_ms)


def screenshot(browser: str, url: str, name: str, size: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / name
    out.unlink(missing_ok=True)
    run_chromium(browser, url, f"--window-size={size}", f"--screenshot={out}")
    assert out.stat().st_size > 10_000, f"{out} looks empty"
    return out


def text_of(dom: str) -> str:
    """The DOM's visible-ish text, tags dropped and entities kept, for `in` checks."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


class Cdp:
    """Just enough of the DevTools protocol (--remote-debugging-pipe: fd 3 in, fd 4 out)."""

    def __init__(self, browser: str, size: tuple[int, int]) -> None:
        self.profile = tempfile.TemporaryDirectory(
            prefix="swarmgpu-chromium-", ignore_cleanup_errors=True
        )
        self.size = size
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        # the child sees our pipe ends as its fd 3 (commands) and fd 4 (replies)
        # the shell moves our pipe ends onto the child's fd 3 (commands) and fd 4 (replies)
        self.proc = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec "$0" "$@" 3<&{to_child_r} 4>&{from_child_w}',
                browser,
                *CHROMIUM_FLAGS,
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile.name}",
                "about:blank",
            ],
            pass_fds=(to_child_r, from_child_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.buf = b""
        self.next_id = 0
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, timeout: float = 20.0, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    assert "error" not in reply, f"{method}: {reply['error']}"
                    result: dict[str, Any] = reply.get("result", {})
                    return result
                self.events.append(reply)
            left = deadline - time.monotonic()
            assert left > 0, f"chromium did not answer {method} in {timeout} s"
            if select.select([self.from_child], [], [], left)[0]:
                chunk = os.read(self.from_child, 1 << 20)
                assert chunk, "chromium closed the DevTools pipe"
                self.buf += chunk

    def open(self, url: str) -> None:
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        self.call(
            "Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
            deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        # every CSP violation of the page, from before its first script (the tests read
        # window.cspViolations; none is expected under the daemon's policy)
        self.call("Page.enable")
        self.call(
            "Page.addScriptToEvaluateOnNewDocument",
            source="window.cspViolations = []; addEventListener('securitypolicyviolation', "
            "(e) => cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`))",
        )
        self.call("Page.navigate", url=url)

    def js(self, expr: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        return res["result"].get("value")

    def wait_for(self, expr: str, timeout: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expr)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"page never satisfied {expr!r}")

    def key(self, key: str, code: int) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=code
            )
        if key == "Enter":
            self.call("Input.dispatchKeyEvent", type="char", text="\r")

    def screenshot(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(self.call("Page.captureScreenshot")["data"]))

    def close(self) -> None:
        try:  # a page that ran under the daemon's CSP reported no violation
            seen = self.js("window.cspViolations") if self.session else None
        except AssertionError:
            seen = None  # the browser is gone: the test says why
        self.proc.kill()  # our own child, by its handle
        self.proc.wait(timeout=10)
        os.close(self.to_child)
        os.close(self.from_child)
        self.profile.cleanup()
        assert not seen, f"CSP violations: {seen}"


def with_node_9(one: Callable[[], Doc]) -> Callable[[], Doc]:
    """The sample cluster with the one node of ``one()``'s document added to it as
    ``n9`` (``gpu-node-9``), built afresh on each read (as the map polls it)."""

    def doc() -> Doc:
        out = sample()
        (n,) = one()["nodes"]
        out["nodes"].append({**n, "id": "n9", "hostname": "gpu-node-9"})
        return out

    return doc


def card_text(dom: str, hostname: str, classes: str = r'node[^"]*') -> str:
    """The text of the node card of ``hostname`` in ``dom`` (its ``article``, whose
    class attribute matches the regular expression ``classes``); it must be there."""
    card = re.search(rf'<article class="{classes}"[^>]*data-node="{re.escape(hostname)}"'
                     r".*?</article>", dom)
    assert card is not None, f"no card of {hostname} (class {classes})"
    return text_of(card.group(0))


def map_servers() -> Iterator[Callable[[Callable[[], Doc]], MapServer]]:
    """A starter of MapServers (the ``serve`` fixture's), each closed at the end."""
    servers: list[MapServer] = []

    def start(cluster_json: Callable[[], Doc]) -> MapServer:
        servers.append(MapServer(cluster_json))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
