"""``lm-latent-eval train <model> ...``: dispatch to the trainer module of one of our latent LMs."""

from __future__ import annotations

import argparse
import importlib

# model name -> trainer module with ``add_arguments(parser)`` and ``run(args)``; register a new trainer here.
# Every registered module is imported to build --help, so keep heavy imports inside its ``run``.
TRAINERS = {
    "hmm": "lm_latent_eval.models.hmm.train",
    "kglm": "lm_latent_eval.models.kglm.train",
    "entitynlm": "lm_latent_eval.models.entitynlm.train",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One sub-command per trainable model, each with its trainer's own arguments."""
    sub = parser.add_subparsers(dest="model", required=True, metavar="MODEL")
    for name, module in TRAINERS.items():
        trainer = importlib.import_module(module)
        p = sub.add_parser(name, help=(trainer.__doc__ or name).strip().splitlines()[0])
        trainer.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Run the chosen model's trainer."""
    return int(importlib.import_module(TRAINERS[args.model]).run(args) or 0)
