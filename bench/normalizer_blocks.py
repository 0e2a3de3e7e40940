"""The softmax normalizers on the CPU in cache-sized blocks against one pass over every row, side by side (issue 55,
item 2: fewer temporaries beyond the cache).

``tensors.log_normalizer`` takes log Σ_v exp(logit_v) of the word heads (KGLM, EntityNLM, the RNNG: float32) and of
the masked LMs (float64) in blocks of rows of at most ``CPU_NORMALIZER_ENTRIES`` entries, where a pass over every
row at once writes and reads the log-sum-exp's temporaries (logits − max, then its exp) through main memory. Both
give the same numbers; this bench checks that (``torch.equal``) and times them alternately (A, B, A, B, ...; the
best of ``--repeats``), one thread:

- the normalizer alone at the package's shapes (rows × vocabulary);
- end to end, ``log_joint`` of the paper-sized models (``full_size.py``, random weights) on one synthetic document
  at K particles, the blocks against ``CPU_NORMALIZER_ENTRIES`` set to every row.

    python bench/normalizer_blocks.py          # writes bench/normalizer_blocks/output.md
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import full_size
from kernel_counts import one_normalizer_pass
from smc_cost import cpu_name, package_revision

from lm_latent_eval import tensors

OUTPUT = Path(__file__).resolve().parent / "normalizer_blocks" / "output.md"
# (where the package meets it, rows, vocabulary, dtype summed in)
SHAPES = (
    (
        "KGLM's word head, a product of 1,024 (position, entity) pairs",
        1024,
        full_size.WT2_VOCAB,
        torch.float32,
    ),
    ("EntityNLM's word head, a product of WORD_BLOCK logits", 419, full_size.CONLL_VOCAB, torch.float32),
    ("a masked LM of GPT-2's vocabulary, float64, 512 rows", 512, 50_257, torch.float64),
    ("a masked LM of LLaDA's vocabulary, float64, 256 rows", 256, 126_464, torch.float64),
)
# model -> (document tokens, K) of the end-to-end rows
END_TO_END = {"kglm": (200, 500), "entitynlm": (200, 500), "rnng": (25, 500)}


def side_by_side(fn, repeats: int) -> tuple[float, float, bool]:
    """(best seconds in one pass, best seconds in blocks, the same numbers) of ``fn()``, timed alternately."""
    best = {True: float("inf"), False: float("inf")}
    out = {}
    for _ in range(repeats):
        for whole in (True, False):
            with one_normalizer_pass() if whole else contextlib.nullcontext():
                start = time.perf_counter()
                out[whole] = fn()
                best[whole] = min(best[whole], time.perf_counter() - start)
    return best[True], best[False], torch.equal(out[True], out[False])


def end_to_end(name: str, repeats: int) -> tuple[str, float, float, bool]:
    tokens, K = END_TO_END[name]
    model = full_size.BUILDERS[name][0]()
    x = model.tokenize(full_size.model_documents(name, model, (tokens,))[0])
    with torch.no_grad():
        z, _ = model.proposal.sample(x, K, generator=torch.Generator().manual_seed(0))
        model.log_joint(x, z)  # the per-document caches outside the times
        whole, blocks, same = side_by_side(lambda: model.log_joint(x, z), repeats)
    return f"`log_joint` of the paper-sized {name}, {x.numel()} tokens, K = {K:,}", whole, blocks, same


def markdown(rows: list[tuple[str, float, float, bool]]) -> str:
    load = "/".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        "# The softmax normalizers on the CPU: one pass over every row against cache-sized blocks",
        "",
        (
            f"lm_latent_eval {package_revision()}; {cpu_name()}, torch {torch.__version__}, one thread; blocks of at "
            f"most {tensors.CPU_NORMALIZER_ENTRIES:,} entries (`tensors.CPU_NORMALIZER_ENTRIES`); best of the "
            f"alternating repeats; load average {load}."
        ),
        "",
        "| what | one pass (s) | blocks (s) | one pass / blocks | the same numbers |",
        "|---|---|---|---|---|",
    ]
    for what, whole, blocks, same in rows:
        same = "yes" if same else "NO"
        lines.append(f"| {what} | {whole:.3f} | {blocks:.3f} | {whole / blocks:.2f}x | {same} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=list(END_TO_END), choices=list(END_TO_END))
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for what, n, V, dtype in SHAPES:
        logits = torch.randn(n, V, generator=gen) * 3
        rows.append((what, *side_by_side(lambda: tensors.log_normalizer(logits, dtype), args.repeats)))
        print(markdown(rows), flush=True)
    for name in args.models:
        rows.append(end_to_end(name, args.repeats))
        print(markdown(rows), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(rows))


if __name__ == "__main__":
    main()
