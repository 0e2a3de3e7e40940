"""``lm-latent-eval`` console script: each subcommand lives in its own module with ``add_arguments`` and ``run``."""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
import warnings

from . import metrics_path, tasks_path
from .errors import UserError, one_line

# subcommand -> (module, one-line help)
COMMANDS = {
    "sweep": (
        "lm_latent_eval.reports.sweep",
        "IS / beam table over temperatures x peeking x aggregation, K-convergence plot",
    ),
    "report": (
        "lm_latent_eval.reports.card",
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


def _did_you_mean(unknown: list[str], parser: argparse.ArgumentParser) -> str:
    """ " (did you mean --num-samples?)" for the unknown options close to one the subcommand accepts, else ""."""
    options = [name for action in parser._actions for name in action.option_strings]
    hints = [
        f"{given} → {match[0]}"
        for given in unknown
        if given.startswith("--")
        and (match := difflib.get_close_matches(given.split("=", 1)[0], options, n=1, cutoff=0.7))
    ]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings of the console script as ``lm-latent-eval: warning: <message>`` (no source line)."""
    return f"lm-latent-eval: warning: {' '.join(str(message).split())}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lm-latent-eval", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    argv = sys.argv[1:] if argv is None else argv
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        # only the chosen subcommand's module is imported (keeps --help and path lookups fast)
        if argv and argv[0] == name:
            importlib.import_module(module).add_arguments(p)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)}{_did_you_mean(unknown, sub.choices[args.command])}"
        )
    saved, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        return int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
    # our errors' messages are the whole story (and an OSError names its file); anything else may be a bug: traceback
    except (UserError, OSError) as err:
        print(f"lm-latent-eval {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = saved


if __name__ == "__main__":
    sys.exit(main())
