"""The README and the docs site (issue 28): what `mkdocs build --strict` does not check, read from the files.

The README's code blocks fit a 120-column terminal; every page under docs/ is in the nav of mkdocs.yml and
every nav entry is a page; each link from the README to a page (and a heading of it) lands.  MkDocs itself
is not needed: CI's `mkdocs build --strict` checks the links between the pages.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line inside a fenced block or an indented block of Markdown text."""
    out: list[tuple[int, str]] = []
    fenced = False
    prev_blank = True
    in_indented = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prev_blank = False
            continue
        if fenced:
            out.append((no, line))
            continue
        if line.startswith("    ") and (prev_blank or in_indented):
            in_indented = True
            out.append((no, line))
        elif line.strip():
            in_indented = False
        prev_blank = not line.strip()
    return out


def _nav_pages(nav) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def _slug(heading: str) -> str:
    """The anchor of a heading, as MkDocs' toc extension (and GitHub, for these headings) makes it."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M)}


def test_every_line_of_the_readme_code_blocks_fits_120_columns():
    lines = _code_lines(README.read_text(encoding="utf-8"))
    assert lines, "no code block found in README.md"
    too_wide = [f"README.md:{no}: {len(line)} columns" for no, line in lines if len(line) > 120]
    assert not too_wide, "\n".join(too_wide)


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs"
    nav = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_the_readme_links_to_docs_pages_and_headings_that_exist():
    links = re.findall(r"\]\((docs/[^)\s]+)\)", README.read_text(encoding="utf-8"))
    assert links, "the README links to no docs page"
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), f"README.md links to {link}: no such file"
        if anchor:
            assert anchor in _anchors(target), f"README.md links to {link}: no such heading in {path}"


def test_the_lock_file_beside_a_saved_baseline_is_named_in_the_baselines_page_and_the_ci_guide():
    # issue 49, item 9: a user who commits baselines learns that NAME.json.lock stays beside the file, and not to
    # commit it
    root = Path(__file__).resolve().parents[1]
    for page in ("docs/baselines.md", "ci/README.md"):
        text = " ".join((root / page).read_text().split())
        assert "NAME.json.lock" in text and "*.json.lock" in text and ".gitignore" in text, page
