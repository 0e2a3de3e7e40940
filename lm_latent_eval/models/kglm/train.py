"""Train a KGLM p(x, z) and its proposal q(z | x) on annotated Linked-WikiText-2-format JSONL.

Both are fit by maximum likelihood on the gold annotations: p maximizes log p(x, z_gold); q maximizes the
peeking log q(z_gold | x) (z_t read from the state after x_t, as the original kglm-disc) and, when it has its own
no-peeking heads, also the no-peeking log q(z_gold | x) (z_t read from the state after x_<t). After ``epochs``
joint epochs (keeping the parameters with the lowest validation joint perplexity), ``proposal_epochs`` more
epochs fit q alone (keeping the lowest validation NLL of q). Validation reports the per-token perplexity
exp(−Σ log p(x, z_gold) / Σ T) (an upper bound on the true perplexity, which also needs the z ≠ z_gold terms) and
q's per-token negative log-likelihood of z_gold; the result is saved in the Hub layout (``KGLM.save_pretrained``)
with ``training.json`` (settings and the per-epoch record).
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import InputError
from ..training import (
    AWDLSTMTraining,
    BestParameters,
    TrainingSettings,
    WordVocabularySettings,
    add_trainer_arguments,
    config_from_args,
    evaluation,
    finish_training,
    fit_epochs,
    gold_numbers,
    model_arguments,
    prefixed,
    seeded_rng,
    train_and_report,
)
from .graph import KnowledgeGraph
from .linked_wikitext import LinkedDocument, document_tensors, read_linked_jsonl
from .model import KGLM, build_vocabulary
from .pickles import knowledge_graph_from_pickles
from .synthetic import write_corpus


@dataclass
class TrainConfig(AWDLSTMTraining, WordVocabularySettings, TrainingSettings):
    """Model sizes and optimization settings (defaults suit the small synthetic corpus on a CPU)."""

    epochs: int = 10
    lr: float = 3e-3
    token_dim: int = 32
    entity_dim: int = 16
    hidden_size: int = 64
    num_layers: int = 2
    cutoff: int = 30
    weight_decay: float = 1.2e-6
    chunk_size: int = 70
    # q's own LSTM width (default: p's)
    proposal_hidden_size: int | None = None
    # q's own no-peeking heads, trained on log q(z_t | x_<t, z_<t)
    proposal_nopeek_heads: bool = True
    # peeking q reads "x_t starts an alias of e" features
    proposal_alias_features: bool = True
    # extra epochs fitting q alone after p is fixed
    proposal_epochs: int = 0


def _prepare(docs: list[LinkedDocument], model: KGLM, name: str) -> list[tuple]:
    """(title, x [T], gold z [1, T]) for each non-empty article."""
    out = []
    for i, doc in enumerate(docs):
        if not doc.tokens:
            continue
        x, z, _ = document_tensors(doc, model, where=f"{name} article {i} ({doc.title!r})")
        out.append((doc.title, x, z))
    return out


@evaluation
def evaluate_gold(model: KGLM, data: list[tuple]) -> dict:
    """Validation numbers on gold annotations: joint perplexity of p and per-token NLL of q (peek / no peek)."""
    tokens = 0
    joint = q_peek = q_nopeek = 0.0
    for _, x, z in data:
        tokens += x.numel()
        joint += float(model.log_joint(x, z)[0])
        q_peek += float(model.proposal.log_prob(x, z, peek=True)[0])
        q_nopeek += float(model.proposal.log_prob(x, z, peek=False)[0])
    tokens = max(tokens, 1)
    return {**gold_numbers(joint, q_peek, q_nopeek, tokens), "tokens": tokens}


def _gold_numbers(model: KGLM, data: list[tuple]) -> dict:
    """``evaluate_gold``'s numbers without the token count."""
    gold = evaluate_gold(model, data)
    del gold["tokens"]
    return gold


def train_kglm(
    train_docs: list[LinkedDocument],
    valid_docs: list[LinkedDocument],
    graph: KnowledgeGraph,
    config: TrainConfig,
    output_dir: str | Path | None = None,
    progress: bool = True,
) -> tuple[KGLM, list[dict]]:
    """Fit p and q on ``train_docs``; keep the parameters with the best validation joint perplexity.

    Returns (model in eval mode, per-epoch records); saves it to ``output_dir`` when given.
    """
    if not train_docs:
        raise InputError("train_kglm: no training articles")
    rng = seeded_rng(config.seed)
    vocab = build_vocabulary([d.tokens for d in train_docs], config.min_count, config.max_vocab)
    model = KGLM(vocab, graph, **model_arguments(config, KGLM))
    train_data = _prepare(train_docs, model, "train")
    valid_data = _prepare(valid_docs, model, "valid") if valid_docs else []
    history: list[dict] = []
    # the untrained model, for reference
    if valid_data:
        history.append({"epoch": 0, **prefixed("valid_", _gold_numbers(model, valid_data))})
    best = _fit(model, train_data, valid_data, config, history, rng, progress, joint=True)
    if config.proposal_epochs > 0:
        best = _fit(model, train_data, valid_data, config, history, rng, progress, joint=False)
    return finish_training(best, config, output_dir)


def proposal_log_prob(model: KGLM, x: torch.Tensor, z: dict) -> torch.Tensor:
    """q's training objective on gold z: log q_peek(z | x) (+ log q_nopeek(z | x) when q has no-peeking heads)."""
    total = model.proposal.log_prob(x, z, peek=True)[0]
    if model.proposal.nopeek_projection is not None:
        total = total + model.proposal.log_prob(x, z, peek=False)[0]
    return total


def _fit(
    model: KGLM,
    train_data: list[tuple],
    valid_data: list[tuple],
    config: TrainConfig,
    history: list[dict],
    rng: random.Random,
    progress: bool,
    joint: bool,
) -> BestParameters:
    """``epochs`` of Adam on −(log p + log q) (joint), or ``proposal_epochs`` on −log q (q's parameters only);
    restore the best validation state."""
    params = model.parameters() if joint else model.proposal.parameters()
    optimizer = torch.optim.Adam(list(params), lr=config.lr, weight_decay=config.weight_decay)

    def step(item: tuple) -> tuple:
        title, x, z = item
        log_p = model.log_joint(x, z)[0] if joint else torch.zeros((), dtype=torch.float64)
        log_q = proposal_log_prob(model, x, z)
        if not (torch.isfinite(log_p) and torch.isfinite(log_q)):
            raise RuntimeError(
                f"train article {title!r}: gold annotations outside the model's support "
                f"(log p = {float(log_p)}, log q = {float(log_q)})"
            )
        return -(log_p + log_q) / x.numel(), [-float(log_p.detach()), -float(log_q.detach()), x.numel()]

    def numbers(sums: list) -> dict:
        nll_p, nll_q, tokens = sums
        return {
            "train_q_nll": nll_q / tokens,
            **({"train_joint_ppl": math.exp(nll_p / tokens)} if joint else {}),
        }

    def proposal_score(record: dict) -> float:
        if valid_data:
            return record["valid_q_nll_peek"] + record["valid_q_nll_nopeek"]
        return record["train_q_nll"]

    best = fit_epochs(
        model,
        optimizer,
        history,
        step,
        numbers,
        batches=lambda: list(train_data),
        rng=rng,
        epochs=config.epochs if joint else config.proposal_epochs,
        grad_clip=config.grad_clip,
        validate=(lambda: _gold_numbers(model, valid_data)) if valid_data else None,
        score="joint_ppl" if joint else proposal_score,
        postfix=lambda s: {"train_ppl": f"{math.exp(s[0] / s[2]):.2f}", "q_nll": f"{s[1] / s[2]:.3f}"},
        stage="joint" if joint else "proposal",
        progress=progress,
    )
    best.restore()
    return best


def load_graph_files(
    knowledge_graph: str | None, kg_pickle: str | None, alias_pickle: str | None
) -> KnowledgeGraph:
    """Our JSON graph, or the original ``knowledge_graph.pkl`` (+ ``alias.pkl``) read with the restricted unpickler."""
    if knowledge_graph and kg_pickle:
        raise InputError("give either --knowledge-graph (JSON) or --knowledge-graph-pickle, not both")
    if knowledge_graph:
        return KnowledgeGraph.from_json(knowledge_graph)
    if kg_pickle:
        return knowledge_graph_from_pickles(kg_pickle, alias_pickle)
    raise InputError(
        "a knowledge graph is required: --knowledge-graph graph.json or --knowledge-graph-pickle kg.pkl"
    )


# --- `lm-latent-eval train kglm` ---------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``lm-latent-eval train kglm``."""
    add_trainer_arguments(
        parser,
        TrainConfig,
        "annotated JSONL (Linked WikiText-2 format)",
        {"metavar": "DIR", "help": "generate the synthetic corpus into DIR and train on it"},
    )
    parser.add_argument(
        "--knowledge-graph", help="knowledge graph + aliases in our JSON form (KnowledgeGraph.to_json)"
    )
    parser.add_argument("--knowledge-graph-pickle", help="the original knowledge_graph.pkl")
    parser.add_argument("--alias-pickle", help="the original alias.pkl")


def run(args: argparse.Namespace) -> int:
    """Read the data (or generate it), train, save; print the final validation numbers."""
    config = config_from_args(TrainConfig, args)
    if args.synthetic:
        paths = write_corpus(args.synthetic, seed=config.seed)
        args.train, args.valid, args.knowledge_graph = (
            paths["train"],
            paths["valid"],
            paths["knowledge_graph"],
        )
    if not args.train:
        raise SystemExit("lm-latent-eval train kglm: --train (or --synthetic DIR) is required")
    graph = load_graph_files(args.knowledge_graph, args.knowledge_graph_pickle, args.alias_pickle)
    train_docs = list(read_linked_jsonl(args.train))
    valid_docs = list(read_linked_jsonl(args.valid)) if args.valid else []
    return train_and_report(train_kglm, args, train_docs, valid_docs, graph, config)
