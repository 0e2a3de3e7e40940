"""``lm-latent-eval`` console script: each subcommand lives in its own module with ``add_arguments`` and ``run``."""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
import warnings
from typing import ClassVar

from . import metrics_path, tasks_path
from .errors import UserError, one_line

# subcommand -> (module, one-line help)
COMMANDS = {
    "sweep": (
        "lm_latent_eval.reports.sweep.cli",
        "IS / beam table over temperatures x peeking x aggregation, K-convergence plot",
    ),
    "report": (
        "lm_latent_eval.reports.card.cli",
        "estimate cards (Markdown, JSON, PNG) from an lm-eval output folder",
    ),
    "compare": (
        "lm_latent_eval.reports.compare",
        "two runs over the same documents side by side, with a paired test",
    ),
    "train": ("lm_latent_eval.models.training", "train one of our latent LMs and save it in the Hub layout"),
    "lda-peers": (
        "lm_latent_eval.reports.lda_peers",
        "an LDA's held-out perplexity by our estimators beside what scikit-learn, gensim, tomotopy and MALLET report",
    ),
    "distortion": (
        "lm_latent_eval.distortion.pipeline",
        "distortion-error curves of a model against a reference LM",
    ),
    "fit-value-head": (
        "lm_latent_eval.models.masked.value_fit",
        "fit SMC's value head to a masked LM and texts like yours (model_args value_head=)",
    ),
    "check-model": (
        "lm_latent_eval.model_check",
        "check a latent LM against the contract on short texts (shapes, log q, estimators, prefix declaration)",
    ),
    "tasks-path": (
        "lm_latent_eval.cli",
        "print the folder of the bundled lm-eval tasks (for --include_path)",
    ),
    "metrics-path": ("lm_latent_eval.cli", "print the folder of the bundled evaluate metrics"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The path subcommands take no arguments."""


def run(args: argparse.Namespace) -> int:
    """Print a bundled resource folder."""
    print(tasks_path() if args.command == "tasks-path" else metrics_path())
    return 0


def positive_int(text: str) -> int:
    """argparse ``type`` of a count that must be at least 1 (``--resamples``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def level(text: str) -> float:
    """argparse ``type`` of a confidence level: a number strictly between 0 and 1 (0.95, not 95)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(
            f"expected a number strictly between 0 and 1 (e.g. 0.95), got {text!r}"
        )
    return value


# what a Ctrl-C prints after "interrupted": what a subcommand keeps of its work, where it is not obvious
INTERRUPTED = {
    "sweep": "nothing written (a sweep interrupted after its first row writes the rows finished); fewer "
    "--temperatures, --beam-sizes or --num-samples make a shorter run",
}

# former spellings of options, still accepted: old -> new (a warning names the new one)
DEPRECATED_OPTIONS = {"--output-dir": "--output"}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """The long options of ``parser`` and of its sub-parsers (``train <model>``), without duplicates."""
    names = []
    for action in parser._actions:
        names += [n for n in action.option_strings if n.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names += _options(sub)
    return list(dict.fromkeys(names))


def _unknown_options(argv, options: list[str]) -> list[str]:
    """The ``--name`` (or ``--name=value``) tokens of ``argv`` that name none of ``options`` (nor abbreviate one, as
    argparse allows)."""
    unknown = []
    for token in argv:
        name = token.split("=", 1)[0]
        if token == "--" or not name.startswith("--"):
            continue
        if not any(option.startswith(name) for option in options):
            unknown.append(name)
    return unknown


def _did_you_mean(unknown: list[str], parser: argparse.ArgumentParser) -> str:
    """ " (did you mean --num-smaples → --num-samples?)" for the unknown options (``--name`` or ``--name=value``) close
    to an option of ``parser`` or of its sub-parsers, else ""."""
    options = _options(parser)
    hints = [
        f"{name} → {match[0]}"
        for name in dict.fromkeys(u.split("=", 1)[0] for u in unknown if u.startswith("--"))
        if (match := difflib.get_close_matches(name, options, n=1, cutoff=0.7))
    ]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors name the closest option to each misspelled one, whatever the error: an
    unrecognized argument, or a required option missing because it was misspelled (``--refrence x`` gives "required:
    --reference"). Sub-parsers (``train <model>``) are of this class too (argparse makes them ``type(parser)``)."""

    argv: ClassVar[tuple[str, ...]] = ()  # the command line being parsed (set by main)

    def error(self, message: str):
        if "did you mean" not in message:
            choice = re.search(r"invalid choice: '([^']*)'", message)
            if choice:  # a misspelled subcommand (or model of train)
                names = [
                    n for a in self._actions if isinstance(a, argparse._SubParsersAction) for n in a.choices
                ]
                match = difflib.get_close_matches(choice[1], names, n=1, cutoff=0.6)
                message += f" (did you mean {match[0]}?)" if match else ""
            else:
                message += _did_you_mean(_unknown_options(self.argv, _options(self)), self)
        super().error(message)


def _renamed_options(argv: list[str]) -> list[str]:
    """``argv`` with each former option name (``DEPRECATED_OPTIONS``) replaced by its new one, with a warning."""
    out = []
    for token in argv:
        name, eq, value = token.partition("=")
        if name in DEPRECATED_OPTIONS:
            new = DEPRECATED_OPTIONS[name]
            warnings.warn(
                f"{name} is deprecated and will be removed in a later release: use {new} (the same option)",
                FutureWarning,
                stacklevel=3,
            )
            token = new + eq + value
        out.append(token)
    return out


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings of the console script as ``lm-latent-eval: warning: <message>`` (no source line)."""
    return f"lm-latent-eval: warning: {' '.join(str(message).split())}\n"


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="lm-latent-eval", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    saved, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        argv = _renamed_options(argv)
        for name, (module, help_text) in COMMANDS.items():
            p = sub.add_parser(name, help=help_text, description=help_text)
            # only the chosen subcommand's module is imported (keeps --help and path lookups fast)
            if argv and argv[0] == name:
                importlib.import_module(module).add_arguments(p)
        _Parser.argv = tuple(argv)
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # _Parser.error names the closest option to each
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        try:
            return int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
        # our errors' messages are the whole story (and an OSError names its file); anything else may be a bug
        except (UserError, OSError) as err:
            print(f"lm-latent-eval {args.command}: error: {one_line(err)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            # on a line of its own: a Ctrl-C usually lands in the middle of a progress bar's line
            hint = f"; {INTERRUPTED[args.command]}" if args.command in INTERRUPTED else ""
            print(f"\nlm-latent-eval {args.command}: interrupted{hint}", file=sys.stderr)
            return 130
    finally:
        _Parser.argv = ()
        warnings.formatwarning = saved


if __name__ == "__main__":
    sys.exit(main())
