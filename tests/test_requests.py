"""The request language in deploy.labels: good requests, bad values, output keys."""

from __future__ import annotations

import pytest

from swarmgpu.manager.services.requests import (
    OUTPUT_LABEL_PREFIXES,
    GpuRequest,
    Rebalance,
    RequestError,
    Topology,
    parse_all,
    parse_request,
    request_labels,
)

P = "swarmgpu."


def req(**labels: str) -> GpuRequest | None:
    return parse_request({P + k.replace("_", "-"): v for k, v in labels.items()})


@pytest.mark.parametrize(
    ("labels", "want", "text"),
    [
        ({"gpus": "2"}, GpuRequest(gpus=2), "2 GPUs"),
        (
            {"gpus": "2", "topology": "NVLink", "gpu_memory": "40GiB"},
            GpuRequest(gpus=2, topology=Topology.NVLINK, min_memory_mib=40960),
            "2 NVLink GPUs >= 40 GiB",
        ),
        (
            {"gpus": "4", "topology": "numa"},
            GpuRequest(gpus=4, topology=Topology.NUMA),
            "4 same-NUMA GPUs",
        ),
        ({"gpu_memory": "24576MiB"}, GpuRequest(min_memory_mib=24576), "1 GPU >= 24 GiB"),
        ({"gpu_memory": "40G"}, GpuRequest(min_memory_mib=40960), "1 GPU >= 40 GiB"),
        ({"gpu_memory": "80GB"}, GpuRequest(min_memory_mib=81920), "1 GPU >= 80 GiB"),
        ({"gpu_memory": "1.5g"}, GpuRequest(min_memory_mib=1536), "1 GPU >= 1536 MiB"),
        ({"gpu_memory": "20000"}, GpuRequest(min_memory_mib=20000), "1 GPU >= 20000 MiB"),
        ({"gpu_fraction": "0.25"}, GpuRequest(gpu_milli=250), "0.25 GPU"),
        ({"gpu_fraction": "50%", "gpus": "1"}, GpuRequest(gpu_milli=500), "0.5 GPU"),
        ({"mig": "mig-1g.10gb"}, GpuRequest(mig_profile="1g.10gb"), "MIG 1g.10gb"),
        ({"mig": "3g.21gb"}, GpuRequest(mig_profile="3g.20gb"), "MIG 3g.20gb"),
        (
            {"gpu_product": "NVIDIA A100*| nvidia h100*"},
            GpuRequest(products=("NVIDIA A100*", "nvidia h100*")),
            "1 GPU (NVIDIA A100* | nvidia h100*)",
        ),
        ({"rebalance": "never"}, GpuRequest(rebalance=Rebalance.NEVER), "1 GPU, never moved"),
        (
            {"zone_prefer": "eu-1a,eu-1b", "zone_avoid": "eu-1c"},
            GpuRequest(zone_prefer=("eu-1a", "eu-1b"), zone_avoid=("eu-1c",)),
            "1 GPU, prefer zone eu-1a|eu-1b, avoid zone eu-1c",
        ),
    ],
)
def test_good(labels: dict[str, str], want: GpuRequest, text: str) -> None:
    got = req(**labels)
    assert got == want
    assert got.describe() == text


@pytest.mark.parametrize(
    ("labels", "key", "accepted"),
    [
        ({"gpus": "two"}, "swarmgpu.gpus", "whole number >= 1"),
        ({"gpus": "-1"}, "swarmgpu.gpus", "or 0 (no GPU)"),
        ({"gpus": "0", "gpu_fraction": "0.5"}, "swarmgpu.gpus", "no swarmgpu.gpu-fraction with"),
        ({"gpus": "0", "mig": "1g.10gb"}, "swarmgpu.gpus", "no swarmgpu.mig with"),
        ({"gpus": "0", "gpu_memory": "8GiB"}, "swarmgpu.gpus", "no swarmgpu.gpu-memory with"),
        ({"gpus": "0", "gpu_product": "A100*"}, "swarmgpu.gpus", "no swarmgpu.gpu-product"),
        ({"gpus": "0", "topology": "nvlink"}, "swarmgpu.gpus", "no swarmgpu.topology with"),
        ({"gpus": "1.5"}, "swarmgpu.gpus", "whole number >= 1"),
        ({"gpu": "2"}, "swarmgpu.gpu", "did you mean swarmgpu.gpus"),
        ({"gpu_fraction": "1.5"}, "swarmgpu.gpu-fraction", "strictly between 0 and 1"),
        ({"gpu_fraction": "0"}, "swarmgpu.gpu-fraction", "strictly between 0 and 1"),
        ({"gpu_fraction": "0.0001"}, "swarmgpu.gpu-fraction", "3 decimals"),
        ({"gpu_fraction": "half"}, "swarmgpu.gpu-fraction", "strictly between"),
        # What float() also took: other scripts' digits, '_', '%%', 4 decimals rounded.
        ({"gpu_fraction": "\uff10.\uff15"}, "swarmgpu.gpu-fraction", "3 decimals"),
        ({"gpu_fraction": "\u0660.\u0665"}, "swarmgpu.gpu-fraction", "3 decimals"),
        ({"gpu_fraction": "0.2_5"}, "swarmgpu.gpu-fraction", "3 decimals"),
        ({"gpu_fraction": "50%%"}, "swarmgpu.gpu-fraction", "3 decimals"),
        ({"gpu_fraction": "0.2504"}, "swarmgpu.gpu-fraction", "3 decimals"),
        ({"gpu_fraction": "0.5", "gpus": "2"}, "swarmgpu.gpu-fraction", "no swarmgpu.gpus"),
        ({"gpu_memory": "lots"}, "swarmgpu.gpu-memory", "binary units"),
        ({"gpu_memory": "0GiB"}, "swarmgpu.gpu-memory", "binary units"),
        ({"gpu_memory": "40PB"}, "swarmgpu.gpu-memory", "binary units"),
        ({"gpu_product": "A100||H100"}, "swarmgpu.gpu-product", "none empty"),
        ({"topology": "ring", "gpus": "2"}, "swarmgpu.topology", "any | nvlink | numa"),
        ({"topology": "nvlink"}, "swarmgpu.topology", "gpus of 2 or more"),
        ({"mig": "1g.9gb"}, "swarmgpu.mig", "1g.10gb"),
        ({"mig": "1g.10gb", "gpus": "2"}, "swarmgpu.mig", "one MIG device"),
        ({"mig": "1g.10gb", "gpu_fraction": "0.5"}, "swarmgpu.mig", "fixes the share"),
        ({"mig": "1g.10gb", "gpu_memory": "8GiB"}, "swarmgpu.mig", "fixes the share"),
        ({"rebalance": "sometimes"}, "swarmgpu.rebalance", "auto | never"),
        ({"zone_prefer": "a b"}, "swarmgpu.zone-prefer", "zone names"),
        ({"zone_prefer": "a", "zone_avoid": "a"}, "swarmgpu.zone-avoid", "both name a"),
    ],
)
def test_bad(labels: dict[str, str], key: str, accepted: str) -> None:
    with pytest.raises(RequestError) as info:
        req(**labels)
    err = info.value
    assert err.key == key
    assert accepted in err.accepted
    # The message names key, value and what is accepted.
    assert str(err) == f"{err.key}={err.value!r}: expected {err.accepted}"


def test_message_example() -> None:
    err = parse_all({"swarmgpu.gpus": "two"})
    assert isinstance(err, RequestError)
    assert str(err) == (
        "swarmgpu.gpus='two': expected a whole number >= 1 (e.g. swarmgpu.gpus=2), or 0 (no GPU)"
    )


def test_no_request_and_output_keys() -> None:
    assert parse_request({}) is None
    assert parse_request({"com.docker.stack.namespace": "app", "swarmgpugpus": "2"}) is None
    written = {
        "swarmgpu.devices.nodeabc": "GPU-1,GPU-2",
        "swarmgpu.placement": "{}",
        "swarmgpu.state.moved": "3",
        "swarmgpu.assigned": "x",
        "swarmgpu.managed": "true",
    }
    assert all(k.startswith(OUTPUT_LABEL_PREFIXES) for k in written)
    assert parse_request(written) is None
    assert parse_request({**written, "swarmgpu.gpus": "2"}) == GpuRequest(gpus=2)


def test_custom_prefix_and_zone_label() -> None:
    labels = {"acme.gpu.gpus": "2", "acme.gpu.devices.n1": "GPU-1", "swarmgpu.bogus": "x"}
    got = parse_request(labels, prefix="acme.gpu.", zone_label="failure-domain")
    assert got == GpuRequest(gpus=2, zone_label="failure-domain")


def test_parse_all_keeps_going() -> None:
    assert parse_all({}) is None
    assert parse_all({"swarmgpu.gpus": "3"}) == GpuRequest(gpus=3)
    assert isinstance(parse_all({"swarmgpu.gpus": "x"}), RequestError)


@pytest.mark.parametrize(
    ("patterns", "product", "ok"),
    [
        ("NVIDIA A100*", "NVIDIA A100-SXM4-80GB", True),
        ("NVIDIA A100*", "NVIDIA-A100-SXM4-80GB", True),  # GFD's spelling
        ("nvidia a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB", True),
        ("*H100*|*H200*", "NVIDIA H200", True),
        ("*H100*", "NVIDIA A100-SXM4-80GB", False),
        ("Tesla T4", "Tesla T4 ", True),
    ],
)
def test_product_match(patterns: str, product: str, ok: bool) -> None:
    got = parse_request({"swarmgpu.gpu-product": patterns})
    assert got is not None and got.matches_product(product) is ok


@pytest.mark.parametrize("value", ["24B", "24b", "24iB", "24 iB", "1024B"])
def test_memory_in_bytes_or_a_bare_ib_is_refused_not_read_as_mib(value: str) -> None:
    # Docker's --memory reads 24b as 24 bytes; the unit letter carried no prefix, and
    # a bare 'iB' is no unit: each was read as that many MiB.
    err = parse_all({"swarmgpu.gpu-memory": value})
    assert isinstance(err, RequestError) and err.key == "swarmgpu.gpu-memory"
    assert "binary units" in err.accepted


@pytest.mark.parametrize(
    ("key", "meant"),
    [("GPUS", "gpus"), ("GPU-MEMORY", "gpu-memory"), ("Zone_Prefer", "zone-prefer")],
)
def test_a_key_in_another_case_names_the_key_it_meant(key: str, meant: str) -> None:
    # Label keys are case-sensitive; the hint compared case too, so GPUS got none.
    err = parse_all({P + key: "2"})
    assert isinstance(err, RequestError) and err.key == P + key
    assert err.accepted.endswith(f"(did you mean {P}{meant}?)")


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("SwarmGPU.gpus", "swarmgpu.gpus"),
        ("SWARMGPU.GPU-MEMORY", "swarmgpu.gpu-memory"),
        ("swarmgpu-gpus", "swarmgpu.gpus"),
        ("swarmgpu_gpu_fraction", "swarmgpu.gpu-fraction"),
        ("swarmgpu:mig", "swarmgpu.mig"),
        ("swarmgpu/topology", "swarmgpu.topology"),
    ],
)
def test_a_request_key_under_a_misspelt_prefix_is_an_error_not_ignored(
    key: str, meant: str
) -> None:
    # Not under the prefix as written, the service was no request at all: placed by
    # Swarm with no GPU, and nothing said why.
    err = parse_all({key: "2"})
    assert isinstance(err, RequestError) and err.key == key
    assert err.accepted.endswith(f"(did you mean {meant}?)")
    assert request_labels({key: "2"}) == ((key, "2"),)


def test_a_label_only_like_the_prefix_is_still_no_request() -> None:
    labels = {"swarmgpugpus": "2", "SwarmGPU.team": "ml", "swarmgpu-owner": "me", "gpus": "2"}
    assert parse_all(labels) is None
    assert parse_all({"acme.gpu.gpus": "2"}) is None  # another prefix's key


@pytest.mark.parametrize("value", ["NVIDIA A100*,NVIDIA H100*", "A100, H100", "*A100*,"])
def test_products_separated_by_a_comma_are_refused_naming_the_bar(value: str) -> None:
    # No GPU product name has a comma: read as one pattern, it matched no GPU, and the
    # service waited for ever on a list the zone keys would have taken.
    err = parse_all({"swarmgpu.gpu-product": value})
    assert isinstance(err, RequestError) and err.key == "swarmgpu.gpu-product"
    assert "separated by |" in err.accepted and "not ," in err.accepted
