"""Every link and section reference in README.md and docs/*.md leads somewhere: a
relative link to a file that exists and, with ``#anchor``, to a heading of it (GitHub's
anchor for it); a section named in quotes after a page (`docs/deploy.md, "Monitoring"`)
to a heading, a bold lead-in or a list item of that page that starts so."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A page, then one or more quoted section names ("A", "B" and "C").
SECTION_REF = re.compile(
    r"(docs/[\w-]+\.md|README(?:\.md)?)((?:(?:,|:|;| and| or| section)?\s*\"[^\"]{3,90}\")+)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", _prose(page.read_text()), re.M):
        a = _anchor(m.group(1))
        out.add(f"{a}-{seen[a]}" if a in seen else a)
        seen[a] = seen.get(a, 0) + 1
    return out


def _starts(page: Path) -> list[str]:
    """How each heading, list item and paragraph of ``page`` starts, normalised."""
    parts = re.split(r"\n\s*\n|\n(?=\s*(?:[-*] |#|\*\*|\d+\. ))", page.read_text())
    return [_norm(re.sub(r"^\s*(?:#{1,6}\s+|[-*]\s+|\d+\.\s+)*", "", p)[:300])
            for p in parts]


def _norm(text: str) -> str:
    return " ".join(text.replace("`", "").replace("*", "").split()).lower()


def test_every_relative_link_reaches_a_file_and_its_anchor() -> None:
    broken = []
    for page in PAGES:
        for m in LINK.finditer(_prose(page.read_text())):
            target, _, anchor = m.group(1).partition("#")
            if re.match(r"[a-z]+:", target):
                continue
            path = (page.parent / target) if target else page
            if not path.exists():
                broken.append(f"{page.name}: {m.group(1)} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.name}: {m.group(1)} (no such heading)")
    assert not broken, broken


def test_every_section_named_in_quotes_after_a_page_is_in_that_page() -> None:
    starts = {p.relative_to(REPO).as_posix(): _starts(p) for p in PAGES}
    missing = []
    for page in PAGES:
        for m in SECTION_REF.finditer(" ".join(page.read_text().split())):
            doc = "README.md" if m.group(1).startswith("README") else m.group(1)
            if doc not in starts:
                missing.append(f"{page.name}: {doc} (no such page)")
                continue
            for name in re.findall(r"\"([^\"]+)\"", m.group(2)):
                if not any(s.startswith(_norm(name)) for s in starts[doc]):
                    missing.append(f'{page.name}: {doc} "{name}"')
    assert not missing, missing


def test_no_page_installs_swarmgpu_from_a_package_index() -> None:
    """Before: docs/deploy.md's GPU-node step said `pip install swarmgpu`; swarmgpu is
    installed from a clone (README, Install), not from whatever an index calls so."""
    found = [f"{page.name}: {m.group(0)}" for page in PAGES
             for m in re.finditer(r"pip\s+install\s+swarmgpu(?![\w\[-])", page.read_text())]
    assert not found, found


def _strings(module: Path) -> list[str]:
    """The string constants of ``module`` (implicit concatenation joined, as Python does),
    f-strings' literal parts too: the messages and help texts a reader is shown."""
    tree = ast.parse(module.read_text(), str(module))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_every_page_and_section_the_code_names_exists() -> None:
    """A fix line or a --help text sends the reader to `docs/X.md, "Section"`: both exist."""
    starts = {p.relative_to(REPO).as_posix(): _starts(p) for p in PAGES}
    missing = []
    for module in sorted((REPO / "swarmgpu").rglob("*.py")):
        for text in _strings(module):
            text = " ".join(text.split())
            for page in re.findall(r"docs/[\w-]+\.md", text):
                if page not in starts:
                    missing.append(f"{module.name}: {page} (no such page)")
            for m in SECTION_REF.finditer(text):
                doc = "README.md" if m.group(1).startswith("README") else m.group(1)
                missing += [f'{module.name}: {doc} "{name}"'
                            for name in re.findall(r"\"([^\"]+)\"", m.group(2))
                            if doc in starts and not any(
                                s.startswith(_norm(name)) for s in starts[doc])]
    assert not missing, missing
