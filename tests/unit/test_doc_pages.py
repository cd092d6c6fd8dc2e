"""README is the front door and docs/ holds the reference: every relative link in them reaches an
existing file and, with a ``#fragment``, a heading of that file (GitHub's anchor for it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "dev").glob("*.md")),
    ROOT / "sim" / "README.md",
    ROOT / "bench" / "README.md",
]
#: Pages for users (README, docs/): none tells the project's own history. docs/dev/ is for
#: contributors; docs/real-tools.md is the ledger of sources the doubles follow.
USER_PAGES = [
    ROOT / "README.md",
    *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "real-tools.md"),
]
HISTORY = re.compile(r"\bissue \d+|\bissue #\d+|\bthis branch\b|\bDESIGN\b|\.\./shared/", re.I)
#: Where code and inputs point users at a page: comments, docstrings, messages, .in files.
CODE = [
    *sorted((ROOT / "src").rglob("*.py")),
    *sorted((ROOT / "locks").glob("*.in")),
    *sorted((ROOT / "templates").glob("*")),
    *sorted((ROOT / "group_data").glob("*.py")),
    *sorted((ROOT / "tasks").glob("*.py")),
    *(ROOT / name for name in ("deploy.py", "verify.py", "inventory.py")),
]
REFERENCE = re.compile(r"(?<![\w/.])((?:docs/[\w./-]+\.md|README\.md))(?:#([\w-]+))?")
PROSE_REFERENCE = re.compile(r"\bREADME(?:\.md)?,\s+\"?[A-Z]")
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
INDENTED = re.compile(r"(?:^\n)(?:^(?: {4}|\t).*\n?)+", re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links.

    >>> prose("see [a](b.md) and `[c](d)`")
    'see [a](b.md) and '
    """
    return INLINE_CODE.sub("", INDENTED.sub("\n", FENCE.sub("", text)))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.

    >>> anchor("Supported Proxmox VE versions")
    'supported-proxmox-ve-versions'
    >>> anchor("Container hosts (`@pct`)")
    'container-hosts-pct'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor of ``page`` (a repeated heading also gets GitHub's ``-1``, ``-2``)."""
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            base = anchor(heading.group(1))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def broken_links(page: Path) -> list[str]:
    """``target`` of each relative link in ``page`` whose file or heading does not exist."""
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked offline
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (fragment and fragment not in anchors(file)):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page):
    assert broken_links(page) == []


def test_a_link_to_a_missing_page_or_heading_is_broken(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-part) [gone](missing.md) [bad](other.md#nope) `[x](x.md)`\n")
    assert broken_links(page) == ["missing.md", "other.md#nope"]


def test_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


def test_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if f"](docs/{p.name}" not in readme]
    assert unlinked == []


def test_user_pages_tell_no_development_history():
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)!r}"
        for p in USER_PAGES
        for m in HISTORY.finditer(p.read_text())
    ]
    assert found == []


def code_references(path: Path) -> list[str]:
    """Each ``docs/<page>.md[#heading]`` or ``README.md[#heading]`` named in ``path`` that does
    not reach a file and heading, and each "README, Heading" (a reference no test can follow)."""
    text = path.read_text(errors="replace")
    bad = [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for m in PROSE_REFERENCE.finditer(text)]
    for m in REFERENCE.finditer(text):
        page, fragment = ROOT / m.group(1), m.group(2)
        if m.group(1).startswith("docs/guides/"):  # uv's own docs, cited as a source
            continue
        if not page.exists() or (fragment and fragment not in anchors(page)):
            bad.append(f"{path.relative_to(ROOT)}: {m.group(0)!r}")
    return bad


def test_every_page_named_in_code_and_inputs_exists_with_its_heading():
    assert [b for path in CODE if path.is_file() for b in code_references(path)] == []


def test_a_stale_reference_in_code_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Locks\n")
    code = tmp_path / "x.in"
    code.write_text('# see docs/a.md#locks, docs/a.md#nope, docs/b.md and (README.md, "Locks")\n')
    assert code_references(code) == [
        "x.in: 'README.md, \"L'",
        "x.in: 'docs/a.md#nope'",
        "x.in: 'docs/b.md'",
        "x.in: 'README.md'",
    ]
