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
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import InputError
from ..training import (
    BestParameters,
    add_trainer_arguments,
    config_from_args,
    finish_training,
    gradient_step,
    importance_sampled_ppl,
    prefixed,
    report_training,
    seeded_rng,
    shuffled_epoch,
)
from .latents import spans_from_actions
from .model import RNNG, build_vocabulary
from .synthetic import generate_treebank
from .tree_crf import log_partition, tree_scores
from .treebank import Sentence, read_treebank, sentence_from_bracketed


@dataclass
class TrainConfig:
    """Model sizes, preprocessing and optimization settings (defaults suit the small synthetic treebank on a CPU)."""

    dim: int = 32
    hidden_size: int = 32
    num_layers: int = 1
    proposal_hidden_size: int = 32
    count_eos: bool = True
    lowercase: bool = False
    remove_punctuation: bool = False
    replace_numbers: bool = False
    binarize: str = "right"
    epochs: int = 20
    batch_size: int = 16
    lr: float = 2e-3
    grad_clip: float = 5.0
    dropout: float = 0.1
    min_count: int = 1
    max_vocab: int | None = None
    seed: int = 0
    # IS trees per validation sentence for the final perplexity estimate (0: skip)
    valid_samples: int = 32


def prepare(sentences: list[Sentence], model: RNNG) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, words [T], gold actions [2T − 1]) per sentence (ids without </s>)."""
    return [
        (s.name or s.text()[:40], model.token_ids(s.words, eos=False).cpu(), torch.tensor(s.actions))
        for s in sentences
        if s.words
    ]


def _batches(data: list, batch_size: int) -> list[list]:
    """Sentences grouped by length (no padding), in batches of at most ``batch_size``."""
    by_length: dict[int, list] = {}
    for item in data:
        by_length.setdefault(item[1].numel(), []).append(item)
    return [
        group[s : s + batch_size]
        for _, group in sorted(by_length.items())
        for s in range(0, len(group), batch_size)
    ]


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


@torch.no_grad()
def evaluate_gold(model: RNNG, data: list, batch_size: int = 64) -> dict:
    """Validation numbers on gold trees: per-token joint perplexity of p and per-sentence NLL of q."""
    was_training = model.training
    model.eval()
    joint = q = 0.0
    tokens = 0
    for batch in _batches(data, batch_size):
        lp, lq, n = batch_log_probs(model, batch, model.count_eos)
        joint, q, tokens = joint + float(lp.sum()), q + float(lq.sum()), tokens + n
    model.train(was_training)
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
    model = RNNG(
        vocab,
        dim=config.dim,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        count_eos=config.count_eos,
        lowercase=config.lowercase,
        tie_weights=config.dim == config.hidden_size,
        dropout=config.dropout,
        proposal_hidden_size=config.proposal_hidden_size,
    )
    train_data, valid_data = prepare(train, model), prepare(valid, model)
    history: list[dict] = []
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    best = BestParameters(model, history, progress)
    for epoch in range(1, config.epochs + 1):
        model.train()
        bar = shuffled_epoch(
            _batches(train_data, config.batch_size), rng, f"epoch {epoch}/{config.epochs}", progress
        )
        sums, tokens, sentences, start = [0.0, 0.0], 0, 0, time.time()
        for batch in bar:
            lp, lq, n = batch_log_probs(model, batch)
            gradient_step(optimizer, -(lp.sum() + lq.sum()) / n, model, config.grad_clip)
            sums = [sums[0] + float(lp.detach().sum()), sums[1] + float(lq.detach().sum())]
            tokens, sentences = tokens + n, sentences + len(batch)
            bar.set_postfix(train_ppl=f"{math.exp(-sums[0] / tokens):.2f}")
        record = {
            "epoch": epoch,
            "train_joint_ppl": math.exp(-sums[0] / tokens),
            "train_q_nll": -sums[1] / sentences,
            "seconds": round(time.time() - start, 2),
        }
        if valid_data:
            record.update(prefixed("valid_", evaluate_gold(model, valid_data)))
        best.epoch_done(record, record.get("valid_joint_ppl", record["train_joint_ppl"]))

    # after the best parameters are restored; sentences with their </s> if counted
    def final_validation() -> dict:
        documents = [
            (name, model.token_ids([model.vocab[i] for i in w.tolist()])) for name, w, _ in valid_data
        ]
        is_ppl = importance_sampled_ppl(model, documents, config.valid_samples)
        gold = prefixed("valid_", evaluate_gold(model, valid_data))
        return {"valid_is_ppl": is_ppl, "valid_samples": config.valid_samples, **gold}

    final = final_validation if valid_data and config.valid_samples > 0 else None
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
    if args.synthetic:
        trees = generate_treebank(seed=config.seed)
        sents = [
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
        valid, train = sents[:100], sents[100:]
    elif args.train:
        train = read_split(args.train, config)
        valid = read_split(args.valid, config) if args.valid else []
    else:
        raise SystemExit("lm-latent-eval train rnng: --train TREES (or --synthetic) is required")
    _, history = train_rnng(train, valid, config, args.output, progress=not args.no_progress)
    return report_training(args.output, history)
