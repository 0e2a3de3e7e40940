"""``lm-latent-eval train <model> ...``: dispatch to the trainer module of one of our latent LMs."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import random
import shutil
from pathlib import Path

import torch
from tqdm.auto import tqdm

from . import MODELS

# model name -> trainer module with ``add_arguments(parser)`` and ``run(args)`` (the ``trainer`` column of MODELS).
# Every trainer module is imported to build --help, so keep heavy imports inside its ``run``.
TRAINERS = {name: entry.trainer for name, entry in MODELS.items() if entry.trainer is not None}


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


# --- shared by the trainers ----------------------------------------------------------------------------------------
def add_config_arguments(parser: argparse.ArgumentParser, config_cls) -> None:
    """One ``--field-name`` flag per field of a dataclass of training settings (booleans as --x / --no-x)."""
    for name, value in dataclasses.asdict(config_cls()).items():
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=value)
        else:
            parser.add_argument(flag, type=type(value) if value is not None else int, default=value)


def add_trainer_arguments(
    parser: argparse.ArgumentParser, config_cls, train_help: str, synthetic: dict
) -> None:
    """The options every trainer has: --train, --valid (same format), --synthetic (``synthetic``: add_argument
    keywords), --output, one flag per training setting of ``config_cls``, --no-progress."""
    parser.add_argument("--train", help=train_help)
    parser.add_argument("--valid", help="validation data (same format)")
    parser.add_argument("--synthetic", **synthetic)
    parser.add_argument("--output", required=True, help="checkpoint folder (Hub layout)")
    add_config_arguments(parser, config_cls)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def seeded_rng(seed: int) -> random.Random:
    """Seed torch's global generator (initial weights, dropout) with ``seed``; return a ``random.Random(seed)`` for
    the order of the training batches."""
    torch.manual_seed(seed)
    return random.Random(seed)


def shuffled_epoch(items: list, rng: random.Random, desc: str, progress: bool = True):
    """``items`` shuffled in place by ``rng``, behind a progress bar named ``desc`` (none unless ``progress``)."""
    rng.shuffle(items)
    return tqdm(items, desc=desc, disable=not progress, leave=False)


def gradient_step(optimizer, loss, model, grad_clip: float) -> None:
    """One optimizer step down ``loss``: clear the gradients, backpropagate, clip the gradient norm of the model's
    parameters to ``grad_clip``, step."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()


def prefixed(prefix: str, numbers: dict) -> dict:
    """``numbers`` with ``prefix`` before every key (e.g. the validation numbers as ``valid_*``)."""
    return {f"{prefix}{k}": v for k, v in numbers.items()}


def importance_sampled_ppl(model, documents: list, num_samples: int, seed: int = 0) -> float:
    """Instance-level IS perplexity exp(−Σ_n log p̂(x_n) / Σ_n T_n) of (name, x [T]) documents, with K =
    ``num_samples`` samples of the model's proposal (peeking, τ = 1) per document; the model is left in eval mode."""
    # kept local (~0.6 s): every trainer imports this module, and `train --help` imports every trainer (above)
    from ..estimators import importance_log_weights, instance_ppl

    model.eval()
    weights = [
        importance_log_weights(
            model, x, num_samples=num_samples, seed=seed, document=name, device=model.device
        )
        for name, x in documents
    ]
    return instance_ppl(weights, [x.numel() for _, x in documents])


def finish_training(best: BestParameters, config, output_dir, final=None) -> tuple:
    """The end of a trainer: restore the parameters ``best`` kept, switch the model to eval mode, log the record
    ``final()`` returns then (marked ``"final": True``; where ``final`` is given), save the checkpoint when
    ``output_dir`` is given. Returns (model, history)."""
    best.restore()
    best.model.eval()
    if final is not None:
        best.log({"final": True, **final()})
    if output_dir is not None:
        save_checkpoint(best.model, output_dir, config, best.history)
    return best.model, best.history


def report_training(output, history: list[dict]) -> int:
    """Print the checkpoint folder and the last training record as one JSON line (the trainers' CLI output)."""
    print(json.dumps({"output": str(output), "final": history[-1] if history else None}))
    return 0


def config_from_args(config_cls, args: argparse.Namespace):
    """The dataclass of training settings filled from the flags of ``add_config_arguments``."""
    return config_cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)})


def save_checkpoint(model, output_dir: str | Path, config, history: list[dict]) -> Path:
    """``model.save_pretrained`` (Hub layout) + training.json (the settings and the per-epoch record)."""
    output_dir = Path(output_dir)
    model.save_pretrained(output_dir)
    record = {"config": dataclasses.asdict(config), "history": history}
    (output_dir / "training.json").write_text(json.dumps(record, indent=1))
    return output_dir


def make_default_arguments(description: str, epochs: int | None, argv: list[str] | None = None):
    """``--output-dir`` (required: nothing is written unless asked), ``--seed`` and ``--epochs`` (where the recipe
    has epochs): the options of every ``make_default`` script, which writes a bundled checkpoint and its corpus."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        required=True,
        help="data folder to write into, in the layout of lm_latent_eval/data (pass lm_latent_eval/data to "
        "regenerate the bundled files)",
    )
    parser.add_argument("--seed", type=int, default=0)
    if epochs is not None:
        parser.add_argument("--epochs", type=int, default=epochs)
    return parser.parse_args(argv)


def split_documents(docs: list, num_test: int, num_valid: int) -> tuple[list, list, list]:
    """(test, valid, train): the first ``num_test`` documents, the next ``num_valid``, the rest."""
    return docs[:num_test], docs[num_test : num_test + num_valid], docs[num_test + num_valid :]


def default_settings(recipe, args: argparse.Namespace):
    """The training settings of a ``make_default`` script: its ``recipe`` with the ``--epochs`` and ``--seed`` given."""
    return dataclasses.replace(recipe, epochs=args.epochs, seed=args.seed)


def fresh_folder(path: Path) -> Path:
    """``path``, removed with its contents first where it exists (a bundled checkpoint is written anew)."""
    if path.exists():
        shutil.rmtree(path)
    return path


def write_card(folder: Path, card: str, splits: tuple[list, list, list], seed: int, final: dict) -> None:
    """``folder``/README.md: ``card`` filled in with the sizes of the (test, valid, train) splits, the seed and the
    final validation record (``gold``: valid_joint_ppl, ``k``: valid_samples, ``is_ppl``: valid_is_ppl)."""
    test, valid, train = splits
    text = card.format(
        train=len(train),
        valid=len(valid),
        test=len(test),
        seed=seed,
        gold=final["valid_joint_ppl"],
        k=final["valid_samples"],
        is_ppl=final["valid_is_ppl"],
    )
    (folder / "README.md").write_text(text)


class BestParameters:
    """Per-epoch bookkeeping of the trainers: append and print each epoch's record, keep a copy of the parameters
    with the lowest score (e.g. validation gold perplexity), and restore them at the end."""

    def __init__(self, model, history: list[dict], progress: bool = True) -> None:
        self.model, self.history, self.progress = model, history, progress
        self.score, self.state = math.inf, None

    def log(self, record: dict) -> None:
        """Append ``record`` to the history (and print it as JSON when showing progress)."""
        self.history.append(record)
        if self.progress:
            tqdm.write(json.dumps(record))

    def epoch_done(self, record: dict, score: float) -> None:
        """Log the epoch's record; copy the parameters when ``score`` is the lowest so far."""
        self.log(record)
        if score < self.score:
            self.score = score
            self.state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def restore(self) -> None:
        """Load the kept parameters (if any epoch ran)."""
        if self.state is not None:
            self.model.load_state_dict(self.state)
