"""`swarmgpu render` warns where the stack's folder has a compose ``.env`` setting
variables the stack uses that the environment does not set: docker compose substitutes
them from it, `docker stack deploy` does not (moby#29133), so a stack moved to Swarm
runs its defaults. render still substitutes as docker/cli does. Before, ``image:
vllm/vllm-openai:${TAG:-latest}`` with ``TAG=v0.9.1`` in ``.env`` rendered ``latest``
without a word."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from swarmgpu.cli import main
from swarmgpu.manager.commands.render import check_stack

STACK = """\
services:
  llm:
    image: vllm/vllm-openai:${TAG:-latest}
    environment:
      HF_TOKEN: ${HF_TOKEN}
      PRICE: $$5
    deploy:
      labels:
        swarmgpu.gpus: "1"
"""


def dotenv(tmp_path: Path, text: str, environ: dict[str, str]) -> tuple[list[str], str]:
    (tmp_path / ".env").write_text(text)
    checked = check_stack(STACK, environ=environ, env_base=str(tmp_path))
    assert checked.errors == []
    image = checked.stack["services"]["llm"]["image"]
    return [n for n in checked.notes if ".env sets" in n], image


def test_a_dotenv_variable_the_shell_does_not_set_is_a_warning_naming_it(tmp_path: Path) -> None:
    (w,), image = dotenv(tmp_path, "# pinned\nTAG=v0.9.1\nexport HF_TOKEN=hf_x\nUNUSED=1\n", {})
    assert w == (
        "WARNING: .env sets HF_TOKEN, TAG, which the stack uses, but docker stack deploy "
        "reads no .env (docker compose does) and this environment does not set them: "
        'docker substitutes the stack\'s default, or ""; export them in the shell that '
        "runs render and docker stack deploy (set -a; . ./.env; set +a)"
    )
    assert image == "vllm/vllm-openai:latest"  # as docker substitutes it: .env unread


def test_what_the_shell_sets_or_the_stack_does_not_use_says_nothing(tmp_path: Path) -> None:
    assert dotenv(tmp_path, "TAG=v0.9.1\nHF_TOKEN=x\n", {"TAG": "v1", "HF_TOKEN": "y"}) == (
        [], "vllm/vllm-openai:v1")
    # $$5 is a $ of its own, not the variable 5; UNUSED is in no value
    assert dotenv(tmp_path, "UNUSED=1\n", {"HF_TOKEN": "y"})[0] == []


def test_many_names_are_cut(tmp_path: Path) -> None:
    names = [f"V{i:03}" for i in range(300)]
    (tmp_path / ".env").write_text("".join(f"{n}=1\n" for n in names))
    text = STACK.replace("PRICE: $$5", "PRICE: " + "".join(f"${{{n}}}" for n in names))
    checked = check_stack(text, environ={"HF_TOKEN": "y"}, env_base=str(tmp_path))
    (w,) = [n for n in checked.notes if ".env sets" in n]
    assert "V000, V001" in w and "V009 and 290 more, which the stack uses" in w, w


def test_no_dotenv_or_no_substitution_says_nothing(tmp_path: Path) -> None:
    checked = check_stack(STACK, environ={}, env_base=str(tmp_path))
    assert [n for n in checked.notes if ".env sets" in n] == []
    (tmp_path / ".env").write_text("TAG=v0.9.1\n")
    skipped = check_stack(STACK, environ=None, env_base=str(tmp_path))  # --skip-interpolation
    assert [n for n in skipped.notes if ".env sets" in n] == []


def test_render_check_prints_it_and_succeeds(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TAG=v0.9.1\n")
    f = tmp_path / "ai.yml"
    f.write_text(STACK)
    r = CliRunner().invoke(main, ["render", "--check", str(f)], env={"TAG": None, "HF_TOKEN": "y"})
    assert r.exit_code == 0, r.output
    assert "swarmgpu render: WARNING: .env sets TAG, which the stack uses" in r.output


def test_a_bare_environment_name_the_dotenv_alone_sets_is_a_warning(tmp_path: Path) -> None:
    """``environment: [HF_TOKEN]`` passes the variable through: docker compose takes its
    value from the ``.env`` too, `docker stack deploy` from its own environment alone
    (docker/cli's loader resolves it from os.Environ), so the container goes without."""
    (tmp_path / ".env").write_text("HF_TOKEN=hf_x\nMODEL=m\n")
    text = STACK.replace("      HF_TOKEN: ${HF_TOKEN}\n", "      HF_TOKEN:\n")
    checked = check_stack(text, environ={"TAG": "v1"}, env_base=str(tmp_path))
    (w,) = [n for n in checked.notes if ".env sets" in n]
    assert w.startswith("WARNING: .env sets HF_TOKEN, which the stack uses"), w
    assert "an environment entry without a value gets none" in w, w
    listed = STACK.replace("    environment:\n      HF_TOKEN: ${HF_TOKEN}\n      PRICE: $$5\n",
                           "    environment: [HF_TOKEN, MODEL=x]\n")
    checked = check_stack(listed, environ={"TAG": "v1"}, env_base=str(tmp_path))
    assert [n[:31] for n in checked.notes if ".env sets" in n] == [
        "WARNING: .env sets HF_TOKEN, wh"]
    # set in the shell: docker passes it too
    checked = check_stack(listed, environ={"TAG": "v1", "HF_TOKEN": "y"}, env_base=str(tmp_path))
    assert [n for n in checked.notes if ".env sets" in n] == []


def test_a_yaml_style_dotenv_line_sets_its_variable_too(tmp_path: Path) -> None:
    """compose's .env reader (compose-go dotenv: "library also supports yaml-style value
    declaration") takes ``TAG: v0.9.1`` as ``TAG=v0.9.1``; a value's own ``:`` after
    the ``=`` is the value's."""
    (w,), _ = dotenv(tmp_path, "TAG: v0.9.1\nexport HF_TOKEN: x\nURL=http://h:80\n", {})
    assert w.startswith("WARNING: .env sets HF_TOKEN, TAG, which the stack uses"), w
