"""Every relative link in README.md, BENCHMARKS.md and docs/ leads somewhere.

A link's file must exist, and a link's anchor (`#...`) must be the slug of a heading
in the file it points to (GitHub's rule: lower case, punctuation dropped, spaces to
hyphens, a repeated heading numbered -1, -2, ...). Headings inside fenced code
blocks are not headings. External links (http, mailto) are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*?)\s*#*\s*$")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    text = "\n".join(_prose_lines(path.read_text(encoding="utf-8")))
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return [m.group(1) for m in LINK.finditer(text)]


def broken_links(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.name}")
    return bad


def test_slugs_follow_githubs_rule():
    assert slug("The demo, end to end") == "the-demo-end-to-end"
    assert slug("The second engine, llama.cpp") == "the-second-engine-llamacpp"
    assert slug("`make demo` (2026-11-29)") == "make-demo-2026-11-29"
    assert slug("Issue 19: the demo's design") == "issue-19-the-demos-design"


def test_the_checker_finds_a_broken_link(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Here\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#here) [self](#x) [gone](c.md) [anchor](a.md#there) [web](https://x.org)\n"
        "\n```\n[in code](nowhere.md)\n```\n\n## X\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "c.md: no such file",
        "a.md#there: no heading with that anchor in a.md",
    ]


def test_every_relative_link_resolves():
    problems = {str(p.relative_to(ROOT)): broken_links(p) for p in doc_files()}
    assert not {k: v for k, v in problems.items() if v}


# The front page (issue 44, item 7): short, the two commands as CI runs them, and
# every measured figure it shows also in BENCHMARKS.md's latest-figures table.

FIGURE = re.compile(
    r"(?<![\w.\-])\d+ min(?: \d+(?:\.\d+)? s)?"  # 14 min 20 s
    r"|(?<![\w.\-])\d+(?:[.,]\d+)*(?:-\d+(?:[.,]\d+)*)?(?:x\b|%| s\b| ms\b| MiB\b| GiB\b)"  # 2.60x, 5.4%
    r"|\[\d+(?:\.\d+)?-\d+(?:\.\d+)?\]"  # an interval, [2.42-2.80]
)
#: numbers on the front page that are settings or definitions, not measurements
NOT_MEASURED = {"95%", "5%"}  # the intervals' level; the labels' default margin


def readme_figures(text: str) -> set[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return set(FIGURE.findall(prose)) - NOT_MEASURED


def latest_table(benchmarks: str) -> str:
    start = benchmarks.index("## Latest figures")
    end = benchmarks.index("\n## ", start + 1)
    return benchmarks[start:end]


def test_figure_finder_sees_what_a_reader_sees():
    text = "took 14 min 20 s; code 2.60x [2.42-2.80], chat 0.98-1.04x, 5.4%; vllm 0.32.0, 32 tokens\n"
    assert readme_figures(text) == {"14 min 20 s", "2.60x", "[2.42-2.80]", "0.98-1.04x", "5.4%"}


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 260
    # .ci/run runs exactly the README's test command
    assert "\nmake test   # set-up + the whole test suite (what CI runs: .ci/run)\n" in text
    assert "\nmake demo   # " in text
    assert "exec make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_readme_figure_is_in_the_latest_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = latest_table((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"))
    figures = readme_figures(readme)
    assert figures, "the figure finder found nothing"
    assert sorted(f for f in figures if f not in table) == []
