"""Variables in a stack file are substituted as `docker stack deploy` substitutes them.

Each expectation is docker/cli's rule, named where it comes from: template.go is
cli/compose/template/template.go, interpolation.go cli/compose/interpolation/
interpolation.go, loader/interpolate.go cli/compose/loader/interpolate.go.
"""

from __future__ import annotations

import pytest

from swarmgpu.core.yamlfile import MAX_TEXT
from swarmgpu.manager.commands.interpolation import TemplateError, interpolate, substitute

ENV = {"ZONE": "eu", "EMPTY": "", "N": "3", "PRICE": "$5"}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # template.go defaultPattern: "escaped" ($$), "named" ($NAME), "braced" (${NAME})
        ("a$$b", "a$b"),
        ("$$ZONE", "$ZONE"),
        ("zone == ${ZONE}", "zone == eu"),
        ("zone == $ZONE", "zone == eu"),
        ("$ZONE/x", "eu/x"),
        ("${ZONE}_x", "eu_x"),
        ("$ZONE_x", ""),  # the name is ZONE_x, unset
        # template.go softDefault (":-": unset or empty), hardDefault ("-": unset)
        ("${UNSET:-2}", "2"),
        ("${EMPTY:-2}", "2"),
        ("${ZONE:-2}", "eu"),
        ("${UNSET-2}", "2"),
        ("${EMPTY-2}", ""),
        ("${UNSET:-}", ""),
        # unbraced, the default runs to the end of the value (subst's [^}]*)
        ("$UNSET-a b", "a b"),
        ("$ZONE-a b", "eu"),
        ("${UNSET:-{x}}", "{x}"),  # [^}]* stops at the first }
        # template.go required / requiredNonEmpty, when set
        ("${ZONE:?say}", "eu"),
        ("${EMPTY?say}", ""),
        # the value's own $ is not substituted again (ReplaceAllStringFunc)
        ("${PRICE}", "$5"),
        # softDefault is tried first wherever ":-" is: the name is "A?x", unset
        ("${A?x:-y}", "y"),
        # hardDefault before required: "-" in the message makes "A:?must" a name
        ("${A:?must-be-set}", "be-set"),
    ],
)
def test_a_value_is_substituted_as_docker_cli_substitutes_it(text: str, want: str) -> None:
    assert substitute(text, ENV)[0] == want


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("${UNSET:?say}", "UNSET is not set"),  # template.go requiredNonEmpty
        ("${EMPTY:?say}", "EMPTY is empty"),
        ("${UNSET?say}", "UNSET is not set"),  # template.go required
    ],
)
def test_a_required_variable_missing_is_an_error_naming_it(text: str, names: str) -> None:
    with pytest.raises(TemplateError, match=names):
        substitute(text, ENV)


@pytest.mark.parametrize(
    "text",
    [
        "$5",  # template.go: "invalid" matches any other $
        "cost $",
        "${}",
        "${ZONE",
        "${1A}",
        # template.go has no :+ (docker compose's compose-go has): invalid
        "${ZONE:+x}",
        "${ZONE+x}",
        # docker drops these errors when a later variable in the value is substituted
        # (substituteWith's err is overwritten): render refuses them either way
        "$5 ${ZONE}",
        "${UNSET:?say} ${ZONE}",
    ],
)
def test_an_invalid_template_is_refused(text: str) -> None:
    with pytest.raises(TemplateError, match="docker stack deploy"):
        substitute(text, ENV)


def test_an_unset_variable_is_empty_with_a_warning_naming_it() -> None:
    got, warnings = substitute("node.labels.zone == ${ZONE2}", ENV)
    assert got == "node.labels.zone == " and len(warnings) == 1 and "ZONE2" in warnings[0]


def test_the_whole_file_is_substituted_values_only_and_cast_where_docker_casts() -> None:
    stack = {
        "version": "${V}",  # read before substitution (loader.go Load)
        "services": {
            "a": {
                "image": "x:${N}",
                "deploy": {
                    "replicas": "${N}",  # loader/interpolate.go: toInt
                    "labels": {"${ZONE}": "${ZONE}"},  # keys are not substituted
                    "update_config": {"max_failure_ratio": "0.${N}"},  # toFloat
                },
                "read_only": "${UNSET:-yes}",  # toBoolean
                "healthcheck": {"retries": "3"},  # unchanged: no cast (interpolation.go)
            },
            "b.c": {"deploy": {"replicas": "${N}"}},  # "b.c" splits the path: no cast
        },
        "x-any": ["$$"],
    }
    got, errors, warnings = interpolate(stack, ENV)
    assert errors == [] and warnings == []
    a = got["services"]["a"]
    assert got["version"] == "${V}" and got["x-any"] == ["$"]
    assert a["image"] == "x:3" and a["deploy"]["replicas"] == 3
    assert a["deploy"]["labels"] == {"${ZONE}": "eu"}
    assert a["deploy"]["update_config"]["max_failure_ratio"] == 0.3
    assert a["read_only"] is True and a["healthcheck"]["retries"] == "3"
    assert got["services"]["b.c"]["deploy"]["replicas"] == "3"


@pytest.mark.parametrize(
    ("value", "cast"),
    [
        ("${ZONE}", "whole number"),  # strconv.Atoi
        ("${UNSET}", "whole number"),
        ("1_0${EMPTY}", "whole number"),
        ("9223372036854775808${EMPTY}", "whole number"),  # past int64
    ],
)
def test_a_value_docker_cannot_cast_is_an_error_naming_its_path(value: str, cast: str) -> None:
    stack = {"services": {"a": {"deploy": {"replicas": value}}}}
    _, errors, _ = interpolate(stack, ENV, {("services", "a", "deploy", "replicas"): 7})
    assert len(errors) == 1 and errors[0].startswith("services.a.deploy.replicas (line 7): ")
    assert cast in errors[0]


def test_a_file_that_substitutes_past_the_text_limit_is_one_error_not_gigabytes() -> None:
    # 2,000 values of 1,000 "$P" each, P 10 characters: 20 MB from 4 MB of file.
    stack = {"services": {"a": {"command": ["$P" * 1000] * 2000}}}
    _, errors, _ = interpolate(stack, {"P": "x" * 10})
    assert len(errors) == 1 and f"longer than {MAX_TEXT:,} characters" in errors[0]
    assert errors[0].startswith("services.a.command[")
