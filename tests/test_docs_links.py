"""The documentation's links hold: every relative link in README.md and docs/*.md names a file
that exists, and a `#anchor` on a markdown target names a heading of that file (GitHub's slug
rule).  README.md stays short (at most 300 lines); the depth lives in docs/.  Pure text: no
llamapy import, no model."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300

# [text](target) and ![alt](target); the target may carry a "title" after a space.
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_files() -> list[Path]:
    """README.md and every markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked out, so that
    code that looks like a link (`a[i](x)`) is not read as one."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, re.sub(r"`[^`]*`", lambda m: " " * len(m.group()), line)))
    return out


def links(text: str) -> list[tuple[int, str]]:
    """Every (line, target) of a markdown link or image in the prose of `text`."""
    return [(n, m.group(1)) for n, line in _prose_lines(text) for m in _LINK.finditer(line)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation other than `-`
    and `_` dropped, each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a markdown file's headings give (a repeated heading gets -1, -2, ..)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(path.read_text()):
        m = _HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        k = seen.get(s, 0)
        seen[s] = k + 1
        out.add(s if k == 0 else f"{s}-{k}")
    return out


def broken_links(path: Path) -> list[str]:
    """Every relative link of `path` that names a missing file or a missing heading."""
    bad = []
    for n, target in links(path.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ..
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{n}: {target}"
        if not dest.exists():
            bad.append(f"{where} (no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            bad.append(f"{where} (no heading with anchor #{anchor} in {dest.relative_to(ROOT)})")
    return bad


def test_the_parser_finds_links_and_headings() -> None:
    """The link parser and the slug rule on known text, so that an empty or broken parser
    cannot pass the real checks below."""
    text = ("See [a](docs/a.md), ![img](docs/p.png \"t\") and [b](https://x.org).\n"
            "```\n[not](a-link.md)\n```\n`[code](x.md)` and [c](#anchor)\n")
    assert [t for _, t in links(text)] == ["docs/a.md", "docs/p.png", "https://x.org", "#anchor"]
    assert slug("Loading: the file's own memory, and a cold start") == "loading-the-files-own-memory-and-a-cold-start"
    assert slug("Pipeline stages: a model split by layers (`--pp`)") == "pipeline-stages-a-model-split-by-layers---pp"
    assert slug("AMD EPYC (Zen 4, family 25 model 17)") == "amd-epyc-zen-4-family-25-model-17"
    found = sum(len(links(p.read_text())) for p in doc_files())
    assert found >= 20, f"only {found} links found in README.md and docs/: the parser is broken"


def test_a_broken_link_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing file and a missing heading are both reported."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("# Title here\n")
    readme = tmp_path / "README.md"
    readme.write_text("[ok](docs/x.md#title-here) [gone](docs/y.md) [bad](docs/x.md#nope)\n")
    bad = broken_links(readme)
    assert len(bad) == 2 and "docs/y.md" in bad[0] and "#nope" in bad[1], bad


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert not broken_links(path), "broken links:\n" + "\n".join(broken_links(path))


def test_readme_is_short() -> None:
    n = len((ROOT / "README.md").read_text().splitlines())
    assert 0 < n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}: move depth to docs/)"


def test_every_document_is_linked_from_the_readme() -> None:
    """Each document in docs/ is one link away from README.md."""
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for _, t in links(readme.read_text())}
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert (ROOT / "docs").is_dir() and not missing, f"not linked from README.md: {missing}"
