"""Every input bounded, every node isolated (issue 13, part 1).

Hostile agents are real loopback HTTP servers that misbehave on purpose; each cap has a
Hypothesis property. Times are never asserted tightly: a fetch must end by its deadline
plus generous slack (a stalled fetch would take minutes, not a second more).
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.gpu_nodes import DGX_A100, RTX4090
from support.overshare import G1, service_use
from support.overshare import F as OF
from support.placement import DGX
from support.traced import traced_peak

from swarmgpu.core.config import AgentsConfig
from swarmgpu.core.labelkeys import usable_label_key, usable_label_value
from swarmgpu.core.metrics_in import MAX_GPUS as MAX_METRIC_GPUS
from swarmgpu.core.metrics_in import parse_metrics
from swarmgpu.core.model import (
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS,
    MAX_MIG_PER_GPU,
    MAX_STR_LEN,
    FactsError,
    Gpu,
    MigDevice,
    NodeFacts,
)
from swarmgpu.core.peertext import PEER_TEXT_LIMIT, escaped, json_escaped, peer_text
from swarmgpu.manager.commands.audit import audit
from swarmgpu.manager.nodes import boundedhttp
from swarmgpu.manager.nodes.agent_client import fetch_all, fetch_facts, parse_json_bounded
from swarmgpu.manager.nodes.agentbook import AgentBook, load_saved
from swarmgpu.manager.nodes.sync import Snapshot
from swarmgpu.manager.placement import Holding, plan_placement
from swarmgpu.manager.rebalance.scrape import scrape_node
from swarmgpu.manager.services.overshare import owners
from swarmgpu.manager.services.requests import RequestError, parse_all
from swarmgpu.manager.web.cluster_view import build_cluster
from swarmgpu.swarm.client import SwarmNode, SwarmService, SwarmTask
from swarmgpu.swarm.labels import (
    MAX_LABEL_VALUE_LEN,
    MAX_NODE_LABELS,
    desired_labels,
    largest_nvlink_group,
    writable_label_value,
)

Behaviour = Callable[[socket.socket], None]
GOOD = json.dumps(RTX4090.facts().to_dict()).encode()


class _Hostile(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(behaviour: Behaviour) -> tuple[_Hostile, int]:
    class H(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                self.request.settimeout(30)
                self.request.recv(65536)  # the request; nobody cares what it says
                behaviour(self.request)
            except OSError:
                pass

    srv = _Hostile(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return srv, srv.server_address[1]


@pytest.fixture
def hostile() -> Iterator[Callable[[Behaviour], int]]:
    servers: list[_Hostile] = []

    def start(b: Behaviour) -> int:
        srv, port = serve(b)
        servers.append(srv)
        return port

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def node(port: int, nid: str = "nid", host: str = "gpu-node-2") -> SwarmNode:
    return SwarmNode(nid, host, "127.0.0.1", "worker", "ready", "active", {}, {}, 1, {}, {})


def cfg_for(port: int, timeout: float = 1.0) -> AgentsConfig:
    return AgentsConfig(port=port, timeout_s=timeout, max_response_bytes=1024 * 1024,
                        identity="none")  # plain HTTP: these agents are hostile, not TLS


def ok(body: bytes, extra: bytes = b"") -> Behaviour:
    def b(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra)
                  + body)
    return b


def drip(head: bytes, every_s: float, n: int = 100) -> Behaviour:
    def b(s: socket.socket) -> None:
        s.sendall(head)
        for _ in range(n):
            s.sendall(b" ")
            time.sleep(every_s)
    return b


# --- a wall-clock deadline per fetch (connect + every read) -------------------------------

# A hang guard: a drip each within a per-read timeout runs 30 s; its text tells it apart.
@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["body", "headers", "silence"])
def test_slow_agent_is_cut_at_the_deadline(hostile: Callable[[Behaviour], int],
                                           what: str) -> None:
    heads = {"body": b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
             "headers": b"HTTP/1.1 200 OK\r\nX-Slow: ", "silence": b""}
    every = 0.3 if what != "silence" else 30
    port = hostile(drip(heads[what], every))
    res = fetch_facts(node(port), cfg_for(port, timeout=1.0))
    # Cut by the fetch's one deadline: a drip read to its end fails otherwise (short).
    assert res.facts is None and res.error, res.error
    assert "timed out" in res.error and "within 1.0s" in res.error, res.error


def test_one_stalling_agent_never_delays_the_others(hostile: Callable[[Behaviour], int]
                                                    ) -> None:
    slow = hostile(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", 0.3))
    good = hostile(ok(GOOD))
    cfg = replace(cfg_for(0, timeout=1.0), url_template="http://127.0.0.1:{port}")
    nodes = [node(slow, "bad"), node(good, "good")]
    cfgs = {"bad": replace(cfg, port=slow), "good": replace(cfg, port=good)}
    res = {n.id: fetch_facts(n, cfgs[n.id]) for n in nodes}
    assert res["good"].facts is not None and res["bad"].facts is None
    # fetch_all on many stalling agents: each cut at its own deadline.
    many = fetch_all([node(slow, f"n{i}") for i in range(6)], replace(cfg, port=slow))
    assert all(r.facts is None and "within 1.0s" in (r.error or "")
               for r in many.values()), many


# --- caps on bytes, JSON depth, facts -----------------------------------------------------

def test_body_cap_and_lying_content_length(hostile: Callable[[Behaviour], int]) -> None:
    def chunked_forever(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            s.sendall(b"10000\r\n" + b" " * 0x10000 + b"\r\n")

    def lying_length(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\nx")

    for b in (lying_length, chunked_forever,
              ok(b" " * (2 * 1024 * 1024))):
        port = hostile(b)
        res = fetch_facts(node(port), cfg_for(port, timeout=5))
        assert res.facts is None and res.error and "more than" in res.error, res.error


def test_chunked_and_close_delimited_bodies_are_read(hostile: Callable[[Behaviour], int]
                                                      ) -> None:
    def chunked(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(GOOD), 1000):
            part = GOOD[i:i + 1000]
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        s.sendall(b"0\r\n\r\n")

    def close_delimited(s: socket.socket) -> None:
        s.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + GOOD)

    for b in (chunked, close_delimited):
        port = hostile(b)
        res = fetch_facts(node(port), cfg_for(port, timeout=5))
        assert res.facts is not None, res.error


def test_deep_json_is_this_agents_error(hostile: Callable[[Behaviour], int]) -> None:
    port = hostile(ok(b"[" * 200_000))
    res = fetch_facts(node(port), cfg_for(port, timeout=5))
    assert res.facts is None and res.error and "nested too deeply" in res.error
    assert parse_json_bounded(b"{" * 100_000)[1] is not None


def test_an_answer_of_more_values_than_any_facts_is_refused_unparsed(
        hostile: Callable[[Behaviour], int]) -> None:
    """Within the byte cap, 1 MiB of ``[{},{},...]`` parsed into some 25 MiB of Python
    objects (4 MiB, the default cap: 100 MiB; 64 MiB: 1.6 GiB, agents.parallel of them
    at once) before the facts' own caps refused it. Counted from the text, it is
    refused unparsed; a node's real facts hold some thousands of values."""
    body = b'{"errors": [' + b",".join([b"{}"] * (340 * 1024)) + b"]}"
    port = hostile(ok(body))
    res, peak = traced_peak(lambda: fetch_facts(node(port), cfg_for(port, timeout=5)))
    assert res.facts is None and res.error and "values" in res.error, res.error
    assert peak < 12 * 1024 * 1024, peak
    big = DGX_A100.facts().to_dict()
    assert parse_json_bounded(json.dumps(big).encode()) == (big, None)


def test_an_answer_of_one_long_escaped_string_is_counted_in_little_memory() -> None:
    """The count of an answer's values skips its strings with a pattern whose repeat kept
    ~170 bytes of backtracking state per escape: 1 MiB of ``\\\\`` in one string took
    ~90 MiB (a 4 MiB answer 290 MiB) before any JSON was parsed."""
    body = b'{"errors": ["' + b"\\\\" * (512 * 1024) + b'"]}'
    (value, why), peak = traced_peak(lambda: parse_json_bounded(body))
    assert why is None and value == {"errors": ["\\" * (512 * 1024)]}
    assert peak < 16 * 1024 * 1024, peak


def test_a_key_named_twice_is_this_agents_error(hostile: Callable[[Behaviour], int]) -> None:
    """json.loads keeps the last of two repeated keys, silently: an answer naming a key
    twice (one value for whoever reads the first, jq, a proxy, another for the daemon)
    was taken as facts."""
    good = RTX4090.facts().to_dict()
    text = json.dumps(good)
    twice = text[:-1] + ', "errors": []}'  # the same object, "errors" again at its end
    port = hostile(ok(twice.encode()))
    res = fetch_facts(node(port, host=RTX4090.hostname), cfg_for(port))
    assert res.facts is None and res.error and "'errors' twice" in res.error, res.error
    inner = text.replace('"hostname": ', '"hostname": "x\\nforged", "hostname": ', 1)
    value, why = parse_json_bounded(inner.encode())
    assert value is None and why and "'hostname' twice" in why, why
    _clean_and_short(why)
    assert parse_json_bounded(text.encode()) == (good, None)

def test_an_agent_naming_one_gpu_index_twice_is_refused_alone(
        hostile: Callable[[Behaviour], int]) -> None:
    """Two GPUs with index 0 in one agent's answer were taken as facts; now that node's
    facts are refused, naming the index and the fix, and the other nodes are read."""
    body = RTX4090.facts().to_dict()
    body["gpus"][1]["index"] = body["gpus"][0]["index"]
    bad = hostile(ok(json.dumps(body).encode()))
    good = hostile(ok(GOOD))
    cfg = replace(cfg_for(0), url_template="http://127.0.0.1:{port}")
    res = {n: fetch_facts(node(p, n, RTX4090.hostname), replace(cfg, port=p))
           for n, p in (("bad", bad), ("good", good))}
    err = res["bad"].error or ""
    assert res["bad"].facts is None and "GPU index 0 appears twice" in err, err
    assert "gpus[0] and gpus[1]" in err and "fix:" in err
    assert res["good"].facts is not None


def test_redirect_not_followed_and_body_never_echoed(hostile: Callable[[Behaviour], int]
                                                     ) -> None:
    secret = b"INTERNAL-SECRET-PAGE"
    inner = hostile(ok(secret * 3))
    port = hostile(lambda s: s.sendall(
        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/\r\nContent-Length: 20\r\n\r\n"
        % inner + secret))
    res = fetch_facts(node(port), cfg_for(port))
    assert res.error and "redirect" in res.error and "SECRET" not in res.error
    garbage = hostile(ok(secret + b" not json"))
    res = fetch_facts(node(garbage), cfg_for(garbage))
    assert res.error and "not JSON" in res.error and "SECRET" not in res.error
    for sc in (scrape_node(node(port), f"http://127.0.0.1:{port}/metrics", 2),
               scrape_node(node(garbage), f"http://127.0.0.1:{garbage}/metrics", 2)):
        assert sc.result is None and sc.error and "SECRET" not in sc.error, sc.error


def test_too_many_gpus_or_mig_devices_refused() -> None:
    base = RTX4090.facts().to_dict()
    g = base["gpus"][0]
    many = {**base, "gpus": [{**g, "uuid": f"GPU-{i}", "index": i} for i in range(65)],
            "links": []}
    with pytest.raises(FactsError, match="at most 64"):
        NodeFacts.from_dict(many)
    mig = {"profile": "1g.10gb", "uuid": "MIG-x", "memory_mib": 9728}
    migs = {**base, "gpus": [{**g, "mig_devices": [{**mig, "uuid": f"MIG-{i}"}
                                                   for i in range(17)]}], "links": []}
    with pytest.raises(FactsError, match="at most 16"):
        NodeFacts.from_dict(migs)
    huge = {**base, "node": {**base["node"], "collected_at": 10**400}}
    with pytest.raises(FactsError):
        NodeFacts.from_dict(huge)
    nv = RTX4090.facts().to_dict()
    nv["links"][0][1] = nv["links"][1][0] = "NV" + "9" * 5000
    with pytest.raises(FactsError):
        NodeFacts.from_dict(nv)


def test_mig_devices_on_a_gpu_not_in_mig_mode_refused() -> None:
    """A GPU not in MIG mode is handed out whole: slices listed on it as well would give
    one service the GPU and others its slices (a MIG device exists only in MIG mode)."""
    body = DGX_A100.facts().to_dict()
    assert body["gpus"][0]["mig_devices"] and body["gpus"][0]["mig_enabled"]
    body["gpus"][0]["mig_enabled"] = False
    with pytest.raises(FactsError, match=r"gpus\[0\]\.mig_devices: .*mig_enabled") as e:
        NodeFacts.from_dict(body)
    _clean_and_short(str(e.value))


def _mig_body(devices: list[dict[str, object]], memory_mib: int = 81559) -> dict[str, object]:
    """One H100 80GB in MIG mode with ``devices`` as its MIG devices."""
    body = RTX4090.facts().to_dict()
    body["gpus"] = [{**body["gpus"][0], "product": "NVIDIA H100 80GB HBM3",
                     "memory_mib": memory_mib, "mig_capable": True, "mig_enabled": True,
                     "mig_devices": devices}]
    body["links"] = []
    return body


def _mig(k: int, profile: str, memory_mib: int, gi: int | None = None,
         ci: int | None = None) -> dict[str, object]:
    return {"profile": profile, "uuid": f"MIG-{k:08x}-0000-0000-0000-000000000000",
            "memory_mib": memory_mib, "gi_id": gi, "ci_id": ci}


@pytest.mark.parametrize(("devices", "wrong"), [
    # 3+3+2 = 8 compute slices: an H100 has 7
    ([_mig(0, "3g.40gb", 40448, 1), _mig(1, "3g.40gb", 40448, 2),
      _mig(2, "2g.20gb", 20096, 3)], r"8 compute slices.*at most 7"),
    # without GI ids too: each whole-GI profile is its own GPU instance
    ([_mig(k, "4g.40gb", 40448) for k in range(2)], r"8 compute slices.*at most 7"),
    # 4 x 1g.40gb: 161792 MiB of MIG memory on an 81559 MiB GPU
    ([_mig(k, "1g.40gb", 40448, k) for k in range(4)], r"161792 MiB.*81559 MiB"),
    ([_mig(0, "1g.10gb", 9984, 1), {**_mig(1, "1g.10gb", 9984, 2), "uuid":
                                    _mig(0, "x", 0)["uuid"]}], r"UUID .* twice"),
    ([_mig(0, "1g.10gb", 9984, 1, 0), _mig(1, "1g.10gb", 9984, 1, 0)],
     r"GPU instance 1, compute instance 0 twice"),
])
def test_mig_devices_more_than_their_gpu_holds_refused(
        devices: list[dict[str, object]], wrong: str) -> None:
    """A broken or hostile agent listed more MIG devices than the GPU can hold: more
    compute slices than its 7, more memory than it has, one UUID or one (GI, CI) twice;
    each was taken as facts (slices handed out that do not exist). Refused, naming the
    GPU and what is wrong."""
    with pytest.raises(FactsError, match=r"gpus\[0\]\.mig_devices: " + wrong) as e:
        NodeFacts.from_dict(_mig_body(devices))
    _clean_and_short(str(e.value))


def test_a_mig_uuid_on_two_gpus_refused() -> None:
    body = _mig_body([_mig(0, "1g.10gb", 9984, 1)])
    gpus = body["gpus"]
    assert isinstance(gpus, list)
    gpus.append({**gpus[0], "index": 1, "uuid": "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"})
    with pytest.raises(FactsError, match=r"gpus\[1\]\.mig_devices\[0\]\.uuid: .* also"):
        NodeFacts.from_dict(body)


@pytest.mark.parametrize("devices", [
    # the real H100 capture (nvidia-smi -q): 3g.40gb, 2g.20gb, 1g.10gb x2, 7 slices
    [_mig(0, "3g.40gb", 40448, 2, 0), _mig(1, "2g.20gb", 20096, 3, 0),
     _mig(2, "1g.10gb", 9984, 9, 0), _mig(3, "1g.10gb", 9984, 10, 0)],
    # three compute instances of one 3g GPU instance, each with the GI's memory, plus a
    # 4g.40gb: 7 slices, the GI's memory counted once
    [_mig(0, "1c.3g.40gb", 40448, 1, 0), _mig(1, "1c.3g.40gb", 40448, 1, 1),
     _mig(2, "1c.3g.40gb", 40448, 1, 2), _mig(3, "4g.40gb", 40448, 2, 0)],
    # the same without GI ids: compute instances of one profile may share its GI
    [_mig(0, "1c.3g.40gb", 40448), _mig(1, "1c.3g.40gb", 40448),
     _mig(2, "1c.3g.40gb", 40448), _mig(3, "4g.40gb", 40448)],
    # nominal sizes (topo:, gfd: without memory labels): the name's GiB, rounded up
    [_mig(0, "7g.80gb", 81920, 0)],
    [_mig(k, "1g.10gb+me" if k == 0 else "1G.10GB", 10240, k) for k in range(7)],
])
def test_real_and_nominal_mig_layouts_are_read(devices: list[dict[str, object]]) -> None:
    f = NodeFacts.from_dict(_mig_body(devices))
    assert len(f.gpus[0].mig_devices) == len(devices)


def _json_children(c: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # A def, not a lambda: Hypothesis reads the lambda's source to see that it recurses,
    # failed to here, and warned that it could not.
    return st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    _json_children,
    max_leaves=30,
)



@pytest.mark.parametrize("uuid", [
    "GPU-1\nswarmgpu.x=y",  # a newline into a node label (the ledger) and a service label
    "GPU-a,GPU-b",  # read back from the ledger as two GPUs; two devices for the container
    "all",  # NVIDIA_VISIBLE_DEVICES=all: every GPU of the node
    "GPU-a@500",  # read back as half of GPU-a
    "s1=GPU-a;x", "GPU a", "GPU-\u202eevil", "", 5,
])
@pytest.mark.parametrize("where", ["gpu", "mig"])
def test_a_gpu_uuid_that_would_change_a_label_or_device_list_is_refused(
        hostile: Callable[[Behaviour], int], uuid: object, where: str) -> None:
    """A GPU's UUID is written as it is into the ledger (``<p>assign.<svc>`` node label),
    the service's device list and so NVIDIA_VISIBLE_DEVICES: any string an agent sent was
    placed and written, newline and all."""
    body = DGX_A100.facts().to_dict()
    g = body["gpus"][0]
    if where == "mig":
        g = g["mig_devices"][0]
    g["uuid"] = uuid
    with pytest.raises(FactsError) as e:
        NodeFacts.from_dict(body)
    assert "uuid" in str(e.value) and ("GPU-" if where == "gpu" else "MIG-") in str(e.value)
    _clean_and_short(str(e.value))
    port = hostile(ok(json.dumps(body).encode()))
    res = fetch_facts(node(port, host=DGX_A100.hostname), cfg_for(port))
    assert res.facts is None and res.error and "uuid" in res.error, res.error


def test_real_gpu_and_mig_uuid_forms_are_read() -> None:
    body = RTX4090.facts().to_dict()
    for uuid, mig in (("GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
                       "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"),
                      ("GPU-5ca1ab1e-0279-8fe3-6a24-1338ed3e7532",  # synthetic
                       "MIG-GPU-5ca1ab1e-0279-8fe3-6a24-1338ed3e7532/1/0")):  # pre-R470
        body["gpus"][0]["uuid"] = uuid
        body["gpus"][0]["mig_enabled"] = True
        body["gpus"][0]["mig_devices"] = [{"profile": "1g.10gb", "uuid": mig,
                                           "memory_mib": 9984}]
        f = NodeFacts.from_dict(body)
        assert (f.gpus[0].uuid, f.gpus[0].mig_devices[0].uuid) == (uuid, mig)

@pytest.mark.parametrize("field", [
    "node.hostname", "node.driver_version", "node.cuda_driver_version", "node.nvml_version",
    "node.source", "gpus[0].product", "gpus[0].pci_bus_id", "gpus[0].cpu_affinity",
    "gpus[0].mig_devices[0].profile",
])
def test_a_lone_surrogate_in_a_facts_string_is_refused_naming_the_field(
        hostile: Callable[[Behaviour], int], field: str) -> None:
    """JSON's \\ud800 reads as a lone UTF-16 surrogate, which no UTF-8 can hold: a host
    or product named with one was taken, and every page writing it (/metrics, labels)
    failed downstream. Refused where it is read, naming the field."""
    body = DGX_A100.facts().to_dict()
    at: Any = body
    *path, key = field.replace("[0]", ".0").split(".")
    for part in path:
        at = at[int(part)] if part.isdigit() else at[part]
    at[key] = "x\ud800"
    with pytest.raises(FactsError) as e:
        NodeFacts.from_dict(body)
    assert str(e.value).startswith(f"facts.{field}: ") and "surrogate" in str(e.value)
    _clean_and_short(str(e.value))
    port = hostile(ok(json.dumps(body).encode()))
    res = fetch_facts(node(port, host=DGX_A100.hostname), cfg_for(port))
    assert res.facts is None and res.error and key in res.error, res.error


def test_a_lone_surrogate_in_an_agents_note_is_dropped_not_refused() -> None:
    # Notes are the agent's own text (an exception naming a file whose name is not
    # UTF-8 carries surrogates): cleaned as every note is, the facts kept.
    body = RTX4090.facts().to_dict()
    body["errors"] = ["read \udcff failed"]
    body["gpus"][0].update(healthy=False, error="XID \ud800 79")
    f = NodeFacts.from_dict(body)
    assert f.errors == ("read  failed",) and f.gpus[0].error == "XID  79"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["schema", "node", "gpus", "links", "errors"]), _json)
       | _json)
def test_prop_facts_from_any_json_is_facts_or_factserror(data: object) -> None:
    try:
        f = NodeFacts.from_dict(data)
    except FactsError:
        return
    assert len(f.gpus) <= MAX_GPUS
    assert all(len(g.mig_devices) <= MAX_MIG_PER_GPU for g in f.gpus)


# --- labels: strict values, bounded count -------------------------------------------------

def test_label_values_strict_ascii_no_whitespace() -> None:
    for bad in ("535.1\n", "535 1", "\u017f", "\u212a", "a" * (MAX_LABEL_VALUE_LEN + 1), "", "é"):
        assert not writable_label_value(bad), bad
    assert writable_label_value("535.104.05") and writable_label_value("NVIDIA-A100-SXM4-40GB")
    assert not usable_label_value("\u017f") and not usable_label_key("\u017fwarmgpu.x")
    assert not usable_label_key("swarmgpu.x\n")
    f = replace(RTX4090.facts(), driver_version="535.1\n", cuda_driver_version="12.\u017f")
    labels = desired_labels(f)
    assert "swarmgpu.driver.version.full" not in labels
    assert "swarmgpu.cuda.driver-version.full" not in labels


_label_text = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_label_text, st.lists(_label_text, max_size=6)),
                min_size=1, max_size=12), _label_text, _label_text)
def test_prop_labels_bounded_and_writable(gpus: list[tuple[str, list[str]]],
                                          driver: str, host: str) -> None:
    facts = NodeFacts(
        hostname=host, driver_version=driver or None,
        gpus=tuple(Gpu(i, f"GPU-{i}", prod or "x", 1024, mig_enabled=bool(migs),
                       mig_devices=tuple(MigDevice(p or "1g", f"MIG-{i}-{j}", 512)
                                         for j, p in enumerate(migs)))
                   for i, (prod, migs) in enumerate(gpus)))
    labels = desired_labels(facts)
    assert len(labels) <= MAX_NODE_LABELS
    for k, v in labels.items():
        assert usable_label_key(k) and writable_label_value(v), (k, v)
        assert v.isascii() and not any(c.isspace() for c in v)


# --- NVLink group search: bounded ---------------------------------------------------------

def _with_links(n: int, nvlinked: Callable[[int, int], bool]) -> NodeFacts:
    gpus = tuple(Gpu(i, f"GPU-{i}", "x", 1024) for i in range(n))
    links = tuple(tuple("X" if i == j else ("NV2" if nvlinked(i, j) else "SYS")
                        for j in range(n)) for i in range(n))
    return NodeFacts("h", gpus=gpus, links=links)


def test_nvlink_group_at_64_gpus_is_bounded_and_sound() -> None:
    # Moon-Moser graph (every GPU linked to all but its two twins): 3^21 maximal
    # cliques, the worst case for a clique enumerator. The answer is 22 (one of each
    # of the 22 triples); without pivoting this never finishes.
    moon = _with_links(64, lambda i, j: i // 3 != j // 3)
    assert largest_nvlink_group(moon) == 22
    # A tiny budget still answers a real clique size (a lower bound), at once.
    assert 1 <= largest_nvlink_group(moon, budget=10) <= 22
    full = _with_links(64, lambda i, j: True)
    assert largest_nvlink_group(full) == 64
    assert largest_nvlink_group(DGX_A100.facts()) == 8


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 16), st.randoms(use_true_random=False))
def test_prop_nvlink_group_is_a_clique_never_above_truth(n: int, rnd: object) -> None:
    import itertools
    import random
    assert isinstance(rnd, random.Random)
    edges = {(i, j) for i, j in itertools.combinations(range(n), 2) if rnd.random() < 0.5}
    facts = _with_links(n, lambda i, j: (min(i, j), max(i, j)) in edges)
    got = largest_nvlink_group(facts, budget=50)
    exact = largest_nvlink_group(facts, budget=10**9)
    assert 1 <= got <= exact


# --- metrics: nothing an exporter prints crashes the parser -------------------------------

def test_metrics_superscript_gpu_label_does_not_crash() -> None:
    text = ('DCGM_FI_DEV_GPU_UTIL{gpu="\u00b2",UUID="GPU-1"} 5\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-2",GPU_I_ID="\u0663"} 5\n')
    res = parse_metrics(text)
    assert res.samples_by_uuid["GPU-1"].index is None


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_prop_metrics_parser_never_raises(text: str) -> None:
    res = parse_metrics(text)
    assert len(res.samples_by_uuid) <= MAX_METRIC_GPUS
    assert len(res.errors) <= 51


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["0", "\u00b2", "\u0663", "99999999999", ""]),
                          st.sampled_from(["GPU-a", "GPU-b", "x" * 200])), max_size=80))
def test_prop_metrics_gpu_labels(rows: list[tuple[str, str]]) -> None:
    text = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",UUID="{u}"}} 1\n' for g, u in rows)
    for g in parse_metrics(text).samples_by_uuid.values():
        assert g.index is None or 0 <= g.index <= 9999
        assert len(g.uuid) <= 96



def test_a_reading_near_float_max_is_unknown_not_a_crash() -> None:
    """1e308 is finite, so it was kept: two of them summed to inf (the MIG slices of one
    GPU, or one service's processes on a GPU) and ``round(inf)`` raised OverflowError,
    which ended every cycle's observe step (the map, the over-share watch) for all nodes
    while that one page said so."""
    procs = "".join(
        f'swarmgpu_gpu_process_memory_used_mib{{UUID="{G1.uuid}",gpu="1",pid="{pid}",'
        f'container="{"c" * 64}",task="ta",service="a"}} {v}\n'
        for pid, v in ((10, "1e308"), (11, "1e308"), (12, "100")))
    migs = "".join(f'DCGM_FI_DEV_FB_USED{{UUID="{G1.uuid}",gpu="1",GPU_I_ID="{gi}"}} '
                   f'{v}\n' for gi, v in ((1, "1e308"), (2, "1.7e308")))
    res = parse_metrics(procs + migs + f'DCGM_FI_DEV_GPU_UTIL{{UUID="{G1.uuid}"}} 1e300\n')
    g = res.samples_by_uuid[G1.uuid]
    assert g.fb_used_mib is None and g.util_pct is None
    assert [(p.pid, p.used_mib) for p in g.processes] == [(12, 100)]
    assert any("DCGM_FI_DEV_FB_USED" in e and "not a reading" in e for e in res.errors), \
        res.errors
    ledger = {"a": {DGX.id: Holding("a", DGX.id, (G1.uuid,), (500,))}}
    owners_ = owners([SwarmService("sid-a", "a", {}, (), (), "replicated", 1, None, 1)],
                     [SwarmTask("ta", "sid-a", DGX.id, 1, "running", "running", (),
                                container_id="c" * 64)])
    (use,) = service_use([DGX], ledger, {DGX.id: OF}, {DGX.id: res.samples_by_uuid}, owners_)
    assert (use.service, use.used_mib) == ("a", 100)
    # Real readings stay: DCGM's energy counter (mJ) and the like are far below 2**53.
    big = parse_metrics(f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{UUID="{G1.uuid}"}} '
                        '5.7767663e+13\n')
    assert big.samples_by_uuid[G1.uuid].values and not big.errors

# --- one service's labels never stop the others --------------------------------------------

def test_giant_numbers_make_only_that_service_invalid() -> None:
    for labels in ({"swarmgpu.gpus": "9" * 5000}, {"swarmgpu.gpu-memory": "9" * 400},
                   {"swarmgpu.gpu-memory": "1" + "0" * 400 + "GiB"},
                   {"swarmgpu.gpus": "\u0663"}, {"swarmgpu.gpu-fraction": "1e-400"},
                   {"swarmgpu.zone-prefer": "a" * 100_000}):
        assert isinstance(parse_all(labels), RequestError), labels
    bad = SwarmService("id-bad", "aa-bad", {"swarmgpu.gpus": "9" * 5000}, (), (), "replicated",
                       1, None, 1)
    good = SwarmService("id-good", "bb-good", {"swarmgpu.gpus": "1"}, (), (), "replicated", 1,
                        None, 1)
    n = node(1, "n-4090")
    plan = plan_placement([n], [bad, good], [], {"n-4090": RTX4090.facts()})
    by = {s.name: s for s in plan.services}
    assert by["aa-bad"].status == "invalid" and by["aa-bad"].reason
    assert by["bb-good"].status == "placed"


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["swarmgpu.gpus", "swarmgpu.gpu-memory", "swarmgpu.gpu-fraction",
                     "swarmgpu.mig", "swarmgpu.topology", "swarmgpu.zone-prefer",
                     "swarmgpu.zone-avoid", "swarmgpu.gpu-product", "swarmgpu.rebalance"]),
    st.text(max_size=30) | st.builds(lambda n, d, u: d * n + u, st.integers(300, 5000),
                                     st.sampled_from("19"), st.sampled_from(["", "GiB", ".5"]))))
def test_prop_parse_all_never_raises(labels: dict[str, str]) -> None:
    r = parse_all(labels)
    assert r is None or isinstance(r, RequestError) or r.gpus >= 1


def test_boundedhttp_refuses_other_schemes() -> None:
    with pytest.raises(boundedhttp.FetchError):
        boundedhttp.get("file:///etc/passwd", timeout_s=1, max_bytes=10)


_ANSWER: list[bytes] = [b""]


@pytest.fixture(scope="module")
def echo_port() -> Iterator[int]:
    """A server that answers whatever the current example put in _ANSWER, then closes."""
    srv, port = serve(lambda s: s.sendall(_ANSWER[0]))
    yield port
    srv.shutdown()
    srv.server_close()


_heads = st.sampled_from([b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 200 OK\r\n", b"HTTP/1.1 302 X\r\n",
                          b"HTTP/1.1 2000 OK\r\n", b"garbage\r\n", b""])
_hdrs = st.lists(st.sampled_from([b"Content-Length: 5\r\n", b"Content-Length: 99999999\r\n",
                                  b"Content-Length: -1\r\n", b"Content-Length: \xd9\xa3\r\n",
                                  b"Transfer-Encoding: chunked\r\n", b"X: y\r\n", b"bad\r\n"]),
                 max_size=3)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(_heads, _hdrs, st.binary(max_size=3000))
def test_prop_bounded_get_never_exceeds_its_cap(echo_port: int, head: bytes,
                                                hdrs: list[bytes], body: bytes) -> None:
    _ANSWER[0] = head + b"".join(hdrs) + b"\r\n" + body
    try:
        got = boundedhttp.get(f"http://127.0.0.1:{echo_port}/facts", timeout_s=2,
                              max_bytes=1000)
    except (boundedhttp.FetchError, TimeoutError):
        return
    assert len(got.body) <= 1000
    assert got.status == 200 or got.body == b""  # an error's body is never read


def test_facts_without_a_host_name_are_refused(hostile: Callable[[Behaviour], int]) -> None:
    """The host name check is no longer skipped when the claim is empty."""
    body = RTX4090.facts().to_dict()
    body["node"]["hostname"] = ""
    port = hostile(ok(json.dumps(body).encode()))
    res = fetch_facts(node(port), cfg_for(port))
    assert res.facts is None and res.error and "without a host name" in res.error


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300_000), st.sampled_from(["[", "{\"a\":", "[{\"b\":"]))
def test_prop_json_nesting_never_escapes(depth: int, opener: str) -> None:
    value, why = parse_json_bounded((opener * depth).encode())
    assert value is None and why is not None  # never closed: an error, never an exception


# --- issue 25, part 4: bounded text -----------------------------------------------------

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def _clean_and_short(text: object) -> None:
    assert isinstance(text, str), text
    assert len(text) <= PEER_TEXT_LIMIT, len(text)
    assert not _CONTROLS.search(text), repr(text[:120])


def test_a_3mb_schema_value_is_a_short_clean_error_everywhere_it_goes(
        hostile: Callable[[Behaviour], int], tmp_path: Path) -> None:
    """Issue 25: a 3 MB ``schema`` value made a 3,000,165-character error in the logs,
    agents.json and /api/v1/cluster."""
    body = RTX4090.facts().to_dict()
    body["schema"] = "\x1b[2J\u202e" + "x" * 3_000_000 + "\nforged log line"
    port = hostile(ok(json.dumps(body).encode()))
    cfg = replace(cfg_for(port, timeout=5), max_response_bytes=8 * 1024 * 1024)
    sick = node(port, host=RTX4090.hostname)
    labelled = replace(sick, labels=desired_labels(RTX4090.facts(), "swarmgpu."))
    res = fetch_facts(labelled, cfg)
    assert res.facts is None and res.error and "not supported" in res.error
    assert "3000" in res.error  # the cut says how long the value was
    _clean_and_short(res.error)
    book = AgentBook()
    book.record(res)
    book.save(str(tmp_path))
    saved = json.loads((tmp_path / "agents.json").read_text())
    _clean_and_short(saved[sick.id]["last_error"])
    _clean_and_short(load_saved(str(tmp_path))[sick.id]["last_error"])
    snap = Snapshot([labelled], [], [], {sick.id: res})
    doc = build_cluster(snap, None, saved_agents=saved)
    _clean_and_short(doc["nodes"][0]["agent"]["error"])
    findings = [f for f in audit(snap, saved_agents=saved) if f.kind == "unreachable"]
    assert findings
    for f in findings:
        assert len(f.message) <= PEER_TEXT_LIMIT + 200  # our own words around it
        assert not _CONTROLS.search(f.message)


def test_agents_own_notes_and_many_unknown_keys_are_cut_and_cleaned() -> None:
    body = RTX4090.facts().to_dict()
    body["errors"] = ["nvml\x1b]0;pwned\x07 hiccup\n" + "y" * 10_000]
    body["gpus"][0]["error"] = "Xid 79\r\nforged"
    facts = NodeFacts.from_dict(body)
    for text in (*facts.errors, facts.gpus[0].error):
        _clean_and_short(text)
    assert facts.errors[0].startswith("nvml]0;pwned hiccup y")
    junk = {f"k{i}\n" + "z" * 1000: 1 for i in range(5000)}
    with pytest.raises(FactsError) as e:
        NodeFacts.from_dict({**RTX4090.facts().to_dict(), **junk})
    _clean_and_short(str(e.value))
    assert "more" in str(e.value)


def test_an_older_agents_long_gpu_error_is_cut_not_the_nodes_refusal() -> None:
    """An agent from before its GPU errors were cut at 256 characters (one per NVLink of
    18 failing: 2,000 characters) sent a GPU error the daemon refused, and with it the
    node's facts whole: every GPU unread. Now that error is cut, said as cut, on that
    GPU, its health as the agent sent it; a name past 256 characters is still refused."""
    body = RTX4090.facts().to_dict()
    long = "; ".join(f"NVLink {k} state could not be read: Unknown Error" for k in range(18))
    body["gpus"][0].update(error=long, healthy=False)
    body["gpus"][1]["error"] = long
    facts = NodeFacts.from_dict(body)
    g0, g1 = facts.gpus[:2]
    assert (g0.healthy, g1.healthy) == (False, True)
    for g in (g0, g1):
        assert len(g.error or "") <= MAX_STR_LEN and (g.error or "").startswith("NVLink 0 ")
        assert f"[{len(long)} characters]" in (g.error or "")
    body["gpus"][1]["product"] = "x" * (MAX_STR_LEN + 1)
    with pytest.raises(FactsError, match=r"gpus\[1\]\.product: 257 characters"):
        NodeFacts.from_dict(body)


def test_a_huge_broken_metrics_page_gives_short_clean_errors(
        hostile: Callable[[Behaviour], int]) -> None:
    """Issue 25: metrics errors reached 5.9 MB (every hostname label of a page quoted)."""
    page = "".join(f'DCGM_FI_DEV_FB_USED{{UUID="GPU-{i % 4}",Hostname="host-{i}"}} 1\n'
                   for i in range(60_000))
    page += "\x1b[31m" + "garbage" * 100_000 + "\n"
    parsed = parse_metrics(page)
    assert parsed.errors and len(parsed.errors) <= 51
    for err in parsed.errors:
        _clean_and_short(err)
    port = hostile(ok(page.encode()))
    got = scrape_node(node(port, host=RTX4090.hostname), f"http://127.0.0.1:{port}/metrics",
                      10)
    assert got.error
    _clean_and_short(got.error)


def test_metrics_labels_from_a_page_are_cut_and_cleaned() -> None:
    # Raw controls: the format allows any character but LF in a value (\u202e or \t as
    # escapes are no escapes of the format: that line is refused, test_metrics_in).
    page = ('swarmgpu_gpu_process_memory_used_mib{UUID="GPU-1",pid="7",'
            'service="svc\\nforged\u202e' + "s" * 4000 + '",task="t\t1",container="c"} 5\n'
            'DCGM_FI_DEV_FB_USED{UUID="GPU-1",modelName="A100\u0007' + "m" * 500 + '"} 1\n')
    g = parse_metrics(page).samples_by_uuid["GPU-1"]
    p = g.processes[0]
    for text in (p.service, p.task, p.container, g.model_name):
        assert text is not None and len(text) <= 96 and not _CONTROLS.search(text), text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000), st.integers(0, 400))
def test_prop_peer_text_is_short_and_clean(text: str, limit: int) -> None:
    out = peer_text(text, limit)
    assert len(out) <= limit
    assert not _CONTROLS.search(out)
    if len(text) <= limit and text.isprintable():
        assert out == text  # nothing to cut or clean: unchanged


# Format characters the hand-written list missed: Arabic number signs, end of ayah,
# Syriac abbreviation mark, Kaithi number sign, musical beam and slur controls; an
# unassigned code point; a lone surrogate.
_MISSED = "\u0600\u0605\u06dd\u070f\U000110bd\U0001d173\U0001d17a\U000e0080\ud800"


def test_every_hidden_character_is_dropped_or_escaped_by_its_category() -> None:
    # A list of code points missed these: they reached terminals and logs as themselves.
    assert peer_text(f"a{_MISSED}b") == "ab"
    out = escaped(f"a{_MISSED}b")
    assert out.isprintable() and out.startswith("a\\u0600\\u0605") and out.endswith("\\ud800b")
    assert escaped("GPU Ünïcode 名前 🙂") == "GPU Ünïcode 名前 🙂"  # printable kept
    assert peer_text("x\u2028y\u202ez\u00ad") == "xyz"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_prop_escaped_text_is_printable_and_only_hidden_characters_change(text: str) -> None:
    out = escaped(text)
    assert out.isprintable() or any(unicodedata.category(c) in ("Co", "Zs") for c in out)
    if text.isprintable():
        assert out == text


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=20), st.text(max_size=200), max_size=5))
def test_prop_json_escaped_line_is_printable_and_decodes_the_same(doc: dict[str, str]) -> None:
    # What the JSON log format writes: loguru's ensure_ascii=False line, then this.
    out = json_escaped(json.dumps(doc, ensure_ascii=False))
    assert out.isprintable() or any(unicodedata.category(c) in ("Co", "Zs") for c in out)
    assert json.loads(out) == doc


def test_a_gpu_memory_past_any_gpus_is_refused_not_believed() -> None:
    """NVML's garbled memory total is unknown on the agent (``MAX_GPU_MEMORY_MIB``), but
    the daemon believed any memory_mib below 2**53 from others (an older agent, GFD's
    gpu.memory label, a facts file): a GPU of 2**44 MiB fitting every request."""
    body = RTX4090.facts().to_dict()
    body["gpus"][1]["memory_mib"] = MAX_GPU_MEMORY_MIB
    assert NodeFacts.from_dict(body).gpus[1].memory_mib == MAX_GPU_MEMORY_MIB
    body["gpus"][1]["memory_mib"] = 1 << 44
    with pytest.raises(FactsError, match=r"gpus\[1\]\.memory_mib: .*16 TiB") as e:
        NodeFacts.from_dict(body)
    _clean_and_short(str(e.value))
