"""What a shared GPU holding tells its container (manager.services.sharing), in the planner and
in `render`, on facts from real captures (DGX A100 40 GB with GPU 0 in MIG mode)."""

from __future__ import annotations

import yaml
from support.gpu_nodes import DGX_A100
from support.placement import DGX, FACTS, svc

from swarmgpu.manager.commands.render import render_stack
from swarmgpu.manager.placement import plan_placement
from swarmgpu.manager.services.requests import parse_all
from swarmgpu.manager.services.sharing import env_lines, missing_env, share_labels, share_values

P = "swarmgpu."
SHARED_ENV = (
    'SWARMGPU_GPU_FRACTION={{or (index .Service.Labels (print "swarmgpu.share.fraction." '
    '.Node.ID)) ""}}',
    'SWARMGPU_GPU_MEMORY_MIB={{or (index .Service.Labels (print "swarmgpu.share.memory-mib." '
    '.Node.ID)) ""}}',
    'CUDA_DEVICE_MEMORY_LIMIT={{or (index .Service.Labels (print '
    '"swarmgpu.share.memory-limit." .Node.ID)) ""}}',
    'CUDA_DEVICE_SM_LIMIT={{or (index .Service.Labels (print "swarmgpu.share.sm-limit." '
    '.Node.ID)) ""}}',
)


def test_env_lines_are_the_documented_templates() -> None:
    assert env_lines(P) == SHARED_ENV


def test_share_values_floor_so_shares_of_one_gpu_never_exceed_it() -> None:
    assert share_values(500, 40960) == {"fraction": "0.5", "memory-mib": "20480",
                                        "memory-limit": "20480m", "sm-limit": "50"}
    assert share_values(125, 24564) == {"fraction": "0.125", "memory-mib": "3070",
                                        "memory-limit": "3070m", "sm-limit": "12"}
    assert share_values(5, 24564)["sm-limit"] == "1"  # HAMi-core reads 0 as "no limit"
    assert sum(int(share_values(333, 24564)["memory-mib"]) for _ in range(3)) <= 24564


def test_a_share_whose_memory_rounds_to_nothing_is_capped_at_1_mib_never_unlimited() -> None:
    """0.001 of a 512 MiB GPU is 0.5 MiB: the floor wrote memory-limit '0m', which
    HAMi-core reads as no limit at all (as it would an SM limit of 0)."""
    got = share_values(1, 512)
    assert got["memory-limit"] == "1m" and got["memory-mib"] == "1", got
    assert share_values(500, 1)["memory-limit"] == "1m"


def test_whole_gpus_and_mig_get_no_share_labels() -> None:
    facts = DGX_A100.facts()
    g1 = facts.gpus[1].uuid
    assert share_labels(P, "n", (g1,), (1000,), facts) == {}
    assert share_labels(P, "n", (g1, facts.gpus[2].uuid), (1000, 1000), facts) == {}
    mig = facts.gpus[0].mig_devices[0].uuid
    assert share_labels(P, "n", (mig,), (1000,), facts) == {}
    assert share_labels(P, "n", (g1,), (500,), None) is None  # unknown: keep what is written


def test_missing_env_keeps_a_users_own_value() -> None:
    own = ["CUDA_DEVICE_SM_LIMIT=30", "X=1"]
    missing = missing_env(P, own)
    assert len(missing) == 3 and not any(m.startswith("CUDA_DEVICE_SM_LIMIT=") for m in missing)


def test_half_of_a_40gb_gpu_beside_a_whole_gpu_service() -> None:
    half = svc("half", {"swarmgpu.gpu-fraction": "0.5"})
    half = half.__class__(**{**half.__dict__, "env": (*half.env, *SHARED_ENV)})
    whole = svc("whole", {"swarmgpu.gpus": "1"})
    plan = plan_placement([DGX], [half, whole], [], FACTS)
    by = {sp.name: sp for sp in plan.services}
    (p,) = by["half"].placements
    assert p.milli == (500,)
    assert {k: v for k, v in by["half"].service_labels_set.items() if ".share." in k} == {
        "swarmgpu.share.fraction.n-dgx": "0.5",
        "swarmgpu.share.memory-mib.n-dgx": "20268",
        "swarmgpu.share.memory-limit.n-dgx": "20268m",
        "swarmgpu.share.sm-limit.n-dgx": "50",
    }
    assert not by["half"].add_env and not by["half"].warnings
    assert not any(".share." in k for k in by["whole"].service_labels_set)
    assert not by["whole"].add_env


def test_shared_service_without_the_env_lines_is_adopted_or_told() -> None:
    half = svc("half", {"swarmgpu.gpu-fraction": "0.5"})
    sp = plan_placement([DGX], [half], [], FACTS).services[0]
    assert tuple(SHARED_ENV) == sp.add_env
    assert any("tell each container its share" in w for w in sp.warnings)
    sp = plan_placement([DGX], [half], [], FACTS, adopt_ungated=False).services[0]
    assert not sp.add_env
    assert any("not told their share" in w for w in sp.warnings)


def test_share_labels_follow_the_holding_and_go_with_it() -> None:
    half = svc("half", {"swarmgpu.gpu-fraction": "0.5"})
    labels = {**half.labels, "swarmgpu.share.fraction.gone-node": "0.5",
              "swarmgpu.devices.gone-node": "GPU-x"}
    half = half.__class__(**{**half.__dict__, "labels": labels,
                             "env": (*half.env, *SHARED_ENV)})
    sp = plan_placement([DGX], [half], [], FACTS).services[0]
    assert "swarmgpu.share.fraction.gone-node" in sp.service_labels_remove
    assert sp.service_labels_set["swarmgpu.share.fraction.n-dgx"] == "0.5"
    # share labels are swarmgpu's output, never request errors
    assert parse_all(labels, prefix=P) is not None
    assert not isinstance(parse_all(labels, prefix=P), Exception)


STACK = """
version: "3.8"
services:
  half:
    image: my/model
    environment: [MODEL=a]
    deploy:
      labels: {swarmgpu.gpu-fraction: "0.5", swarmgpu.gpu-product: "*A100*"}
  whole:
    image: my/model
    environment: {MODEL: b}
    deploy:
      labels: {swarmgpu.gpus: "1", swarmgpu.gpu-product: "*A100*"}
"""


def test_render_writes_the_same() -> None:
    text, plan = render_stack(STACK, "s", [DGX], [], [], FACTS)
    out = yaml.safe_load(text)["services"]
    half, whole = out["half"], out["whole"]
    assert all(line in half["environment"] for line in SHARED_ENV)
    assert half["deploy"]["labels"]["swarmgpu.share.memory-limit.n-dgx"] == "20268m"
    assert half["deploy"]["labels"]["swarmgpu.share.sm-limit.n-dgx"] == "50"
    assert not any(k.startswith("SWARMGPU_") or k.startswith("CUDA_DEVICE_M")
                   or k.startswith("CUDA_DEVICE_SM") for k in whole["environment"])
    assert not any(".share." in k for k in whole["deploy"]["labels"])
    assert all(not sp.warnings for sp in plan.services), [sp.warnings for sp in plan.services]
