"""A generated block between two marker comments in a Markdown file: the one splice the figure scripts share."""

from __future__ import annotations

from pathlib import Path


def spliced(doc: Path, text: str, start: str, end: str, table: str, *, tool: str) -> str:
    """``text`` (the content of ``doc``) with what lies between ``start`` and ``end`` replaced by ``table``; a file
    without both markers stops ``tool`` with one line saying which markers to add."""
    if start not in text or end not in text:
        raise SystemExit(f"{tool}: {doc.name} has no table markers; add '{start}' and '{end}'")
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    return f"{before}{start}\n{table}\n{end}{after}"


def write_or_check(doc: Path, text: str, new: str, *, check: bool, tool: str) -> int:
    """With ``check``: 1 (and one line) when ``doc``'s table differs from ``new``, else 0. Without: write ``new``."""
    if check:
        if new != text:
            print(f"{tool}: {doc.name}'s table is not its record's; run python scripts/{tool}.py render")
            return 1
        return 0
    if new != text:
        doc.write_text(new)
    return 0
