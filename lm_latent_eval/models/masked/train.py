"""Train a masked-diffusion LM (the bundled ``MaskedDiffusionLM``) with the MDLM objective on sentences.

For a text x of T tokens draw a mask ratio t ~ U(0, 1) (stratified over the batch: t_b = (b + u) / B), mask every
position independently with probability t, and minimise (1/t) Σ_{masked i} −log p_θ(x_i | the unmasked tokens):
the continuous-time negative ELBO of MDLM (Sahoo et al. 2024) under the linear schedule, which equals the
any-order bound −E_{σ ~ uniform} log p(x | σ) of the order latent this package evaluates. Sentences of equal
length are batched together (no padding: the network always sees a whole text), each ``draws`` times with its own
t. Each epoch reports the validation negative ELBO per token (as a perplexity bound, a fixed seed); the parameters
with the lowest one are kept; at the end the exact validation perplexity by the dynamic program is reported over the
sentences of at most ``exact_tokens`` tokens.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch

from ...errors import InputError
from ..hmm.tokenizer import UNK, split_words
from ..training import (
    TrainingSettings,
    add_trainer_arguments,
    config_from_args,
    equal_length_batches,
    evaluation,
    finish_training,
    fit_epochs,
    model_arguments,
    prefixed,
    seeded_rng,
    train_and_report,
)
from ..vocabulary import build_word_list
from .corpus import TRAIN_FILE, read_sentences
from .diffusion import MASK, MaskedDiffusionLM


@dataclass
class TrainConfig(TrainingSettings):
    """Network sizes and optimization settings (defaults: the bundled model, about a minute on 2 CPU cores)."""

    epochs: int = 30
    lr: float = 2e-3
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    max_length: int = 64
    dropout: float = 0.1
    min_count: int = 2
    batch_size: int = 32
    draws: int = 4
    # the final exact validation perplexity covers the sentences of at most this many tokens (0: skip)
    exact_tokens: int = 12


def length_batches(data: list[torch.Tensor], batch_size: int) -> list[torch.Tensor]:
    """Non-empty texts grouped by length, stacked in batches of at most ``batch_size``: LongTensor [B, T] each."""
    texts = [x for x in data if x.numel()]
    return [torch.stack(batch) for batch in equal_length_batches(texts, torch.Tensor.numel, batch_size)]


def diffusion_loss(model: MaskedDiffusionLM, ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Σ_b (1/t_b) Σ_{masked i} −log p_θ(x_bi | unmasked x_b) for texts ids [B, T], t_b stratified over (0, 1)."""
    B, T = ids.shape
    t = (torch.arange(B) + torch.rand(B, generator=generator)) / B
    masked = torch.rand(B, T, generator=generator) < t[:, None]
    inputs = torch.where(masked, torch.full_like(ids, model.mask_id), ids)
    logits = model.predict(inputs.to(model.device)).float()
    logits = logits.index_fill(-1, torch.tensor([model.mask_id], device=logits.device), -math.inf)
    nll = -torch.log_softmax(logits, -1).gather(-1, ids.to(model.device)[..., None]).squeeze(-1)
    return (nll * masked.to(nll.device) / t.to(nll.device)[:, None]).sum()


@evaluation
def validation_nelbo(model: MaskedDiffusionLM, batches: list[torch.Tensor], draws: int = 8) -> dict:
    """The negative ELBO per token of the validation texts (``draws`` mask ratios each, seed 0) as exp(·): an upper
    bound on the model's perplexity, estimated."""
    generator = torch.Generator().manual_seed(0)
    total = sum(float(diffusion_loss(model, b.repeat(draws, 1), generator)) / draws for b in batches)
    return {"nelbo_ppl": math.exp(total / max(sum(b.numel() for b in batches), 1))}


@torch.no_grad()
def exact_perplexity(model: MaskedDiffusionLM, data: list[torch.Tensor], max_tokens: int) -> dict:
    """exp(−Σ log p(x) / Σ T) by the dynamic program over the texts of 1..``max_tokens`` tokens, and their count."""
    model.eval()
    texts = [x for x in data if 0 < x.numel() <= max_tokens]
    log_p = sum(model.log_marginal(x) for x in texts)
    return {"exact_ppl": math.exp(-log_p / max(sum(x.numel() for x in texts), 1)), "exact_texts": len(texts)}


def build_model(sentences: list[str], config: TrainConfig) -> MaskedDiffusionLM:
    """A fresh model over the words seen ≥ ``min_count`` times (``<unk>``, ``<mask>`` first)."""
    vocab = build_word_list((split_words(s) for s in sentences), (UNK, MASK), config.min_count)
    return MaskedDiffusionLM(vocab, **model_arguments(config, MaskedDiffusionLM))


def train_masked(
    train: list[str], valid: list[str], config: TrainConfig, output_dir=None, progress: bool = True
):
    """Fit the network on ``train`` sentences, keep the best validation state; returns (model in eval mode, records)."""
    if not train:
        raise InputError("train_masked: no training sentences")
    rng = seeded_rng(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    model = build_model(train, config)
    train_data = length_batches([model.tokenize(s) for s in train], config.batch_size)
    valid_texts = [model.tokenize(s) for s in valid]
    valid_data = length_batches(valid_texts, config.batch_size)

    def step(batch: torch.Tensor) -> tuple:
        ids = batch.repeat(config.draws, 1)
        loss = diffusion_loss(model, ids, generator)
        return loss / ids.numel(), [float(loss.detach()), ids.numel()]

    best = fit_epochs(
        model,
        torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01),
        [],
        step,
        lambda sums: {"train_nelbo_ppl": math.exp(sums[0] / sums[1])},
        batches=lambda: train_data,
        rng=rng,
        epochs=config.epochs,
        grad_clip=config.grad_clip,
        validate=(lambda: validation_nelbo(model, valid_data)) if valid_data else None,
        score="nelbo_ppl",
        progress=progress,
    )

    def final() -> dict:
        return prefixed("valid_", exact_perplexity(model, valid_texts, config.exact_tokens))

    return finish_training(best, config, output_dir, final if valid and config.exact_tokens > 0 else None)


# --- `lm-latent-eval train masked` ---------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``lm-latent-eval train masked``."""
    add_trainer_arguments(
        parser,
        TrainConfig,
        "documents (.jsonl with a 'text' field, or one per line), split into sentences (default: the bundled corpus)",
        {"action": "store_true", "help": "train on the bundled tiny corpus (the default without --train)"},
    )


def run(args: argparse.Namespace) -> int:
    """Read the sentences, train, save; print the final validation numbers."""
    config = config_from_args(TrainConfig, args)
    train = read_sentences(args.train or TRAIN_FILE)
    valid = read_sentences(args.valid) if args.valid else []
    return train_and_report(train_masked, args, train, valid, config)
