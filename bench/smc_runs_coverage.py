"""Why SMC with the precision target undercovers at 200 HMM documents: the same runs with more SMC runs per document.

For each seed, the default precision-target estimate (peeking, target 0.002) of the first 200 documents of
``bench/interval_coverage.py``'s corpus, with ``--runs`` runs of ``--num-samples`` particles in all, and the
standardized error (truth − centre) / SE of the two-sided statement. With calibrated errors these have SD 1 and the
interval holds in 95% of seeds.

    python bench/smc_runs_coverage.py --runs 8 --num-samples 200 --seeds 20   # bench/smc_runs_coverage/R8_K200.md
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
from interval_coverage import add_run_arguments, benchmark_corpus
from tqdm.auto import tqdm

from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.corpus import corpus_estimate
from lm_latent_eval.estimators.registry import resolve
from lm_latent_eval.estimators.settings import AUTO_TARGET_SE
from lm_latent_eval.models import load_model

OUTPUT = Path(__file__).resolve().parent / "smc_runs_coverage"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, runs=8, num_samples=200, seeds=20, documents=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_model("hmm")
    docs = benchmark_corpus(args.documents)
    truth = sum(float(model.log_marginal(model.tokenize(d))) for d in docs)
    z, held, two_sided, samples = [], [], [], []
    for seed in tqdm(range(args.seeds), desc=f"{args.runs} runs, K = {args.num_samples}"):
        settings = EstimatorSettings(
            "smc", args.num_samples, seed=seed, smc_runs=args.runs, target_se=AUTO_TARGET_SE
        )
        by_text = estimate_corpus(resolve(settings, model), docs, progress=False)
        interval = corpus_estimate([by_text[d] for d in docs]).interval
        held.append(interval.lower <= truth <= interval.upper)
        two_sided.append(interval.two_sided)
        samples.append(float(np.mean([by_text[d].log_weights.size for d in docs])))
        if interval.two_sided:
            z.append((truth - interval.centre) / interval.standard_error)
    text = "\n".join(
        [
            (
                f"SMC, {args.runs} runs, K = {args.num_samples}, target {AUTO_TARGET_SE}, peeking, {args.documents} HMM "
                f"documents, seeds 0-{args.seeds - 1} (load average {os.getloadavg()[0]:.1f} at the end)"
            ),
            "",
            f"- statement held: {sum(held)} of {args.seeds}; two-sided: {sum(two_sided)} of {args.seeds}",
            (
                f"- (truth − centre) / SE of the two-sided runs: SD {np.std(z, ddof=1):.2f}, "
                f"mean {np.mean(z):.2f}, |z| > 1.96 in {sum(abs(x) > 1.96 for x in z)}"
            ),
            f"- mean samples per document: {np.mean(samples):.0f}",
        ]
    )
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / f"R{args.runs}_K{args.num_samples}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
