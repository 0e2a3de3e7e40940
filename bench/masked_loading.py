"""Peak host memory of loading a Hugging Face masked LM in bfloat16: dtype and device given to ``from_pretrained``
(``hf.loading_options``) against loading in the checkpoint's float32 and casting afterwards (the package before).

A random-weight BERT-architecture masked LM of about 1 GB in float32 (built and saved here, in its own process) is
loaded with ``load_model("masked", pretrained=..., dtype=bfloat16, device="cpu")`` in a fresh process per run; each
process reports its peak resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``: tracemalloc does not see
torch's allocations) and the same figure after importing the libraries only, so the difference is what loading cost.
The "before" process runs the same function with the placement switched off (``places_while_loading`` false): the
network read as the checkpoint stores it (float32), then ``.to(bfloat16)``. On an 8B checkpoint the same ratio is the
difference between 16 GB and 32 GB of host memory.

    python bench/masked_loading.py            # writes bench/masked_loading/README.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "masked_loading"
ROOT = Path(__file__).resolve().parent.parent
# BERT-large width, 20 layers: 283 M parameters, 1.13 GB in float32
SHAPE = {"hidden_size": 1024, "num_hidden_layers": 20, "num_attention_heads": 16, "intermediate_size": 4096}
# the dtypes the checkpoint is stored in (the same random weights)
STORED = ("float32", "bfloat16")

BUILD = """
import json, sys, torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
torch.manual_seed(0)
config = BertConfig(vocab_size=30522, max_position_embeddings=512, **json.loads(sys.argv[2]))
model = BertForMaskedLM(config).eval().to(getattr(torch, sys.argv[3]))
model.save_pretrained(sys.argv[1])
print(sum(p.numel() for p in model.parameters()))
BertTokenizerFast(vocab={w: i for i, w in enumerate(words)}).save_pretrained(sys.argv[1])
"""

LOAD = """
import json, resource, sys, threading, time
import torch, transformers
import lm_latent_eval.models as models
from lm_latent_eval.models.masked import hf

def anonymous_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))

peak_anon, loading = [anonymous_kib()], True

def watch():
    while loading:
        peak_anon[0] = max(peak_anon[0], anonymous_kib())
        time.sleep(0.001)

imported, imported_anon = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, anonymous_kib()
if sys.argv[2] == "before":
    models.places_while_loading = lambda cls: False
watcher = threading.Thread(target=watch)
watcher.start()
start = time.perf_counter()
lm, _ = models.load_model("masked", pretrained=sys.argv[1], dtype=torch.bfloat16, device="cpu")
seconds = time.perf_counter() - start
loading = False
watcher.join()
dtypes = sorted({str(p.dtype) for p in lm.parameters()})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"imported_kib": imported, "peak_kib": peak, "imported_anon_kib": imported_anon,
                  "peak_anon_kib": max(peak_anon[0], anonymous_kib()), "seconds": seconds, "dtypes": dtypes,
                  "options": {k: str(v) for k, v in hf.loading_options(torch.bfloat16, "cpu").items()}}))
"""


def child(code: str, *args: str, site: str | None = None) -> str:
    """Run ``code`` in a fresh interpreter (one thread, offline; ``site`` first on its path); its last line."""
    path = os.pathsep.join(p for p in (site, str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def environments(extra: list[str]) -> list[tuple[str | None, str]]:
    """(folder first on the children's path, its transformers version): the installed one, then each of ``extra``."""
    code = "import transformers; print(transformers.__version__)"
    return [(site, child(code, site=site)) for site in [None, *extra]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--transformers",
        action="append",
        default=[],
        metavar="DIR",
        help="also run with the transformers installed in DIR (pip install --target DIR transformers==4.46.3 "
        "'huggingface_hub<1' 'tokenizers<0.21' --no-deps)",
    )
    args = parser.parse_args()
    import torch

    OUTPUT.mkdir(exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        sizes = {}
        for stored in STORED:
            parameters = int(child(BUILD, f"{folder}/{stored}", json.dumps(SHAPE), stored))
            sizes[stored] = sum(f.stat().st_size for f in Path(folder, stored).glob("*.safetensors"))
        for site, version in environments(args.transformers):
            for stored in STORED:
                for which in ("before", "after"):
                    run = json.loads(child(LOAD, f"{folder}/{stored}", which, site=site))
                    rows.append((version, stored, sizes[stored], which, run))
    lines = [
        "# Peak host memory: loading a masked LM in bfloat16",
        "",
        f"`python bench/masked_loading.py {' '.join(f'--transformers {d}' for d in args.transformers)}`".replace(
            " `", "`"
        )
        + f" on {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; torch "
        f"{torch.__version__}, Python {platform.python_version()}. Checkpoints: one random-weight BertForMaskedLM "
        f"({', '.join(f'{k}={v}' for k, v in SHAPE.items())}; {parameters / 1e6:.1f} M parameters), model.safetensors stored in float32 "
        f"({sizes['float32'] / 1e9:.3f} GB) and in bfloat16 ({sizes['bfloat16'] / 1e9:.3f} GB, as LLaDA-8B and "
        'Dream-7B are released). Each row is one fresh process running `load_model("masked", pretrained=..., '
        'dtype=torch.bfloat16, device="cpu")`; *before* loads as the package did before (nothing passed to '
        "`from_pretrained`, then `.to(bfloat16)`), *after* passes `hf.loading_options`. Figures are above the "
        "process's memory after importing torch, transformers and the package: anonymous = the peak of `RssAnon` "
        "(private memory, sampled every millisecond while loading), RSS = `ru_maxrss` (also counts the "
        "checkpoint's pages read through safetensors' memory map, which the kernel can drop).",
        "",
        (
            "| transformers | stored | loading | from_pretrained's options | parameters | anonymous peak (GB) "
            "| ÷ file | RSS peak (GB) | ÷ file | seconds |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    peaks = {}
    for version, stored, size, which, run in rows:
        anon = (run["peak_anon_kib"] - run["imported_anon_kib"]) * 1024
        rss = (run["peak_kib"] - run["imported_kib"]) * 1024
        peaks[version, stored, which] = anon
        options = "none" if which == "before" else ", ".join(f"`{k}={v}`" for k, v in run["options"].items())
        lines.append(
            f"| {version} | {stored} | {which} | {options} | {', '.join(run['dtypes'])} | {anon / 1e9:.3f} | "
            f"{anon / size:.2f} | {rss / 1e9:.3f} | {rss / size:.2f} | {run['seconds']:.1f} |"
        )
    lines += ["", "Anonymous peak, before ÷ after:"]
    for version, stored, which in peaks:
        if which == "after":
            before, after = peaks[version, stored, "before"], peaks[version, stored, "after"]
            lines.append(f"- transformers {version}, {stored} checkpoint: {before / max(after, 1):.2f}x")
    lines.append("")
    (OUTPUT / "README.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
