"""The figures README.md and docs/ quote from a command's output are copies of that command's committed output.

A marker comment on its own line names the output file:

- ``<!-- output: FILE -->``: the next table (consecutive ``|`` lines) appears verbatim, as one block, in FILE;
- ``<!-- output: FILE rows -->``: every line of the next table is a line of FILE;
- ``<!-- output: FILE "s1" "s2" ... -->``: every string occurs in the next paragraph and in FILE (not as part of a
  longer number); in a ``.json`` FILE a numeric string may instead equal a number of the file rounded to the
  quoted digits. Every number with two or more decimals in that paragraph must be part of a listed string.

FILE is relative to the repository root. A table whose header is the header of a committed output table must carry a
marker. Relative links (and their #anchors) in README.md, CHANGELOG.md and docs/ must resolve.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!-- output: (\S+)(.*?)-->\s*$")


@dataclass
class Marker:
    page: Path
    line: int  # 1-based line of the marker
    file: str
    mode: str  # "table", "rows" or "strings"
    strings: list[str]
    following: list[str]  # the table or paragraph after the marker (after the other markers right below it)
    group_strings: list[
        str
    ]  # the strings of every marker of the group of consecutive markers above a paragraph

    @property
    def id(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page.name
        return f"{page}:{self.line}"


def _table_at(lines: list[str], start: int) -> list[str]:
    """The consecutive ``|`` lines from the first non-blank line at or after ``start`` (empty if that is no table)."""
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    table = []
    while i < len(lines) and lines[i].startswith("|"):
        table.append(lines[i])
        i += 1
    return table


def _paragraph_at(lines: list[str], start: int) -> list[str]:
    """The lines from ``start`` up to the next blank line."""
    paragraph = []
    for line in lines[start:]:
        if not line.strip():
            break
        paragraph.append(line)
    return paragraph


def parse_markers(page: Path, text: str | None = None) -> list[Marker]:
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    markers: list[Marker] = []
    group: list[Marker] = []  # consecutive string markers above one paragraph
    for i, line in enumerate(lines):
        match = MARKER.match(line)
        if not match:
            group = []
            continue
        args = shlex.split(match.group(2))
        if not args:
            mode, strings, following = "table", [], _table_at(lines, i + 1)
        elif args == ["rows"]:
            mode, strings, following = "rows", [], _table_at(lines, i + 1)
        else:
            start = i + 1
            while start < len(lines) and MARKER.match(lines[start]):
                start += 1
            mode, strings, following = "strings", args, _paragraph_at(lines, start)
        marker = Marker(page, i + 1, match.group(1), mode, strings, following, [])
        markers.append(marker)
        group = [*group, marker] if mode == "strings" else []
        for member in group:
            member.group_strings = [s for m in group for s in m.strings]
    return markers


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _occurs(needle: str, haystack: str) -> bool:
    """``needle`` occurs in ``haystack`` (whitespace runs equal), not as part of a longer number or word."""
    pattern = r"(?<![\w.])" + re.escape(_squash(needle)) + r"(?!\w|\.\d)"
    return re.search(pattern, _squash(haystack)) is not None


def _json_numbers(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [] if isinstance(value, float) and math.isnan(value) else [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _json_numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _json_numbers(v)]
    return []


def _in_json(needle: str, text: str) -> bool:
    if not re.fullmatch(r"[+-]?\d+(\.\d+)?", needle):
        return False
    digits = len(needle.split(".")[1]) if "." in needle else 0
    target = float(needle)
    return any(
        math.isclose(round(n, digits), target, abs_tol=10 ** -(digits + 3))
        for n in _json_numbers(json.loads(text))
    )


def problems(marker: Marker, root: Path = REPO) -> list[str]:
    """What is wrong with one marker (empty when it holds)."""
    path = root / marker.file
    if not path.is_file():
        return [f"{marker.id}: the marker names {marker.file}, which does not exist"]
    output = path.read_text(encoding="utf-8")
    if marker.mode in ("table", "rows"):
        if not marker.following:
            return [f"{marker.id}: no table follows the marker"]
        if marker.mode == "table":
            block = "\n".join(marker.following)
            return (
                []
                if f"\n{block}\n" in f"\n{output}\n"
                else [f"{marker.id}: this table is not a verbatim block of {marker.file}:\n{block}"]
            )
        output_lines = set(output.splitlines())
        return [
            f"{marker.id}: row not in {marker.file}: {row}"
            for row in marker.following
            if row not in output_lines
        ]
    found = []
    paragraph = "\n".join(marker.following)
    for needle in marker.strings:
        if not _occurs(needle, paragraph):
            found.append(f"{marker.id}: {needle!r} is not in the paragraph after the marker")
        in_output = _occurs(needle, output) or (path.suffix == ".json" and _in_json(needle, output))
        if not in_output:
            found.append(f"{marker.id}: {needle!r} is not in {marker.file}")
    for number in re.findall(r"(?<![\w.])\d[\d,]*\.\d{2,}", paragraph):
        if not any(number in needle for needle in marker.group_strings):
            found.append(f"{marker.id}: the paragraph quotes {number}, which the marker does not list")
    return found


ALL_MARKERS = [m for page in PAGES for m in parse_markers(page)]


@pytest.mark.parametrize("marker", ALL_MARKERS, ids=[m.id for m in ALL_MARKERS])
def test_quoted_figures_match_committed_output(marker):
    assert not problems(marker), "\n".join(problems(marker))


def test_the_sweeps_and_benchmarks_are_quoted_behind_markers():
    named = {m.file for m in ALL_MARKERS}
    for output in [
        "bench/hmm_sweep/tables.md",
        "bench/kglm_sweep/tables.md",
        "bench/rnng_sweep/tables.md",
        "lm_latent_eval/data/interval_coverage/coverage.md",
        "bench/kglm_reference/reference.md",
        "bench/kglm_reference/seeds.md",
        "bench/bundled_models/table.md",
        "bench/quickstart/output.md",
        "bench/tokenization_gap/gap.md",
        "bench/RESULTS.md",
    ]:
        assert output in named, f"no marker quotes {output}"


def _tables(text: str) -> list[tuple[int, list[str]]]:
    """(0-based first line, lines) of every table of ``text``."""
    lines, tables, i = text.splitlines(), [], 0
    while i < len(lines):
        if lines[i].startswith("|"):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            tables.append((start, lines[start:i]))
        else:
            i += 1
    return tables


def test_tables_shaped_like_outputs_carry_a_marker():
    output_headers = {
        table[0]
        for path in (REPO / "bench").rglob("*.md")
        for _, table in _tables(path.read_text(encoding="utf-8"))
    }
    unmarked = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for start, table in _tables("\n".join(lines)):
            previous = next((line for line in reversed(lines[:start]) if line.strip()), "")
            if table[0] in output_headers and not MARKER.match(previous):
                unmarked.append(f"{page.relative_to(REPO)}:{start + 1}: {table[0]}")
    assert not unmarked, "tables quoting a committed output without a marker:\n" + "\n".join(unmarked)


def test_the_checker_catches_drift(tmp_path):
    """An edited number in a table, a row or prose, a missing file or a missing table: each is reported."""
    (tmp_path / "out.md").write_text("| a | b |\n|---|---|\n| x | 16.887 |\n\nmean ESS 42.7 of 50\n")
    (tmp_path / "out.json").write_text('{"ppl": [27.379, 13.651], "n": 333}')
    page = tmp_path / "page.md"

    def check(text: str) -> list[str]:
        return [p for m in parse_markers(page, text) for p in problems(m, root=tmp_path)]

    table = "<!-- output: out.md -->\n| a | b |\n|---|---|\n| x | 16.887 |\n\n"
    rows = "<!-- output: out.md rows -->\n| x | 16.887 |\n\n"
    prose = '<!-- output: out.md "42.7 of 50" -->\nESS 42.7 of 50 here.\n\n'
    from_json = '<!-- output: out.json "27.4" "13.7" "333" -->\nPPL 27.4, 13.7 over 333 tokens.\n'
    assert check(table + rows + prose + from_json) == []
    assert check(table.replace("16.887", "16.861"))  # the output changed, the page did not (or the reverse)
    assert check(rows.replace("16.887", "16.88"))
    assert check(table.replace("out.md", "missing.md"))
    assert check(prose.replace("ESS 42.7", "ESS 42.8"))  # the prose drifted from the marker
    assert check(prose.replace("42.7", "2.7"))  # 2.7 is not 42.7
    assert check(from_json.replace("27.4", "27.5"))
    assert check(from_json.replace("333", "336"))
    assert check(prose.replace("here.", "here, 42.71 there."))  # a number the marker does not list
    assert check("<!-- output: out.md -->\nno table here\n")
    two_files = '<!-- output: out.md "42.7" -->\n<!-- output: out.json "333" -->\nESS 42.7 over 333 tokens.\n'
    assert check(two_files) == []
    assert check(two_files.replace("333 tokens", "333 tokens, 16.887 there"))


_SLUG_DROP = re.compile(r"[^\w\- ]", flags=re.UNICODE)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of the headings of ``page``."""
    anchors, seen = set(), {}
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL | re.MULTILINE)
    for line in text.splitlines():
        match = re.match(r"^#{1,6} (.*)", line)
        if match:
            slug = _SLUG_DROP.sub("", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _strip_code(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.sub(r"`[^`\n]*`", "", text)


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _strip_code(page.read_text(encoding="utf-8"))):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_an_entrance():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert not re.search(r"\bissue \d+", readme, flags=re.IGNORECASE)
    assert readme.startswith(
        "# lm-latent-eval\n\n```bash\n"
        "pip install torch==2.13.0 && pip install . && lm_eval --model latent_kglm --tasks linked_wikitext2_tiny "
        '--include_path "$(lm-latent-eval tasks-path)" --batch_size auto --output_path lm_eval_out --log_samples\n'
        'pip install ".[test]" && python -m pytest\n```\n'
    )


def test_the_test_command_names_each_skip_reason(tmp_path):
    """The README's second command (plain ``python -m pytest`` with pyproject's addopts) lists every skipped test
    with its reason, as the README says."""
    (tmp_path / "test_skipping.py").write_text(
        'import pytest\n\n\ndef test_x():\n    pytest.skip("the reason a user must see")\n', encoding="utf-8"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-n", "0", "-p", "no:cacheprovider", str(tmp_path / "test_skipping.py")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "SKIPPED [1]" in proc.stdout and "the reason a user must see" in proc.stdout
