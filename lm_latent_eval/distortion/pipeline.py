"""``lm-latent-eval distortion``: sample a language from p_L at temperature T, score with p_M, write curves.

Writes to --output: sequences.csv (one row per scored sequence), summary.json (settings and every result),
<curve>.csv for each curve, and <curve>.png plots.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..errors import InputError
from ..models import hub_snapshot
from . import error_curves as de
from . import plots
from .artificial_language import max_positions, sample_language, score_sequences
from .perturbations import MEAN_RANDOM_LENGTH, perturbation_chain, potential_productivity, random_sequences

# tokens per sample when the reference declares no context window
DEFAULT_MAX_LENGTH = 128
# share of samples without EOS that may be left out
DEFAULT_MAX_TRUNCATED = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the distortion subcommand."""
    parser.add_argument("--reference", required=True, help="reference causal LM p_L: local folder or Hub id")
    parser.add_argument("--model", required=True, help="evaluated causal LM p_M: local folder or Hub id")
    parser.add_argument("--output", dest="output_dir", required=True, type=Path, help="folder for the curves")
    parser.add_argument("--num-sequences", type=int, default=1000, help="samples drawn from p_L")
    parser.add_argument("--temperature", type=float, default=1.0, help="softmax temperature T of p_L")
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="most tokens per sample, EOS included (default: what the reference's context window holds after BOS, "
        f"or {DEFAULT_MAX_LENGTH} if it declares none)",
    )
    parser.add_argument(
        "--max-truncated",
        type=float,
        default=DEFAULT_MAX_TRUNCATED,
        help="largest share of samples that may draw no EOS within --max-length (they are left out, which conditions "
        "p_L on short sequences); more is an error",
    )
    parser.add_argument(
        "--perturbation-steps", type=int, default=0, help="recursive edits per sample (0 = none)"
    )
    parser.add_argument(
        "--num-random-sequences", type=int, default=0, help="uniform Σ* sequences to score too"
    )
    parser.add_argument(
        "--random-mean-length", type=float, default=MEAN_RANDOM_LENGTH, help="Poisson mean length"
    )
    parser.add_argument(
        "--num-bins", type=int, default=de.NUM_EQUAL_WIDTH_BINS, help="equal-width log p_L bins"
    )
    parser.add_argument("--num-equal-size-bins", type=int, default=de.NUM_EQUAL_SIZE_BINS)
    parser.add_argument(
        "--num-rarity-bins", type=int, default=de.NUM_RARITY_BINS, help="rows of the steps grid"
    )
    parser.add_argument(
        "--min-count", type=int, default=de.MIN_COUNT, help="keep bins with more sequences than this"
    )
    parser.add_argument("--num-resamples", type=int, default=de.NUM_RESAMPLES, help="bootstrap resamples")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="|error| ≤ this (nats) counts as neither under- nor overestimated (float32 scoring noise)",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bos-token-id", type=int, default=None, help="default: the reference tokenizer's BOS"
    )
    parser.add_argument(
        "--eos-token-id", type=int, default=None, help="default: the reference tokenizer's EOS"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def load_causal_lm(name_or_path: str, device: str, what: str = "--model"):
    """(model in eval mode on ``device``, tokenizer) from a local folder or a Hub id (a name that is neither is one
    clean error, ``models.hub_snapshot``)."""
    if not Path(name_or_path).exists():
        name_or_path = str(hub_snapshot(name_or_path, what))

    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.float32).to(device).eval()
    return model, tokenizer


def special_ids(tokenizer, bos: int | None, eos: int | None) -> tuple[int, int]:
    """BOS and EOS ids: the given ones, else the tokenizer's (GPT-2 uses one id for both)."""
    bos = tokenizer.bos_token_id if bos is None else bos
    eos = tokenizer.eos_token_id if eos is None else eos
    if bos is None or eos is None:
        raise InputError(
            f"the reference tokenizer defines no {'BOS' if bos is None else 'EOS'} token: pass its id"
        )
    return int(bos), int(eos)


def alphabet(tokenizer, model_vocab_size: int, bos: int, eos: int) -> np.ndarray:
    """Σ: token ids that both models can emit, special tokens excluded: int64 [V']."""
    special = set(tokenizer.all_special_ids) | {bos, eos}
    return np.array(
        [i for i in range(min(len(tokenizer), model_vocab_size)) if i not in special], dtype=np.int64
    )


def check_same_vocabulary(reference_tokenizer, model_tokenizer) -> None:
    """p_M must read p_L's token ids with the same meaning."""
    ref, mod = reference_tokenizer.get_vocab(), model_tokenizer.get_vocab()
    if ref != mod:
        diff = sorted(set(ref.items()) ^ set(mod.items()))[:5]
        raise InputError(
            f"the reference and model tokenizers differ ({len(ref)} vs {len(mod)} entries; e.g. {diff}): "
            "the distortion error compares probabilities of the same token sequences"
        )


def max_length(reference, requested: int | None) -> int:
    """``--max-length``: the requested one, checked against the reference's context window (BOS takes one position),
    else what that window holds (DEFAULT_MAX_LENGTH when it declares none)."""
    window = max_positions(reference)
    if requested is None:
        return DEFAULT_MAX_LENGTH if window is None else window - 1
    if requested < 1 or (window is not None and requested + 1 > window):
        raise InputError(
            f"--max-length {requested}: BOS + {requested} tokens do not fit the reference's context window of "
            f"{window} positions; pass --max-length {window - 1} or less (the default)"
            if requested >= 1
            else f"--max-length must be a positive integer, got {requested}"
        )
    return requested


def check_finished(finished: np.ndarray, args: argparse.Namespace, window: int | None) -> int:
    """The number of samples that drew no EOS within --max-length (left out, with a warning); InputError when more
    than --max-truncated of them, or too many to leave more than --min-count sequences, are left out."""
    num_truncated, num_kept = int((~finished).sum()), int(finished.sum())
    what = (
        f"{num_truncated} of {finished.size} samples drew no EOS within --max-length {args.max_length}: they are "
        "not complete sequences of p_L"
    )
    if num_truncated > args.max_truncated * finished.size or num_kept <= args.min_count:
        remedy = (
            "raise --max-length (up to the reference's context window) or lower --temperature"
            if window is None or args.max_length < window - 1
            else "that is the reference's whole context window: use a reference that ends its samples with EOS "
            "(a model trained without an end-of-text target never does)"
        )
        raise InputError(
            f"{what}, and the {num_kept} left would describe p_L conditioned on short sequences (allowed: "
            f"--max-truncated {args.max_truncated:g} of the samples left out, more than --min-count "
            f"{args.min_count} left); {remedy}"
        )
    if num_truncated:
        warnings.warn(f"{what} and are left out of every result (counted in summary.json)", stacklevel=2)
    return num_truncated


def _write_csv(path: Path, columns: dict[str, list]) -> None:
    keys = list(columns)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(keys)
        writer.writerows(zip(*(columns[k] for k in keys)))


def _curve_columns(curve: dict) -> dict[str, list]:
    return {k: v for k, v in curve.items() if isinstance(v, list)}


def _grid_columns(grid: dict) -> dict[str, list]:
    rows = {"bin_left": [], "bin_right": [], "steps": [], "count": [], "mean_error": []}
    for r, (lo, hi) in enumerate(zip(grid["bin_left"], grid["bin_right"])):
        for j, s in enumerate(grid["steps"]):
            rows["bin_left"].append(lo)
            rows["bin_right"].append(hi)
            rows["steps"].append(s)
            rows["count"].append(grid["count"][r][j])
            rows["mean_error"].append(grid["mean_error"][r][j])
    return rows


def run(args: argparse.Namespace) -> int:
    """Sample, perturb, score and write every curve; prints the headline numbers."""
    progress = not args.no_progress
    # made once there is something to write
    out = Path(args.output_dir)
    ref_model, ref_tok = load_causal_lm(args.reference, args.device, "--reference")
    model, model_tok = load_causal_lm(args.model, args.device)
    check_same_vocabulary(ref_tok, model_tok)
    bos, eos = special_ids(ref_tok, args.bos_token_id, args.eos_token_id)
    sigma = alphabet(ref_tok, min(ref_model.config.vocab_size, model.config.vocab_size), bos, eos)

    args.max_length = max_length(ref_model, args.max_length)
    generator = torch.Generator(device=args.device).manual_seed(args.seed)
    language = sample_language(
        ref_model,
        args.num_sequences,
        bos,
        eos,
        args.temperature,
        args.max_length,
        args.batch_size,
        generator,
        progress,
    )
    num_truncated = check_finished(language.finished, args, max_positions(ref_model))
    keep = np.flatnonzero(language.finished)
    samples = [language.tokens[i] for i in keep]

    # rows to score: the samples (steps 0), their recursive perturbations (steps 1..S), random Σ* sequences
    rng = np.random.default_rng(args.seed)
    seqs, source, steps, parent = (
        list(samples),
        ["sample"] * len(samples),
        [0] * len(samples),
        list(range(len(samples))),
    )
    for i, x in enumerate(samples):
        chain = perturbation_chain(x, args.perturbation_steps, sigma, rng)
        seqs += chain
        source += ["perturbed"] * len(chain)
        steps += list(range(1, len(chain) + 1))
        parent += [i] * len(chain)
    randoms = random_sequences(args.num_random_sequences, sigma, rng, args.random_mean_length)
    seqs += randoms
    source += ["random"] * len(randoms)
    # not derived from a sample
    steps += [-1] * len(randoms)
    parent += [-1] * len(randoms)

    ref_tokens = [language.token_log_probs[i] for i in keep] + score_sequences(
        ref_model, seqs[len(samples) :], bos, eos, args.temperature, args.batch_size, progress, "scoring p_L"
    )
    model_tokens = score_sequences(model, seqs, bos, eos, 1.0, args.batch_size, progress, "scoring p_M")
    log_p_ref = np.array([t.sum() for t in ref_tokens])
    log_p_model = np.array([t.sum() for t in model_tokens])
    token_errors = [m - r for m, r in zip(model_tokens, ref_tokens)]
    errors = de.sequence_errors(log_p_model, log_p_ref)
    source_arr, steps_arr = np.array(source), np.array(steps)

    out.mkdir(parents=True, exist_ok=True)
    _write_csv(
        out / "sequences.csv",
        {
            "source": source,
            "perturbation_steps": steps,
            "parent": parent,
            "length": [len(x) + 1 for x in seqs],
            "log_p_reference": log_p_ref.tolist(),
            "log_p_model": log_p_model.tolist(),
            "error": errors.tolist(),
            "tokens": [" ".join(map(str, x)) for x in seqs],
        },
    )

    is_sample = source_arr == "sample"
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
    results = {
        "settings": settings,
        "num_truncated": num_truncated,
        "potential_productivity": potential_productivity(samples),
        "language": de.distortion_report(
            log_p_model[is_sample],
            log_p_ref[is_sample],
            token_errors=[token_errors[i] for i in np.flatnonzero(is_sample)],
            num_bins=args.num_bins,
            num_equal_size_bins=args.num_equal_size_bins,
            min_count=args.min_count,
            num_resamples=args.num_resamples,
            tolerance=args.tolerance,
            seed=args.seed,
        ),
        "perturbation_grid": None,
        "random": None,
    }
    if args.perturbation_steps > 0:
        grid_rows = steps_arr >= 0
        results["perturbation_grid"] = de.perturbation_grid(
            log_p_ref[grid_rows],
            errors[grid_rows],
            steps_arr[grid_rows],
            args.num_rarity_bins,
            args.min_count,
            args.tolerance,
        )
    if args.num_random_sequences > 0:
        is_random = source_arr == "random"
        results["random"] = de.summary(errors[is_random], args.tolerance)
        results["random"]["equal_width_curve"] = de.equal_width_curve(
            log_p_ref[is_random],
            errors[is_random],
            args.num_bins,
            args.min_count,
            args.num_resamples,
            rng=np.random.default_rng(args.seed),
        )

    with open(out / "summary.json", "w") as fh:
        json.dump(results, fh, indent=2, allow_nan=False, default=_json_default)

    language_report = results["language"]
    figures = {
        "equal_width_curve": (language_report["equal_width_curve"], plots.plot_error_curve),
        "equal_size_curve": (language_report["equal_size_curve"], plots.plot_error_curve),
        "length_curve": (language_report["length_curve"], plots.plot_length_curve),
        "perturbation_grid": (results["perturbation_grid"], plots.plot_perturbation_grid),
    }
    models = f"p_M = {_short(args.model)}, p_L = {_short(args.reference)} at T = {args.temperature:g}"
    if results["random"] is not None:
        figures["random_equal_width_curve"] = (results["random"]["equal_width_curve"], plots.plot_error_curve)
    for name, (result, plot) in figures.items():
        if result is None:
            continue
        _write_csv(
            out / f"{name}.csv",
            _grid_columns(result) if name == "perturbation_grid" else _curve_columns(result),
        )
        # an empty frame would read as "no error"
        if _empty(result):
            warnings.warn(
                f"{name}: every bin holds --min-count {args.min_count} sequences or fewer, so no figure is drawn "
                f"(its CSV has no rows); {REMEDY[name]} or lower --min-count",
                stacklevel=2,
            )
            continue
        plots.save_figure(plot(result, title=f"{name.replace('_', ' ')}: {models}"), out / f"{name}.png")

    print(
        f"{len(samples)} sequences from p_L (T={args.temperature:g}): "
        f"mean error {language_report['mean_error']:.4f} nats, "
        f"{language_report['share_underestimated']:.1%} underestimated; "
        f"P_N = {results['potential_productivity']:.3f}"
    )
    print(f"results written to {out}")
    return 0


# per figure: the option that draws its sequences, then the one that sets its bins (if any)
REMEDY = {
    "equal_width_curve": "draw more --num-sequences, use fewer --num-bins",
    "random_equal_width_curve": "draw more --num-random-sequences, use fewer --num-bins",
    "equal_size_curve": "draw more --num-sequences, use fewer --num-equal-size-bins",
    # a bin per length
    "length_curve": "draw more --num-sequences",
    "perturbation_grid": "draw more --num-sequences, use fewer --num-rarity-bins",
}


def _empty(result: dict) -> bool:
    """No bin kept: a curve without points, or a grid whose every cell is blank."""
    rows = result["mean_error"]
    return all(v is None for row in rows for v in (row if isinstance(row, list) else [row]))


def _short(name: str) -> str:
    """A model's folder or Hub id, shortened for a figure title (its last two path parts)."""
    return "/".join(Path(name).parts[-2:])


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return None if math.isnan(value) else float(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
