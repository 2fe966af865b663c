"""MIG profile names: the known profiles, per GPU model, and the one spelling of each.

Profile names come in three spellings that must meet: nvidia-smi's ``3g.20gb``, the
``mig-3g.20gb`` / ``nvidia.com/mig-3g.20gb`` resource style, and old GPU feature
discovery labels that rounded memory in decimal GB (``mig-3g.21gb`` for the A100-40GB's
3g.20gb, 20096 MiB). Requests, placement and node labels all use ``canonical_profile``.

A compute instance smaller than its GPU instance is named as the MIG user guide and
``nvidia-smi -L`` name it: its compute slices before the instance's profile,
``1c.3g.20gb`` (one of a 3g.20gb instance's three). It is its own profile: a request
for ``3g.20gb`` never gets one. It shares its instance's memory with the instance's
other compute instances, and counts its own compute slices (``compute_share``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from swarmgpu.core.commalist import ASCII_BLANKS, non_ascii
from swarmgpu.core.peertext import peer_text

# Every profile in NVIDIA/mig-parted's default config (config-default.yaml), i.e. every
# GPU-instance profile of A30, A100, H100, H100 NVL, H200, GH200, B200/B300, GB200/GB300
# and RTX PRO 6000 Blackwell.
_KNOWN_TEXT = """
    1g.5gb 1g.5gb+me 2g.10gb 3g.20gb 4g.20gb 7g.40gb
    1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb
    1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb
    1g.12gb 1g.12gb+me 1g.24gb 1g.24gb+me 2g.24gb 3g.47gb 4g.47gb 7g.94gb
    3g.48gb 4g.48gb 7g.96gb
    1g.18gb 1g.18gb+me 1g.35gb 1g.35gb+me 2g.35gb 3g.71gb 4g.71gb 7g.141gb
    1g.36gb 2g.36gb 3g.72gb 4g.72gb 7g.144gb
    1g.23gb 1g.23gb+me 1g.45gb 1g.47gb 2g.45gb 2g.47gb 3g.90gb 3g.93gb 4g.90gb 4g.93gb
    7g.180gb 7g.186gb
    1g.34gb 1g.34gb+me 1g.67gb 1g.70gb 2g.67gb 2g.70gb 3g.95gb 3g.135gb 3g.139gb
    4g.95gb 4g.135gb 4g.139gb 7g.189gb 7g.269gb 7g.278gb
    1g.24gb+gfx 1g.24gb+me.all 1g.24gb-me 2g.48gb 2g.48gb+gfx 2g.48gb+me.all 2g.48gb-me
    4g.96gb 4g.96gb+gfx
"""
_KNOWN: frozenset[str] = frozenset(_KNOWN_TEXT.split())
# The profiles of the 4-slice GPUs (A30, RTX PRO 6000 Blackwell); every other is one of
# 7 slices. Plain 1g.24gb is on both H100 NVL and RTX PRO 6000: by name alone, taken as
# the H100 NVL's (1/7; on an RTX PRO 6000 it is 1/4): ``compute_share`` reads the GPU's
# model first where it is known.
_FOUR_SLICES_TEXT = """
    1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb
    1g.24gb+gfx 1g.24gb+me.all 1g.24gb-me 2g.48gb 2g.48gb+gfx 2g.48gb+me.all 2g.48gb-me
    4g.96gb 4g.96gb+gfx
"""
_OF_FOUR_SLICES: frozenset[str] = frozenset(_FOUR_SLICES_TEXT.split())

# Compute slices of a whole GPU, per MIG-capable GPU model (matched on the product name).
_SLICES_BY_PRODUCT: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\ba30\b|rtx[ -]?pro[ -]?6000", re.IGNORECASE), 4),
    (
        re.compile(
            r"\b(?:a100|a800|h100|h800|h200|h20|gh200|b200|b300|gb200|gb300)\b", re.IGNORECASE
        ),
        7,
    ),
)

# Profiles per GPU model, for the models whose MIG layouts are documented in the MIG user
# guide and mig-parted (matched on the product name, spaces and dashes alike). The model
# is a whole word: "h200" alone took the GH200 (96 or 144 GB: other profiles) for an H200.
_BY_PRODUCT: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = tuple(
    (re.compile(pat, re.IGNORECASE), frozenset(profiles.split()))
    for pat, profiles in (
        (r"\ba[18]00\b.*40gb", "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb"),
        (
            r"\b(a[18]00|h[18]00)\b.*80gb",
            "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
        ),
        (r"\bh[18]00\b.*nvl", "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb"),
        (r"\bh200\b", "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb"),
        (r"\ba30\b", "1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb"),
    )
)

_PROFILE_RE = re.compile(r"^(?P<g>[1-8])g\.(?P<mem>\d+)gb(?P<suffix>(?:[+-][a-z.]+)?)$",
                         re.ASCII)  # (\d takes Arabic-Indic digits, which int() reads)
_CI_RE = re.compile(r"^(?P<c>[1-8])c\.(?P<gi>.*)$")  # a compute instance: 1c.3g.20gb
# re.ASCII: case-blind in Unicode, a dotless i (U+0131) or a dotted I (U+0130) is an i
_PREFIX_RE = re.compile(r"^(?:nvidia\.com/)?(?:mig[- ])?", re.IGNORECASE | re.ASCII)
_GIB_TO_GB = 1.073741824


class MigProfileError(ValueError):
    """A MIG profile name that is malformed or not a known GPU-instance profile."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint  # what would be accepted instead, for callers' own messages


def known_profiles() -> tuple[str, ...]:
    """Every known MIG profile, sorted by compute slices then memory."""
    return tuple(sorted(_KNOWN, key=_sort_key))


def profiles_for_product(product: str) -> frozenset[str] | None:
    """Valid profiles of a GPU model (``NVIDIA A100-SXM4-40GB``...), None when unknown."""
    for pattern, profiles in _BY_PRODUCT:
        if pattern.search(product):
            return profiles
    return None


def normalize_profile(name: str) -> str:
    """``MIG-3g.20gb``, ``nvidia.com/mig-3g.21gb``, ``3G.20GB`` -> ``3g.20gb``.

    A compute instance's (``1C.3g.21gb`` -> ``1c.3g.20gb``): its instance's part so, and
    as many compute slices as the instance's is the instance (``3c.3g.20gb``: nvidia-smi
    names it ``3g.20gb``). Raise MigProfileError naming the input and what is accepted.
    """
    raw = name
    # ASCII blanks only, as every label value is trimmed: an NBSP is no profile's
    name = name.strip(ASCII_BLANKS)
    if odd := non_ascii(raw[:64]):
        # Named: shown, the lookalike reads as the profile meant (a dotless i in mig-).
        hint = "the profile typed in ASCII, such as nvidia.com/mig-1g.10gb"
        raise MigProfileError(f"MIG profile {peer_text(raw, 64)!r} has characters that "
                              f"only look like ASCII ones ({odd}); retype it", hint)
    name = _PREFIX_RE.sub("", name).lower()
    ci = _CI_RE.match(name)
    if ci is None:
        return _instance_profile(name, raw)
    gi = _instance_profile(ci["gi"], raw)
    c, g = int(ci["c"]), int(gi.split("g.", 1)[0])
    if c == g:
        return gi
    if c > g:
        hint = f"at most {g - 1}c of a {g}g instance (e.g. 1c.{gi}), or {gi} itself"
        raise MigProfileError(f"MIG profile {raw!r} has more compute slices than its GPU "
                              f"instance; expected {hint}", hint)
    return f"{c}c.{gi}"


def _instance_profile(name: str, raw: str) -> str:
    """A GPU-instance profile's one spelling (``normalize_profile``), ``name`` prefixless
    and lower-case already."""
    m = _PROFILE_RE.match(name)
    if not m:
        hint = ("<slices>g.<memory>gb such as 1g.10gb or 3g.40gb (a mig- prefix is fine), "
                "or a compute instance of one such as 1c.3g.40gb")
        raise MigProfileError(f"MIG profile {raw!r} is malformed; expected {hint}", hint)
    if name in _KNOWN:
        return name
    # Old GPU feature discovery labels give memory in decimal GB, rounded from MiB:
    # 3g.20gb (20096 MiB) became mig-3g.21gb. Map back when exactly one profile fits.
    g, mem, suffix = m["g"], int(m["mem"]), m["suffix"]
    matches = [
        p
        for p in _KNOWN
        if (pm := _PROFILE_RE.match(p)) is not None
        and pm["g"] == g
        and pm["suffix"] == suffix
        and round(int(pm["mem"]) * _GIB_TO_GB) in (mem, mem + 1)
    ]
    if len(matches) == 1:
        return matches[0]
    near = sorted((p for p in _KNOWN if p.startswith(f"{g}g.")), key=_sort_key)
    hint = f"a known profile; the {g}g ones are {', '.join(near) or 'none'}"
    raise MigProfileError(f"MIG profile {raw!r} is not known; expected {hint}", hint)


def _sort_key(profile: str) -> tuple[int, int, str]:
    m = _PROFILE_RE.match(profile)
    return (int(m["g"]), int(m["mem"]), m["suffix"]) if m else (0, 0, profile)


def gpu_slices(product: str) -> int | None:
    """Compute slices of a whole GPU of this model (``NVIDIA A30``: 4), None unknown."""
    return next((n for pattern, n in _SLICES_BY_PRODUCT if pattern.search(product)), None)


def compute_share(profile: str, product: str | None = None) -> tuple[int, int]:
    """(compute slices of ``profile``, of its whole GPU): ``3g.40gb`` is (3, 7), A30's
    ``2g.12gb`` (2, 4). The whole GPU's slices are its model's (``product``, the GPU the
    device is on) where known; else the profile's name says (``_OF_FOUR_SLICES``), a
    name newer than the table taken as a 7-slice GPU's."""
    name = canonical_profile(profile)
    ci = _CI_RE.match(name)
    gi = ci["gi"] if ci else name  # a compute instance's: its own slices of its instance's
    m = _PROFILE_RE.match(gi)
    total = (gpu_slices(product) if product else None) or (4 if gi in _OF_FOUR_SLICES else 7)
    slices = int(ci["c"]) if ci and m else int(m["g"]) if m else total
    return min(slices, total), total


def canonical_profile(profile: str) -> str:
    """A device's profile as a request names it (``normalize_profile``), or as it is."""
    try:
        return normalize_profile(profile)
    except MigProfileError:
        return profile.strip().lower()  # a profile newer than our table still matches itself


MAX_MODELS_NAMED = 3  # GPU models a "not offered" reason lists, each with its profiles


def not_offered(profile: str, products: Iterable[str]) -> str | None:
    """Why ``profile`` can never be free on GPUs of these models (each model's profiles
    named, at most MAX_MODELS_NAMED), or None when one of them may have it (or a model
    unknown here might)."""
    offers: dict[str, frozenset[str]] = {}
    ci = _CI_RE.match(profile)
    instance = ci["gi"] if ci else profile  # a compute instance: where its instance may be
    for product in sorted(set(products)):
        got = profiles_for_product(product)
        if got is None or instance in got:
            return None
        offers[product] = got
    if not offers:
        return None
    named = [
        f"{peer_text(p, 48)} offers {', '.join(sorted(o, key=_sort_key))}"
        for p, o in list(offers.items())[:MAX_MODELS_NAMED]
    ]
    more = f"; and {len(offers) - len(named)} more model(s)" if len(offers) > len(named) else ""
    return (
        f"no GPU model in the cluster has {profile} ({'; '.join(named)}{more}): ask "
        "for one of those, or a gpu-product that has it"
    )
