"""Train an LDA by Gibbs sampling (θ integrated out, Φ drawn): ``lm-latent-eval train lda``.

Each sweep draws Φ_k ~ Dir(β + n_k·) given the topics z, then every document's z_t given the other topics of its
document and Φ, p(z_t = k | ·) ∝ (n_dk^{−t} + α_k) Φ[k, x_t] (one position of every document at a time: documents are
independent given Φ). The saved topics average the posterior means (n_kw + β) / (n_k + Vβ) of the last
``average_last`` sweeps, kept as the pseudo-counts λ = n_kw + β with η = β; α stays fixed and symmetric.
The vocabulary: tokens of ``token_pattern`` (lower-cased) in at least ``min_df`` training documents, stop words
(a short English list) left out unless ``--no-stop-words``.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..training import add_config_arguments, config_from_args, report_training, save_checkpoint
from .corpus import CORPUS_DIR, read_texts
from .model import LDA
from .tokenizer import DEFAULT_TOKEN_PATTERN, LDATokenizer

STOP_WORDS = frozenset(
    """a about above after again against all also an and any are as at be because been before being below between
    both but by can could did do does doing down during each either else few for from further had has have having he
    her here hers herself him himself his how however if in into is it its itself just may me might more most must my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through to too under until up upon us
    very was we were what when where which while who whom why will with within without would yet you your yours
    yourself yourselves""".split()  # noqa: SIM905 (a word list reads best as text)
)


@dataclass
class LDATrainingConfig:
    """Settings of ``lm-latent-eval train lda`` (recorded in training.json)."""

    num_topics: int = 4
    # α_k of every topic (scikit-learn's default 1/K for K = 4)
    alpha: float = 0.25
    # η, the topic-word prior
    beta: float = 0.05
    iterations: int = 400
    # sweeps whose posterior means of Φ are averaged
    average_last: int = 100
    # vocabulary: words in at least this many training documents
    min_df: int = 3
    stop_words: bool = True
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    seed: int = 0


def build_vocabulary(texts: list[str], config: LDATrainingConfig) -> list[str]:
    """Sorted words of ``token_pattern`` in ≥ ``min_df`` documents, stop words out (``stop_words``)."""
    pattern = re.compile(config.token_pattern)
    df = Counter(w for text in texts for w in set(pattern.findall(text.lower())))
    drop = STOP_WORDS if config.stop_words else frozenset()
    return sorted(w for w, n in df.items() if n >= config.min_df and w not in drop)


def _collapsed_log_joint(doc_topic, topic_word, alpha: float, beta: float) -> float:
    """log p(x, z | α, β) with θ and Φ integrated out (the usual Gibbs trace)."""
    K, V = topic_word.shape
    a = torch.full((K,), alpha, dtype=torch.float64)
    docs = (torch.lgamma(doc_topic + a) - math.lgamma(alpha)).sum() + len(doc_topic) * math.lgamma(K * alpha)
    docs = docs - torch.lgamma(doc_topic.sum(1) + K * alpha).sum()
    words = (torch.lgamma(topic_word + beta) - math.lgamma(beta)).sum() + K * math.lgamma(V * beta)
    words = words - torch.lgamma(topic_word.sum(1) + V * beta).sum()
    return float(docs + words)


@torch.no_grad()
def gibbs(docs: list[torch.Tensor], vocab_size: int, config: LDATrainingConfig, progress: bool = True):
    """(λ = averaged n_kw + β [K, V] float64, history): the sampler of the module docstring."""
    # Dirichlet draws use the global generator
    torch.manual_seed(config.seed)
    K, D = config.num_topics, len(docs)
    lengths = torch.tensor([len(d) for d in docs])
    width = int(lengths.max()) if D else 0
    words = torch.zeros(D, width, dtype=torch.long)
    for d, doc in enumerate(docs):
        words[d, : len(doc)] = doc
    mask = torch.arange(width)[None] < lengths[:, None]
    z = torch.randint(K, (D, width)) * mask
    doc_topic = torch.zeros(D, K, dtype=torch.float64).scatter_add_(1, z, mask.double())
    alpha = torch.full((K,), config.alpha, dtype=torch.float64)
    total = torch.zeros(K, vocab_size, dtype=torch.float64)
    history, kept = [], 0
    for sweep in range(config.iterations):
        topic_word = torch.zeros(K, vocab_size, dtype=torch.float64).index_put_(
            (z[mask], words[mask]), torch.ones(int(mask.sum()), dtype=torch.float64), accumulate=True
        )
        if sweep >= config.iterations - config.average_last:
            total += topic_word + config.beta
            kept += 1
        if sweep % 50 == 0 or sweep == config.iterations - 1:
            record = {
                "sweep": sweep,
                "log_joint": _collapsed_log_joint(doc_topic, topic_word, config.alpha, config.beta),
            }
            history.append(record)
            if progress:
                print(record, flush=True)
        # [K, V]
        phi = torch.distributions.Dirichlet(topic_word + config.beta).sample()
        for pos in range(width):
            rows = mask[:, pos].nonzero().flatten()
            old = z[rows, pos]
            doc_topic[rows, old] -= 1.0
            weights = (doc_topic[rows] + alpha) * phi[:, words[rows, pos]].t()
            new = torch.multinomial(weights, 1).squeeze(1)
            doc_topic[rows, new] += 1.0
            z[rows, pos] = new
    return total / max(kept, 1), history


def train_lda(texts: list[str], config: LDATrainingConfig, progress: bool = True):
    """(LDA, history) trained on ``texts`` (see the module docstring)."""
    vocab = build_vocabulary(texts, config)
    if not vocab:
        raise ValueError(f"no word occurs in {config.min_df} or more training documents: lower --min-df")
    tokenizer = LDATokenizer(vocab, config.token_pattern)
    docs = [ids for ids in (tokenizer.encode(t) for t in texts) if ids.numel()]
    lam, history = gibbs(docs, len(vocab), config, progress)
    model = LDA.from_parameters(
        lam / lam.sum(1, keepdim=True), config.alpha, vocab, pseudocounts=lam, eta=config.beta,
        token_pattern=config.token_pattern, source="lm-latent-eval train lda (Gibbs sampling)",
    )  # fmt: skip
    return model, history


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train", help=".jsonl (field 'text') or .txt (one document per line)")
    parser.add_argument("--bundled", action="store_true", help="train on the bundled pydoc_data train split")
    parser.add_argument("--output", required=True, help="checkpoint folder (Hub layout)")
    add_config_arguments(parser, LDATrainingConfig)
    parser.add_argument("--no-progress", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    if bool(args.train) == bool(args.bundled):
        raise SystemExit("lm-latent-eval train lda: give exactly one of --train FILE and --bundled")
    path = CORPUS_DIR / "train.jsonl" if args.bundled else Path(args.train)
    if not path.is_file():
        raise SystemExit(f"lm-latent-eval train lda: {path}: no such file")
    try:
        texts = read_texts(path)
        config = config_from_args(LDATrainingConfig, args)
        model, history = train_lda(texts, config, progress=not args.no_progress)
    except ValueError as err:
        raise SystemExit(f"lm-latent-eval train lda: {err}") from None
    save_checkpoint(model, args.output, config, history)
    return report_training(args.output, history)
