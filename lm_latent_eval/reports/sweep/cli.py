"""``lm-latent-eval sweep``: IS perplexity over τ × {peek, no peek} × {corpus, instance} (Logan et al. 2020, Table 1),
SMC rows for the same proposal settings (models with the stepwise part), beam bounds for several k (Table 2), and the
K-convergence plot, all from one run per proposal setting; writes ``sweep.json``, ``tables.md`` and
``convergence.png``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ...errors import InputError
from ...estimators import EstimatorSettings
from ...estimators.registry import resolve
from ...estimators.settings import DEFAULT_RESAMPLE_THRESHOLD, DEFAULT_SMC_RUNS
from ...harness.provenance import package_path
from ...harness.threads import choose_workers
from ...models import MODELS, bundled_corpus, load_model
from ...models.corpora import read_documents
from ...protocol import check_num_samples, has
from ..json_files import write_json
from .compute import DEFAULT_BEAM_SIZES, DEFAULT_TEMPERATURES, run_sweep
from .render import save_convergence_plot, tables_markdown


def _floats(text: str) -> list[float]:
    return [float(t) for t in text.split(",") if t]


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default="hmm", help="registered name (hmm, kglm, entitynlm, rnng) or package.module:Class"
    )
    parser.add_argument(
        "--pretrained", default=None, help="checkpoint dir or Hub id (default: the bundled one)"
    )
    parser.add_argument(
        "--data",
        default=None,
        help=".jsonl (field 'text'), .txt (one per line) or PTB trees; default: the model's bundled test set",
    )
    parser.add_argument("--num-samples", type=int, default=100)
    parser.add_argument("--temperatures", type=_floats, default=list(DEFAULT_TEMPERATURES))
    parser.add_argument("--peek", choices=("both", "peek", "no-peek"), default="both")
    parser.add_argument("--beam-sizes", type=_ints, default=list(DEFAULT_BEAM_SIZES))
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="particles per log_joint call (memory only; default one sample block)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--output",
        dest="output_dir",
        default="sweep_out",
        help="folder for the tables and plots",
    )
    parser.add_argument(
        "--smc",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="SMC rows beside the IS rows (default: whenever the model has the stepwise part)",
    )
    parser.add_argument(
        "--resample-threshold",
        type=float,
        default=DEFAULT_RESAMPLE_THRESHOLD,
        help="SMC resamples when ESS < threshold · particles",
    )
    parser.add_argument(
        "--smc-runs", type=int, default=DEFAULT_SMC_RUNS, help="independent SMC runs per document"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes that estimate a setting's documents side by side on the CPU (default: one per torch "
        "thread); the numbers do not depend on it",
    )
    parser.add_argument(
        "--exact-ppl",
        type=float,
        default=None,
        help="the corpus's exact perplexity when known from elsewhere (e.g. python bench/rnng_exact.py for the "
        "bundled RNNG): the tables' exact row and the plot's exact line (a model with log_marginal needs none)",
    )


def run(args: argparse.Namespace) -> int:
    if args.workers is not None:
        check_num_samples(args.workers, "--workers")
    model, _ = load_model(args.model, args.pretrained, device=args.device, given_as="--pretrained")
    if args.data is None and not (args.model in MODELS and MODELS[args.model].corpus):
        raise InputError(f"--data: {args.model} has no bundled test set; name a .jsonl, .txt or tree file")
    data = args.data or bundled_corpus(args.model)
    peek_modes = {"both": (True, False), "peek": (True,), "no-peek": (False,)}[args.peek]
    # a proposal that declares always_peeks = True: no-peeking rows do not apply
    if getattr(model.proposal, "always_peeks", False):
        if args.peek == "no-peek":
            raise SystemExit(
                f"{type(model.proposal).__name__} always reads the whole text: no no-peeking proposal"
            )
        if args.peek == "both":
            print(f"{type(model.proposal).__name__} always reads the whole text: peeking rows only")
        peek_modes = (True,)
    if args.smc and not has(model, "stepwise"):
        # the error names the missing methods
        resolve(EstimatorSettings("smc"), model)
    result = run_sweep(
        model,
        read_documents(data),
        args.temperatures,
        peek_modes,
        args.beam_sizes,
        args.num_samples,
        args.seed,
        args.batch_size,
        args.device,
        smc=args.smc,
        resample_threshold=args.resample_threshold,
        smc_runs=args.smc_runs,
        workers=choose_workers(args.workers, torch.device(args.device))[0],
    )
    if args.exact_ppl is not None and result.exact_perplexity is None:
        result.exact_perplexity, result.exact_source = args.exact_ppl, "given by --exact-ppl"
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    # bundled files as lm_latent_eval/data/...: no machine's path
    # what the numbers depend on (not the processes that computed them)
    options = {k: v for k, v in vars(args).items() if k not in ("func", "workers")}
    result.config = options | {"data": package_path(data)}
    write_json(out / "sweep.json", result.to_json())
    tables = tables_markdown(result)
    (out / "tables.md").write_text(tables)
    save_convergence_plot(result, out / "convergence.png")
    print(tables)
    written = f"{out / 'sweep.json'}, {out / 'tables.md'}, {out / 'convergence.png'}"
    if result.interrupted:
        print(
            f"lm-latent-eval sweep: interrupted; wrote the rows finished before it to {written}",
            file=sys.stderr,
        )
        return 130
    print(f"wrote {written}")
    return 0
