"""SMC / IS time per particle·token on every bundled model with the stepwise part (issue 33, item 2).

`python bench/smc_cost.py` (one thread). For each model (``--models``) the same documents are estimated with
importance sampling (``importance_log_weights``) and with SMC (``smc_log_weights``, default settings: resampling when
ESS < 0.5·N, 4 independent runs) at the same K and seed; IS and SMC repeats alternate (IS, SMC, IS, SMC, ...), so load
from other processes hits both alike. Both draw K particles per document (SMC's runs split the K), so both do
K × T particle·tokens per document; the table gives the best-of-repeats particle·tokens/s of each and the ratio of
SMC's time to IS's. ``lda`` is the bundled LDA with its default twisted proposal (SMC also computes the twist ψ_t at
every token, which IS does not need), ``lda_urn`` the same model with the urn proposal (``lookahead="none"``), where
SMC and IS do the same arithmetic. The markdown table goes to ``--output`` (default bench/smc_cost/output.md). ``--revision REV``
times the package as it was at a git revision (the "before": `--revision 02ba024 --output bench/smc_cost/before.md`).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from particles import timed

from lm_latent_eval.estimators import importance_log_weights, smc_log_weights
from lm_latent_eval.models import MODELS, load_model
from lm_latent_eval.models.corpora import read_documents
from lm_latent_eval.paths import DATA_DIR
from lm_latent_eval.protocol import has

OUTPUT = Path(__file__).resolve().parent / "smc_cost" / "output.md"
CORPORA = {name: row.corpus for name, row in MODELS.items() if row.corpus}  # the model table's corpora
# model -> (its bundled test corpus, documents timed): about a second per estimator and repeat at K = 1,000
DOCUMENTS = {
    "hmm": (CORPORA["hmm"], 30),
    "kglm": (CORPORA["kglm"], 5),
    "entitynlm": (CORPORA["entitynlm"], 6),
    "rnng": (CORPORA["rnng"], 10),
    "lda": (CORPORA["lda"], 30),
    "lda_urn": (CORPORA["lda"], 30),
    "masked": ("masked_tiny/test.jsonl", 4),
    "tokenization": (CORPORA["tokenization"], 5),
}


# rows that time a bundled model with other arguments: the LDA's urn proposal (Wallach et al.'s left-to-right, no
# twist), where SMC does the arithmetic of IS, beside the default twisted proposal, where SMC also computes the twist
VARIANTS = {"lda_urn": ("lda", {"lookahead": "none"})}


def package_revision() -> str:
    """Where the timed package comes from: the revision ``--revision`` extracted, else this checkout's commit (with
    "+ changes" when its lm_latent_eval differs from it). Other benches with a ``--revision`` use it too."""
    if os.environ.get("SMC_COST_REVISION"):
        import lm_latent_eval

        # the extracted copy, not this checkout
        assert lm_latent_eval.__file__.startswith(os.environ["PYTHONPATH"]), lm_latent_eval.__file__
        return f"at revision {os.environ['SMC_COST_REVISION']}"
    repo = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = git("status", "--porcelain", "lm_latent_eval")
    return f"at revision {git('rev-parse', '--short', 'HEAD')}{' + changes' if dirty else ''}"


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform``'s guess."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_is(model, xs, docs, k):
    for x, doc in zip(xs, docs):
        importance_log_weights(model, x, num_samples=k, seed=0, document=doc)


def run_smc(model, xs, docs, k):
    for x, doc in zip(xs, docs):
        smc_log_weights(model, x, num_samples=k, seed=0, document=doc)


def model_rows(name: str, ks: list[int], repeats: int, num_docs: int | None) -> list[str]:
    """One table row per K: best-of-``repeats`` particle·tokens/s of IS and SMC, alternated, and SMC s / IS s."""
    base, kwargs = VARIANTS.get(name, (name, {}))
    model, _ = load_model(base, **kwargs)
    if not has(model, "stepwise"):
        return [f"| {name} | - | no stepwise part | | | | | |"]
    path, default_docs = DOCUMENTS[name]
    docs = [d for d in read_documents(str(DATA_DIR / path)) if d.strip()][: num_docs or default_docs]
    xs = [model.tokenize(d) for d in docs]
    tokens = sum(int(x.numel()) for x in xs)
    # warm-up: lazy tables, caches and first-call costs
    run_is(model, xs[:1], docs[:1], 8)
    run_smc(model, xs[:1], docs[:1], 8)
    rows = []
    for k in ks:
        best = {"is": float("inf"), "smc": float("inf")}
        for _ in range(repeats):
            best["is"] = min(best["is"], timed(lambda: run_is(model, xs, docs, k), "cpu")[0])
            best["smc"] = min(best["smc"], timed(lambda: run_smc(model, xs, docs, k), "cpu")[0])
        rate = {e: k * tokens / s for e, s in best.items()}
        rows.append(
            f"| {name} | {k:,} | {len(docs)} | {tokens} | {best['is']:.3f} | {best['smc']:.3f} | "
            f"{rate['is'] / 1e6:.3f} M | {rate['smc'] / 1e6:.3f} M | {best['smc'] / best['is']:.2f}x |"
        )
        print(rows[-1], flush=True)
    return rows


def short_commit(revision: str) -> str:
    """The abbreviated commit that ``revision`` (a branch, tag, HEAD, ...) names in this repository."""
    repo = Path(__file__).resolve().parents[1]
    return subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def run_at_revision(
    revision: str, argv: list[str], script: str = __file__, folders: tuple[str, ...] = ("lm_latent_eval",)
) -> None:
    """``script`` (default this one), run on the package of ``revision`` (``git archive`` of ``folders``: add
    ``tasks`` for a script that runs lm-eval's tasks) in a child process; the rest of ``argv`` as given."""
    repo = Path(__file__).resolve().parents[1]
    rest = [a for i, a in enumerate(argv) if a != "--revision" and (i == 0 or argv[i - 1] != "--revision")]
    rest = [a for a in rest if not a.startswith("--revision=")]
    commit = short_commit(revision)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", commit, *folders], cwd=repo, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        env = os.environ | {"PYTHONPATH": tmp, "SMC_COST_REVISION": commit}
        subprocess.run([sys.executable, script, *rest], env=env, check=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="hmm,kglm,entitynlm,rnng,lda,lda_urn,masked,tokenization")
    p.add_argument("--ks", default="1000,4000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--num-docs", type=int, default=None, help="documents per model (default: per-model table)"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--label", default="", help="a word for the heading (before / after)")
    p.add_argument("--output", default=str(OUTPUT))
    p.add_argument(
        "--revision",
        default=None,
        help="time lm_latent_eval as it was at this git revision (extracted to a temporary folder; the 'before')",
    )
    args = p.parse_args(argv)
    if args.revision:
        return run_at_revision(args.revision, argv if argv is not None else sys.argv[1:])
    torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]
    start = time.perf_counter()
    head = (
        f"# SMC / IS cost per particle·token{f' ({args.label})' if args.label else ''}\n\n"
        f"lm_latent_eval {package_revision()}; "
        f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load average at the start "
        f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())}; seed 0, SMC defaults (ESS < 0.5·N, 4 runs); "
        f"best of {args.repeats} alternating IS/SMC repeats.\n\n"
        "| model | K | documents | tokens | IS s | SMC s | IS particle·tokens/s | SMC particle·tokens/s | "
        "SMC / IS |\n|---|---|---|---|---|---|---|---|---|"
    )
    print(head, flush=True)
    rows = []
    for name in args.models.split(","):
        rows += model_rows(name, ks, args.repeats, args.num_docs)
    tail = (
        f"\n{time.perf_counter() - start:.0f} s in all; load average at the end "
        f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())}."
    )
    print(tail)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join([head, *rows, tail]) + "\n")


if __name__ == "__main__":
    main()
