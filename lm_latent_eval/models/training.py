"""``lm-latent-eval train <model> ...``: dispatch to the trainer module of one of our latent LMs."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import json
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
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
@dataclass
class TrainingSettings:
    """The optimization settings of every gradient trainer: ``epochs`` passes over the training data, learning rate
    ``lr`` (each trainer's ``TrainConfig`` extends this class and gives both their defaults), gradient norms clipped
    to ``grad_clip``, ``seed`` for the initial weights, dropout and the order of the batches (``seeded_rng``)."""

    epochs: int
    lr: float
    grad_clip: float = 1.0
    seed: int = 0


@dataclass
class WordVocabularySettings:
    """The word vocabulary a trainer builds from its training texts (KGLM, EntityNLM, RNNG: ``build_vocabulary``):
    the words seen ``min_count`` times or more, at most ``max_vocab`` words (None: no limit)."""

    min_count: int = 1
    max_vocab: int | None = None


@dataclass
class AWDLSTMTraining:
    """The dropout rates an AWD-LSTM model (KGLM, EntityNLM) is trained with, named as its constructor (and
    ``kglm.awd_lstm.AWDLSTMDropouts``) names them."""

    dropout: float = 0.1
    dropouti: float = 0.1
    dropoute: float = 0.0
    wdrop: float = 0.1


@dataclass
class ImportanceValidation:
    """A trainer that ends with an importance-sampling estimate of the validation perplexity (``final_is_record``)."""

    # IS particles of the model's proposal per validation document for the final perplexity estimate (0: skip)
    valid_samples: int = 32


def model_arguments(config, model_cls) -> dict:
    """The settings of ``config`` named as parameters of ``model_cls``'s constructor (the model's sizes, rates and
    preprocessing), as its keyword arguments: a ``TrainConfig`` field takes the name of the parameter it sets."""
    parameters = inspect.signature(model_cls.__init__).parameters
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name in parameters}


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


def equal_length_batches(items: list, length: Callable[[object], int], batch_size: int) -> list[list]:
    """``items`` grouped by ``length(item)``, shortest first (in their order within a group), in batches of at most
    ``batch_size``: batches without padding."""
    by_length: dict[int, list] = {}
    for item in items:
        by_length.setdefault(length(item), []).append(item)
    return [
        group[s : s + batch_size]
        for _, group in sorted(by_length.items())
        for s in range(0, len(group), batch_size)
    ]


def shuffled_epoch(items: list, rng: random.Random, desc: str, progress: bool = True):
    """``items`` shuffled in place by ``rng``, behind a progress bar named ``desc`` (none unless ``progress``)."""
    rng.shuffle(items)
    return tqdm(items, desc=desc, disable=not progress, leave=False)


def evaluation(fn):
    """Decorates a validation function ``fn(model, ...)``: it runs under ``torch.no_grad()`` with the model in eval
    mode (no dropout), and the model's mode is restored after."""

    @functools.wraps(fn)
    def evaluate(model, *args, **kwargs):
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return fn(model, *args, **kwargs)
        finally:
            model.train(was_training)

    return evaluate


def gradient_step(optimizer, loss, model, grad_clip: float) -> None:
    """One optimizer step down ``loss``: clear the gradients, backpropagate, clip the gradient norm of the model's
    parameters to ``grad_clip``, step."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()


def fit_epochs(
    model,
    optimizer,
    history: list[dict],
    step: Callable[[object], tuple[torch.Tensor, list[float]]],
    numbers: Callable[[list[float]], dict],
    *,
    batches: Callable[[], list],
    rng: random.Random,
    epochs: int,
    grad_clip: float,
    validate: Callable[[], dict] | None = None,
    score: str | Callable[[dict], float],
    postfix: Callable[[list[float]], dict] | None = None,
    stage: str | None = None,
    progress: bool = True,
) -> BestParameters:
    """The epochs of a gradient trainer. Each epoch puts the model in train mode and shuffles ``batches()`` with
    ``rng``; per batch, ``step(batch)`` returns (the loss, numbers to total over the epoch) and ``gradient_step``
    descends the loss; the epoch's record is {"stage" (where given), "epoch", **``numbers(totals)``, "seconds"} with
    ``validate()``'s numbers as ``valid_*`` (where given), kept in ``history`` by a ``BestParameters``, which the
    record's ``score`` ranks (a callable, or a name: ``valid_<name>``, else ``train_<name>``) and which is returned
    (``restore`` loads the best epoch's parameters). ``postfix(totals)``: the progress bar's running numbers."""
    rank = score if callable(score) else lambda record: record.get(f"valid_{score}", record[f"train_{score}"])
    best = BestParameters(model, history, progress)
    head = {} if stage is None else {"stage": stage}
    for epoch in range(1, epochs + 1):
        model.train()
        desc = " ".join(filter(None, (stage, f"epoch {epoch}/{epochs}")))
        bar = shuffled_epoch(batches(), rng, desc, progress)
        totals, start = None, time.time()
        for batch in bar:
            loss, sums = step(batch)
            gradient_step(optimizer, loss, model, grad_clip)
            totals = [t + s for t, s in zip(totals or [0.0] * len(sums), sums)]
            if postfix is not None:
                bar.set_postfix(postfix(totals))
        record = {**head, "epoch": epoch, **numbers(totals), "seconds": round(time.time() - start, 2)}
        if validate is not None:
            record.update(prefixed("valid_", validate()))
        best.epoch_done(record, rank(record))
    return best


def final_is_record(model, valid_samples: int, documents: list, gold: Callable[[], dict]):
    """The ``final`` of ``finish_training`` for a model with a proposal: the validation perplexity estimated by
    ``importance_sampled_ppl`` over the (name, x) ``documents`` (``valid_samples`` samples each) and ``gold()``'s
    numbers, as ``valid_*``; None (no final record) where there are no documents or ``valid_samples`` is 0."""
    if valid_samples <= 0 or not documents:
        return None

    def final() -> dict:
        is_ppl = importance_sampled_ppl(model, documents, valid_samples)
        return {"valid_is_ppl": is_ppl, "valid_samples": valid_samples, **prefixed("valid_", gold())}

    return final


def gold_numbers(joint: float, peek: float, nopeek: float, tokens: float) -> dict:
    """Per-token numbers of a model with a proposal on gold latents, from the sums Σ log p(x, z_gold) (``joint``),
    Σ log q(z_gold | x) with and without peeking, over ``tokens`` tokens: the joint perplexity (an upper bound on the
    perplexity) and q's negative log-likelihoods."""
    return {
        "joint_ppl": math.exp(-joint / tokens),
        "q_nll_peek": -peek / tokens,
        "q_nll_nopeek": -nopeek / tokens,
    }


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


def training_data(
    args: argparse.Namespace, read, synthetic, num_valid: int, model: str, metavar: str
) -> tuple[list, list]:
    """(train, valid) of ``lm-latent-eval train <model>``: with --synthetic, the items ``synthetic()`` makes, the
    first ``num_valid`` of them to validate on; else ``read(--train)`` and ``read(--valid)`` (none without --valid);
    a SystemExit asking for ``--train <metavar>`` where neither is given."""
    if args.synthetic:
        items = synthetic()
        return items[num_valid:], items[:num_valid]
    if not args.train:
        raise SystemExit(f"lm-latent-eval train {model}: --train {metavar} (or --synthetic) is required")
    return read(args.train), (read(args.valid) if args.valid else [])


def train_and_report(train, args: argparse.Namespace, *data) -> int:
    """``train(*data, --output, progress=not --no-progress)`` (a trainer's ``train_*`` function), then the line of
    ``report_training``."""
    _, history = train(*data, args.output, progress=not args.no_progress)
    return report_training(args.output, history)


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


def make_default_arguments(
    description: str, epochs: int | None, argv: list[str] | None = None, flags: dict[str, str] | None = None
):
    """``--output-dir`` (required: nothing is written unless asked), ``--seed`` and ``--epochs`` (where the recipe
    has epochs): the options of every ``make_default`` script, which writes a bundled checkpoint and its corpus;
    ``flags``: a script's own on/off options (name -> help)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for name, text in (flags or {}).items():
        parser.add_argument(name, action="store_true", help=text)
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
