"""mkdocs hook: pages include files that live at the repository root, so each keeps one home.

A line ``<!-- include FILE -->`` is replaced by FILE (relative to the repository root), and
``<!-- include FILE "## Heading" -->`` by that section's body (the heading's line excluded, up to
the next heading of the same level). Links between root files are rewritten to their pages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

INCLUDE = re.compile(r'^<!-- include (?P<file>[\w./-]+)(?: "(?P<heading>[^"]+)")? -->$', re.M)

PAGES = {"BENCHMARKS.md": "benchmarks.md", "CHANGELOG.md": "changelog.md", "README.md": "index.md"}
"""Root files shown as pages of the site, by the page that shows them."""


def section(text: str, heading: str) -> str:
    """The body under ``heading`` (a whole line such as ``## Limits``) up to the next heading of
    its level or higher; a missing heading is an error naming it."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    try:
        start = lines.index(heading) + 1
    except ValueError:
        raise ValueError(f"docs include: no line {heading!r}") from None
    end = next(
        (
            i
            for i in range(start, len(lines))
            if re.match(rf"#{{1,{level}}} ", lines[i])
            and not lines[i].startswith("#" * (level + 1))
        ),
        len(lines),
    )
    return "\n".join(lines[start:end]).strip("\n") + "\n"


def included(file: str, heading: str | None, page_depth: int) -> str:
    """FILE (or its section) with links to root files pointed at their pages."""
    text = (ROOT / file).read_text(encoding="utf-8")
    if heading:
        text = section(text, heading)
    up = "../" * page_depth
    for root_file, page in PAGES.items():
        text = text.replace(f"]({root_file})", f"]({up}{page})")
        text = text.replace(f"]({root_file}#", f"]({up}{page}#")
    return re.sub(r"\]\(docs/", f"]({up}", text)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Expand the include lines of a page."""
    depth = page.file.src_uri.count("/")
    return INCLUDE.sub(lambda m: included(m["file"], m["heading"], depth), markdown)
