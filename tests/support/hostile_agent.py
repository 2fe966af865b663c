"""A hostile stand-in for a node agent: ``python hostile_agent.py MODE ADDR PORT [HOST]``.

Each MODE is one class of attack from issue 13; /facts and /metrics both misbehave.
Standalone (no swarmgpu import), so it runs anywhere a test starts it.
"""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import time

MODES = ("drip", "hang", "deep-json", "too-many-gpus", "mig-flood", "redirect",
         "garbage", "bad-labels", "superscript-metrics", "huge")


def facts(host: str, gpus: int = 8, migs: int = 0) -> bytes:
    g = [{"index": i, "uuid": f"GPU-hostile-{i}", "product": "NVIDIA H100 80GB HBM3",
          "memory_mib": 81559, "mig_devices": [
              {"profile": f"1g.{j}gb", "uuid": f"MIG-{i}-{j}", "memory_mib": 9728}
              for j in range(migs)]} for i in range(gpus)]
    return json.dumps({"schema": "swarmgpu.facts/v1", "node": {"hostname": host},
                       "gpus": g}).encode()


def answer(mode: str, host: str, path: bytes, s: socket.socket) -> None:
    def ok(body: bytes, ctype: bytes = b"application/json") -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)

    if mode == "drip":  # one byte a second, forever
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        while True:
            s.sendall(b" ")
            time.sleep(1)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "deep-json":
        ok(b"[" * 200_000)
    elif mode == "too-many-gpus":
        ok(facts(host, gpus=500))
    elif mode == "mig-flood":
        ok(facts(host, gpus=8, migs=2500))
    elif mode == "redirect":
        s.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/"
                  b"\r\nContent-Length: 21\r\n\r\nSECRET-METADATA-TOKEN")
    elif mode == "garbage":
        ok(b"SECRET-INTERNAL-PAGE <html>" * 3, b"text/html")
    elif mode == "bad-labels":  # values Swarm must never receive
        body = json.loads(facts(host))
        body["node"]["driver_version"] = "535.1\n"
        body["node"]["cuda_driver_version"] = "12.\u017f"
        body["gpus"][0]["product"] = "x" * 250
        ok(json.dumps(body).encode())
    elif mode == "superscript-metrics":
        if path.startswith(b"/metrics"):
            ok(b'DCGM_FI_DEV_GPU_UTIL{gpu="\xc2\xb2",UUID="GPU-hostile-0"} 99\n', b"text/plain")
        else:
            ok(facts(host))
    elif mode == "huge":
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n")
        chunk = b" " * 65536
        while True:
            s.sendall(chunk)


def main() -> None:
    mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    host = sys.argv[4] if len(sys.argv) > 4 else socket.gethostname()
    assert mode in MODES, mode

    class H(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                self.request.settimeout(30)
                head = self.request.recv(65536)
                path = head.split(b" ")[1] if head.count(b" ") >= 2 else b"/"
                answer(mode, host, path, self.request)
            except OSError:
                pass

    class S(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    with S((addr, port), H) as srv:
        srv.serve_forever()


if __name__ == "__main__":
    main()
