"""latent_tokenization: canonical vs lm-eval's ``hf`` backend (tokens/s), and the cost of IS at K = 1, 10, 100.

`python bench/bench_tokenization.py [--device cpu] [--pages 12] [--repeats 2] [--is-pages 3]`

Builds a randomly initialised GPT-2 (``--n-layer`` x ``--n-embd``, context ``--n-positions``) with a byte-level BPE
tokenizer trained here on pages of the bundled tiny corpus (nothing downloaded), and a local copy of lm-eval's
``wikitext`` task over those pages. Part 1 times ``simple_evaluate`` of ``hf`` and ``latent_tokenization``
(estimator=canonical) on the same model and task in this one process, alternating ``--repeats`` times (model
loading included, fastest run kept), and prints canonical tokens per second of both, their ratio and both word
perplexities (they must agree). Part 2 times our estimators directly on the first ``--is-pages`` pages: canonical,
beam (k = 4) and IS at K = 1, 10, 100, as seconds and as a multiple of canonical, with the mean ESS of IS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from lm_latent_eval.paths import DATA_DIR

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bench_plain_lm import task_manager, timed_run
from particles import timed
from tiny_models import make_tiny_bpe_gpt2


def make_pages(path: Path, num_pages: int, sentences_per_page: int) -> list[str]:
    """Wikitext-schema pages ({"page": ...}) of consecutive bundled corpus sentences; returns the page texts."""
    sentences = [
        json.loads(line)["text"]
        for line in (DATA_DIR / "corpus" / "tiny_train.jsonl").read_text().splitlines()
    ]
    pages = []
    with path.open("w") as fh:
        for n in range(num_pages):
            chunk = [
                sentences[(n * sentences_per_page + i) % len(sentences)] for i in range(sentences_per_page)
            ]
            page = f" = Page {n} = \n\n " + " ".join(chunk) + " \n"
            pages.append(page)
            fh.write(json.dumps({"page": page}) + "\n")
    return pages


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--pages", type=int, default=12)
    p.add_argument("--sentences-per-page", type=int, default=10)
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--n-positions", type=int, default=128)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8, help="lm-eval --batch_size of the hf run")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--is-pages", type=int, default=3)
    p.add_argument("--dtype", default="float32")
    args = p.parse_args(argv)

    import lm_latent_eval.harness.backends  # noqa: F401  (registers --model latent_tokenization in this process)
    from lm_latent_eval.estimators import EstimatorSettings, estimate_document, summarize
    from lm_latent_eval.models import load_model
    from lm_latent_eval.models.tokenization import canonical

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pages_file = tmp / "pages.jsonl"
        pages = make_pages(pages_file, args.pages, args.sentences_per_page)
        model_dir = make_tiny_bpe_gpt2(tmp / "gpt2", pages, args.vocab_size, args.n_positions, args.n_embd,
                                       args.n_layer)  # fmt: skip
        manager = task_manager(tmp, pages_file)
        lm, _ = load_model(
            "tokenization", str(model_dir), device=args.device, dtype=getattr(torch, args.dtype)
        )
        import lm_eval.models.huggingface  # noqa: F401

        texts = [page for page in pages]  # wikitext's detokenizer leaves these pages unchanged up to spacing
        n_tokens = sum(len(lm.tokenize(t)) for t in texts)
        n_params = sum(t.numel() for t in lm.model.parameters())
        print(f"# latent_tokenization on {args.device} ({args.dtype}): GPT-2 {args.n_layer} layers x {args.n_embd},"
              f" context {args.n_positions}, BPE vocabulary {len(lm.tokenizer)}, {n_params / 1e6:.1f} M parameters;"
              f" {args.pages} pages, ~{n_tokens} canonical tokens; {platform.machine()}, torch {torch.__version__},"
              f" {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}, {datetime.now():%Y-%m-%d %H:%M}")  # fmt: skip

        backends = {"hf": ("hf", f"pretrained={model_dir},dtype={args.dtype}", args.batch_size),
                    "canonical": ("latent_tokenization", f"pretrained={model_dir},estimator=canonical,dtype={args.dtype}",
                                  1)}  # fmt: skip
        best = {name: (math.inf, None) for name in backends}
        for _ in range(args.repeats):  # alternate, keep each backend's fastest run
            for name, (model, model_args, bs) in backends.items():
                seconds, ppl = timed_run(model, model_args, manager, args.device, bs)
                best[name] = (min(best[name][0], seconds), ppl)
        (t_hf, ppl_hf), (t_ours, ppl_ours) = best["hf"], best["canonical"]
        print("\n| lm_eval wikitext run | seconds | canonical tokens/s | word_perplexity |")
        print("|---|---|---|---|")
        print(f"| hf (batch_size {args.batch_size}) | {t_hf:.2f} | {n_tokens / t_hf:.0f} | {ppl_hf:.6f} |")
        print(f"| latent_tokenization, canonical | {t_ours:.2f} | {n_tokens / t_ours:.0f} | {ppl_ours:.6f} |")
        print(f"\nours / hf time: {t_ours / t_hf:.2f}; word perplexity relative difference "
              f"{abs(ppl_ours - ppl_hf) / ppl_hf:.1e}")  # fmt: skip

        sub = texts[: args.is_pages]
        sub_tokens = sum(len(lm.tokenize(t)) for t in sub)
        t_canon, _ = timed(lambda: canonical.loglikelihood_rolling(lm, sub), args.device)
        t_canon = min(t_canon, timed(lambda: canonical.loglikelihood_rolling(lm, sub), args.device)[0])
        device = torch.device(args.device)
        rows = [("canonical", t_canon, "")]
        t_beam, _ = timed(lambda: [estimate_document(lm, t, EstimatorSettings(estimator="beam", beam_size=4),
                                                     device=device) for t in sub], args.device)  # fmt: skip
        rows.append(("beam, k = 4", t_beam, ""))
        for k in (1, 10, 100):
            settings = EstimatorSettings(estimator="is", num_samples=k, seed=0)
            seconds, ests = timed(lambda s=settings: [estimate_document(lm, t, s, device=device) for t in sub],
                                  args.device)  # fmt: skip
            ess = np.mean([summarize(e.log_weights)["ess"] for e in ests])
            rows.append((f"IS, K = {k}", seconds, f"{ess:.1f}"))
        print(f"\nestimators on {len(sub)} pages ({sub_tokens} canonical tokens), canonical_mix {lm.canonical_mix},"
              f" particle_batch {lm.particle_batch}:")  # fmt: skip
        print("| estimator | seconds | tokens/s | x canonical | mean ESS |")
        print("|---|---|---|---|---|")
        for name, seconds, ess in rows:
            print(
                f"| {name} | {seconds:.2f} | {sub_tokens / seconds:.0f} | {seconds / t_canon:.1f} | {ess} |"
            )


if __name__ == "__main__":
    main()
