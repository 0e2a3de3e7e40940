"""Train an EntityNLM p(x, z) and its proposal q(z | x) on coreference-annotated JSONL (CoNLL-2012 form).

Both are fit by maximum likelihood on the gold annotations, in padded batches of documents: p maximizes
log p(x, z_gold); q maximizes log q_peek(z_gold | x) + log q_nopeek(z_gold | x). Each epoch reports the validation
per-token perplexity on gold z, exp(−Σ log p(x, z_gold) / Σ T) (an upper bound on the true perplexity), and q's
per-token NLL of z_gold; the parameters with the lowest validation gold perplexity are kept. At the end, the
validation perplexity is also estimated by importance sampling with q (``valid_samples`` particles per document,
instance level). The model is saved in the Hub layout (``save_pretrained``) with ``training.json``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import InputError
from ..training import (
    AWDLSTMTraining,
    ImportanceValidation,
    TrainingSettings,
    WordVocabularySettings,
    add_trainer_arguments,
    config_from_args,
    evaluation,
    final_is_record,
    finish_training,
    fit_epochs,
    gold_numbers,
    model_arguments,
    prefixed,
    seeded_rng,
    train_and_report,
    training_data,
)
from .conll import CorefDocument, gold_latents, read_coref_jsonl
from .latents import LATENT_KEYS
from .model import EntityNLM, build_vocabulary
from .synthetic import generate_corpus


@dataclass
class TrainConfig(ImportanceValidation, AWDLSTMTraining, WordVocabularySettings, TrainingSettings):
    """Model sizes and optimization settings (defaults suit the small synthetic corpus on a CPU)."""

    epochs: int = 15
    lr: float = 5e-3
    dim: int = 32
    hidden_size: int = 64
    num_layers: int = 2
    max_entities: int = 6
    max_mention_length: int = 4
    lowercase: bool = True
    batch_size: int = 16
    weight_decay: float = 1e-6


def _batch_tensors(model: EntityNLM, docs: list[tuple[str, torch.Tensor, dict]]) -> tuple:
    """Pad documents to [B, T_max]: (x, z dict, mask [B, T] of real tokens)."""
    B, T = len(docs), max(x.numel() for _, x, _ in docs)
    x = torch.full((B, T), model.unk_id, dtype=torch.long)
    z = {
        "mention": torch.zeros(B, T, dtype=torch.long),
        "entity": torch.full((B, T), -1, dtype=torch.long),
        "length": torch.ones(B, T, dtype=torch.long),
    }
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i, (_, xi, zi) in enumerate(docs):
        n = xi.numel()
        x[i, :n], mask[i, :n] = xi, True
        for k in LATENT_KEYS:
            z[k][i, :n] = zi[k][0]
    device = model.device
    return x.to(device), {k: v.to(device) for k, v in z.items()}, mask.to(device)


def prepare(docs: list[CorefDocument], model: EntityNLM, split: str) -> list[tuple[str, torch.Tensor, dict]]:
    """(name, x [T], gold z [1, T]) per non-empty document; an error naming a document that exceeds the model."""
    out = []
    for i, doc in enumerate(docs):
        name = f"{split} document {i} ({doc.name or 'unnamed'})"
        if not doc.tokens:
            continue
        if doc.num_entities > model.max_entities:
            raise InputError(
                f"{name}: {doc.num_entities} entities > max_entities={model.max_entities} (--max-entities)"
            )
        if doc.longest_mention > model.max_mention_length:
            raise InputError(
                f"{name}: a mention of {doc.longest_mention} tokens > max_mention_length="
                f"{model.max_mention_length} (--max-mention-length)"
            )
        out.append((name, model.token_ids(doc.tokens).cpu(), gold_latents(doc)))
    return out


def batch_log_probs(model: EntityNLM, batch: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(log p(x, z_gold) [B], log q_peek [B], log q_nopeek [B], tokens) for a list of prepared documents."""
    x, z, mask = _batch_tensors(model, batch)
    log_p = model.log_joint_batch(model.encode_batch(x), x, z, mask)
    states_q = model.proposal.encode_batch(x)
    q_peek = model.proposal.log_prob_batch(states_q, z, peek=True, mask=mask)
    q_nopeek = model.proposal.log_prob_batch(states_q, z, peek=False, mask=mask)
    return log_p, q_peek, q_nopeek, int(mask.sum())


def _batches(data: list, batch_size: int) -> list[list]:
    """Documents grouped by length (less padding), in batches of ``batch_size``."""
    ordered = sorted(data, key=lambda d: d[1].numel())
    return [ordered[s : s + batch_size] for s in range(0, len(ordered), batch_size)]


@evaluation
def evaluate_gold(model: EntityNLM, data: list, batch_size: int = 32) -> dict:
    """Validation numbers on gold z: per-token joint perplexity of p and NLL of q (peek / no peek)."""
    joint = peek = nopeek = 0.0
    tokens = 0
    for batch in _batches(data, batch_size):
        lp, qp, qn, n = batch_log_probs(model, batch)
        joint, peek, nopeek, tokens = (
            joint + float(lp.sum()),
            peek + float(qp.sum()),
            nopeek + float(qn.sum()),
            tokens + n,
        )
    return gold_numbers(joint, peek, nopeek, max(tokens, 1))


def train_entitynlm(
    train_docs: list[CorefDocument],
    valid_docs: list[CorefDocument],
    config: TrainConfig,
    output_dir: str | Path | None = None,
    progress: bool = True,
) -> tuple[EntityNLM, list[dict]]:
    """Fit p and q on ``train_docs``, keep the best validation state; returns (model in eval mode, epoch records)."""
    if not train_docs:
        raise InputError("train_entitynlm: no training documents")
    rng = seeded_rng(config.seed)
    vocab = build_vocabulary(
        [[t.lower() if config.lowercase else t for t in d.tokens] for d in train_docs],
        config.min_count,
        config.max_vocab,
    )
    model = EntityNLM(vocab, **model_arguments(config, EntityNLM))
    train_data = prepare(train_docs, model, "train")
    valid_data = prepare(valid_docs, model, "valid") if valid_docs else []
    history: list[dict] = []
    if valid_data:
        history.append({"epoch": 0, **prefixed("valid_", evaluate_gold(model, valid_data))})
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)

    def step(batch: list) -> tuple:
        lp, qp, qn, n = batch_log_probs(model, batch)
        bad = ~(torch.isfinite(lp) & torch.isfinite(qp) & torch.isfinite(qn))
        if bad.any():
            raise RuntimeError(
                f"{batch[int(bad.nonzero()[0])][0]}: gold annotation outside the model's support"
            )
        return -(lp.sum() + qp.sum() + qn.sum()) / n, [*(float(v.detach().sum()) for v in (lp, qp, qn)), n]

    best = fit_epochs(
        model,
        optimizer,
        history,
        step,
        lambda sums: prefixed("train_", gold_numbers(*sums)),
        batches=lambda: _batches(train_data, config.batch_size),
        rng=rng,
        epochs=config.epochs,
        grad_clip=config.grad_clip,
        validate=(lambda: evaluate_gold(model, valid_data)) if valid_data else None,
        score="joint_ppl",
        postfix=lambda sums: {"train_ppl": f"{math.exp(-sums[0] / sums[-1]):.2f}"},
        progress=progress,
    )
    documents = [(name, x.to(model.device)) for name, x, _ in valid_data]
    final = final_is_record(model, config.valid_samples, documents, lambda: evaluate_gold(model, valid_data))
    return finish_training(best, config, output_dir, final)


# --- `lm-latent-eval train entitynlm` ----------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``lm-latent-eval train entitynlm``."""
    add_trainer_arguments(
        parser,
        TrainConfig,
        "CoNLL-2012 JSONL (tokens + clusters) for training",
        {"action": "store_true", "help": "train on the synthetic corpus (synthetic.py)"},
    )


def run(args: argparse.Namespace) -> int:
    """Read (or generate) the data, train, save; print the final validation numbers."""
    config = config_from_args(TrainConfig, args)
    train_docs, valid_docs = training_data(
        args,
        lambda path: list(read_coref_jsonl(path)),
        lambda: generate_corpus(seed=config.seed),
        30,
        "entitynlm",
        "JSONL",
    )
    return train_and_report(train_entitynlm, args, train_docs, valid_docs, config)
