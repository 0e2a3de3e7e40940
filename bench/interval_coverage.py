"""Do the 95% statements about Σ_n log p(x_n) cover the truth at every corpus size? Repeated runs on the bundled HMM,
whose exact log p(x) the forward algorithm gives.

Documents: the bundled training corpus (400 documents) followed by 600 texts sampled from the HMM itself with the
same lengths, cycled (seed 0); a corpus of N documents is the first N. For every estimator (IS, SMC), K (the default
100 and 10) and peeking mode with a fixed K (each of ``--repeats`` seeds estimates all documents once), and from
K = 100 (SMC also from K = 10) with the precision target of ``estimator=auto`` (target_se = 0.002; it allocates by
corpus, so each N is its own run), the
table gives, per N, the share of runs whose printed statement held: the two-sided interval contained the truth, or,
where only the one-sided certified bound is honest, the truth was above it (``lm_latent_eval.estimators.intervals``).
Beside it: the share of runs that could print a two-sided interval, the coverage of those, the coverage those
would have had without the bias allowance (S̃ ± t·SE instead of S̃ ± (t·SE + C)), the mean samples per document, and
the old method's coverage ("before": IS with the delta-method ``student`` interval, SMC with one run ± 1.96
Lee-Whiteley standard errors).

    python bench/interval_coverage.py --jobs 2   # 200 seeds per fixed-K row, 100 / 100 / 40 / 20 per target row
    # writes lm_latent_eval/data/interval_coverage/: coverage.md (the table), coverage.json (its rows, which the
    # cards quote) and runs.json (every run's record); hours on 2 cores: --settings, --ks and --sizes split it into
    # parts, --join puts the parts together
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from lm_latent_eval.estimators import DocumentEstimate, EstimatorSettings, estimate_document
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import certified_log_likelihood
from lm_latent_eval.estimators.policy import DEFAULT_POLICY
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.estimators.settings import AUTO_TARGET_SE
from lm_latent_eval.models import load_model
from lm_latent_eval.paths import DATA_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interval_coverage_models import SmallSupportLM, small_support_corpus

SIZES = (10, 50, 200, 1000)
TARGET_REPEATS = "10:100,50:100,200:40,1000:20"  # seeds of the precision-target rows per corpus size
OUTPUT = Path(__file__).resolve().parents[1] / "lm_latent_eval" / "data" / "interval_coverage"
MODEL_LABELS = {"hmm": "bundled HMM", "small_support": "small support (4 topics), near-exact q"}


@dataclass(frozen=True)
class Setting:
    """One row group of the table: an estimator with its K, peeking mode and number of SMC runs."""

    estimator: str
    num_samples: int
    peek: bool
    smc_runs: int = 4
    target_se: float | None = None
    model: str = "hmm"

    @property
    def label(self) -> str:
        runs = f", {self.smc_runs} run{'s' * (self.smc_runs > 1)}" if self.estimator == "smc" else ""
        target = f", target {self.target_se}" if self.target_se else ""
        model = "" if self.model == "hmm" else f"{MODEL_LABELS[self.model]}: "
        return (
            f"{model}{self.estimator.upper()}, K = {self.num_samples}{runs}{target}, "
            f"{'peeking' if self.peek else 'no peeking'}"
        )

    def settings(self, seed: int) -> EstimatorSettings:
        return EstimatorSettings(
            self.estimator,
            self.num_samples,
            peek=self.peek,
            seed=seed,
            smc_runs=self.smc_runs,
            target_se=self.target_se,
        )


def add_run_arguments(
    parser: argparse.ArgumentParser, runs: int, num_samples: int, seeds: int, documents: int
):
    """The options of the scripts that rerun one SMC setting on the first ``--documents`` of ``benchmark_corpus``."""
    parser.add_argument("--runs", type=int, default=runs, help="SMC runs per document")
    parser.add_argument("--num-samples", type=int, default=num_samples, help="K, particles per document")
    parser.add_argument("--seeds", type=int, default=seeds)
    parser.add_argument("--documents", type=int, default=documents)


def load_bench_model(name: str):
    """The model of a row group: the bundled HMM, or the small-support test model (``interval_coverage_models``)."""
    return SmallSupportLM() if name == "small_support" else load_model("hmm")[0]


def bench_corpus(name: str, num_documents: int = max(SIZES)) -> list[str]:
    """The corpus of a row group's model (``benchmark_corpus`` for the HMM)."""
    return small_support_corpus(num_documents) if name == "small_support" else benchmark_corpus(num_documents)


def benchmark_corpus(num_documents: int = max(SIZES)) -> list[str]:
    """The bundled training corpus, then texts sampled from the HMM with the same lengths (seed 0)."""
    model, _ = load_model("hmm")
    with open(DATA_DIR / "corpus" / "tiny_train.jsonl", encoding="utf-8") as fh:
        docs = [json.loads(line)["text"] for line in fh if line.strip()]
    lengths = [int(model.tokenize(d).numel()) for d in docs]
    gen = torch.Generator().manual_seed(0)
    while len(docs) < num_documents:
        docs.append(model.sample_text("", lengths[len(docs) % len(lengths)], generator=gen))
    return docs[:num_documents]


def _run(args) -> dict:
    """One seed of one setting: for each N, whether the printed statement and the old interval held, and their kind.
    A fixed K estimates the documents once (a corpus of N is the first N); a precision target runs each N apart."""
    setting, seed, docs, exact, sizes = args
    torch.set_num_threads(1)
    model = load_bench_model(setting.model)
    if not setting.target_se:
        estimates = [estimate_document(model, d, setting.settings(seed)) for d in docs[: max(sizes)]]
    out = {}
    for n in sizes:
        if setting.target_se:
            by_text = estimate_corpus(resolve(setting.settings(seed), model), docs[:n], progress=False)
            estimates = [by_text[d] for d in docs[:n]]
        corpus, truth = estimates[:n], float(exact[:n].sum())
        certified = certified_log_likelihood(corpus)
        interval = DEFAULT_POLICY.interval([e.error() for e in corpus], lower_certified=certified)
        out[n] = {
            "seed": seed,
            "held": bool(interval.lower <= truth <= interval.upper),
            "two_sided": interval.two_sided,
            "z": (
                (truth - interval.centre) / interval.standard_error
                if interval.two_sided and interval.standard_error > 0
                else None
            ),
            # every document's log p proven (IS draws that covered q's support): the exact value ± float32 rounding
            "exact": all(e.error().exact for e in corpus),
            "held_without_allowance": (  # S̃ ± t·SE, the interval before the bias allowance
                abs(truth - interval.centre)
                <= (interval.upper - interval.lower) / 2 - interval.bias_correction
                if interval.two_sided
                else None
            ),
            "width": interval.upper - interval.lower,
            "before": _before(corpus, truth),
            "samples": float(np.mean([e.log_weights.size for e in corpus])),
            "certified_held": bool(certified <= truth),
        }
    return out


def _before(estimates: list[DocumentEstimate], truth: float) -> bool:
    """Whether the old printed interval held: IS, Σ (log p̂ + r²/2) ± 1.96 √Σ r² (delta method, no gate); SMC,
    Σ log p̂ ± 1.96 √Σ se² with the Lee-Whiteley standard errors."""
    ll = sum(e.log_likelihood for e in estimates)
    if estimates[0].estimator == "smc":
        se = math.sqrt(
            sum(
                e.diagnostics.lee_whiteley_relative_variance
                for e in estimates
                if math.isfinite(e.diagnostics.lee_whiteley_relative_variance)
            )
        )
        return bool(abs(ll - truth) <= 1.96 * se)
    r2 = np.array([e.error().relative_variance for e in estimates])
    r2 = np.where(np.isnan(r2), 0.0, r2)
    return bool(abs(ll + r2.sum() / 2 - truth) <= 1.96 * math.sqrt(r2.sum()))


def summarize(runs: list[dict], sizes=SIZES) -> dict:
    """Per N: coverage of the printed statement, share two-sided, coverage given two-sided, median two-sided width,
    coverage of the certified bound alone, coverage of the old interval (over the runs that measured N)."""
    rows = {}
    for n in sizes:
        r = [run[n] for run in runs if n in run]
        if not r:
            continue
        two = [x for x in r if x["two_sided"]]
        rows[n] = {
            "coverage": float(np.mean([x["held"] for x in r])),
            "two_sided_share": len(two) / len(r),
            "two_sided_coverage": float(np.mean([x["held"] for x in two])) if two else None,
            "without_allowance_coverage": (
                float(np.mean([x["held_without_allowance"] for x in two]))
                if two and all(x.get("held_without_allowance") is not None for x in two)
                else None
            ),
            "median_two_sided_width": float(np.median([x["width"] for x in two])) if two else None,
            "certified_coverage": float(np.mean([x["certified_held"] for x in r])),
            "mean_samples": float(np.mean([x["samples"] for x in r])),
            "exact_share": float(np.mean([x.get("exact", False) for x in r])),
            "before_coverage": float(np.mean([x["before"] for x in r])),
            "runs": len(r),
            "runs_detail": r,  # per run (written to runs.json): seed, held, two-sided, z = (truth − centre) / SE, ...
        }
    return rows


def markdown(results: list[dict]) -> str:
    """One row per setting and N."""
    lines = [
        (
            "| setting | N | runs | coverage (printed statement) | two-sided share | coverage when two-sided | "
            "the same without the bias allowance | median two-sided width (nats) | certified bound held | mean K "
            "| before |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    pct = lambda x: "–" if x is None else f"{100 * x:.0f}%"
    for res in results:
        for n, row in res["rows"].items():
            width = "–" if row["median_two_sided_width"] is None else f"{row['median_two_sided_width']:.2f}"
            lines.append(
                f"| {res['label']} | {n} | {row['runs']} | {pct(row['coverage'])} | {pct(row['two_sided_share'])} | "
                f"{pct(row['two_sided_coverage'])} | {pct(row.get('without_allowance_coverage'))} | {width} | "
                f"{pct(row['certified_coverage'])} | "
                f"{row['mean_samples']:.0f} | {pct(row['before_coverage'])} |"
            )
    return "\n".join(lines)


def _plan(setting: Setting, sizes: tuple[int, ...], args) -> list[tuple[int, tuple[int, ...]]]:
    """(seed, corpus sizes) of every run of a setting: a fixed K measures every N in one run (``--repeats`` seeds); a
    precision target allocates by corpus, so each N is its own run, with the seeds ``--target-repeats`` gives that N."""
    if not setting.target_se:
        return [(seed, sizes) for seed in range(args.repeats)]
    seeds = target_repeats(args.target_repeats, sizes)
    plan = [(seed, tuple(n for n in sizes if seed < seeds[n])) for seed in range(max(seeds.values()))]
    return [(seed, ns) for seed, ns in plan if ns]


def target_repeats(text: str, sizes: tuple[int, ...]) -> dict[int, int]:
    """``--target-repeats``: seeds per corpus size from "N:seeds,..." pairs, or one number for every size."""
    if ":" not in text:
        return dict.fromkeys(sizes, int(text))
    pairs = dict(tuple(int(x) for x in pair.split(":")) for pair in text.split(","))
    missing = [n for n in sizes if n not in pairs]
    if missing:
        raise SystemExit(f"--target-repeats {text!r} gives no seeds for corpus sizes {missing}")
    return {n: pairs[n] for n in sizes}


def _done(path: Path, meta: dict) -> dict[str, dict]:
    """Results of an earlier run of the same configuration in the folder ``path``, by setting label."""
    if not (path / "coverage.json").is_file():
        return {}
    data = load(path)
    same = all(data["settings"].get(k) == json.loads(json.dumps(v)) for k, v in meta.items())
    return {r["label"]: r for r in data["results"]} if same else {}


def load(folder: Path) -> dict:
    """``folder``'s coverage.json with each row's per-run records (``runs_detail``) put back from its runs.json."""
    data = json.loads((folder / "coverage.json").read_text())
    runs = json.loads((folder / "runs.json").read_text()) if (folder / "runs.json").is_file() else {}
    for r in data["results"]:
        for n, row in r["rows"].items():
            row.setdefault("runs_detail", runs.get(r["label"], {}).get(n, []))
    return data


def write(folder: Path, data: dict) -> None:
    """coverage.json (the summaries the cards read; shipped with the package), runs.json (every run's record: seed,
    held, two-sided, z = (truth − centre) / SE, ...; kept out of the wheel) and the table coverage.md."""
    runs = {r["label"]: {n: row["runs_detail"] for n, row in r["rows"].items()} for r in data["results"]}
    summaries = [
        {
            **r,
            "rows": {n: {k: v for k, v in row.items() if k != "runs_detail"} for n, row in r["rows"].items()},
        }
        for r in data["results"]
    ]
    (folder / "coverage.json").write_text(json.dumps({**data, "results": summaries}, indent=1))
    (folder / "runs.json").write_text(
        "{\n"
        + ",\n".join(f"{json.dumps(label)}: {json.dumps(rows)}" for label, rows in runs.items())
        + "\n}\n"
    )
    (folder / "coverage.md").write_text(markdown(data["results"]) + "\n")


def join(output: Path, sources: list[Path]) -> None:
    """``--join``: the settings of ``sources`` put into ``output/coverage.json``, each replacing the row group of the
    same estimator, K asked for, peeking mode and target (so a new default replaces the old one) or, where the label
    is the same, only the corpus sizes the source measured; each row keeps its own run count."""

    def key(result: dict) -> tuple:
        s = result["setting"]
        return s["estimator"], s["num_samples"], s["peek"], s["target_se"], s.get("model", "hmm")

    data = load(output)
    by_key = {key(r): r for r in data["results"]}
    for source in sources:
        for r in load(source)["results"]:
            same = by_key.get(key(r), {}).get("label") == r["label"]
            by_key[key(r)] = {**r, "rows": {**by_key[key(r)]["rows"], **r["rows"]}} if same else r
    data["results"] = list(by_key.values())
    data["settings"].pop("repeats", None)  # the rows now differ in seeds: each row's "runs" says how many
    data["settings"].pop("target_repeats", None)
    write(output, data)
    print(markdown(data["results"]))


def _corpus(name: str) -> tuple[list[str], np.ndarray, list[int]]:
    """A model's corpus, the exact log p(x_n) of its documents and their token counts."""
    docs, model = bench_corpus(name), load_bench_model(name)
    exact = np.array([float(model.log_marginal(model.tokenize(d))) for d in docs])
    return docs, exact, [int(model.tokenize(d).numel()) for d in docs]


def _chosen_settings(args) -> list[Setting]:
    """The row groups ``--models``, ``--ks`` and ``--settings`` ask for: on the HMM IS and SMC at K = 100 and 10, both
    peeking modes, fixed K and the precision target (IS from K = 100, SMC from 100 and 10); on the small-support
    model IS at K = 100 with its peeking proposal, fixed K and the precision target."""
    settings = [Setting(e, k, peek) for e in ("is", "smc") for k in (100, 10) for peek in (True, False)]
    settings += [  # the precision target, from the default K (SMC also from K = 10)
        Setting(e, k, peek, target_se=AUTO_TARGET_SE)
        for e, k in (("smc", 100), ("is", 100), ("smc", 10))
        for peek in (True, False)
    ]
    settings += [Setting("is", 100, True, target_se=t, model="small_support") for t in (None, AUTO_TARGET_SE)]
    settings = [s for s in settings if str(s.num_samples) in args.ks.split(",")]
    settings = [s for s in settings if s.model in args.models.split(",")]
    if args.settings == "all":
        return settings
    chosen = set(args.settings.split(","))
    estimators, kinds, modes = (
        chosen & {"is", "smc"} or {"is", "smc"},
        chosen & {"fixed", "target"} or {"fixed", "target"},
        chosen & {"peek", "nopeek"} or {"peek", "nopeek"},
    )
    return [
        s
        for s in settings
        if s.estimator in estimators
        and ("target" if s.target_se else "fixed") in kinds
        and ("peek" if s.peek else "nopeek") in modes
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=200, help="seeds of every fixed-K row")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (one thread each)")
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument(
        "--settings",
        default="all",
        help="'all', or comma-separated estimators (is, smc), kinds (fixed, target) and/or modes (peek, nopeek): "
        "e.g. 'smc,target' runs the SMC rows with the precision target (several runs, each into its own folder, "
        "their coverage.json results joined into one --output, then --resume writes one table)",
    )
    parser.add_argument(
        "--target-repeats",
        default=TARGET_REPEATS,
        help="seeds of the precision-target rows per corpus size, as N:seeds pairs, or one number for every size "
        f"(default {TARGET_REPEATS}: they cost more as N grows)",
    )
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="corpus sizes N")
    parser.add_argument("--ks", default="100,10", help="the K of the rows to run (comma-separated)")
    parser.add_argument(
        "--models",
        default=",".join(MODEL_LABELS),
        help="the models of the rows to run (comma-separated): hmm (the bundled HMM), small_support "
        "(interval_coverage_models.SmallSupportLM)",
    )
    parser.add_argument(
        "--join",
        nargs="+",
        metavar="DIR",
        help="put the settings measured in these folders' coverage.json into --output's (each replacing the row group "
        "of the same estimator, K asked for, peeking mode and target, in its place) and write its table; measures "
        "nothing",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the settings an earlier run of the same "
        "--repeats, --target-repeats and --sizes already wrote to --output",
    )
    args = parser.parse_args()
    if args.join:
        return join(Path(args.output), [Path(d) for d in args.join])
    start = time.perf_counter()
    sizes = tuple(int(n) for n in args.sizes.split(","))
    settings = _chosen_settings(args)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    corpora = {name: _corpus(name) for name in dict.fromkeys(s.model for s in settings)}
    meta = {
        "repeats": args.repeats,
        "level": 0.95,
        "model": "bundled HMM",
        "target_repeats": args.target_repeats,
        "tokens": {n: int(sum(corpora.get("hmm", _corpus("hmm"))[2][:n])) for n in sizes},
    }
    if "small_support" in corpora:
        meta["small_support_tokens"] = {n: int(sum(corpora["small_support"][2][:n])) for n in sizes}
    done = _done(out, meta) if args.resume else {}
    results = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for setting in settings:
            if (
                setting.label in done
            ):  # --resume: measured by an earlier, interrupted run with the same settings
                results.append(done[setting.label])
                continue
            docs, exact, _ = corpora[setting.model]
            jobs = [(setting, seed, docs, exact, n) for seed, n in _plan(setting, sizes, args)]
            runs = list(tqdm(pool.imap_unordered(_run, jobs), total=len(jobs), desc=setting.label))
            results.append(
                {"label": setting.label, "setting": asdict(setting), "rows": summarize(runs, sizes)}
            )
            print(f"{setting.label}: done ({time.perf_counter() - start:.0f} s)", flush=True)
            meta["seconds"] = (
                time.perf_counter() - start
            )  # written after every setting: an interruption loses one
            write(out, {"settings": meta, "results": results})
    print(markdown(results))


if __name__ == "__main__":
    main()
