"""Plain causal LM: our backend (``--model latent``, ``model=causal``, exact) vs lm-eval's own ``hf`` backend.

`python bench/bench_plain_lm.py [--device cuda] [--pages 40] [--repeats 2]`

Builds a randomly initialised GPT-2 (word-level tokenizer, nothing downloaded) and a local copy of lm-eval's
built-in ``wikitext`` task whose pages (same schema as EleutherAI/wikitext_document_level) are sampled from the
bundled HMM, then times ``simple_evaluate`` of both backends on the same model and task in this one process,
alternating them ``--repeats`` times, and prints both word_perplexities (they must agree), both wall times and
their ratio. Model loading is inside the timed region for both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tiny_models import make_tiny_gpt2

BUILTIN_WIKITEXT = "wikitext/wikitext.yaml"


def make_pages(path: Path, num_pages: int, words_per_page: int) -> list[str]:
    """Wikitext-schema pages ({"page": ...}) sampled from the bundled HMM, one JSON line each; returns the vocab."""
    from lm_latent_eval.models import load_model

    hmm, _ = load_model("hmm")
    gen = torch.Generator().manual_seed(0)
    with path.open("w") as fh:
        for n in range(num_pages):
            body = hmm.sample_text("", words_per_page, generator=gen)
            fh.write(json.dumps({"page": f" = Page {n} = \n\n {body} \n"}) + "\n")
    return [w for w in hmm.vocab if w != "<unk>"] + ["=", *map(str, range(10))]


def task_manager(folder: Path, pages: Path):
    """lm-eval's built-in wikitext config with only the dataset location overridden (as tests/harness/test_builtin_tasks)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    include = Path(lm_eval.__file__).parent / "tasks" / BUILTIN_WIKITEXT
    override = {"include": str(include), "task": "wikitext_bench", "tag": [], "dataset_path": "json",
                "dataset_name": None,
                "dataset_kwargs": {"data_files": {s: str(pages) for s in ("train", "validation", "test")}}}  # fmt: skip
    (folder / "wikitext_bench.yaml").write_text(json.dumps(override))
    return TaskManager(include_path=str(folder), include_defaults=False)


def timed_run(model: str, model_args: str, manager, device: str, batch_size: int) -> tuple[float, float]:
    """(seconds, word_perplexity) of one simple_evaluate, model loading included."""
    import lm_eval

    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=["wikitext_bench"], task_manager=manager,
                                  device=device, batch_size=batch_size, bootstrap_iters=0)  # fmt: skip
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, out["results"]["wikitext_bench"]["word_perplexity,none"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--pages", type=int, default=40)
    p.add_argument("--words-per-page", type=int, default=500)
    p.add_argument("--n-positions", type=int, default=256)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument(
        "--batch-sizes", default="1,16", help="lm-eval --batch_size values to time (both backends)"
    )
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)

    import lm_latent_eval.harness.backends  # noqa: F401  (registers --model latent in this process)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pages = tmp / "pages.jsonl"
        vocab = make_pages(pages, args.pages, args.words_per_page)
        model_dir = make_tiny_gpt2(
            tmp / "gpt2",
            vocab,
            args.n_positions,
            n_embd=args.n_embd,
            n_layer=args.n_layer,
            n_head=max(1, args.n_embd // 64),
            split_punctuation=True,
        )
        manager = task_manager(tmp, pages)
        backends = {
            "hf": ("hf", f"pretrained={model_dir},dtype=float32"),
            "latent": ("latent", f"model=causal,pretrained={model_dir},estimator=exact"),
        }
        n_params = sum(t.numel() for t in __import__("transformers").AutoModelForCausalLM.from_pretrained(
            model_dir).parameters())  # fmt: skip
        print(f"# plain LM on {args.device}: GPT-2 {args.n_layer} layers x {args.n_embd}, context {args.n_positions},"
              f" {n_params / 1e6:.1f} M parameters; {args.pages} wikitext pages x {args.words_per_page} words;"
              f" {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads,"
              f" load {os.getloadavg()[0]:.2f}, {datetime.now():%Y-%m-%d %H:%M}")  # fmt: skip
        print("| batch_size | hf s | latent s | latent / hf | hf word_ppl | latent word_ppl | rel. diff |")
        print("|---|---|---|---|---|---|---|")
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            best = {name: (math.inf, None) for name in backends}
            for _ in range(args.repeats):  # alternate, keep each backend's fastest run
                for name, (model, model_args) in backends.items():
                    seconds, ppl = timed_run(model, model_args, manager, args.device, batch_size)
                    best[name] = (min(best[name][0], seconds), ppl)
            (t_hf, ppl_hf), (t_ours, ppl_ours) = best["hf"], best["latent"]
            print(f"| {batch_size} | {t_hf:.2f} | {t_ours:.2f} | {t_ours / t_hf:.2f} | {ppl_hf:.6f} | {ppl_ours:.6f} |"
                  f" {abs(ppl_ours - ppl_hf) / ppl_hf:.1e} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
