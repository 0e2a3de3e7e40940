"""Every command docs/*.md quotes, run as written: in a ```bash block, or as inline code starting with
``lm-latent-eval``, ``lm_eval``, ``python -m`` or ``python bench/``.

Each command is found by reading the pages, so a new or changed command is run (or, when it holds a placeholder, needs
a download or a GPU, or runs for minutes, skipped with its reason) without editing this file. A command runs in a
fresh folder where ``lm_latent_eval``, ``tasks`` and ``docs`` point into this checkout and ``bench`` is an empty
folder, so a command that regenerates a committed output writes a copy, never the committed file. ``lm-latent-eval``,
``lm_eval`` and ``python`` are this interpreter's (the same programs, found without PATH), with this checkout first
on PYTHONPATH. A command that reads what an earlier one wrote (``report out`` after ``lm_eval ... --output_path out``)
runs after the commands of its page it depends on (``AFTER``).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from python_subprocess import run_checked

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").glob("*.md"))
INLINE = re.compile(
    r"`((?:lm-latent-eval|lm_eval|python -m|python bench/|pip install|accelerate launch|torchrun)[^`]*)`"
)
# inline code that names a program or subcommand in prose (`lm-latent-eval report`, `python -m lm_eval`), not a command
NAME_ONLY = re.compile(
    r"^(lm-latent-eval( (?!tasks-path|metrics-path)[a-z-]+)?|lm_eval(\.\w+)?|python -m lm_eval|accelerate launch)$"
)
# what starts a shell command in a page: a program (after optional VAR=value assignments) and at least one argument
COMMAND_LIKE = re.compile(
    r"^(?:[A-Z_]+=\S*\s+)*(?:lm-latent-eval|lm_eval|python3?|pip|accelerate|torchrun|pytest|bash|uv|conda|git)\s+\S"
)
# the languages of the pages' fenced blocks: shell blocks are read for commands, python and yaml blocks are run by
# the tests of their pages (test_tutorial, test_other_code_base, the metric cards' doctests) or are configuration
FENCES = {"bash", "sh", "shell", "python", "yaml"}


@dataclass(frozen=True)
class Command:
    page: str  # docs/<name>.md
    line: int  # 1-based line where the command starts
    text: str  # continuation lines joined, the trailing comment removed

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _strip_comment(line: str) -> str:
    """The command without a trailing ``# comment`` (a ``#`` after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def quoted_commands(pages=PAGES) -> list[Command]:
    """The commands of ```bash blocks (one per logical line) and of inline code, in page order."""
    commands = []
    for page in pages:
        name = str(page.relative_to(REPO))
        lines = page.read_text(encoding="utf-8").splitlines()
        fence, pending, start = None, "", 0
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                fence = line[3:].strip() if fence is None else None
                continue
            if fence is None:
                commands += [
                    Command(name, number, m.group(1).strip())
                    for m in INLINE.finditer(line)
                    if not NAME_ONLY.match(m.group(1).strip())
                ]
            elif fence in ("bash", "sh", "shell"):
                text = _strip_comment(line)
                if not pending:
                    start = number
                if text.endswith("\\"):
                    pending += text[:-1].rstrip() + " "
                    continue
                text = (pending + text.strip()).strip()
                pending = ""
                if text:
                    commands.append(Command(name, start, text))
    return commands


# Why a command cannot run here: the first matching rule names it (matched against the command's text).
PLACEHOLDER = re.compile(
    r"\.\.\.|<\w+>|\b(DIR|FILE|OUT|MODEL|DIR_OR_HUB_ID)\b|\bmy_(pkg|corpus|model|lda|tasks)|ε|τ|\bR\b|\bK\b"
    r"|(?<![/\w])(docs\.jsonl|train\.jsonl|train\.mrg|kglm\.model|weights\.txt)|their_|my_latent_lm|my_texts|/path/to/|out_a"
)
SKIPS = [
    (
        re.compile(
            r"--output bench/(hmm|rnng|kglm)_sweep$|^lm-latent-eval lda-peers .*--output bench/lda_peers$"
        ),
        (
            "regenerates a committed output: tests/reports/test_committed_sweeps.py and test_committed_lda_peers.py run "
            "it and compare what it writes with the committed files"
        ),
    ),
    (re.compile(r"--device cuda|bench/gpu\.py"), "needs a GPU"),
    (re.compile(r"\bgpt2\b"), "downloads gpt2 from the Hugging Face Hub"),
    (re.compile(r"--tasks \S*(wikitext|arc_easy|gsm8k)"), "downloads an lm-eval dataset"),
    (
        re.compile(r"^(accelerate launch|torchrun)\b"),
        "several processes: tests/harness runs accelerate launch on the HMM",
    ),
    (
        re.compile(r"^pip install\b"),
        "installs into the environment the tests run in (.ci/run installs the package with pip before the tests)",
    ),
    (PLACEHOLDER, "a template: it holds a placeholder or a user's own file"),
    (
        re.compile(r"make_default"),
        "retrains a bundled checkpoint (minutes; tests/models/<name> test the trainer and pin the checkpoint)",
    ),
    (
        re.compile(r"^python bench/"),
        (
            "a benchmark of minutes to hours, not rerun here: the figures docs quote from it are checked against its "
            "committed output (tests/docs/test_docs_figures.py)"
        ),
    ),
]
# Commands that run in seconds (the tokenization gap: 15 s); every other runnable command is marked slow.
FAST = re.compile(
    r"--help$|^lm-latent-eval (tasks|metrics)-path$|^python -m lm_latent_eval.reports.tokenization_gap --output "
)
# The commands of a page that must run first: (page, command that depends) -> commands it needs, in order.
AFTER = {
    ("docs/reports.md", "lm-latent-eval report out --beam-size 10"): (
        (
            "lm_eval --model latent_hmm --model_args pretrained=lm_latent_eval/data/hmm,estimator=is,num_samples=1000 "
            "--tasks latent_ppl_tiny --include_path tasks --output_path out --log_samples"
        ),
    ),
}


# Commands that read what a template above them would have written.
READS_A_TEMPLATE = {
    (
        "docs/your-model.md",
        "lm-latent-eval report out",
    ): "reads the runs of the tutorial (tests/docs/test_tutorial.py)",
    ("docs/other-code-base.md", "lm-latent-eval report out"): (
        "reads the run of the worked example (tests/docs/test_other_code_base.py)"
    ),
}


def skip_reason(command: Command) -> str | None:
    if (command.page, command.text) in READS_A_TEMPLATE:
        return READS_A_TEMPLATE[command.page, command.text]
    return next((reason for rule, reason in SKIPS if rule.search(command.text)), None)


def as_script(text: str) -> str:
    """The command with the console scripts and ``python`` as this interpreter's modules."""
    python = sys.executable
    text = re.sub(r"(^|(?<=[\s(]))lm-latent-eval\b", f"{python} -m lm_latent_eval.cli", text)
    text = re.sub(r"(^|(?<=[\s(]))lm_eval\b", f"{python} -m lm_eval", text)
    return re.sub(r"^python\b", python, text)


def _params():
    for command in quoted_commands():
        reason = skip_reason(command)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        if not reason and not FAST.search(command.text):
            marks.append(pytest.mark.slow)
        yield pytest.param(command, marks=marks, id=command.id)


def test_commands_are_found():
    """The reader sees the commands the pages quote (a change of markup must not silently empty the list)."""
    texts = {c.text for c in quoted_commands()}
    assert (
        "python -m lm_latent_eval.reports.tokenization_gap --output bench/tokenization_gap/gap.json" in texts
    )
    assert "lm-latent-eval report out --beam-size 10" in texts
    assert any(
        t.startswith("lm_eval --model latent_hmm --model_args pretrained=lm_latent_eval/data/hmm,")
        for t in texts
    )
    for (page, text), needs in AFTER.items():
        page_texts = {c.text for c in quoted_commands([REPO / page])}
        assert text in page_texts and set(needs) <= page_texts, (page, text)


def test_every_command_a_page_quotes_is_found():
    """Issue 34 (1): every command docs/*.md quote is run by a test or skipped with its reason, so the reader must see
    each one: every inline code span and every line of a shell block that starts like a shell command (a program and
    an argument) is one of ``quoted_commands``, and no fenced block hides commands in a language the reader skips."""
    found = {(c.page, c.text) for c in quoted_commands()}
    missed, fences = [], set()
    for page in PAGES:
        name = str(page.relative_to(REPO))
        fence = None
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fence = line[3:].strip() if fence is None else None
                if fence is not None:
                    fences.add((name, number, fence))
                continue
            spans = [m.group(1).strip() for m in re.finditer(r"`([^`]+)`", line)] if fence is None else []
            for text in spans:
                if COMMAND_LIKE.match(text) and not NAME_ONLY.match(text) and (name, text) not in found:
                    missed.append(f"{name}:{number}: {text}")
    assert not missed, "commands the reader does not see (so no test runs or excuses them):\n" + "\n".join(
        missed
    )
    odd = [f"{page}:{number}: ```{fence}" for page, number, fence in sorted(fences) if fence not in FENCES]
    assert not odd, "fenced blocks in a language whose commands nothing reads:\n" + "\n".join(odd)


def test_every_quoted_command_is_run_or_excused():
    """Each command is run (fast, or marked slow) or skipped with a reason that names why and where else it is
    covered: never dropped without a word."""
    for command in quoted_commands():
        reason = skip_reason(command)
        assert reason is None or len(reason.split()) >= 3, (command.id, reason)


def test_the_skip_rules_keep_the_runnable_commands():
    """The commands the docs give for the bundled models are run, not skipped."""
    runnable = {c.text for c in quoted_commands() if skip_reason(c) is None}
    for text in (
        "python -m lm_latent_eval.reports.tokenization_gap --output bench/tokenization_gap/gap.json",
        "lm-latent-eval sweep --model hmm --num-samples 100",
    ):
        assert text in runnable


@pytest.mark.parametrize("command", list(_params()))
def test_quoted_command_runs(command: Command, tmp_path):
    for name in ("lm_latent_eval", "tasks", "docs"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "bench").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    for text in (*AFTER.get((command.page, command.text), ()), command.text):
        run_checked(["bash", "-euo", "pipefail", "-c", as_script(text)], env=env, timeout=1800, cwd=tmp_path)
