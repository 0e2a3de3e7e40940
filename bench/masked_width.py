"""Issue 44, item 6: seconds per document of a LLaDA-8B-sized network, for the 128-draw ELBO and the default statement.

    PYTHONPATH=<transformers 4.46.3> python bench/masked_width.py --llada DIR [--layers 32] [--device cuda]

LLaDA's own modeling code (``--llada``: the folder with ``configuration_llada.py`` and ``modeling_llada.py``; it loads
under transformers 4.46.3 only, ``hf.AUTHORS_TRANSFORMERS``) is built with GSAI-ML/LLaDA-8B-Base's configuration
(d_model 4,096, 32 heads, SwiGLU 12,288, 126,464 output rows, mask id 126,336; ``--layers`` of its 32 blocks) with its
own random initialisation, in ``--dtype`` (bfloat16) straight on ``--device``, and read by ``HFMaskedLM`` as the
backend reads a LLaDA checkpoint. The texts are the first ``--documents`` distinct held-out sentences of
``masked_ppl_tiny`` through a word-level tokenizer built here over their words (ids 0..n, far below the mask id).

Per method: network rows (one row: one text with some positions masked), forward calls, seconds per document (CUDA
synchronised), and seconds per 1,000 rows. Random weights make every conditional nearly uniform, so the default
statement meets its precision target at its first stage here; on a trained network it runs more stages, and its
cost is its rows times the seconds per row measured here. The last line prices the rows per document that the
bundled model's defaults and ELBO spend (``bench/masked_side_by_side/table.md``) at this network's seconds per row.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import torch
from masked_side_by_side import OUTPUT as SIDE_BY_SIDE
from masked_side_by_side import Cost

from lm_latent_eval.documents import read_texts
from lm_latent_eval.estimators import EstimatorSettings
from lm_latent_eval.estimators.adaptive import estimate_corpus
from lm_latent_eval.estimators.registry import resolve, with_model_defaults
from lm_latent_eval.models.masked.corpus import TEST_FILE
from lm_latent_eval.models.masked.hf import HFMaskedLM

LLADA_8B = {  # GSAI-ML/LLaDA-8B-Base's config.json, n_layers given by --layers
    "model_type": "llada",
    "architectures": ["LLaDAModelLM"],
    "auto_map": {
        "AutoConfig": "configuration_llada.LLaDAConfig",
        "AutoModel": "modeling_llada.LLaDAModelLM",
    },
    "activation_type": "silu",
    "block_type": "llama",
    "d_model": 4096,
    "n_heads": 32,
    "n_kv_heads": 32,
    "mlp_hidden_size": 12288,
    "mlp_ratio": 4,
    "layer_norm_type": "rms",
    "rms_norm_eps": 1e-5,
    "rope": True,
    "rope_theta": 500000.0,
    "max_sequence_length": 4096,
    "vocab_size": 126464,
    "embedding_size": 126464,
    "weight_tying": False,
    "mask_token_id": 126336,
    "eos_token_id": 126081,
    "pad_token_id": 126081,
    "attention_dropout": 0.0,
    "residual_dropout": 0.0,
    "embedding_dropout": 0.0,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_fn": "mitchell",
    "flash_attention": False,
    "alibi": False,
    "scale_logits": False,
    "input_emb_norm": False,
    "use_cache": False,
}


def word_tokenizer(texts: list[str]):
    """A word-level fast tokenizer over the texts' words (specials first), adding no special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", *dict.fromkeys(w for t in texts for w in re.findall(r"\w+|[^\w\s]", t))]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")


def llada_network(source: Path, layers: int, dtype: torch.dtype, device: str, shrink: int = 1):
    """LLaDA's class (its own code, copied from ``source`` into a temporary folder) at 8B width (every width divided
    by ``shrink``), random weights."""
    from transformers import AutoConfig, AutoModel

    folder = Path(tempfile.mkdtemp(prefix="llada8b"))
    for name in ["configuration_llada.py", "modeling_llada.py"]:
        shutil.copy(source / name, folder / name)
    config = {**LLADA_8B, "n_layers": layers, "init_device": device}
    for key in ("d_model", "mlp_hidden_size", "vocab_size", "embedding_size", "mask_token_id"):
        config[key] //= shrink
    for key in ("n_heads", "n_kv_heads"):
        config[key] = max(
            1, config[key] * 4 // shrink
        )  # 32 heads of 128 at full width, 2 heads of 32 at 1/64
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    loaded = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    network = AutoModel.from_config(loaded, trust_remote_code=True, torch_dtype=dtype)
    return network.to(device).eval()


def measure(model, texts: list[str], settings: EstimatorSettings, device: str) -> dict:
    """Rows, forward calls and seconds of ``settings`` over ``texts`` (one warm-up document first)."""
    cost = Cost(model)
    estimator = resolve(settings, model)
    estimate_corpus(estimator, texts[:1], device, progress=False)  # warm-up: kernels chosen, allocator grown

    def run():
        out = estimate_corpus(estimator, texts, device, progress=False)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return out

    estimates, rows, calls, seconds = cost.run(run)
    log_p = sum(e.log_likelihood for e in estimates.values())
    return {"rows": rows, "calls": calls, "seconds": seconds, "log_p": log_p}


def bundled_rows_per_document() -> dict[str, float]:
    """Network rows per document of the bundled model's 128-draw ELBO and defaults (the side-by-side table)."""
    table = (SIDE_BY_SIDE / "table.md").read_text(encoding="utf-8")
    documents = int(re.search(r"the (\d+) distinct held-out sentences", table).group(1))
    rows = {}
    for label, start in (
        ("elbo128", "| ELBO, 128 mask draws (count, LLaDA) |"),
        ("defaults", "| package defaults"),
    ):
        line = next(line for line in table.splitlines() if line.startswith(start))
        rows[label] = int(line.split("|")[5].strip().replace(",", "")) / documents
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llada", type=Path, required=True, help="folder with LLaDA's two modeling files")
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--output", type=Path, default=None, help="also write the table here")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: every width divided by 64")
    args = parser.parse_args()
    import transformers

    texts = list(dict.fromkeys(read_texts(TEST_FILE)))[: args.documents]
    start = time.perf_counter()
    network = llada_network(
        args.llada, args.layers, getattr(torch, args.dtype), args.device, 64 if args.tiny else 1
    )
    built = time.perf_counter() - start
    model = HFMaskedLM(network, word_tokenizer(texts)).to(args.device)
    tokens = sum(model.text_ids(t).numel() for t in texts)
    parameters = sum(p.numel() for p in network.parameters())
    defaults, _ = with_model_defaults(EstimatorSettings(), model)
    methods = {
        "ELBO, 128 mask draws (count, LLaDA)": EstimatorSettings("elbo", 128),
        "package defaults (auto: SMC, uniform orders, target)": defaults,
    }
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    lines = [
        (
            f"LLaDA's code at LLaDA-8B width, {args.layers} of 32 blocks ({parameters / 1e9:.2f} B parameters), random "
            f"weights, {args.dtype} on {device} (torch {torch.__version__}, transformers {transformers.__version__}); "
            f"built in {built:.1f} s; {len(texts)} held-out sentences of masked_ppl_tiny, {tokens} tokens."
        ),
        "",
        "| method | network rows | forward calls | seconds per document | seconds per 1,000 rows |",
        "|---|---|---|---|---|",
    ]
    per_row = {}
    for label, settings in methods.items():
        m = measure(model, texts, settings, args.device)
        per_row[label] = m["seconds"] / m["rows"]
        lines.append(
            f"| {label} | {m['rows']:,} | {m['calls']:,} | {m['seconds'] / len(texts):.3f} | "
            f"{1000 * per_row[label]:.3f} |"
        )
        print(lines[-1], flush=True)
    bundled = bundled_rows_per_document()
    rate = per_row["package defaults (auto: SMC, uniform orders, target)"]
    lines += [
        "",
        (
            f"Priced at the defaults' {1000 * rate:.3f} s per 1,000 rows: the bundled model's rows per document "
            f"(side-by-side table) give {bundled['elbo128'] * rate:.2f} s per document for the 128-draw ELBO "
            f"({bundled['elbo128']:.1f} rows) and {bundled['defaults'] * rate:.2f} s for the default statement "
            f"({bundled['defaults']:.1f} rows), at {args.layers} of 32 blocks."
        ),
    ]
    print("\n".join(lines))
    if args.output:
        args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
