"""A request label that only looks like swarmgpu's, and values that only read as its
words through Unicode's case rules or its blanks: each is refused, named, never taken
as another request (or as none, the service run with no GPU and nothing said)."""

from __future__ import annotations

import textwrap

import pytest

from swarmgpu.core.config import parse_priority_classes
from swarmgpu.core.tenants import parse_tenants
from swarmgpu.manager.commands.render import check_stack
from swarmgpu.manager.services.requests import RequestError, parse_all, request_labels

KELVIN = "\u212a"  # KELVIN SIGN: its lower case is the ASCII 'k'


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("sw\u0430rmgpu.gpus", "swarmgpu.gpus"),  # CYRILLIC SMALL LETTER A
        ("\uff53warmgpu.gpus", "swarmgpu.gpus"),  # FULLWIDTH LATIN SMALL LETTER S
        ("swarmg\u0440u.mig", "swarmgpu.mig"),  # CYRILLIC SMALL LETTER ER
        ("\u0455w\u0430rmgpu.gpu-memory", "swarmgpu.gpu-memory"),  # two of them
    ],
)
def test_a_request_key_under_a_lookalike_prefix_is_an_error_not_ignored(
    key: str, meant: str
) -> None:
    # Not under the prefix byte for byte, it was no request at all: the service placed
    # by Swarm with no GPU, and nothing said why.
    err = parse_all({key: "2"})
    assert isinstance(err, RequestError) and err.key == key
    assert "ASCII" in err.accepted and f"did you mean {meant}?" in err.accepted
    assert request_labels({key: "2"}) == ((key, "2"),)


def test_a_lookalike_label_that_is_no_request_key_stays_the_tenants() -> None:
    # Another label that merely starts like the prefix is not swarmgpu's to judge.
    assert parse_all({"sw\u0430rmgpu.team": "ml", "caf\u00e9.gpus": "2"}) is None


def test_render_check_names_a_lookalike_prefix() -> None:
    text = textwrap.dedent("""\
        services:
          web:
            image: nginx
            deploy:
              labels:
                sw\u0430rmgpu.gpus: "2"
        """)
    errors = check_stack(text, stack_name="ai").errors
    assert any("sw\u0430rmgpu.gpus" in e and "ASCII" in e for e in errors), errors


@pytest.mark.parametrize(
    "labels",
    [
        {"swarmgpu.gpus": "2", "swarmgpu.topology": f"NVLIN{KELVIN}"},
        {"swarmgpu.gpus": "2", "swarmgpu.topology": f"nvlin{KELVIN}"},
        {"swarmgpu.priority": f"PEA{KELVIN}"},
    ],
)
def test_a_value_that_is_a_word_only_by_unicode_case_folding_is_refused(
    labels: dict[str, str],
) -> None:
    # Python's lower() makes the Kelvin sign an ASCII k: NVLINK written with it was
    # read as nvlink, a class's name with it as that class.
    err = parse_all(labels, classes={"peak": 50})
    assert isinstance(err, RequestError), err


def test_ascii_case_is_still_folded_in_a_value() -> None:
    got = parse_all({"swarmgpu.gpus": "2", "swarmgpu.topology": "NVLINK",
                     "swarmgpu.preemptible": "TRUE", "swarmgpu.priority": "PEAK"},
                    classes={"peak": 50})
    assert not isinstance(got, RequestError) and got is not None
    assert (got.topology, got.preemptible, got.priority) == ("nvlink", True, 50)


@pytest.mark.parametrize("value", ["2\u3000", "\u00a02", "\x1c2", "2\x1f", "2\u2028", "2\x85"])
def test_a_value_padded_with_a_unicode_blank_is_refused(value: str) -> None:
    # Python's strip() takes these as blanks (the file separators \x1c-\x1f among
    # them): gpus=2 read from a value no one sees as 2.
    err = parse_all({"swarmgpu.gpus": value})
    assert isinstance(err, RequestError) and err.key == "swarmgpu.gpus"


def test_ascii_blanks_around_a_value_are_still_trimmed() -> None:
    got = parse_all({"swarmgpu.gpus": " 2\t"})
    assert not isinstance(got, RequestError) and got is not None and got.gpus == 2


def test_a_priority_class_named_with_a_kelvin_sign_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not printable ASCII \(U\+212A at 4\)"):
        parse_priority_classes(f"PEA{KELVIN}=50")


@pytest.mark.parametrize("text", ["x=--5", "x=-", "x=5-", "x=+5"])
def test_a_priority_class_number_that_is_no_integer_is_named(text: str) -> None:
    # "--5" passed the digit check and reached int(), whose own words named no class.
    with pytest.raises(ValueError, match=r"is not name=integer"):
        parse_priority_classes(text)


def test_a_tenant_ceiling_named_with_a_kelvin_sign_is_no_class() -> None:
    raw = {"team-a": {"stacks": ["a*"], "max_priority": f"PEA{KELVIN}"}}
    _, _, errors = parse_tenants(raw, None, {"peak": 50}, 10)
    assert any("tenants.team-a.max_priority" in e for e in errors), errors


@pytest.mark.parametrize("key", [" swarmgpu.priority", "\tswarmgpu.priority", " SwarmGPU.priority"])
def test_a_request_key_after_a_blank_is_an_error_not_ignored(key: str) -> None:
    # docker keeps the blank (a list item is split at '=' and nothing trimmed), so the
    # label was no request key: the priority asked for was dropped without a word. A
    # blank after the key was refused already (an unknown key under the prefix).
    err = parse_all({"swarmgpu.gpus": "1", key: "5"})
    assert isinstance(err, RequestError) and err.key == key
    assert "blank" in err.accepted and "did you mean swarmgpu.priority?" in err.accepted
    assert (key, "5") in request_labels({key: "5"})


def test_render_check_names_a_request_key_after_a_blank() -> None:
    text = ('services:\n  web:\n    image: nginx\n    deploy:\n'
            '      labels: ["swarmgpu.gpus=1", " swarmgpu.priority=5"]\n')
    errors = check_stack(text, stack_name="ai").errors
    assert any("' swarmgpu.priority'" in e or " swarmgpu.priority=" in e for e in errors), errors


@pytest.mark.parametrize(
    "key", ["swarm\u200bgpu.gpus", "\ufeffswarmgpu.gpus", "swarmgpu.\u200dgpus"]
)
def test_a_request_key_with_an_invisible_character_is_an_error_not_ignored(key: str) -> None:
    # A zero-width character no one sees in the stack file made the label no request.
    err = parse_all({key: "2"})
    assert isinstance(err, RequestError) and err.key == key
    assert "invisible" in err.accepted and "did you mean swarmgpu.gpus?" in err.accepted


@pytest.mark.parametrize(
    "text", ["\u00a0batch=0", "batch\u00a0=0", "batch=0\u3000", "x=1,\x1cbatch=0"])
def test_a_priority_class_with_a_unicode_blank_around_it_is_refused_naming_it(text: str) -> None:
    # str.strip() took NBSP, U+3000 and \x1c-\x1f away unseen, where a label's value
    # and the rest of the config trim ASCII blanks only.
    with pytest.raises(ValueError, match=r"U\+(00A0|3000|001C) at "):
        parse_priority_classes(text)


def test_a_priority_class_with_ascii_blanks_around_it_is_read() -> None:
    assert parse_priority_classes(" batch = 0 ,\tcritical=1000\n") == {"batch": 0,
                                                                     "critical": 1000}


@pytest.mark.parametrize("value", ["\u00a01g.10gb", "1g.10gb\u3000", "1g.10gb\x1c"])
def test_a_mig_label_with_a_unicode_blank_around_it_is_refused(value: str) -> None:
    # Every other label value is trimmed of ASCII blanks only; the profile's own strip()
    # took NBSP and U+3000 too, so this one alone read what no one could see.
    err = parse_all({"swarmgpu.mig": value})
    assert isinstance(err, RequestError) and err.key == "swarmgpu.mig", err
    assert repr(value)[1:-1] in str(err)


def test_a_mig_label_with_ascii_blanks_around_it_is_read() -> None:
    got = parse_all({"swarmgpu.mig": " 1g.10gb\t"})
    assert not isinstance(got, RequestError) and got.mig_profile == "1g.10gb"


def test_a_mig_label_with_arabic_indic_digits_is_refused() -> None:
    # \d took U+0660-U+0669 and int() read them: 1g.<U+0661 U+0660>gb was placed as 1g.10gb.
    err = parse_all({"swarmgpu.mig": "1g.\u0661\u0660gb"})
    assert isinstance(err, RequestError) and err.key == "swarmgpu.mig", err


@pytest.mark.parametrize(
    ("key", "named"),
    [
        ("swarmgpu.g\u0440us", "U+0440 at 2 after swarmgpu."),  # CYRILLIC ER in the key
        ("swarmgpu.\uff47pus", "U+FF47 at 1 after swarmgpu."),  # FULLWIDTH g
        ("swarmgpu.gpus ", "a blank"),  # docker keeps it: the key is no request key
        (" swarmgpu.gpus", "blank"),  # (before the prefix: said so already)
    ],
)
def test_a_request_key_that_only_looks_known_names_what_differs(key: str, named: str
                                                                ) -> None:
    # Shown in the message, the key reads as the one it suggests: the error names the
    # character (or the blank) an operator cannot see, so they know what to retype.
    err = parse_all({key: "2"})
    assert isinstance(err, RequestError) and err.key == key
    assert named in err.accepted, err.accepted
