"""The docs hold together: every relative link in the README and docs/ reaches a file, and an
anchor a heading of it."""

import re

from conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path) -> set[str]:
    """GitHub's anchors of a page's headings: lowercased, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_reaches_a_file_and_a_heading():
    broken, checked = [], 0
    for doc in DOCS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # http(s), mailto: not ours to check offline
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            checked += 1
            if not path.exists() or (anchor and anchor not in anchors(path)):
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert checked >= 10 and broken == []


def test_the_anchor_rule_follows_github():
    assert anchors(REPO / "docs" / "RESULTS.md") >= {"conditions", "translation-quality", "the-data-path-at-scale"}
