"""Coverage of the statements printed for ``latent_masked`` against the exact dynamic program, over many seeds.

For each setting (the package defaults; ``peek=false``; ...) and each seed, the corpus statement of the bundled masked
LM on its held-out sentences (``estimate_corpus`` then ``corpus_estimate``, as the perplexity task prints it) is held
to the exact Σ_n log p(x_n) of the dynamic program over revealed sets: whether the two-sided interval (where one is
printed) covers it, and whether the certified bound holds.

Every network row an estimator asks for is one of the 2^T revealed sets of its text, which the dynamic program scores
anyway: the program runs every set of every text once before the first seed, kept in the model's row cache
(``StateTables``; ``models/masked/row_cache.py``), from which the seeds read it back instead of rerunning the network;
the draws are unchanged. Each seed's network rows count every state it looks up once, as a run starting from an empty
row cache runs it; the ``coverage_before_item5*.json`` runs counted each call's distinct states.

    python bench/masked_coverage.py      # the defaults, 300 seeds: bench/masked_side_by_side/coverage_value_head.json
    python bench/masked_coverage.py --seeds 50 --setting resample_threshold=0,peek=false --output /tmp/no_head.json

(``coverage.md`` beside the output has one row per setting of every ``coverage*.json`` there, and pools the seeds of
a setting run in several files; ``coverage.json`` and ``coverage_seeds100_299.json`` hold the 300 seeds of the
defaults before the value head set them, run as ``--setting default`` at that time, and the older files the defaults
before ``exact_where_cheaper`` and before item 5).

``default``: the model_args a user gives none of (``auto``, and the model's ``default_settings``: under the bundled
checkpoint's value head, SMC resampling at ESS < K/2 and peeking through it; ``coverage_value_head.json``, 300 seeds;
the files before it ran the defaults of a model without a head, uniform orders never resampling).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from lm_latent_eval.documents import read_texts
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import resolve, with_model_defaults
from lm_latent_eval.harness.model_args import parse_settings
from lm_latent_eval.models import load_model
from lm_latent_eval.models.masked.corpus import TEST_FILE

OUTPUT = Path(__file__).resolve().parent / "masked_side_by_side"


class StateTables:
    """Every revealed set S of every text run once by the network, by the dynamic program that gives the truth
    (``truth``: Σ_n log p(x_n)), and kept in the model's row cache (``models/masked/row_cache.py``), so that the
    seeds read each state's log p_θ(x_i | S) and confidence back instead of rerunning it; ``model.network_rows``
    counts, per seed, the rows a run that starts with an empty cache would have run: each (text, S) the seed looks
    up, once (``forget`` starts a seed). Both paths that read rows (``conditionals.token_log_probs`` for one text,
    ``documents.cached_rows`` for texts side by side) look them up in the cache, so both are counted."""

    def __init__(self, model, texts: list[str]) -> None:
        self.model, self.seen, self.truth = model, {}, 0.0
        cache = model.row_cache
        for text in tqdm(texts, desc="state tables"):
            x = model.check_text(model.tokenize(text))
            # the program runs every state but the full one, which no step reads
            self.truth += model.log_marginal(x)
            key = cache.key(model, x, False)
            if key not in cache.texts or len(cache.texts[key].index) != (1 << x.numel()) - 1:
                raise RuntimeError("the row cache did not keep every state: raise its max_entries")

    def lookup(self, original, text_key: tuple, keys: list[bytes]):
        """``RowCache.lookup``, counting the keys this seed has not looked up before as rows run."""
        seen = self.seen.setdefault(text_key, set())
        new = set(keys) - seen
        seen |= new
        self.model.network_rows += len(new)
        found, where, missing = original(text_key, keys)
        if missing:
            raise RuntimeError("a state outside the tables was asked for")
        return found, where, missing

    def forget(self) -> None:
        """A new seed: no state has been run yet (as if the model's ``row_cache`` were cleared)."""
        self.seen = {}

    @contextlib.contextmanager
    def installed(self):
        """The model's row cache counts its lookups inside the block."""
        cache = self.model.row_cache
        original = cache.lookup
        cache.lookup = functools.partial(self.lookup, original)
        try:
            yield
        finally:
            del cache.lookup


# an interval computed exactly has width 0: it holds the truth up to the rounding between two exact programs
EXACT_ROUNDING = 1e-9


def holds(lower: float, upper: float, truth: float) -> bool:
    """Whether [lower, upper] holds the truth, to ``EXACT_ROUNDING`` relative (1e-15 apart is no miss)."""
    slack = EXACT_ROUNDING * max(1.0, abs(truth))
    return lower - slack <= truth <= upper + slack


def seed_statement(model, texts, settings, truth: float, tables: StateTables | None, store=None) -> dict:
    """One seed's corpus statement and whether it holds against the truth S (``tables`` None: the seed starts from
    an empty row cache and runs every row itself; ``store``: the precision target's ``DocumentStore``, if any)."""
    if tables is None:
        model.row_cache.clear()
    else:
        tables.forget()
    start, rows = time.perf_counter(), model.network_rows
    estimates = estimate_corpus(resolve(settings, model), texts, progress=False, store=store)
    corpus = corpus_estimate([estimates[t] for t in texts])
    interval = corpus.interval
    return {
        "seed": settings.seed,
        "perplexity": corpus.perplexity,
        "two_sided": interval.two_sided,
        "covered": interval.two_sided and holds(interval.lower, interval.upper, truth),
        "lower": interval.lower,
        "upper": interval.upper,
        "bound_holds": corpus.perplexity_upper_bound >= math.exp(-truth / corpus.num_tokens),
        "perplexity_upper_bound": corpus.perplexity_upper_bound,
        "samples_mean": sum(e.num_samples for e in estimates.values()) / len(estimates),
        "computed_exactly": sum(e.computed_exactly for e in estimates.values()),
        "network_rows": model.network_rows - rows,
        "seconds": time.perf_counter() - start,
    }


def summary(given: dict, why: str, runs: list[dict]) -> dict:
    """The coverage figures of the seeds run so far."""
    two_sided = [r for r in runs if r["two_sided"]]
    return {
        "model_args": given,
        "resolved": why,
        "seeds": len(runs),
        "two_sided": len(two_sided),
        "covered": sum(r["covered"] for r in two_sided),
        "missed_share": (len(two_sided) - sum(r["covered"] for r in two_sided)) / len(runs),
        "bound_held": sum(r["bound_holds"] for r in runs),
        "runs": runs,
    }


def coverage(model, texts, given: dict, seeds: range, truth: float, save, tables: StateTables | None) -> dict:
    """The statements of ``seeds`` under the model_args ``given``, resolved as the backend does (the model's
    ``default_settings`` for what ``given`` does not name, then ``auto``); ``save(summary)`` after every seed."""
    settings, own = with_model_defaults(parse_settings(given), model, given)
    run = resolve(settings, model)
    settings, why = run.settings, run.reason
    runs = []
    for s in tqdm(seeds, desc=str(given)):
        runs.append(seed_statement(model, texts, settings.replace(seed=s), truth, tables))
        save(summary(given, why + own, runs))
    return summary(given, why + own, runs)


def summary_row(args: str, r: dict, seeds: str) -> str:
    """One row of ``coverage.md``."""
    rows = [run["network_rows"] for run in r["runs"]]
    return (
        f"| {args} | {r['resolved']} | {seeds} | {r['two_sided']} | {r['covered']} of {r['two_sided']} | "
        f"{r['missed_share']:.1%} | {r['bound_held']} of {r['seeds']} | "
        f"{sum(rows) / len(rows):,.0f} ({min(rows):,}–{max(rows):,}) |"
    )


def pooled(settings: list[dict]) -> dict:
    """The figures of one setting's runs over several files (their seeds disjoint)."""
    runs = [run for r in settings for run in r["runs"]]
    if len({run["seed"] for run in runs}) != len(runs):
        raise ValueError("pooled: the files repeat a seed")
    return summary(settings[0]["model_args"], settings[0]["resolved"], runs)


def write_summary(path: Path, output: Path) -> None:
    """``coverage.md``: one row per setting of ``output`` and every ``coverage*.json`` beside it, then, for a setting
    run in several files (seed ranges), one row pooling their seeds."""
    rows, by_setting = [], {}
    for file in sorted({*path.parent.glob("coverage*.json"), output}):
        results = json.loads(file.read_text())
        for r in results["settings"]:
            args = ",".join(f"{k}={v}" for k, v in r["model_args"].items()) or "(none: the defaults)"
            rows.append(
                summary_row(args, r, f"{r['seeds']} ({r['runs'][0]['seed']}–{r['runs'][-1]['seed']})")
            )
            by_setting.setdefault((args, r["resolved"]), []).append(r)
    for (args, _), settings in by_setting.items():
        if len(settings) > 1:
            rows.append(
                summary_row(f"**{args}, every seed above**", pooled(settings), f"{pooled(settings)['seeds']}")
            )
    head = (
        f"Statements for `latent_masked` on the {results['documents']} distinct held-out sentences of `masked_ppl_tiny`, "
        "held to the exact dynamic program (`bench/masked_coverage.py`).\n\n"
        "| model_args | resolved | seeds | two-sided | two-sided covering the truth | seeds missed | certified bound held "
        "| network rows per seed, mean (range) |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    path.write_text(head + "\n".join(rows) + "\n", encoding="utf-8")


def parse_setting(text: str) -> dict:
    """``default`` -> {}; ``peek=false,num_samples=1000`` -> model_args as lm-eval parses them."""
    if text == "default":
        return {}
    return {k: v for k, _, v in (item.partition("=") for item in text.split(","))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--setting", action="append", default=None, help="model_args, or 'default'")
    parser.add_argument("--output", type=Path, default=OUTPUT / "coverage_value_head.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model("masked")
    texts = list(dict.fromkeys(read_texts(TEST_FILE)))
    tables = StateTables(model, texts)
    truth = tables.truth
    results = {"documents": len(texts), "truth_log_likelihood": truth, "settings": []}
    args.output.parent.mkdir(parents=True, exist_ok=True)

    def save(done: list[dict], current: dict) -> None:
        args.output.write_text(json.dumps(results | {"settings": [*done, current]}, indent=1) + "\n")
        write_summary(args.output.parent / "coverage.md", args.output)

    with tables.installed():
        for setting in args.setting or ["default"]:
            done = list(results["settings"])
            summary_ = coverage(
                model,
                texts,
                parse_setting(setting),
                range(args.first_seed, args.first_seed + args.seeds),
                truth,
                lambda s, d=done: save(d, s),
                tables,
            )
            results["settings"].append(summary_)
    for r in results["settings"]:
        print(
            f"{r['model_args'] or 'defaults'}: two-sided {r['two_sided']}/{r['seeds']}, covered {r['covered']}, "
            f"missed {r['missed_share']:.1%} of seeds; certified bound held {r['bound_held']}/{r['seeds']}"
        )


if __name__ == "__main__":
    main()
