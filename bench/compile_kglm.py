"""torch.compile of the KGLM per-token sampling kernel: eager vs compiled, side by side (`python bench/compile_kglm.py [K]`).

Times ``proposal.sample`` on 10 bundled documents with (a) the eager kernel as shipped (on the CPU only the particles
that drew "related" go through the parent and edge heads), (b) the eager sync-free kernel (every particle through
every head, the GPU path), (c) (b) under ``torch.compile(dynamic=True)``; then checks that (c) draws the same z."""

import json
import sys
import time

import torch

from lm_latent_eval import tensors
from lm_latent_eval.models import load_model
from lm_latent_eval.models.kglm import proposal as prop_mod
from lm_latent_eval.models.kglm import stepwise
from lm_latent_eval.paths import DATA_DIR

m, _ = load_model("kglm", None, device="cpu")
docs = [
    " ".join(t for t in json.loads(l)["tokens"] if t != "@@START@@")
    for l in (DATA_DIR / "linked_tiny" / "test.jsonl").read_text().splitlines()
][:10]
xs = [m.tokenize(d) for d in docs]
K = int(sys.argv[1]) if len(sys.argv) > 1 else 1000


def every_row(step):
    """``step`` on the accelerator's path, on the CPU too: every particle through every head, masked
    (``tensors.SELECT_ROWS_ON`` emptied while it runs)."""

    def on_every_row(*args):
        saved, tensors.SELECT_ROWS_ON = tensors.SELECT_ROWS_ON, ()
        try:
            return step(*args)
        finally:
            tensors.SELECT_ROWS_ON = saved

    return on_every_row


eager_sync = stepwise.sample_step
eager_nosync = every_row(stepwise.sample_step)
_compiled = every_row(torch.compile(stepwise.sample_step, dynamic=True))


def compiled(tabs, state, t, u):  # t as a 0-d tensor: one graph for every position (no per-t specialization)
    return _compiled(tabs, state, torch.tensor(t), u)


def run(step):
    prop_mod.sample_step = step
    t = time.perf_counter()
    for i, x in enumerate(xs):
        m.proposal.sample(x, K, 1.0, True, torch.Generator().manual_seed(i))
    return time.perf_counter() - t


t0 = time.perf_counter()
run(compiled)
print(f"compile + first pass: {time.perf_counter() - t0:.1f} s", flush=True)
res = {"eager (CPU subset path)": [], "eager (sync-free path)": [], "compiled (sync-free path)": []}
for _ in range(3):
    res["eager (CPU subset path)"].append(run(eager_sync))
    res["eager (sync-free path)"].append(run(eager_nosync))
    res["compiled (sync-free path)"].append(run(compiled))
# same draws?
prop_mod.sample_step = eager_nosync
a = m.proposal.sample(xs[0], K, 1.0, True, torch.Generator().manual_seed(0))
prop_mod.sample_step = compiled
b = m.proposal.sample(xs[0], K, 1.0, True, torch.Generator().manual_seed(0))
same = all(torch.equal(a[0][k], b[0][k]) for k in a[0])
diff = (a[1] - b[1]).abs().max().item()
print(
    f"K = {K}, 10 documents, proposal.sample only; median of 3 (s): "
    + ", ".join(f"{k} {sorted(v)[1]:.3f}" for k, v in res.items())
)
print(f"compiled vs eager: same z {same}, max |log q diff| {diff:.1e}")
