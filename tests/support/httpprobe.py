"""GET some URLs from wherever this runs (another namespace of the test swarm), as JSON.

    python tests/support/httpprobe.py '[{"url": "http://10.0.0.2:9402/healthz"}, ...]'

Each request may carry ``headers``, a ``method`` and a ``body`` (text; the sign-in
form's POST) and, for HTTPS, ``cert``/``key`` (a Swarm node's,
``raft-dek`` headers and all) and ``ca`` (the swarm root CA; the host name is not
checked: node certificates name no address). Prints one JSON list: ``status`` (0: no
answer, with ``error``), ``seconds``, the first 400 bytes of the ``body``.
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time
from typing import Any
from urllib.parse import urlsplit


def probe(req: dict[str, Any]) -> dict[str, Any]:
    from swarmgpu.swarm.identity import client_context

    u = urlsplit(req["url"])
    t0 = time.monotonic()
    conn: http.client.HTTPConnection
    try:
        if u.scheme == "https":
            ctx: ssl.SSLContext = client_context(open(req["ca"]).read(), "",  # noqa: SIM115
                                                 req.get("cert"), req.get("key"))
            conn = http.client.HTTPSConnection(u.hostname or "", u.port, context=ctx,
                                               timeout=req.get("timeout", 5))
        else:
            conn = http.client.HTTPConnection(u.hostname or "", u.port,
                                              timeout=req.get("timeout", 5))
        conn.request(req.get("method", "GET"), u.path + (f"?{u.query}" if u.query else ""),
                     body=req.get("body"), headers=req.get("headers") or {})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return {"status": r.status, "seconds": time.monotonic() - t0,
                "body": body[:400].decode("utf-8", "replace")}
    except Exception as exc:  # reported, never raised: the caller asserts
        return {"status": 0, "seconds": time.monotonic() - t0,
                "error": f"{exc.__class__.__name__}: {exc}"}


if __name__ == "__main__":
    print(json.dumps([probe(r) for r in json.loads(sys.argv[1])]), flush=True)
