"""``lm-latent-eval lda-peers``: an LDA's held-out perplexity by our estimators beside what LDA libraries report.

For one model (our checkpoint, or a scikit-learn / gensim / tomotopy / MALLET model, ``pretrained``) and documents
(default: the bundled held-out paragraphs of Python's documentation): the exact value (dynamic program, where
feasible), SMC and IS (the default settings, K particles / samples), then what scikit-learn's and gensim's own
perplexity calls print for the same Φ and α, MALLET's left-to-right evaluator, and tomotopy's ``infer`` for a
tomotopy model trained on ``--tomotopy-train``; each library row with the cause of its gap in one line
(``models/lda/peers.py``). A library that is not installed gives a row saying so.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ..estimators import EstimatorSettings, resolve
from ..estimators.corpus import corpus_estimate
from ..models import load_model
from ..models.lda import LDA, peers
from ..models.lda.corpus import CORPUS_DIR, read_texts
from ..models.lda.loaders import from_tomotopy
from .json_files import write_json


@dataclass(frozen=True)
class PeerRow:
    """One line of the table: a tool, what it reports, its perplexity (NaN: none), the call made, and the cause of its
    gap to the exact value (or, for our estimators, the honest statement at the default level, 95%)."""

    tool: str
    reports: str
    perplexity: float
    call: str
    cause: str


def our_rows(model, texts: list[str], num_samples: int, seed: int) -> list[PeerRow]:
    """Exact (where every document is feasible), SMC and IS at K = num_samples: one row each."""
    smc = EstimatorSettings("smc", num_samples=num_samples, seed=seed)
    # (settings, the row's label, what it reports)
    ours = [
        (EstimatorSettings("exact"), "exact (dynamic program over topic counts)", "log p(x) summed exactly"),
        (smc, f"SMC, K = {num_samples}", f"unbiased p̂ per document, {smc.smc_runs} runs, resampling"),
        (
            EstimatorSettings("is", num_samples=num_samples, seed=seed),
            f"IS, K = {num_samples}",
            "unbiased p̂ per document (the model's peeking proposal)",
        ),
    ]
    rows = []
    for settings, label, what in ours:
        try:
            run = resolve(settings, model)
            corpus = corpus_estimate([run.estimate(t) for t in texts])
        except ValueError as err:
            # the exact DP refuses a long document
            rows.append(PeerRow(f"lm-latent-eval {settings.estimator}", "", math.nan, "", str(err)))
            continue
        statement = corpus.interval
        cause = (
            "—"
            if not corpus.method.draws_samples
            else (
                f"{statement.level:.0%}: [{corpus.perplexity_interval[0]:.1f}, {corpus.perplexity_interval[1]:.1f}]"
                if statement.two_sided
                else f"certified ≤ {corpus.perplexity_upper_bound:.1f} ({statement.level:.0%})"
            )
        )
        rows.append(PeerRow(label, what, corpus.perplexity, "", cause))
    return rows


def library_rows(model, texts: list[str], tomotopy_train: list[str] | None, particles: int) -> list[PeerRow]:
    """scikit-learn, gensim, MALLET-style and (with training texts) tomotopy: one row each, or why not."""
    calls = [
        ("scikit-learn", lambda: peers.sklearn_perplexity(model, texts)),
        ("gensim", lambda: peers.gensim_perplexity(model, texts)),
        ("MALLET-style left-to-right", lambda: peers.mallet_perplexity(model, texts, particles)),
    ]
    if tomotopy_train is not None:
        calls.append(("tomotopy", lambda: _tomotopy(model, texts, tomotopy_train)))
    rows = []
    for tool, call in calls:
        try:
            figure = call()
        except ImportError as err:
            rows.append(PeerRow(tool, "", math.nan, "", f"not installed ({err})"))
            continue
        except ValueError as err:
            rows.append(PeerRow(tool, "", math.nan, "", str(err)))
            continue
        rows.append(PeerRow(figure.tool, figure.reports, figure.perplexity, figure.call, figure.cause))
    return rows


def _tomotopy(model, texts: list[str], train: list[str]):
    """tomotopy's own model (same vocabulary, K, α and η as ``model``'s): its infer figure, with our exact value of
    that model in the cause."""
    alpha = float(model.alpha.mean())
    eta = float(model.eta) if math.isfinite(float(model.eta)) else 0.01
    mdl = peers.train_tomotopy(train, model.tokenizer, model.num_topics, alpha, eta)
    figure = peers.tomotopy_perplexity(mdl, model.tokenizer, texts)
    own = from_tomotopy(LDA, mdl)
    exact_run = resolve(EstimatorSettings("exact"), own)
    exact = corpus_estimate([exact_run.estimate(t) for t in texts])
    cause = f"{figure.cause}; the exact perplexity of that tomotopy model is {exact.instance_perplexity:.1f}"
    return peers.LibraryFigure(
        figure.tool, figure.call + " (its own model)", figure.perplexity, figure.reports, cause
    )


def markdown(rows: list[PeerRow]) -> str:
    lines = ["| tool | what it reports | perplexity | cause of the gap / statement |", "|---|---|---|---|"]
    for r in rows:
        value = "–" if math.isnan(r.perplexity) else f"{r.perplexity:,.1f}"
        tool = f"{r.tool}: `{r.call}`" if r.call else r.tool
        cells = [tool, r.reports or "–", value, r.cause]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pretrained", default=None, help="LDA checkpoint or library model file (default: bundled)"
    )
    parser.add_argument(
        "--lda-format", default=None, help="auto, checkpoint, sklearn, gensim, tomotopy or mallet"
    )
    parser.add_argument("--alpha", default=None, help="MALLET weights files: α (one value or ':'-separated)")
    parser.add_argument(
        "--data", default=None, help=".jsonl (text) or .txt documents (default: bundled held-out)"
    )
    parser.add_argument("--num-samples", type=int, default=100, help="K of SMC and IS")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--particles", type=int, default=10, help="MALLET-style particles (its default: 10)")
    parser.add_argument(
        "--tomotopy-train", default=None, help="train a tomotopy model on these documents too"
    )
    parser.add_argument("--output", default=None, help="folder for table.md and results.json")


def run(args: argparse.Namespace) -> int:
    options = {k: v for k, v in {"lda_format": args.lda_format, "alpha": args.alpha}.items() if v is not None}
    try:
        model, _ = load_model("lda", args.pretrained, given_as="--pretrained", **options)
        texts = read_texts(args.data or CORPUS_DIR / "test.jsonl")
        train = read_texts(args.tomotopy_train) if args.tomotopy_train else None
        if not any(model.tokenize(t).numel() for t in texts):
            raise ValueError(
                f"none of the {len(texts)} documents has a word of the model's {len(model.vocab)}-word vocabulary "
                f"(e.g. {model.vocab[:3]}): no perplexity to compare"
            )
    except (ValueError, ImportError, OSError) as err:
        print(f"lm-latent-eval lda-peers: {err}", file=sys.stderr)
        return 2
    rows = our_rows(model, texts, args.num_samples, args.seed) + library_rows(
        model, texts, train, args.particles
    )
    table = markdown(rows)
    print(f"# {model.source}: {model.num_topics} topics, {len(model.vocab)} words; {len(texts)} documents\n")
    print(table)
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(table + "\n", encoding="utf-8")
        write_json(out / "results.json", [asdict(r) for r in rows])
    return 0
