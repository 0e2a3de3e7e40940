"""Train an RNNG p(x, z) and its tree-CRF proposal q(z | x) on a treebank (PTB-style bracketed trees).

Both are fit by maximum likelihood on the gold binarized trees, in batches of sentences of equal length: p maximizes
log p(x </s>, z_gold) (the sentence end is always trained, so the model knows when to stop), q maximizes
log q(z_gold | x). Each epoch reports the validation per-token perplexity on gold trees, exp(−Σ log p(x, z_gold) /
Σ T) (an upper bound on the true perplexity; T counts </s> when ``count_eos``), and q's per-sentence NLL of z_gold;
the parameters with the lowest validation gold perplexity are kept. At the end the validation perplexity is also
estimated by importance sampling with q (``valid_samples`` trees per sentence, instance level). The model is saved
in the Hub layout (``save_pretrained``) with ``training.json``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import InputError
from ..training import (
    ImportanceValidation,
    TrainingSettings,
    WordVocabularySettings,
    add_trainer_arguments,
    config_from_args,
    equal_length_batches,
    evaluation,
    final_is_record,
    finish_training,
    fit_epochs,
    model_arguments,
    seeded_rng,
    train_and_report,
    training_data,
)
from .latents import spans_from_actions
from .model import RNNG, build_vocabulary
from .synthetic import generate_treebank
from .tree_crf import log_partition, tree_scores
from .treebank import Sentence, read_treebank, sentence_from_bracketed


@dataclass
class TrainConfig(ImportanceValidation, WordVocabularySettings, TrainingSettings):
    """Model sizes, preprocessing and optimization settings (defaults suit the small synthetic treebank on a CPU)."""

    epochs: int = 20
    lr: float = 2e-3
    grad_clip: float = 5.0
    dim: int = 32
    hidden_size: int = 32
    num_layers: int = 1
    proposal_hidden_size: int = 32
    count_eos: bool = True
    lowercase: bool = False
    remove_punctuation: bool = False
    replace_numbers: bool = False
    binarize: str = "right"
    batch_size: int = 16
    dropout: float = 0.1


def prepare(sentences: list[Sentence], model: RNNG) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, words [T], gold actions [2T − 1]) per sentence (ids without </s>)."""
    return [
        (s.name or s.text()[:40], model.token_ids(s.words, eos=False).cpu(), torch.tensor(s.actions))
        for s in sentences
        if s.words
    ]


def _batches(data: list, batch_size: int) -> list[list]:
    """Sentences grouped by length (no padding), in batches of at most ``batch_size``."""
    return equal_length_batches(data, lambda item: item[1].numel(), batch_size)


def batch_log_probs(
    model: RNNG, batch: list, with_eos: bool = True
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(log p(x, z_gold) [B], log q(z_gold | x) [B], tokens) for a batch of equal-length sentences."""
    words = torch.stack([w for _, w, _ in batch]).to(model.device)
    actions = torch.stack([a for _, _, a in batch]).to(model.device)
    B, T = words.shape
    log_p = model.score_batch(words, actions, with_eos)
    scores = model.proposal.span_scores_batch(words)
    log_q = tree_scores(scores, spans_from_actions(actions, T)) - log_partition(scores)
    return log_p, log_q, B * (T + int(with_eos))


@evaluation
def evaluate_gold(model: RNNG, data: list, batch_size: int = 64) -> dict:
    """Validation numbers on gold trees: per-token joint perplexity of p and per-sentence NLL of q."""
    joint = q = 0.0
    tokens = 0
    for batch in _batches(data, batch_size):
        lp, lq, n = batch_log_probs(model, batch, model.count_eos)
        joint, q, tokens = joint + float(lp.sum()), q + float(lq.sum()), tokens + n
    return {"joint_ppl": math.exp(-joint / max(tokens, 1)), "q_nll": -q / max(len(data), 1)}


def train_rnng(
    train: list[Sentence],
    valid: list[Sentence],
    config: TrainConfig,
    output_dir: str | Path | None = None,
    progress: bool = True,
) -> tuple[RNNG, list[dict]]:
    """Fit p and q on ``train``, keep the best validation state; returns (model in eval mode, epoch records)."""
    if not train:
        raise InputError("train_rnng: no training sentences")
    rng = seeded_rng(config.seed)
    vocab = build_vocabulary(
        [[w.lower() if config.lowercase else w for w in s.words] for s in train],
        config.min_count,
        config.max_vocab,
    )
    model = RNNG(vocab, tie_weights=config.dim == config.hidden_size, **model_arguments(config, RNNG))
    train_data, valid_data = prepare(train, model), prepare(valid, model)

    def step(batch: list) -> tuple:
        lp, lq, n = batch_log_probs(model, batch)
        return -(lp.sum() + lq.sum()) / n, [float(lp.detach().sum()), float(lq.detach().sum()), n, len(batch)]

    def numbers(sums: list) -> dict:
        joint, q, tokens, sentences = sums
        return {"train_joint_ppl": math.exp(-joint / tokens), "train_q_nll": -q / sentences}

    best = fit_epochs(
        model,
        torch.optim.Adam(model.parameters(), lr=config.lr),
        [],
        step,
        numbers,
        batches=lambda: _batches(train_data, config.batch_size),
        rng=rng,
        epochs=config.epochs,
        grad_clip=config.grad_clip,
        validate=(lambda: evaluate_gold(model, valid_data)) if valid_data else None,
        score="joint_ppl",
        postfix=lambda sums: {"train_ppl": f"{math.exp(-sums[0] / sums[2]):.2f}"},
        progress=progress,
    )
    # sentences with their </s> if counted
    documents = [(name, model.token_ids([model.vocab[i] for i in w.tolist()])) for name, w, _ in valid_data]
    final = final_is_record(model, config.valid_samples, documents, lambda: evaluate_gold(model, valid_data))
    return finish_training(best, config, output_dir, final)


def read_split(path: str | Path, config: TrainConfig) -> list[Sentence]:
    """A treebank file preprocessed as ``config`` says (punctuation, lower-casing, numbers, binarization)."""
    return read_treebank(
        path,
        remove_punctuation=config.remove_punctuation,
        lowercase=config.lowercase,
        replace_numbers=config.replace_numbers,
        binarize=config.binarize,
    )


# --- `lm-latent-eval train rnng` ---------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``lm-latent-eval train rnng``."""
    add_trainer_arguments(
        parser,
        TrainConfig,
        "PTB-style bracketed trees for training",
        {"action": "store_true", "help": "train on the synthetic treebank (synthetic.py)"},
    )


def run(args: argparse.Namespace) -> int:
    """Read (or generate) the trees, train, save; print the final validation numbers."""
    config = config_from_args(TrainConfig, args)

    def synthetic() -> list[Sentence]:
        trees = generate_treebank(seed=config.seed)
        return [
            sentence_from_bracketed(
                t,
                f"synthetic tree {i}",
                config.remove_punctuation,
                config.lowercase,
                config.replace_numbers,
                config.binarize,
            )
            for i, t in enumerate(trees)
        ]

    train, valid = training_data(args, lambda path: read_split(path, config), synthetic, 100, "rnng", "TREES")
    return train_and_report(train_rnng, args, train, valid, config)
