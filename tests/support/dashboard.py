"""A one-page HTTP server for a fixed body.

First written in tests/test_dashboard_hostlabels.py."""

from __future__ import annotations

import http.server
import threading
from typing import Any

# The rest of dcgm-exporter's default counters the panels show (values of the A100
# dcgm-exporter capture: SM clock, energy, PCIe throughput).
DCGM_REST = {"sm_clock_mhz": 1410, "enc_util_pct": 0, "dec_util_pct": 0,
             "energy_mj": 319159391, "nvlink_mb_s": 0, "gr_engine_active": 0.4,
             "pcie_tx_bytes_s": 33011804, "pcie_rx_bytes_s": 97863601}


def serve_page(page: bytes) -> tuple[http.server.ThreadingHTTPServer, threading.Thread]:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv, t
