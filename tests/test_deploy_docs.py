"""docs/deploy.md stays true: its daemon.json is what `node-config` prints, its
Prometheus configuration is one promtool accepts, and the image section matches the
Dockerfile's build arguments."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.deploy_docs import DEPLOY, fenced, scrape_config
from support.paths import REPO

from swarmgpu.agent.nodeconfig import node_config
from swarmgpu.core.model import NodeFacts


def test_daemon_json_has_the_keys_node_config_prints() -> None:
    (block,) = fenced("json")
    documented = json.loads(re.sub(r"<[^>]+>", "x", block))
    facts = NodeFacts.from_dict(json.loads(
        (REPO / "tests/doctor_roots/healthy/.swarmgpu-fixture/facts.json").read_text()))
    text = node_config(facts)
    printed = json.loads(text[text.index("{"):text.index("\n}\n") + 2])
    assert documented.keys() == printed.keys()
    assert documented["runtimes"] == printed["runtimes"]  # runtimeArgs, not args
    assert documented["default-runtime"] == printed["default-runtime"]
    assert all(v.startswith("NVIDIA-GPU=GPU-") for v in documented["node-generic-resources"])
    assert '"args"' not in DEPLOY
    for step in ("swarmgpu node-config --source nvml", "swarmgpu doctor"):
        assert step in DEPLOY, step


def test_scrape_config_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool missing: apt-get install prometheus (scripts/setup.sh does)")
    doc = scrape_config()
    (tmp_path / "ca.crt").write_text("")
    (tmp_path / "token").write_text("t\n")
    for job in doc["scrape_configs"]:  # type: ignore[attr-defined]
        # promtool opens the files: stand-ins, at documented keys
        if "tls_config" in job:
            job["tls_config"]["ca_file"] = str(tmp_path / "ca.crt")
        if "authorization" in job:
            job["authorization"]["credentials_file"] = str(tmp_path / "token")
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(doc))
    res = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_image_section_names_both_builds() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE=python:3\.11-slim$", dockerfile, flags=re.M)
    assert re.search(r"^ARG WHEELS=$", dockerfile, flags=re.M)
    script = (REPO / "scripts" / "build-image.sh").read_text()
    assert "--build-arg WHEELS=dist/wheels" in script and "--network=none" in script
    assert "docker build -t swarmgpu ." in DEPLOY
    assert "--build-arg WHEELS=dist/wheels" in DEPLOY and "bash scripts/build-image.sh" in DEPLOY


def test_agent_scrape_is_https_with_the_swarm_ca_and_a_token() -> None:
    """Issue 25: the agents serve HTTPS and /metrics needs a token (or a manager's
    certificate); tests/test_dashboard_prometheus.py runs exactly this job."""
    (job,) = [j for j in scrape_config()["scrape_configs"]  # type: ignore[attr-defined]
              if j["job_name"] == "swarmgpu-agent"]
    assert job["scheme"] == "https"
    assert job["tls_config"]["ca_file"] and job["tls_config"]["server_name"] == "swarm-worker"
    assert job["authorization"]["type"] == "Bearer" and job["authorization"]["credentials_file"]
    assert "insecure_skip_verify" not in job["tls_config"]


def test_daemon_scrape_sends_the_daemons_token() -> None:
    """Issue 32: the daemon on the managers' addresses answers /metrics only to its
    token (or a manager certificate); the stack's secret and this job name one file."""
    (job,) = [j for j in scrape_config()["scrape_configs"]  # type: ignore[attr-defined]
              if j["job_name"] == "swarmgpu-daemon"]
    assert job["authorization"] == {
        "type": "Bearer", "credentials_file": "/etc/prometheus/swarmgpu-http-token"}
    assert "docker secret create swarmgpu-http-token" in DEPLOY
