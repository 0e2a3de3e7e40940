"""``lm-latent-eval check-model``: the contract's properties that hold for any latent LM, checked on short texts.

A user's own model (``--model pkg.mod:Class --pretrained ...``) is checked the way the contract table checks ours:

- **texts**: ``tokenize`` gives a 1-d integer tensor for every text, 0 tokens for the empty one;
- **shapes**: ``proposal.sample(x, K)`` returns K configurations and a finite float log q [K], and ``log_joint`` a
  float64 [K] without NaN or +inf, not all −inf;
- **log q**: the frequencies of K draws match exp(log q) of the configurations drawn (z-scores; skipped where nearly
  every draw is distinct, as for a continuous latent), and the drawn configurations' q-mass is at most 1;
- **estimators agree**: IS and, for a model with the stepwise part, SMC without resampling (the stepwise increments
  as importance weights) give the same log p̂ within their errors, and both agree with ``log_marginal`` where the
  model has one: the increments must telescope to log p(x, z) − log q(z | x);
- **prefix declaration**: with the model's vocabulary (``--words FILE`` or its own ``vocab``), Σ_w p(context ⊕ w) /
  p(context) over the next word is 1 for a prefix probability (``prefix_probability = True``) and below 1 for a model
  that scores complete texts (an end of sentence, or complete trees without one); a declaration that disagrees fails.
  With ``--partial-words`` (a list of some words) only a sum above 1 fails.

Each check prints one row (passed, failed, or skipped with why); the command exits 1 when any failed.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
import torch

from .documents import read_texts
from .estimators import EstimatorSettings, estimate_document, importance_log_weights, log_mean_exp
from .models import load_model
from .protocol import has, is_prefix_probability, num_particles

DEFAULT_TEXTS = ("the cat sat on the mat", "a dog ran")
Z_LIMIT = 5.0


@dataclass(frozen=True)
class Check:
    """One property: ``passed`` True, False, or None (skipped), and what was seen."""

    name: str
    passed: bool | None
    detail: str


def _keys(z) -> list[bytes]:
    """One hashable key per particle of z (its leaves' values as bytes)."""
    leaves = []

    def collect(v):
        if isinstance(v, torch.Tensor):
            leaves.append(v.detach().cpu().reshape(v.shape[0], -1).double().numpy())
        elif isinstance(v, dict):
            for item in v.values():
                collect(item)
        elif isinstance(v, (tuple, list)):
            for item in v:
                collect(item)

    collect(z)
    rows = np.concatenate(leaves, axis=1) if leaves else np.zeros((num_particles(z), 0))
    return [row.tobytes() for row in rows]


def check_texts(model, texts: list[str]) -> Check:
    for text in [*texts, ""]:
        x = model.tokenize(text)
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.is_floating_point():
            return Check("texts", False, f"tokenize({text!r}) is not a 1-d integer tensor")
        if text == "" and x.numel() != 0:
            return Check("texts", False, f"tokenize('') has {x.numel()} tokens, expected 0")
    return Check("texts", True, f"{len(texts)} texts and the empty one tokenize to 1-d integer tensors")


def check_shapes(model, x: torch.Tensor, k: int = 256) -> Check:
    z, log_q = model.proposal.sample(x, k, generator=torch.Generator().manual_seed(0))
    log_p = model.log_joint(x, z)
    problems = []
    if num_particles(z) != k:
        problems.append(f"sample returned {num_particles(z)} configurations for K = {k}")
    if tuple(log_q.shape) != (k,) or not torch.isfinite(log_q).all():
        problems.append(f"log q has shape {tuple(log_q.shape)} or non-finite values")
    if tuple(log_p.shape) != (k,) or log_p.dtype != torch.float64:
        problems.append(
            f"log_joint returned {log_p.dtype} of shape {tuple(log_p.shape)}, expected float64 [{k}]"
        )
    elif torch.isnan(log_p).any() or torch.isposinf(log_p).any() or torch.isneginf(log_p).all():
        problems.append("log_joint has NaN or +inf, or is −inf for every draw")
    return Check(
        "shapes", not problems, "; ".join(problems) or f"K = {k}: z, log q [K], log_joint float64 [K]"
    )


def check_log_q(model, x: torch.Tensor, k: int = 4000) -> Check:
    z, log_q = model.proposal.sample(x, k, generator=torch.Generator().manual_seed(1))
    keys = _keys(z)
    distinct: dict[bytes, tuple[int, float]] = {}
    for key, lq in zip(keys, log_q.double().tolist()):
        count, _ = distinct.get(key, (0, lq))
        distinct[key] = (count + 1, lq)
    if len(distinct) > k / 2:
        return Check("log q", None, f"{len(distinct)} distinct of {k} draws: too many to count frequencies")
    mass = sum(math.exp(lq) for _, lq in distinct.values())
    z_scores = [
        (count - k * math.exp(lq)) / math.sqrt(k * math.exp(lq))
        for count, lq in distinct.values()
        if k * math.exp(lq) >= 20
    ]
    worst = max((abs(s) for s in z_scores), default=0.0)
    passed = worst <= Z_LIMIT and mass <= 1.0 + 1e-6
    return Check(
        "log q",
        passed,
        f"{len(distinct)} distinct configurations of {k} draws hold q-mass {mass:.4f} (≤ 1); largest |z| of their "
        f"counts against K·q: {worst:.2f} (limit {Z_LIMIT})",
    )


def check_estimators(model, text: str, k: int = 1000) -> Check:
    settings = EstimatorSettings("is", num_samples=k, seed=2)
    is_est = estimate_document(model, text, settings)
    rows = {"IS": (is_est.log_likelihood, is_est.error().relative_variance)}
    if has(model, "stepwise"):
        smc = estimate_document(
            model, text, EstimatorSettings("smc", num_samples=k, seed=3, resample_threshold=0.0)
        )
        rows["stepwise IS"] = (smc.log_likelihood, smc.error().relative_variance)
    if has(model, "tractable_marginal"):
        rows["log_marginal"] = (float(model.log_marginal(model.tokenize(text))), 0.0)
    values = list(rows.values())
    worst = 0.0
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            spread = math.sqrt(max(values[i][1] + values[j][1], 1e-12))
            worst = max(worst, abs(values[i][0] - values[j][0]) / spread)
    detail = ", ".join(f"{name} {ll:.4f}" for name, (ll, _) in rows.items())
    if len(rows) < 2:
        return Check(
            "estimators agree", None, f"{detail}: no stepwise part and no log_marginal to compare with"
        )
    return Check("estimators agree", worst <= Z_LIMIT, f"{detail}; largest gap {worst:.2f} standard errors")


def check_prefix(model, context: str, words: list[str], full: bool, k: int = 200) -> Check:
    declared = is_prefix_probability(model)
    if not words:
        return Check(
            "prefix declaration", None, "no word list (--words FILE, or the model's vocab attribute)"
        )

    def log_p(text: str) -> float:
        x = model.tokenize(text)
        if has(model, "tractable_marginal"):
            return float(model.log_marginal(x))
        return float(log_mean_exp(importance_log_weights(model, x, num_samples=k, seed=4, document=text)))

    base = log_p(context)
    total = float(np.exp(np.logaddexp.reduce([log_p(f"{context} {w}") - base for w in words])))
    if declared is True and (total > 1.1 or (full and total < 0.9)):
        verdict = False
        why = "prefix_probability = True needs 1: declare False if log_joint scores complete texts"
    elif declared is False and full and abs(total - 1.0) < 0.01:
        verdict = False
        why = "1 means a prefix probability: declare prefix_probability = True"
    else:
        verdict, why = True, f"consistent with prefix_probability = {declared}"
    scope = "the whole vocabulary" if full else f"{len(words)} words"
    return Check(
        "prefix declaration", verdict, f"Σ_w p(next word = w | {context!r}) over {scope} = {total:.3f}: {why}"
    )


def run_checks(
    model, texts: list[str], words: list[str] | None = None, full_vocabulary: bool = False
) -> list[Check]:
    """Every check on ``model`` with ``texts`` (short: the log q check draws 4,000 configurations of the first), without
    gradients (a trainable model's ``log_marginal`` may build a graph)."""
    with torch.no_grad():
        x = model.tokenize(texts[0])
        checks = [check_texts(model, texts), check_shapes(model, x), check_log_q(model, x)]
        checks.append(check_estimators(model, texts[0]))
        checks.append(check_prefix(model, " ".join(texts[0].split()[:2]), words or [], full_vocabulary))
    return checks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a name of the model table or package.module:Class")
    parser.add_argument(
        "--pretrained", default=None, help="checkpoint folder or Hub id (default: the bundled one)"
    )
    parser.add_argument(
        "--data", default=None, help="short texts to check on (.jsonl text field or one per line)"
    )
    parser.add_argument(
        "--words",
        default=None,
        help="the model's whole vocabulary, one word per line, for the prefix check (default: its vocab attribute)",
    )
    parser.add_argument(
        "--partial-words",
        action="store_true",
        help="--words holds only some words: then only a sum above 1 shows a wrong declaration",
    )


def run(args: argparse.Namespace) -> int:
    model, _ = load_model(args.model, args.pretrained, given_as="--pretrained")
    texts = read_texts(args.data) if args.data else list(DEFAULT_TEXTS)
    vocab = getattr(model, "vocab", None)
    if args.words:
        words, full = read_texts(args.words), not args.partial_words
    elif isinstance(vocab, (list, tuple)) and all(isinstance(w, str) for w in vocab):
        words, full = [w for w in vocab if w.strip()], True
    else:
        words, full = [], False
    checks = run_checks(model, texts, words, full)
    for c in checks:
        mark = {True: "passed", False: "FAILED", None: "skipped"}[c.passed]
        print(f"{c.name:20s} {mark:8s} {c.detail}")
    return 1 if any(c.passed is False for c in checks) else 0
