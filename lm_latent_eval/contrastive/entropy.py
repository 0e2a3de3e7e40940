"""Contrastive entropy (Arora & Rangarajan 2016): H_C(T; d) = (1/N)(log p̃(T) − log p̃(T_d)) and R(d) = H_C(d) / H_C(d_base).

T is a test set of S sentences, T_d its image through the noisy channel of ``lm_latent_eval.contrastive.channel`` at level d,
log p̃ a (possibly unnormalized) sentence score summed over the test set, and N the number of words (``unit="word"``)
or of sentences (``unit="sentence"``, for sentence-level models). Because the channel preserves word count, adding
c per word (or per sentence) to every score leaves H_C unchanged: normalization constants cancel. Each level is
averaged over R independent distortions; the spread is the sample standard deviation (ddof = 1) over the R passes.
R(d) is reported as mean H_C(d) / mean H_C(d_base), its spread as the std of the per-pass ratios (pass r at d over
pass r at d_base).

Scores can come from anywhere (``contrastive_entropy_report``), from a causal LM (``causal_lm_scorer``) or from any
latent LM of ours through the estimators (``latent_lm_scorer``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..estimators import EstimatorSettings, resolve
from ..models import MODELS, load_model
from ..protocol import has
from .channel import DEFAULT_LEVELS, check_level, distortion_set, normalize_whitespace

DEFAULT_BASE_LEVEL = 0.1
DEFAULT_NUM_DISTORTIONS = 10
UNITS = ("word", "sentence")

# S sentences -> S log scores log p̃(sentence)
Scorer = Callable[[list[str]], Sequence[float]]


def _as_scores(scores, what: str) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"{what}: expected one score per sentence (1-d), got shape {s.shape}")
    bad = np.flatnonzero(~np.isfinite(s))
    if bad.size:
        raise ValueError(
            f"{what}: sentence {int(bad[0])} has a non-finite score {s[bad[0]]} ({bad.size} in all)"
        )
    return s


def num_units(texts: Sequence[str], unit: str = "word") -> int:
    """N: the number of whitespace-separated words of the test set, or its number of sentences."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    return len(texts) if unit == "sentence" else sum(len(t.split()) for t in texts)


def contrastive_entropy(
    original_scores: Sequence[float], distorted_scores: Sequence[float], num_units: int
) -> float:
    """H_C = (Σ_s log p̃(t_s) − Σ_s log p̃(t_s^d)) / N for S paired sentence scores ([S] and [S])."""
    orig = _as_scores(original_scores, "original scores")
    dist = _as_scores(distorted_scores, "distorted scores")
    if orig.shape != dist.shape:
        raise ValueError(f"got {orig.size} original but {dist.size} distorted sentence scores")
    if isinstance(num_units, bool) or int(num_units) != num_units or num_units <= 0:
        raise ValueError(
            f"the number of words (or sentences) N must be a positive integer, got {num_units!r}"
        )
    return float((orig.sum() - dist.sum()) / num_units)


def _spread(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if values.size > 1 else 0.0


def contrastive_entropy_report(
    original_scores: Sequence[float],
    distorted_scores: Mapping[float, Sequence[Sequence[float]]],
    num_units: int,
    base_level: float = DEFAULT_BASE_LEVEL,
) -> dict:
    """H_C per level (mean and std over R passes, per-pass values) and R(d) = H_C(d)/H_C(d_base) from [R][S] scores per level."""
    levels = sorted(check_level(d) for d in distorted_scores)
    base = check_level(base_level)
    if base not in levels:
        raise ValueError(f"base level {base} is not among the distortion levels {levels}")
    by_level = {check_level(d): v for d, v in distorted_scores.items()}
    per_pass = {}
    for d in levels:
        passes = by_level[d]
        if len(passes) == 0:
            raise ValueError(f"level {d}: no distorted passes")
        values = []
        for r, p in enumerate(passes):
            try:
                values.append(contrastive_entropy(original_scores, p, num_units))
            except ValueError as err:
                raise ValueError(f"level {d}, distortion {r}: {err}") from err
        per_pass[d] = np.array(values, dtype=np.float64)
    sizes = {d: v.size for d, v in per_pass.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"every level needs the same number of distortion passes to pair them, got {sizes}")
    base_values = per_pass[base]
    zero = int(np.sum(base_values == 0.0))
    if zero:
        warnings.warn(
            f"H_C at the base level {base} is 0 in {zero} of {base_values.size} distortions (the scores do not tell "
            "those distorted texts from the originals): their per-distortion ratios are undefined, ratio_std is NaN"
            + (" and so is every ratio" if base_values.mean() == 0.0 else ""),
            stacklevel=2,
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = {d: per_pass[d] / base_values for d in levels}
        ratio_of_means = {d: per_pass[d].mean() / base_values.mean() for d in levels}
    return {
        "levels": levels,
        "base_level": base,
        "num_units": int(num_units),
        "num_distortions": int(base_values.size),
        "contrastive_entropy": {d: float(per_pass[d].mean()) for d in levels},
        "contrastive_entropy_std": {d: _spread(per_pass[d]) for d in levels},
        "contrastive_entropy_per_distortion": {d: per_pass[d].tolist() for d in levels},
        "ratio": {d: _nan_if_undefined(ratio_of_means[d]) for d in levels},
        "ratio_std": {d: _spread(ratios[d]) if np.all(np.isfinite(ratios[d])) else math.nan for d in levels},
    }


def _nan_if_undefined(x: float) -> float:
    return float(x) if math.isfinite(x) else math.nan


def report_from_sentence_scores(
    original_scores: Sequence[float],
    distorted_scores: Sequence[Sequence[Sequence[float]]],
    num_words: Sequence[int],
    levels: Sequence[float] = DEFAULT_LEVELS,
    base_level: float = DEFAULT_BASE_LEVEL,
    unit: str = "word",
) -> dict:
    """``contrastive_entropy_report`` from per-sentence rows: score [S], distorted scores [S][L][R], word counts [S]."""
    levels = [check_level(d) for d in levels]
    s = len(original_scores)
    if len(distorted_scores) != s or len(num_words) != s:
        raise ValueError(
            f"got {s} original scores, {len(distorted_scores)} distorted rows and {len(num_words)} word counts"
        )
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    counts = set()
    for i, row in enumerate(distorted_scores):
        per_level = [len(r) for r in row]
        if len(per_level) != len(levels) or len(set(per_level)) != 1:
            raise ValueError(
                f"sentence {i}: distorted scores must be [levels][distortions] for the {len(levels)} levels {levels} "
                f"with the same number of distortions each, got {len(per_level)} rows of lengths {per_level}"
            )
        counts.add(per_level[0])
    if len(counts) != 1:
        raise ValueError(
            f"every sentence needs the same number of distortions per level, got {sorted(counts)}"
        )
    if any(isinstance(n, bool) or int(n) != n or n < 0 for n in num_words):
        raise ValueError("word counts must be non-negative integers")
    # [S, L, R]
    grid = np.asarray(distorted_scores, dtype=np.float64)
    n = len(num_words) if unit == "sentence" else int(sum(int(w) for w in num_words))
    distorted = {d: [grid[:, j, r] for r in range(grid.shape[2])] for j, d in enumerate(levels)}
    report = contrastive_entropy_report(original_scores, distorted, n, base_level)
    report["unit"] = unit
    return report


def contrastive_entropy_from_scorer(
    texts: Sequence[str],
    scorer: Scorer,
    levels: Sequence[float] = DEFAULT_LEVELS,
    base_level: float = DEFAULT_BASE_LEVEL,
    num_distortions: int = DEFAULT_NUM_DISTORTIONS,
    seed: int = 0,
    vocabulary: Sequence[str] | None = None,
    unit: str = "word",
) -> dict:
    """Distort the S sentences R times per level, score everything with ``scorer`` (texts -> log p̃), report H_C and R."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of sentences, got a single string")
    originals = [normalize_whitespace(t) for t in texts]
    levels = sorted({check_level(d) for d in (*levels, base_level)})
    corpora = distortion_set(originals, levels, num_distortions, seed, vocabulary)
    flat = originals + [s for d in levels for corpus in corpora[d] for s in corpus]
    scores = np.asarray(scorer(flat), dtype=np.float64)
    if scores.shape != (len(flat),):
        raise ValueError(f"scorer returned {scores.shape} scores for {len(flat)} sentences")
    s = len(originals)
    distorted, offset = {}, s
    for d in levels:
        distorted[d] = [scores[offset + r * s : offset + (r + 1) * s] for r in range(num_distortions)]
        offset += num_distortions * s
    report = contrastive_entropy_report(scores[:s], distorted, num_units(originals, unit), base_level)
    report.update(unit=unit, seed=seed)
    return report


def causal_lm_scorer(
    model_name_or_path: str, device: str = "cpu", batch_size: int = 16, **from_pretrained_kwargs
) -> Scorer:
    """A scorer log p(text | BOS) = Σ_t log p(y_t | BOS, y_<t) from a transformers causal LM (local path or Hub id).

    The prefix is the tokenizer's BOS token (EOS when there is none), as lm-eval's ``hf`` backend does for an empty
    context; no end-of-text event is scored. A text longer than the model's context is an error, not truncated.
    """
    # kept local (~0.8 s): only this scorer needs transformers; the contrastive_entropy metric does not
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
    model = (
        AutoModelForCausalLM.from_pretrained(model_name_or_path, **from_pretrained_kwargs).to(device).eval()
    )
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if prefix is None:
        raise ValueError(
            f"{model_name_or_path}: the tokenizer has neither a BOS nor an EOS token to condition on"
        )
    max_len = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )

    @torch.no_grad()
    def score(texts: list[str]) -> list[float]:
        out = []
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            ids = [[prefix] + tokenizer(t, add_special_tokens=False)["input_ids"] for t in batch]
            for t, row in zip(batch, ids):
                if max_len is not None and len(row) > max_len:
                    raise ValueError(
                        f"sentence {t[:60]!r} has {len(row)} tokens with BOS, over the model's {max_len}"
                    )
            width = max(len(r) for r in ids)
            input_ids = torch.full((len(ids), width), prefix, dtype=torch.long)
            mask = torch.zeros((len(ids), width), dtype=torch.long)
            for i, row in enumerate(ids):
                input_ids[i, : len(row)] = torch.tensor(row)
                mask[i, : len(row)] = 1
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits.double()
            logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:, None].to(device))[
                ..., 0
            ]
            out.extend((logp * mask[:, 1:].to(device)).sum(-1).cpu().tolist())
        return out

    return score


def latent_lm_scorer(
    model, settings=None, device: str = "cpu", pretrained: str | None = None, progress: bool = True
) -> Scorer:
    """A scorer log p̂(text) from a latent LM of ours (instance, registered name or ``pkg.mod:Cls``) via the estimators.

    A name loads ``pretrained`` (local folder or Hub id; default: the bundled checkpoint) with ``models.load_model``.
    ``progress``: a progress bar over the sentences of each call (on stderr).
    """
    settings = settings or EstimatorSettings()
    if isinstance(model, str):
        model, _ = load_model(model, pretrained, device=device)
    estimator = resolve(settings, model)

    def score(texts: list[str]) -> list[float]:
        return [
            estimator.estimate(t, device=device).log_likelihood
            for t in tqdm(texts, desc="scoring sentences", leave=False, disable=not progress)
        ]

    return score


def make_scorer(
    model,
    settings=None,
    device: str = "cpu",
    pretrained: str | None = None,
    batch_size: int = 16,
    progress: bool = True,
) -> Scorer:
    """A scorer from a callable, a latent LM instance, one of our model names / ``pkg.mod:Cls``, or a causal LM path/Hub id.
    ``progress``: a latent LM's progress bar over the sentences it scores (``False`` in a doctest or a log)."""
    if has(model, "latent_lm"):
        return latent_lm_scorer(model, settings, device, progress=progress)
    if callable(model):
        return model
    if isinstance(model, str) and (model in MODELS or ":" in model):
        return latent_lm_scorer(model, settings, device, pretrained, progress=progress)
    if isinstance(model, str):
        return causal_lm_scorer(model, device=device, batch_size=batch_size)
    raise TypeError(
        f"cannot score with {type(model).__name__}: pass a model name, a path, a LatentLM or a callable"
    )
