"""Baum-Welch (EM) training of the HMM LM; the proposal is the same EM run stopped early and flattened.

E-step: the expected counts of initial states, transitions and emissions are the gradient of the exact
forward log-likelihood Σ_n log p(x_n) with respect to (log π, log A, log B). M-step: counts plus a Dirichlet
pseudo-count, normalized (MAP-EM; the pseudo-count keeps every probability > 0, so the proposal covers the
model's support). Proposal: the EM parameters after ``proposal_iterations`` iterations raised to the power
β = ``proposal_flatten`` and renormalized (π'^β, A'^β, B'^β): under-trained, so IS has real variance;
flattened, so its tails stay heavier than the model's and the importance weights stay moderate.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...documents import read_texts
from ...errors import InputError
from ...paths import DATA_DIR
from .model import HMMLanguageModel
from .parameters import batch_log_likelihood
from .tokenizer import build_vocab

DEFAULT_TRAIN = DATA_DIR / "corpus" / "tiny_train.jsonl"


# token ids [N, T_max] (0-padded), lengths [N]
Batch = tuple[torch.Tensor, torch.Tensor]


def batches(docs: list[torch.Tensor], batch_size: int = 256) -> list[Batch]:
    """Non-empty documents sorted by length, padded in groups of ``batch_size`` (empty ones add log p = 0)."""
    docs = sorted((d for d in docs if d.numel()), key=len)
    if not docs:
        raise InputError("no document has any token")
    out = []
    for start in range(0, len(docs), batch_size):
        group = docs[start : start + batch_size]
        lengths = torch.tensor([d.numel() for d in group])
        ids = torch.zeros(len(group), int(lengths.max()), dtype=torch.long)
        for n, d in enumerate(group):
            ids[n, : d.numel()] = d
        out.append((ids, lengths))
    return out


def num_tokens(data: list[Batch]) -> int:
    return sum(int(lengths.sum()) for _, lengths in data)


@torch.no_grad()
def corpus_log_likelihood(model: HMMLanguageModel, data: list[Batch]) -> float:
    """Σ_n log p(x_n) under the model (exact, float64)."""
    log_pi, log_A, log_B = model.hmm.log_probs()
    return sum(
        float(batch_log_likelihood(log_pi, log_A, log_B.t()[ids], lengths).sum()) for ids, lengths in data
    )


def perplexity(model: HMMLanguageModel, data: list[Batch]) -> float:
    """exp(−Σ_n log p(x_n) / Σ_n T_n), exact."""
    return math.exp(-corpus_log_likelihood(model, data) / num_tokens(data))


def em_step(model: HMMLanguageModel, data: list[Batch], pseudo_count: float) -> float:
    """One Baum-Welch iteration in place; returns Σ_n log p(x_n) under the parameters before the update."""
    # log π, log A, log B
    log_probs = [p.detach().requires_grad_() for p in model.hmm.log_probs()]
    counts = [torch.zeros_like(p) for p in log_probs]
    total = 0.0
    for ids, lengths in data:
        log_pi, log_A, log_B = log_probs
        log_lik = batch_log_likelihood(log_pi, log_A, log_B.t()[ids], lengths).sum()
        # E-step: expected counts of initial states, transitions, emissions = ∂ log p(x) / ∂ log θ
        for c, g in zip(counts, torch.autograd.grad(log_lik, log_probs)):
            c += g
        total += float(log_lik.detach())
    pi, A, B = ((c.clamp_min(0) + pseudo_count) for c in counts)
    model.hmm.set_probs(pi / pi.sum(), A / A.sum(-1, keepdim=True), B / B.sum(-1, keepdim=True))
    return total


def train_hmm(
    train_texts: list[str],
    validation_texts: list[str] | None = None,
    num_states: int = 12,
    iterations: int = 100,
    proposal_iterations: int = 30,
    proposal_flatten: float = 0.5,
    min_count: int = 2,
    pseudo_count: float = 0.01,
    seed: int = 0,
    batch_size: int = 256,
    progress: bool = True,
) -> HMMLanguageModel:
    """EM-train an HMM LM; its proposal is the EM parameters after ``proposal_iterations``, flattened."""
    if not 0 <= proposal_iterations <= iterations:
        raise InputError(
            f"need 0 <= proposal_iterations <= iterations, got {proposal_iterations} and {iterations}"
        )
    if not 0 < proposal_flatten <= 1:
        raise InputError(f"proposal_flatten must lie in (0, 1], got {proposal_flatten}")
    model = HMMLanguageModel(vocab=build_vocab(train_texts, min_count), num_states=num_states, seed=seed)
    train = batches([model.tokenize(t) for t in train_texts], batch_size)
    val = batches([model.tokenize(t) for t in validation_texts], batch_size) if validation_texts else None
    bar = tqdm(range(iterations), desc="Baum-Welch", disable=not progress)
    for it in bar:
        if it == proposal_iterations:
            set_proposal(model, proposal_flatten)
        train_ll = em_step(model, train, pseudo_count)
        postfix = {"train_ppl": f"{math.exp(-train_ll / num_tokens(train)):.2f}"}
        if val is not None:
            postfix["val_ppl"] = f"{perplexity(model, val):.2f}"
        bar.set_postfix(postfix)
    if proposal_iterations == iterations:
        set_proposal(model, proposal_flatten)
    return model


@torch.no_grad()
def set_proposal(model: HMMLanguageModel, flatten: float) -> None:
    """proposal (π', A', B') ∝ (π^β, A^β, B^β) of the model's current parameters, β = ``flatten``."""
    for name, log_p in zip(("initial_logits", "transition_logits", "emission_logits"), model.hmm.log_probs()):
        getattr(model.proposal, name).copy_(flatten * log_p)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``lm-latent-eval train hmm``."""
    parser.add_argument(
        "--train",
        "--train-file",
        dest="train",
        default=str(DEFAULT_TRAIN),
        help=".jsonl with a 'text' field, or .txt (default: the bundled training corpus)",
    )
    parser.add_argument(
        "--valid",
        "--validation-file",
        dest="valid",
        default=None,
        help="held-out documents (same format) whose exact perplexity is printed (default: none)",
    )
    parser.add_argument("--output", required=True, help="folder for config.json + model.safetensors")
    parser.add_argument("--num-states", type=int, default=12, help="number of hidden states S")
    parser.add_argument("--iterations", type=int, default=100, help="Baum-Welch iterations")
    parser.add_argument(
        "--proposal-iterations",
        type=int,
        default=30,
        help="the proposal q(z | x) is the EM parameters after this many iterations (fewer: worse proposal)",
    )
    parser.add_argument(
        "--proposal-flatten",
        type=float,
        default=0.5,
        help="exponent β in (0, 1] applied to the proposal's probabilities (smaller: flatter proposal)",
    )
    parser.add_argument("--min-count", type=int, default=2, help="rarer training words become <unk>")
    parser.add_argument(
        "--pseudo-count", type=float, default=0.01, help="Dirichlet pseudo-count of the M-step"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random initial parameters")
    parser.add_argument(
        "--batch-size", type=int, default=256, help="documents per E-step batch (memory only)"
    )


def run(args: argparse.Namespace) -> int:
    """Train on --train, print the exact perplexity on --valid, save to --output (Hub layout + model card)."""
    train_texts = read_texts(args.train)
    validation_texts = read_texts(args.valid) if args.valid else None
    model = train_hmm(
        train_texts,
        validation_texts,
        args.num_states,
        args.iterations,
        args.proposal_iterations,
        args.proposal_flatten,
        args.min_count,
        args.pseudo_count,
        args.seed,
    )
    train_ppl = perplexity(model, batches([model.tokenize(t) for t in train_texts]))
    lines = [f"training perplexity (exact): {train_ppl:.3f} over {len(train_texts)} documents"]
    if validation_texts:
        val_ppl = perplexity(model, batches([model.tokenize(t) for t in validation_texts]))
        lines.append(f"validation perplexity (exact): {val_ppl:.3f} over {len(validation_texts)} documents")
    print("\n".join(lines))
    out = Path(args.output)
    model.save_pretrained(out)
    (out / "model.safetensors").chmod(0o644)
    (out / "README.md").write_text(model_card(args, lines))
    print(f"saved {model.num_states}-state HMM with {len(model.vocab)} words to {out}")
    return 0


def model_card(args: argparse.Namespace, results: list[str]) -> str:
    """A short model card: what the checkpoint is, the exact training recipe and its exact perplexities."""
    recipe = " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("command", "model")
    )
    return (
        "---\nlibrary_name: lm-latent-eval\ntags:\n- latent-variable-lm\n- hmm\n---\n\n"
        "# Word-level HMM language model (lm-latent-eval reference model)\n\n"
        "p(x, z) = π(z_1) B(z_1, x_1) Π A(z_{t-1}, z_t) B(z_t, x_t); "
        "log p(x) is exact (forward algorithm), so "
        "importance-sampling and beam estimates can be checked against it. `proposal.*` holds a second, "
        "mismatched HMM used only as the proposal q(z | x).\n\n"
        "Load with `lm_latent_eval.models.hmm.HMMLanguageModel.from_pretrained(<this folder>)`.\n\n"
        f"Trained with Baum-Welch:\n\n    lm-latent-eval train hmm {recipe}\n\n"
        + "".join(f"- {line}\n" for line in results)
    )
